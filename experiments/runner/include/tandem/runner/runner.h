#pragma once
// `tandem run`: prepare the run folder once, probe the devices used, launch one process per leg
// (CPU legs concurrently with the CPU threads split between them, one leg at a time per GPU), read
// their leg-protocol events, record everything into run.h5 (single writer) and the catalog, report
// progress, and compare the legs at the end. See docs/report.md and docs/run-folder.md.
//
// Durability (docs/run-folder.md "Interruptions"): each leg's events.jsonl is the record of truth.
// The runner appends every line it receives there before it acts on it; run.h5's leg series are
// rebuilt from it on --resume, and a checkpoint is trusted only when events.jsonl holds the event
// that announced it. Legs die with the runner (PR_SET_PDEATHSIG) and a run folder is locked by the
// runner that owns it.
#include "tandem/runner/leg_plan.h"
#include "tandem/runner/runner_options.h"

#include <filesystem>
#include <string>
#include <vector>

namespace tandem::experiments {

// True when a runner holds the run folder's lock (is running it now).
bool runner_is_running(const std::filesystem::path& run_dir);
// Who holds the run folder's lock, for a message ("a `tandem run` (pid 123 on host) holds its lock
// RUN/.runner.lock"); nullopt when no runner runs it. Reads only: never creates the lock file.
std::optional<std::string> live_runner(const std::filesystem::path& run_dir);
// Writes the request; waits up to `wait_s` for the runner to take it. Returns a line for the user.
// Throws tandem::Error when the folder or the leg does not exist. Without a running runner: `stop`
// marks the leg stopped (a later --resume leaves it), `pause` has nothing to do, and `resume`
// clears the stop mark and returns — the caller then starts `tandem run --resume`.
std::string request_leg_action(const std::filesystem::path& run_dir, const std::string& leg, LegAction action,
                               double wait_s = 15.0);

// How a run ended: its legs, and the verdict of the comparison (see Comparison::verdict()).
enum class RunStatus { Finished, Failed, Interrupted };
const char* run_status_name(RunStatus status);  // "finished", "failed", "interrupted"

struct RunOutcome {
    std::filesystem::path folder;
    std::string run_id;
    RunStatus status = RunStatus::Failed;
    std::vector<LegOutcome> legs;
    bool checks_passed = false;  // complete, and every cross-check level within its threshold
    std::string verdict;         // one line: Comparison::verdict() ("equivalent: ...", "incomplete: ...", ...)
};

// Runs (or resumes) a whole experiment. Throws tandem::Error for bad input before any leg starts
// (nothing is left behind then), and for I/O failures while legs run (the legs are stopped first,
// the catalog row says why, and the run can be resumed).
RunOutcome run_experiment(const RunnerOptions& options);

}  // namespace tandem::experiments
