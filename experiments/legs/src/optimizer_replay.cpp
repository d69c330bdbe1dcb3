// The spec's AdamW replayed on the engine leg's own operands (optimizer_replay.h).
#include "tandem/legs/optimizer_replay.h"

#include "tandem/float32.h"
#include "tandem/legs/leg_protocol.h"

#include <cmath>
#include <limits>

namespace tandem::experiments {

namespace {

// ulp of a float32 value (as double): the gap to the next float32 away from zero.
double ulp32(float x) {
    const float a = std::fabs(x);
    return static_cast<double>(std::nextafter(a, std::numeric_limits<float>::infinity())) - static_cast<double>(a);
}

}  // namespace

double replay_ratio(float p0f, float gf, float mf, float vf, float p1f, int64_t step, double lr, const SpecAdamW& spec) {
    if (!std::isfinite(p1f)) return std::numeric_limits<double>::infinity();
    const double p0 = p0f, g = gf, m = mf, v = vf, p1 = p1f;
    const double b1 = spec.beta1, b2 = spec.beta2, wd = spec.weight_decay;
    const double t = static_cast<double>(step + 1);
    const double m1 = b1 * m + (1 - b1) * g;
    const double v1 = b2 * v + (1 - b2) * g * g;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    const double denom = std::sqrt(v1) / std::sqrt(bc2) + spec.eps;
    const double step_size = lr / bc1;
    const double want = p0 * (1 - lr * wd) - step_size * m1 / denom;
    const double terms = step_size * (b1 * std::fabs(m) + (1 - b1) * std::fabs(g)) / denom + lr * wd * std::fabs(p0);
    double bound = ulp32(p1f) + kReplayK * kFloat32Epsilon * terms;
    if (wd != 0) bound += ulp32(p0f);
    const double d = std::fabs(p1 - want);
    if (bound > 0) return d / bound;
    return d > 0 ? std::numeric_limits<double>::infinity() : 0.0;  // a zero bound holds only an exact 0
}

ReplayResult replay_adamw(const engine::OptimizerStepOperands& ops, const std::vector<engine::AdapterSlot>& slots,
                          const SpecAdamW& spec) {
    ReplayResult r;
    for (const auto& slot : slots) {
        int64_t count = 1;
        for (int64_t d : slot.shape) count *= d;
        for (int64_t i = slot.offset; i < slot.offset + count; ++i) {
            const auto k = static_cast<size_t>(i);
            const double ratio = replay_ratio(ops.p0[k], ops.g[k], ops.m[k], ops.v[k], ops.p1[k], ops.step, ops.lr, spec);
            r.over += ratio > 1;
            if (!(ratio <= r.max_ratio)) {  // the first of the largest; inf wins
                r.max_ratio = ratio;
                r.tensor = slot.name;
            }
        }
        r.elements += count;
        ++r.tensors;
    }
    return r;
}

nlohmann::json optimizer_check_event(int64_t update, const ReplayResult& r) {
    return {{"update", update},
            // a non-finite ratio (a non-finite parameter) is over any bound: "Infinity", never "NaN"
            {"max_ratio", protocol_number(std::isfinite(r.max_ratio) ? r.max_ratio : std::numeric_limits<double>::infinity())},
            {"tensor", r.tensor},
            {"over", r.over},
            {"elements", r.elements},
            {"tensors", r.tensors},
            {"bound", "ulp(p1) + " + std::to_string(static_cast<int>(kReplayK)) +
                          " eps32 x the step's terms (the spec's AdamW replayed in float64)"}};
}

}  // namespace tandem::experiments
