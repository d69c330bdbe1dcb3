#pragma once
// What `tandem run` is asked to do (the CLI's flags, `tandem faults`, the workbench's launcher):
// the options run_experiment (runner.h) takes, and the preflight, device sharing and supervisor read.
#include "tandem/compare/judge/gate.h"
#include "tandem/runner/leg_plan.h"

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

struct RunnerOptions {
    std::filesystem::path experiment;              // experiment file (new run)
    std::optional<std::filesystem::path> resume;   // an existing run folder to continue instead
    std::string legs;                              // new runs only: --legs (see plan_legs)
    std::string devices = "cpu";                   // new runs only: --devices
    std::string executor = "local";                // new runs only: --executor local|slurm (recorded in legs.json)
    std::filesystem::path out_dir = "runs";
    std::filesystem::path catalog = "tandem.db";
    // More catalogs looked in, after `catalog` and in order, for the experiment's seed envelopes
    // (`tandem run --catalog A --catalog B`: the run is recorded in A only).
    std::vector<std::filesystem::path> envelope_catalogs;
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

}  // namespace tandem::experiments
