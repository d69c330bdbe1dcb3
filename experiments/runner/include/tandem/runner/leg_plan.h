#pragma once
// The runner's words for legs, below everything else in the runner: what a leg is (LegPlan, from
// --legs/--devices or the experiment), its state, the actions a user can ask for, its live progress
// and how it ended. runner.h (the entry point), the run record, the executors, preflight and the
// supervisor all speak them.
#include "tandem/legs/leg_protocol.h"
#include "tandem/spec/experiment.h"

#include <cstdint>
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

// What a run's runner can be asked to do to one leg (tandem leg stop|pause|resume RUN LEG, the workbench;
// request_leg_action in runner.h).
enum class LegAction { Stop, Pause, Resume };
const char* leg_action_name(LegAction action);  // "stop", "pause", "resume"

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

struct LegOutcome {
    LegPlan plan;
    LegStatus status = LegStatus::Pending;
    int exit_status = 0;         // exit code, or 128 + signal
    LegTrace trace;
};

}  // namespace tandem::experiments
