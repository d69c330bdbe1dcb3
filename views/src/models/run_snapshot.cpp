#include "tandem/views/run_snapshot.h"

namespace tandem::views {

const char* metric_label(Metric metric) {
    switch (metric) {
    case Metric::HeldoutLoss: return "held-out loss";
    case Metric::GradNorm: return "grad norm";  // the pre-clip global norm (SPEC §1)
    case Metric::TrainLoss: return "training loss";
    }
    return "?";
}

const Series& LegTrajectory::series(Metric metric) const {
    switch (metric) {
    case Metric::HeldoutLoss: return heldout_loss;
    case Metric::GradNorm: return grad_norm;
    case Metric::TrainLoss: return train_loss;
    }
    return heldout_loss;
}

std::size_t RunSnapshot::point_count() const {
    std::size_t n = 0;
    for (const auto& leg : legs) n += leg.heldout_loss.size() + leg.grad_norm.size() + leg.train_loss.size();
    for (const auto& r : residuals) n += r.percent.size();
    return n;
}

}  // namespace tandem::views
