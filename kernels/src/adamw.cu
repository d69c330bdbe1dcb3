// AdamW, torch.optim.AdamW's foreach (non-capturable) arithmetic element by element, exactly the
// sequence the CPU's adamw_step writes out (engine/include/tandem/engine/optim.h):
//   p *= decay;  m = m + (1-b1)*(g - m);  v = v*b2 + ((1-b2)*g)*g;
//   denom = sqrt(v) / bc2_sqrt + eps;  p += neg_step_size * (m / denom)
// The scalars are computed once on the host in double and rounded to float (adamw_scalars); the
// element update is adamw_element (element_ops.h), which tests/gpu/test_kernels_host.cpp checks on the host.
// Memory-bound over the ONE flat adapter buffer: a single launch per update.
#include <cmath>

#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

__global__ void adamw_kernel(float* __restrict__ param, const float* __restrict__ grad, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, AdamWScalars s) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float p = param[i], mi = m[i], vi = v[i];
        adamw_element(p, grad[i], mi, vi, s);
        param[i] = p;
        m[i] = mi;
        v[i] = vi;
    }
}

// ---------------------------------------------------------------------------------------------
// launchers

AdamWScalars adamw_scalars(int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay) {
    AdamWScalars s{};
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
    s.beta2 = static_cast<float>(beta2);
    s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
    s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
    s.eps = static_cast<float>(eps);
    s.neg_step_size = static_cast<float>(-(lr / bc1));
    s.decay = static_cast<float>(1.0 - lr * weight_decay);
    s.apply_decay = weight_decay != 0.0;
    return s;
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWScalars& s,
                cudaStream_t stream) {
    if (n <= 0) return;
    adamw_kernel<<<detail::elementwise_grid(n, 256), 256, 0, stream>>>(param, grad, m, v, n, s);
    CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
