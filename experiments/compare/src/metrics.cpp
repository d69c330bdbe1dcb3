#include "tandem/compare/metrics.h"

#include <algorithm>
#include <cmath>

namespace tandem::experiments {

const std::vector<MetricInfo>& metric_table() {
    // Held-out CE and the training loss are token-weighted mean cross-entropies in nats; the grad
    // norm is the pre-clip global L2 norm; tokens/s is supervised tokens / wall seconds of one
    // update (update_tokens_per_second), not a run.h5 column of its own.
    // The recorded metrics are the METRIC entries of tandem/store/row_columns.h; the member is the
    // run.h5 series.
#define EVAL_METRIC(member, initial, enumerator, label, short_label, unit, tensorboard, smoothed, shown) \
    {Metric::enumerator, label, short_label, unit, #member, tensorboard, smoothed, shown, nullptr,  \
     [](const EvalRow& r) { return r.member; }},
#define STEP_METRIC(member, initial, enumerator, label, short_label, unit, tensorboard, smoothed, shown) \
    {Metric::enumerator, label, short_label, unit, #member, tensorboard, smoothed, shown,          \
     [](const StepRow& r) { return r.member; }},
    static const std::vector<MetricInfo> table{
        TANDEM_EVAL_ROW(TANDEM_ROW_SKIP, TANDEM_ROW_SKIP, EVAL_METRIC)
        TANDEM_STEP_ROW(TANDEM_ROW_SKIP, TANDEM_ROW_SKIP, STEP_METRIC)
        {Metric::Throughput, "throughput", "throughput", "tokens/s", "tokens_per_s", "train/tokens_per_second", true, false,
         update_tokens_per_second},
    };
#undef EVAL_METRIC
#undef STEP_METRIC
    return table;
}

double update_tokens_per_second(const StepRow& row) {
    return row.wall_s > 0 ? static_cast<double>(row.tokens) / row.wall_s : std::nan("");
}

const MetricInfo& metric_info(Metric metric) {
    const auto& t = metric_table();
    return *std::find_if(t.begin(), t.end(), [&](const MetricInfo& m) { return m.metric == metric; });
}

std::optional<Metric> metric_of_series(std::string_view series) {
    for (const auto& m : metric_table())
        if (series == m.series) return m.metric;
    return std::nullopt;
}

std::string metric_axis_title(Metric metric, bool short_label) {
    const auto& m = metric_info(metric);
    std::string title = short_label ? m.short_label : m.label;
    if (*m.unit) title += std::string(" [") + m.unit + "]";
    return title;
}

std::string series_label(std::string_view series) {
    if (const auto metric = metric_of_series(series)) return metric_info(*metric).label;
    return std::string(series);
}

const std::vector<XAxisInfo>& x_axis_table() {
    static const std::vector<XAxisInfo> table{
        {XAxis::Update, "update", "", true},
        {XAxis::TokensSeen, "tokens seen", "", true},
        {XAxis::WallTime, "wall time", "s", false},
    };
    return table;
}

const XAxisInfo& x_axis_info(XAxis axis) {
    const auto& t = x_axis_table();
    return *std::find_if(t.begin(), t.end(), [&](const XAxisInfo& x) { return x.axis == axis; });
}

std::string x_axis_title(XAxis axis) {
    const auto& x = x_axis_info(axis);
    return *x.unit ? std::string(x.label) + " [" + x.unit + "]" : std::string(x.label);
}

std::vector<ClockPoint> update_clock(const std::vector<StepRow>& rows, const std::optional<ClockPoint>& after) {
    std::vector<ClockPoint> out;
    if (rows.empty()) return out;
    ClockPoint at = after ? *after : ClockPoint{rows.front().update, 0, 0};
    if (!after) out.push_back(at);
    for (const auto& row : rows) {
        at.update = row.update + 1;
        at.tokens_seen += static_cast<double>(row.tokens);
        at.wall_s += row.wall_s;
        out.push_back(at);
    }
    return out;
}

}  // namespace tandem::experiments
