// AdamW (torch semantics), transformers' cosine-with-warmup schedule, torch's global-norm clipping.
#include "tandem/engine/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "parallel.h"

namespace tandem::engine {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, double lr,
                const AdamWOptions& o) {
    // Scalars are Python floats (double) in torch; each element-wise op casts its scalar to float32.
    const float decay = static_cast<float>(1.0 - lr * o.weight_decay);
    const float w1 = static_cast<float>(1.0 - o.beta1);
    const float b2 = static_cast<float>(o.beta2);
    const float w2 = static_cast<float>(1.0 - o.beta2);
    const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
    const float step_size = static_cast<float>(-(lr / bc1));
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float eps = static_cast<float>(o.eps);
    const bool apply_decay = o.weight_decay != 0.0;
    detail::parallel_for_grain(n, 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            if (apply_decay) param[i] = param[i] * decay;
            const float g = grad[i];
            m[i] = m[i] + w1 * (g - m[i]);
            v[i] = v[i] * b2;
            v[i] = v[i] + (w2 * g) * g;
            const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
            param[i] = param[i] + step_size * (m[i] / denom);
        }
    });
}

double cosine_with_warmup_lr(double base_lr, int64_t t, int64_t warmup, int64_t total) {
    // transformers _get_cosine_schedule_with_warmup_lr_lambda (num_cycles = 0.5), then base_lr * lambda
    double factor;
    if (t < warmup) {
        factor = static_cast<double>(t) / static_cast<double>(std::max<int64_t>(1, warmup));
    } else {
        const double progress =
            static_cast<double>(t - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
        factor = std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * 0.5 * 2.0 * progress)));
    }
    return base_lr * factor;
}

int64_t warmup_updates(double ratio, int64_t total) {
    return static_cast<int64_t>(std::ceil(ratio * static_cast<double>(total)));
}

double global_grad_norm(const float* grad, const std::vector<std::pair<int64_t, int64_t>>& segments) {
    double total = 0.0;
    for (const auto& [offset, count] : segments) {
        double ss = 0.0;
        for (int64_t i = 0; i < count; ++i) ss += double(grad[offset + i]) * double(grad[offset + i]);
        total += ss;
    }
    return std::sqrt(total);
}

float clip_coefficient(double norm, double max_norm) {
    return std::min(1.0f, static_cast<float>(max_norm) / (static_cast<float>(norm) + 1e-6f));
}

float clip_grad(float* grad, int64_t n, double norm, double max_norm) {
    const float coef = clip_coefficient(norm, max_norm);
    for (int64_t i = 0; i < n; ++i) grad[i] = grad[i] * coef;
    return coef;
}

}  // namespace tandem::engine
