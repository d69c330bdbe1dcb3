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
#include "tandem/experiments/leg_protocol.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// What a leg is: its kind decides the program the runner starts (docs/legs.md).
struct LegPlan {
    std::string name;            // legs/<name>/ and /legs/<name> in run.h5
    std::string implementation;  // "engine" | "reference"
    std::string device;          // "cpu", "cuda:0", ...
};

// "engine,reference" or "a=engine,b=engine" + "cpu,cuda:0" -> legs, devices assigned round-robin.
std::vector<LegPlan> plan_legs(const std::string& legs, const std::string& devices);

// A leg's state as the runner tracks it (also the catalog's legs.status and run.h5's leg attribute).
enum class LegStatus { Pending, Running, Finished, Failed, Interrupted };
const char* leg_status_name(LegStatus status);  // "pending", "running", ...

// One leg's live figures, for the progress display (app/cli draws them).
struct LegProgress {
    std::string name, device;
    LegStatus status = LegStatus::Pending;
    int64_t updates_done = 0, updates_total = 0;
    std::optional<double> loss;                  // last training loss
    std::optional<double> heldout_ce;            // last held-out CE, at update heldout_update
    int64_t heldout_update = -1;
    double tokens_per_s = 0;                     // supervised tokens over summed update wall time
    std::optional<double> eta_s;                 // from this attempt's mean update time
};

struct RunnerOptions {
    std::filesystem::path experiment;              // experiment file (new run)
    std::optional<std::filesystem::path> resume;   // an existing run folder to continue instead
    std::vector<LegPlan> legs;                     // new runs only
    std::filesystem::path out_dir = "runs";
    std::filesystem::path catalog = "tandem.db";
    std::optional<std::filesystem::path> assets;
    int cpu_threads = 0;                           // total for CPU legs; 0: hardware concurrency
    bool probe = true;                             // bandwidth probes of every device used
    std::string report_format = "text";            // printed at the end ("" for none)
    // Called about every 0.5 s while legs run, and once more (final = true) when they have ended;
    // a leg that ends is also reported on its own with final = false. May be empty.
    std::function<void(const std::vector<LegProgress>&, bool final)> on_progress;
    // One line for the user (stderr by default).
    std::function<void(const std::string&)> say;
};

struct LegOutcome {
    LegPlan plan;
    LegStatus status = LegStatus::Pending;
    int exit_status = 0;         // exit code, or 128 + signal
    LegTrace trace;
};

// How a run ended: its legs, and the verdict of the comparison (see Comparison::verdict()).
enum class RunStatus { Finished, Failed, Interrupted };
const char* run_status_name(RunStatus status);  // "finished", "failed", "interrupted"

struct RunOutcome {
    std::filesystem::path folder;
    std::string run_id;
    RunStatus status = RunStatus::Failed;
    std::vector<LegOutcome> legs;
    bool checks_passed = false;  // complete, and every cross-check level within its threshold
    std::string verdict;         // one line: "all cross-checks passed", "incomplete: ...", "L1 ...: ..."
};

// Runs (or resumes) a whole experiment. Throws tandem::Error for bad input before any leg starts
// (nothing is left behind then), and for I/O failures while legs run (the legs are stopped first,
// the catalog row says why, and the run can be resumed).
RunOutcome run_experiment(const RunnerOptions& options);

}  // namespace tandem::experiments
