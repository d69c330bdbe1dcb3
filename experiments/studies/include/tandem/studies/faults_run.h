#pragma once
// `tandem faults EXPERIMENT [--faults a,b,...] [--size-search] [--jobs N]` (docs/faults.md): one run
// folder holding one clean reference leg, one clean engine leg and one faulty engine leg per fault,
// each faulty leg compared with the reference only; the fault matrix (fault_matrix.h) computed from
// that comparison, with --size-search the smallest size each level detects (binary search, more
// legs added to the same run), stored in run.h5 (/faults) and the catalog (fault_results).
// Also `--clean-seeds N`: the clean pair on N seeds, one run each, and how often each level fires.
#include "tandem/compare/leg_data.h"
#include "tandem/spec/fault_matrix.h"
#include "tandem/runner/runner.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// Leg names of a faults run.
inline constexpr const char* kFaultsReferenceLeg = "reference";
inline constexpr const char* kFaultsCleanLeg = "engine";
std::string fault_leg_name(const std::string& fault);  // "fault-<name>"

// The row of one pair: which levels fired and when, and the held-out CE at the end (relative to the
// reference, and in units of `clean`'s difference at the same update when given).
FaultRow fault_row_of(const LegData& leg, const LegData& reference, const ExperimentSpec& spec, const Thresholds& t,
                      const FaultRow* clean = nullptr);

// The matrix of a faults run from its legs: the clean row (clean leg vs reference) and one row per
// (fault, leg), in that order.
FaultMatrix fault_matrix_of(const std::vector<LegData>& legs, const ExperimentSpec& spec, const std::string& reference,
                            const std::string& clean, const std::vector<std::pair<FaultSwitch, std::string>>& faults,
                            const Thresholds& t = {});

// The next size a level's binary search probes, or nullopt when it is done (docs/faults.md "Size
// search"): the weakest size first; then midpoints (geometric for a log-scale size, whole numbers for
// an integer one) between the largest size missed and the smallest detected, `steps` of them, fewer
// for an integer size once the two are neighbours.
struct SearchState {
    std::string level;
    double detected;                // smallest size detected so far (starts at the injected size)
    std::optional<double> missed;   // largest size missed so far (nullopt until the weakest is probed)
    bool weakest_probed = false;
    int64_t probes = 0;             // probes this search used
    bool done = false;
};
std::optional<double> next_probe_size(const SearchState& s, const FaultSize& size, int steps);
// Updates the search with the outcome of probing `size`.
void record_probe(SearchState& s, const FaultSize& size, double probed, bool detected, int steps);

struct FaultsOptions {
    std::filesystem::path experiment;
    std::optional<std::string> faults;  // --faults (comma-separated names, "name=size"); nullopt = all
    bool size_search = false;
    int search_steps = 6;               // midpoints per level after the weakest size (at least 6)
    int jobs = 2;                       // legs at once
    int clean_seeds = 0;                // > 0: the false-positive study instead of the matrix
    RunnerOptions runner;               // out_dir, catalog, assets, cpu_threads, probe, callbacks
};

struct FaultsOutcome {
    std::filesystem::path folder;  // the run folder (the first seed's for --clean-seeds)
    std::string run_id;
    FaultMatrix matrix;
    bool all_legs_finished = false;
    bool clean_pair_passed = false;  // L1..L4 of the clean pair (and, for --clean-seeds, of every seed)
    bool every_fault_caught = false;
    std::string text;                // what the command prints (tables in the chosen format)
};

// Runs the whole thing; throws tandem::Error for bad input (nothing left behind) and I/O failures.
FaultsOutcome run_faults(const FaultsOptions& options);

// Reads /faults of a run file (nullopt when the run is not a faults run).
std::optional<FaultMatrix> read_fault_matrix(const std::filesystem::path& run_file);
// Writes /faults (docs/hdf5-layout.md) and the catalog's fault_results rows.
void store_fault_matrix(const std::filesystem::path& run_file, const std::filesystem::path& catalog,
                        const std::string& run_id, const FaultMatrix& m);

}  // namespace tandem::experiments
