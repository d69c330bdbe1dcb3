#include "tandem/views/run_snapshot.h"

namespace tandem::views {

const char* metric_label(Metric metric) {
    switch (metric) {
    case Metric::HeldoutCe: return "held-out CE";
    case Metric::GradNorm: return "grad norm";  // the pre-clip global norm (docs/spec.md §Recipe)
    case Metric::TrainLoss: return "training loss";
    case Metric::LearningRate: return "learning rate";
    case Metric::Throughput: return "tokens/s";
    }
    return "?";
}

const Series& LegTrajectory::series(Metric metric) const {
    switch (metric) {
    case Metric::HeldoutCe: return heldout_ce;
    case Metric::GradNorm: return grad_norm;
    case Metric::TrainLoss: return train_loss;
    case Metric::LearningRate: return learning_rate;
    case Metric::Throughput: return tokens_per_s;
    }
    return heldout_ce;
}

Series& LegTrajectory::series(Metric metric) { return const_cast<Series&>(static_cast<const LegTrajectory&>(*this).series(metric)); }

std::size_t RunSnapshot::point_count() const {
    std::size_t n = 0;
    for (const auto& leg : legs)
        for (Metric m : kAllMetrics) n += leg.series(m).size();
    for (const auto& r : residuals) n += r.percent.size();
    return n;
}

}  // namespace tandem::views
