#pragma once
// Checks before a run folder is prepared (docs/run-folder.md "Size estimate"): everything that can be validated from
// the experiment alone, and a size estimate of the run against the memory and disk available, so an
// absurd experiment is refused in milliseconds instead of after minutes of preparation.
#include "tandem/spec/experiment.h"
#include "tandem/runner/runner_options.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

struct ResourceEstimate {
    double host_bytes_per_cpu_leg = 0;  // peak host memory of one CPU leg (upper estimate)
    double host_bytes_all_legs = 0;     // of every leg running at once
    double disk_bytes = 0;              // the run folder at the end (base, adapters, checkpoints, corpus)
    double memory_available_bytes = 0;  // MemAvailable now
    double disk_available_bytes = 0;    // free space under the output folder now
    std::string summary() const;        // "~1.4 GiB memory per CPU leg (2.9 GiB for 2 legs, 20.1 GiB available); ..."
};

// The estimate of docs/run-folder.md "Size estimate". Pure arithmetic in double (no overflow for
// absurd sizes).
// assets: where "assets:NAME" bases are looked up (RunnerOptions::assets, as prepare does).
// max_concurrent > 0: at most that many legs run at once (RunnerOptions::max_concurrent_legs).
ResourceEstimate estimate_resources(const ExperimentSpec& spec, const std::vector<LegPlan>& legs,
                                    const std::filesystem::path& out_dir,
                                    const std::optional<std::filesystem::path>& assets = std::nullopt,
                                    int max_concurrent = 0);

// Every leg that names its Python interpreter (LegPlan::python): the interpreter exists, runs, and has
// the distributions its kind needs (LegKind::python_packages). Throws tandem::Error with one line per
// problem ("leg old: /envs/old/bin/python has no package peft (... pins peft==0.21.2)"). preflight calls it.
void check_leg_interpreters(const std::vector<LegPlan>& legs);

// Validates the experiment as far as it can without preparing (the model config resolves, the
// estimate fits the machine) and returns the estimate. Throws tandem::Error naming the experiment
// field at fault.
ResourceEstimate preflight(const ExperimentSpec& spec, const std::vector<LegPlan>& legs,
                           const std::filesystem::path& out_dir,
                           const std::optional<std::filesystem::path>& assets = std::nullopt,
                           int max_concurrent = 0);

}  // namespace tandem::experiments
