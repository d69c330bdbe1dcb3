#include "tandem/compare/metrics.h"

#include "tandem/compare/compare.h"

#include <algorithm>

namespace tandem::experiments {

const std::vector<MetricInfo>& metric_table() {
    // Held-out CE and the training loss are token-weighted mean cross-entropies in nats; the grad
    // norm is the pre-clip global L2 norm; tokens/s is supervised tokens / wall seconds of one
    // update (update_tokens_per_second), not a run.h5 column of its own.
    static const std::vector<MetricInfo> table{
        {Metric::HeldoutCe, "held-out CE", "held-out CE", "nats", "heldout_ce", "eval/loss", true, false, true, nullptr,
         [](const EvalRow& r) { return r.heldout_ce; }},
        {Metric::TrainLoss, "training loss", "train loss", "nats", "loss", "train/loss", false, true, true,
         [](const StepRow& r) { return r.loss; }},
        {Metric::GradNorm, "grad norm", "grad norm", "", "grad_norm", "train/grad_norm", false, true, true,
         [](const StepRow& r) { return r.grad_norm; }},
        {Metric::LearningRate, "learning rate", "lr", "", "lr", "train/learning_rate", false, false, false,
         [](const StepRow& r) { return r.lr; }},
        {Metric::Throughput, "throughput", "throughput", "tokens/s", "tokens_per_s", "train/tokens_per_second", false, true, false,
         update_tokens_per_second},
    };
    return table;
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
