#pragma once
// The fault matrix of a `tandem faults` run (docs/faults.md): for every injected fault, which levels
// caught it and how early, and how far it moved the held-out CE. Plain values: computed by
// experiments (faults_run.h: fault_matrix_of), stored in run.h5 (/faults, docs/hdf5-layout.md) and the
// catalog (fault_results), rendered by the report (report_tables: "faults", "fault-sizes") and drawn
// by the workbench's heatmap page, which computes nothing itself.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem::experiments {

// The columns of the matrix, in order: the four levels, then the live gate's flags.
const std::vector<std::string>& fault_matrix_levels();  // "L1", "L2", "L3", "L4", "gate"

// One probe of a size search: the fault injected at `size`, and the levels that caught it.
struct SizeProbe {
    std::string leg;
    double size = 0;
    std::vector<std::string> caught_by;  // levels of fault_matrix_levels() that fired
};

// The smallest size one level detects (binary search between the fault's weakest size and the size
// it was caught at; docs/faults.md "Size search").
struct SizeSearch {
    std::string level;
    std::optional<double> smallest_detected;  // nullopt: not even the largest size searched
    std::optional<double> largest_missed;     // nullopt: detected at the weakest size
    int64_t steps = 0;                        // probes this level's search used
};

struct FaultRow {
    std::string fault;   // catalogue name; "" for the clean engine leg's row
    std::string leg;     // the faulty (or clean) engine leg
    std::string category;
    std::optional<double> size;
    std::vector<std::string> expected;   // the catalogue's expected levels
    std::string status;                  // the leg's status ("finished", "failed", ...)
    // per level of fault_matrix_levels(): the first update at which it fired (nullopt: did not).
    // L1, L2 and L3 are judged before training: update 0. L4: the first paired evaluation at which the
    // held-out CE of the evaluations so far fails L4's criterion. gate: the first flagged update.
    std::vector<std::optional<int64_t>> first_update;
    std::vector<std::string> flags;      // the gate's flag kinds raised, each once ("step-time", ...)
    // Held-out CE at the last paired evaluation: leg - reference, relative to the reference, and in
    // units of the clean pair's |difference| there.
    std::optional<int64_t> end_update;
    std::optional<double> ce_leg, ce_reference, ce_diff_abs, ce_diff_rel, ce_diff_clean_units;
    // Why the fault had no effect on this experiment ("" = it had one): nothing fired and the faulty
    // leg recorded exactly the clean engine leg's numbers. Not counted as uncaught: there was nothing to catch.
    std::string no_effect;
    // Why the fault cannot apply to this experiment ("" = it can): checked before any leg starts
    // (fault_not_applicable); such a fault gets no leg and is not counted (docs/faults.md).
    std::string not_applicable;
    std::vector<SizeProbe> probes;       // --size-search: every probe of this fault, in order
    std::vector<SizeSearch> searches;    // --size-search: per level caught at `size`

    bool fired(const std::string& level) const;
    std::vector<std::string> caught_by() const;  // levels that fired, in column order
    std::optional<int64_t> first_caught() const;  // the earliest update over the levels that fired
    bool caught() const { return !caught_by().empty(); }
    // What the row says: "not applicable", "leg failed", "no effect", "caught", "not caught".
    std::string outcome() const;
};

struct FaultMatrix {
    std::string reference_leg;   // every row is (leg, reference)
    std::string clean_leg;       // the clean engine leg
    FaultRow clean;              // the clean pair (fault ""): must fire nothing
    std::vector<FaultRow> rows;  // one per fault, in catalogue order
    double l1_threshold = 0, l4_threshold = 0;
    int64_t eval_interval = 0, updates = 0;
    bool size_search = false;

    const FaultRow* row(const std::string& fault) const;  // nullptr when absent
};

nlohmann::json fault_matrix_to_json(const FaultMatrix& m);
FaultMatrix fault_matrix_from_json(const nlohmann::json& j);  // throws tandem::Error naming the field

}  // namespace tandem::experiments
