#include "tandem/views/run_snapshot.h"

namespace tandem::views {

const char* metric_label(Metric metric) { return experiments::metric_info(metric).label; }

const Series* LegTrajectory::clock(XAxis axis) const {
    switch (axis) {
    case XAxis::Update: return nullptr;
    case XAxis::TokensSeen: return &tokens_seen;
    case XAxis::WallTime: return &wall_time;
    }
    return nullptr;
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
