#pragma once
// `tandem run`: prepare the run folder once, probe the devices used, launch one process per leg
// (CPU legs concurrently with the CPU threads split between them, one leg at a time per GPU), read
// their leg-protocol events, record everything into run.h5 (single writer) and the catalog, show
// one progress line per leg, and compare the legs at the end. See docs/report.md.
#include "tandem/experiments/leg_protocol.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

struct LegPlan {
    std::string name;            // legs/<name>/ and /legs/<name> in run.h5
    std::string implementation;  // "engine" | "reference"
    std::string device;          // "cpu", "cuda:0", ...
};

// "engine,reference" or "a=engine,b=engine" + "cpu,cuda:0" -> legs, devices assigned round-robin.
std::vector<LegPlan> plan_legs(const std::string& legs, const std::string& devices);

struct RunnerOptions {
    std::filesystem::path experiment;              // experiment file (new run)
    std::optional<std::filesystem::path> resume;   // an existing run folder to continue instead
    std::vector<LegPlan> legs;                     // new runs only
    std::filesystem::path out_dir = "runs";
    std::filesystem::path catalog = "tandem.db";
    std::optional<std::filesystem::path> assets;
    int cpu_threads = 0;                           // total for CPU legs; 0: hardware concurrency
    bool probe = true;                             // bandwidth probes of every device used
    bool quiet = false;                            // no progress lines
    std::string report_format = "text";            // printed at the end ("" for none)
};

struct LegOutcome {
    LegPlan plan;
    std::string status;          // finished | failed | interrupted
    int exit_status = 0;         // exit code, or 128 + signal
    LegTrace trace;
};

struct RunOutcome {
    std::filesystem::path folder;
    std::string run_id;
    std::string status;          // finished | failed | interrupted
    std::vector<LegOutcome> legs;
    bool checks_passed = false;  // every cross-check level within its SPEC threshold
};

// Runs (or resumes) a whole experiment. Throws tandem::Error for bad input before any leg starts.
RunOutcome run_experiment(const RunnerOptions& options);

}  // namespace tandem::experiments
