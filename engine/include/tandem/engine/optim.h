#pragma once
// Optimizer pieces with PyTorch / transformers semantics, written out so the formulas are visible.
#include <cstdint>
#include <vector>

namespace tandem::engine {

struct AdamWOptions {
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.0;
    // Fault variants (faults.h, docs/faults.md); the defaults are torch's AdamW.
    bool bias_correction = true;   // false: bc1 = bc2 = 1 (no bias correction)
    bool eps_inside_sqrt = false;  // true: denom = sqrt(v / bc2 + eps) instead of sqrt(v) / sqrt(bc2) + eps
};

// One torch.optim.AdamW step (foreach implementation, non-capturable), element-wise in float32:
//   p *= 1 - lr*wd
//   m  = m + (1-b1)*(g - m)                      (torch lerp_, weight < 0.5 branch)
//   v  = v*b2 + ((1-b2)*g)*g                     (mul_ then addcmul_)
//   denom = sqrt(v) / sqrt(1 - b2^step) + eps     (bias corrections in double, applied in float)
//   p += (-(lr / (1 - b1^step))) * (m / denom)   (addcdiv_)
// step is the 1-based step count AFTER increment (torch increments before computing).
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, double lr,
                const AdamWOptions& o);

// transformers.get_cosine_schedule_with_warmup (num_cycles 0.5) times base_lr, for 0-based update t.
double cosine_with_warmup_lr(double base_lr, int64_t t, int64_t warmup, int64_t total);
// W = ceil(ratio * T) (docs/spec.md §Recipe: ratio 0.03).
int64_t warmup_updates(double ratio, int64_t total);

// Global L2 norm of the gradient (double accumulation per tensor then over tensors, in the given
// order), returned as double. `segments` are [offset, count] pairs into grad.
double global_grad_norm(const float* grad, const std::vector<std::pair<int64_t, int64_t>>& segments);
// torch.nn.utils.clip_grad_norm_: coef = min(1, float(max) / (float(norm) + 1e-6f)) in float32;
// grad *= coef. Returns the coefficient.
float clip_grad(float* grad, int64_t n, double norm, double max_norm);
float clip_coefficient(double norm, double max_norm);  // the coef above

}  // namespace tandem::engine
