#pragma once
// What the workbench shows of one run: plain values copied out of the run file (experiments/
// computed them; the views only draw them). No Qt, no HDF5: a snapshot crosses threads by value.
#include "tandem/compare/metrics.h"

#include <nlohmann/json_fwd.hpp>

#include <map>
#include <memory>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::views {

struct SeriesPoint {
    double update = 0;  // the update index (x of every trajectory)
    double value = 0;
};
using Series = std::vector<SeriesPoint>;  // sorted by update

// The trajectories the views can draw, in the order of the panels: experiments' metric table
// (label, unit, run.h5 series, panel) is the one place that names them.
using Metric = experiments::Metric;
using XAxis = experiments::XAxis;
const char* metric_label(Metric metric);  // "held-out CE", ... (metric_info(metric).label)

struct LegTrajectory {
    std::string leg;
    std::string device;
    std::string status;  // "running", "done", "failed", ... as recorded
    std::string implementation;  // "engine", "reference", ... (the run file's leg attribute)
    // The leg's trajectory of each metric of experiments' metric table (held-out CE per evaluation;
    // training loss, grad norm, the lr each update used, tokens/s per update), filled through the
    // table's of_step / of_eval. A metric the leg has no points of reads as an empty series.
    std::map<Metric, Series> metrics;
    // The leg's clock (experiments' update_clock): tokens seen and training wall seconds before each
    // update boundary, as (update, value) — what the x axis shows when it counts tokens or time.
    Series tokens_seen;
    Series wall_time;
    const Series& series(Metric metric) const;
    Series& series(Metric metric);
    // The clock series of an x axis; nullptr for the update axis (x = update).
    const Series* clock(XAxis axis) const;
};

// A residual series in percent, leg minus reference, as experiments/ computed it (levels.h L4Entry:
// residual_leg, residual_reference, eval_percent / loss_percent / grad_percent:
// 100 · (leg − reference) / |reference| at every paired update). Points experiments/ left undefined
// (reference value 0) are not drawn.
struct ResidualTrajectory {
    std::string leg;
    std::string reference;
    Metric metric = Metric::HeldoutCe;
    Series percent;
};

// The seed envelope behind one metric (experiments' envelope_band_points of the envelope the run
// file holds, /envelope/<stack>): min and max, and mean -/+ 2 std, per update.
struct EnvelopeBand {
    std::string stack;   // the envelope's implementation ("reference", ...)
    std::int64_t members = 0;
    Metric metric = Metric::HeldoutCe;
    Series min, max, lo, hi;
};

// A live gate flag (the run file's /legs/<leg>/flags), placed on the panel of what it is about.
struct FlagMarker {
    std::string leg, kind, action, message;
    Metric metric = Metric::TrainLoss;
    double update = 0;
    double y = 0;  // where the marker sits: the leg's value at that update (the flag's value when it has none)
};

// A leg's held-out CE in units of the envelope's spread, as experiments/ computed it
// (envelope_z_points: z = (x - mean) / std per evaluation with a spread).
struct ZTrajectory {
    std::string leg;
    std::string stack;
    Series z;
};

struct RunSnapshot {
    std::string path;        // the run.h5 file (or its folder)
    std::string run_id;      // the run's id (/experiment run_id; the folder name when absent)
    std::string experiment;  // experiment name
    std::string spec_json;   // the resolved experiment spec (/experiment spec_json): what labels runs apart
    std::vector<LegTrajectory> legs;
    std::vector<ResidualTrajectory> residuals;  // empty when experiments/ exposed none
    std::string verdict;                        // Comparison::verdict() once every leg has ended; "" before
    std::vector<EnvelopeBand> bands;            // empty without a seed envelope
    std::vector<FlagMarker> flags;              // every leg's gate flags
    std::vector<ZTrajectory> z_scores;          // per leg, when there is an envelope
    std::vector<std::pair<Metric, Series>> flag_points;  // the markers per metric (from `flags`, for drawing)
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
    std::string faults;             // the leg's injected faults (catalog legs.faults; docs/faults.md), "" = clean
    std::string verdict;            // the run's verdict line (catalog runs.note, written by the runner); "" = none yet
    std::shared_ptr<const nlohmann::json> spec;  // the run folder's experiment.json spec; null when unreadable
    std::string envelope;           // the seed envelope folder the run is a member of; "" = none
};

}  // namespace tandem::views
