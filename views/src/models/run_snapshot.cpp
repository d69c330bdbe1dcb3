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
    static const Series none;
    const auto it = metrics.find(metric);
    return it == metrics.end() ? none : it->second;
}

Series& LegTrajectory::series(Metric metric) { return metrics[metric]; }

std::size_t RunSnapshot::point_count() const {
    std::size_t n = 0;
    for (const auto& leg : legs)
        for (const auto& [metric, series] : leg.metrics) n += series.size();
    for (const auto& r : residuals) n += r.percent.size();
    return n;
}

}  // namespace tandem::views
