#pragma once
// What the workbench shows of one run: plain values copied out of the run file (experiments/
// computed them; the views only draw them). No Qt, no HDF5: a snapshot crosses threads by value.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::views {

struct SeriesPoint {
    double update = 0;  // the update index (x of every trajectory)
    double value = 0;
};
using Series = std::vector<SeriesPoint>;  // sorted by update

// The trajectories the views can draw, in the order of the tabs/panels.
enum class Metric { HeldoutCe, GradNorm, TrainLoss, LearningRate, Throughput };
const char* metric_label(Metric metric);  // "held-out CE", ...
// Every metric, in the order of the trajectory panels.
inline constexpr Metric kAllMetrics[] = {Metric::HeldoutCe, Metric::TrainLoss, Metric::GradNorm, Metric::LearningRate,
                                         Metric::Throughput};

struct LegTrajectory {
    std::string leg;
    std::string device;
    std::string status;  // "running", "done", "failed", ... as recorded
    std::string implementation;  // "engine", "reference", ... (the run file's leg attribute)
    Series heldout_ce;
    Series grad_norm;
    Series train_loss;
    Series learning_rate;   // the lr each update used
    Series tokens_per_s;    // supervised tokens / wall seconds of each update (experiments' update_tokens_per_second)
    const Series& series(Metric metric) const;
    Series& series(Metric metric);
};

// A residual series in percent, leg minus reference, as experiments/ computed it (compare.h L4Entry:
// residual_leg, residual_reference, eval_percent / loss_percent / grad_percent:
// 100 · (leg − reference) / |reference| at every paired update). Points experiments/ left undefined
// (reference value 0) are not drawn.
struct ResidualTrajectory {
    std::string leg;
    std::string reference;
    Metric metric = Metric::HeldoutCe;
    Series percent;
};

struct RunSnapshot {
    std::string path;        // the run.h5 file (or its folder)
    std::string run_id;      // the run's id (/experiment run_id; the folder name when absent)
    std::string experiment;  // experiment name
    std::vector<LegTrajectory> legs;
    std::vector<ResidualTrajectory> residuals;  // empty when experiments/ exposed none
    std::size_t point_count() const;            // all points of all legs (for change detection)
};

// One leg of one run, as the catalog lists it (the runs browser shows one row per leg).
struct CatalogLegRow {
    std::string run_id;      // the run folder's name, e.g. clinical-tiny-20261129-101500
    std::string run_status;  // running | finished | failed | interrupted | cancelled
    std::string experiment;  // experiment name
    std::string run_path;    // the run folder
    std::string started;     // ISO-8601 UTC
    std::string run_file;    // run.h5
    std::string leg;         // empty for a run without legs yet
    std::string implementation;
    std::string status;
    std::string device;
    std::optional<std::int64_t> updates_done, updates_total;
    std::optional<double> final_loss;
    std::optional<double> tokens_per_s;
    std::optional<double> peak_memory_bytes;
    std::vector<std::string> tags;  // the run's tags (catalog schema 4)
    std::string note;               // what the user wrote about the run
};

}  // namespace tandem::views
