#pragma once
// The ONE table of the trajectories a run records: for every metric its label, unit, the run.h5
// series it is read from, and the trajectory panel it is drawn on (docs/hdf5-layout.md for the series,
// docs/workbench.md for the panels). The workbench's snapshot, charts, trajectory view, run source,
// figure and CSV exports all name a metric through this table, so a quantity has one name from the
// file to the screen. Also the x axes a trajectory can be drawn against (update, tokens seen, wall
// time) and the clock that maps an update to the other two.
#include "tandem/store/run_file.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::experiments {

// In the order of the trajectory panels: the METRIC entries of tandem/store/row_columns.h (eval
// list first), then the metrics derived from a row (throughput: tokens / wall_s of an update).
#define TANDEM_METRIC_ENUMERATOR(member, initial, enumerator, ...) enumerator,
enum class Metric {
    TANDEM_EVAL_ROW(TANDEM_ROW_SKIP, TANDEM_ROW_SKIP, TANDEM_METRIC_ENUMERATOR)
    TANDEM_STEP_ROW(TANDEM_ROW_SKIP, TANDEM_ROW_SKIP, TANDEM_METRIC_ENUMERATOR)
    Throughput
};
#undef TANDEM_METRIC_ENUMERATOR

struct MetricInfo {
    Metric metric;
    const char* label;        // "held-out CE": legends, hover, panel names, figure axis titles
    const char* short_label;  // for an axis too short for `label` ("CE held-out" is never shortened further)
    const char* unit;         // "nats", "tokens/s"; "" for a dimensionless number
    const char* series;       // run.h5 name: /legs/<leg>/eval:heldout_ce, /legs/<leg>/steps:loss ... (also
                              // the /comparisons and /envelope series name and the curves CSV's metric)
    const char* tensorboard;  // the tag `tandem export tensorboard` writes (HF Trainer's names, what
                              // `tandem import tensorboard` reads back by default)
    bool smoothed;            // display smoothing applies by default (noisy per-update training series)
    bool shown;               // the panel is shown when a run opens
    // The metric's value in one row of the leg's table: of_eval for a per-evaluation metric, else
    // of_step. The workbench's run source fills every series through these, naming no metric.
    double (*of_step)(const StepRow& row) = nullptr;
    double (*of_eval)(const EvalRow& row) = nullptr;
};

// Every metric, in panel order.
const std::vector<MetricInfo>& metric_table();
const MetricInfo& metric_info(Metric metric);
// The metric whose run.h5 series is `series` ("heldout_ce", "loss", ...); nullopt for any other name.
std::optional<Metric> metric_of_series(std::string_view series);
// "held-out CE [nats]"; the label alone for a dimensionless metric.
std::string metric_axis_title(Metric metric, bool short_label = false);
// The label of the metric whose run.h5 series is `series` ("heldout_ce" -> "held-out CE"): how the
// gate's flags, the distances' reasons, the verdicts and the report name a series, so a message says
// what the panel says. A series that is no metric is named as it is.
std::string series_label(std::string_view series);

// Throughput of one update: supervised tokens / wall seconds (NaN when the wall time is not
// positive). The Throughput metric's value; the per-update curve behind TimingRow::tokens_per_s
// (which sums over the run).
double update_tokens_per_second(const StepRow& row);

// What a trajectory's x axis counts.
enum class XAxis { Update, TokensSeen, WallTime };
struct XAxisInfo {
    XAxis axis;
    const char* label;  // "update", "tokens seen", "wall time"
    const char* unit;   // "", "", "s"
    bool integers;      // ticks are whole numbers
};
const std::vector<XAxisInfo>& x_axis_table();
const XAxisInfo& x_axis_info(XAxis axis);
std::string x_axis_title(XAxis axis);  // "wall time [s]"

// The clock of a leg: supervised tokens seen and training wall seconds (the updates' own wall_s,
// summed) BEFORE update `update`, i.e. what the model had been trained on when that update's loss
// and that evaluation were measured. One point per update boundary: (first, 0, 0) and then one after
// every row, so an evaluation after the last update has its x too.
struct ClockPoint {
    std::int64_t update = 0;
    double tokens_seen = 0;
    double wall_s = 0;
};
// The clock points of `rows` (in update order). `after`: the clock point the previous rows ended on
// (a follower appending rows); without it the clock starts at 0 before the first row's update.
std::vector<ClockPoint> update_clock(const std::vector<StepRow>& rows, const std::optional<ClockPoint>& after = std::nullopt);

}  // namespace tandem::experiments
