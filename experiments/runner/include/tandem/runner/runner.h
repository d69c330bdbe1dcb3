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
#include "tandem/spec/experiment.h"
#include "tandem/compare/judge/gate.h"
#include "tandem/legs/leg_protocol.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// What a leg is: its implementation decides the program the runner starts (docs/legs.md).
struct LegPlan {
    std::string name;                  // legs/<name>/ and /legs/<name> in run.h5
    std::string implementation;        // a leg kind (tandem/spec/leg_kinds.h): engine, reference, ...
    std::string device;                // "cpu", "cuda:0", ...
    std::vector<std::string> command;  // command legs: the argument template (experiment `legs`)
    std::vector<FaultSwitch> faults{}; // engine legs: faults injected (docs/faults.md), passed as --faults
    std::vector<std::string> devices{};  // data-parallel ranks of a reference leg (device = devices[0]); empty: one
    std::string executor = "local";    // local (child process) | slurm (sbatch job), docs/cluster.md
    SlurmOptions slurm{};              // sbatch options (executor slurm)
    // Python legs: the interpreter (python_of_environment of legs.<name>.python or --legs KIND@ENV);
    // "" = the kind's default (the reference environment).
    std::string python{};
};

// The executors a leg can run under: "local" (a child process of the runner) and "slurm" (docs/cluster.md).
const std::vector<std::string>& leg_executors();

// The legs of a run from --legs and --devices: "engine,reference", "a=engine,b=engine", or names of
// legs the experiment defines (its `legs` section); devices "cpu,cuda:0" are assigned round-robin
// unless a definition names one. A Python leg may name its interpreter with @ENV ("reference@/envs/old",
// "old=reference@/envs/old/bin/python"); unnamed, such a leg is called KIND-<ENV's folder name>. (`tandem run` without --legs runs the experiment's legs, else
// engine,reference.)
std::vector<LegPlan> plan_legs(const std::string& legs, const std::string& devices,
                               const ExperimentSpec* spec = nullptr);

// A leg's state as the runner tracks it (also the catalog's legs.status and run.h5's leg attribute).
// Paused: stopped on request (tandem leg pause, the gate) and resumable from its last checkpoint;
// Stopped: stopped on request and left so (a later --resume does not restart it).
enum class LegStatus { Pending, Running, Finished, Failed, Interrupted, Paused, Stopped };
const char* leg_status_name(LegStatus status);  // "pending", "running", ...

// Asking a run's runner to act on one leg (tandem leg stop|pause|resume RUN LEG, the workbench):
// a request file legs/<leg>/request that the runner reads within a fraction of a second.
enum class LegAction { Stop, Pause, Resume };
const char* leg_action_name(LegAction action);  // "stop", "pause", "resume"
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
    std::optional<double> stalled_s;             // flagged by the leg watchdog: seconds without an event
    std::string process;                         // its process then: "stopped", "sleeping", "busy" ("" unknown)
};

struct RunnerOptions {
    std::filesystem::path experiment;              // experiment file (new run)
    std::optional<std::filesystem::path> resume;   // an existing run folder to continue instead
    std::string legs;                              // new runs only: --legs (see plan_legs)
    std::string devices = "cpu";                   // new runs only: --devices
    std::string executor = "local";                // new runs only: --executor local|slurm (recorded in legs.json)
    std::filesystem::path out_dir = "runs";
    std::filesystem::path catalog = "tandem.db";
    std::optional<std::filesystem::path> assets;
    int cpu_threads = 0;                           // --threads: split over the legs (device_sharing.h); 0: every core
    // Legs that use one GPU run at the same time (their timings then marked shared) instead of one
    // after the other (docs/cli.md "Legs on one GPU").
    bool share_devices = false;
    bool probe = true;                             // bandwidth probes of every device used
    std::string report_format = "text";            // printed at the end ("" for none)
    // At most this many legs run at once (0: no limit; CPU legs then share the threads evenly). The
    // CPU threads are split over min(this, CPU legs). `tandem faults --jobs`.
    int max_concurrent_legs = 0;
    // New runs only: run exactly these legs instead of --legs (tandem faults builds them).
    std::vector<LegPlan> leg_plans;
    // Compare every leg with this leg only, not every pair (tandem faults: the reference). "" = pairs.
    std::string compare_against;
    // Called for every flag of the live gate (docs/gate.md) as it is raised. May be empty (the flags
    // are still recorded and acted on).
    std::function<void(const GateFlag&)> on_flag;
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
    std::string verdict;         // one line: Comparison::verdict() ("equivalent: ...", "incomplete: ...", ...)
};

// Runs (or resumes) a whole experiment. Throws tandem::Error for bad input before any leg starts
// (nothing is left behind then), and for I/O failures while legs run (the legs are stopped first,
// the catalog row says why, and the run can be resumed).
RunOutcome run_experiment(const RunnerOptions& options);

}  // namespace tandem::experiments
