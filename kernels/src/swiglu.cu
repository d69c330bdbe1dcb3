// SiLU-gated MLP core: out = silu(g) * u with silu(x) = x / (1 + exp(-x)) (torch's formula).
// Backward: s = 1/(1+exp(-g)); dsilu/dg = s * (1 + g * (1 - s));  dg = dout * u * dsilu, du = dout * silu(g).
// Memory-bound: grid-stride loops; expf (not __expf) keeps full float32 accuracy.
#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

__global__ void swiglu_forward_kernel(float* __restrict__ out, const float* __restrict__ gate,
                                      const float* __restrict__ up, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = gate[i];
        out[i] = (g / (1.0f + expf(-g))) * up[i];
    }
}

__global__ void swiglu_backward_kernel(float* __restrict__ dgate, float* __restrict__ dup,
                                       const float* __restrict__ dout, const float* __restrict__ gate,
                                       const float* __restrict__ up, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = gate[i], u = up[i], d = dout[i];
        const float s = 1.0f / (1.0f + expf(-g));
        const float silu = g / (1.0f + expf(-g));
        dgate[i] = d * u * (s * (1.0f + g * (1.0f - s)));
        dup[i] = d * silu;
    }
}

// ---------------------------------------------------------------------------------------------
// launchers

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    swiglu_forward_kernel<<<detail::elementwise_grid(n, 256), 256, 0, stream>>>(out, gate, up, n);
    CUDA_CHECK_LAUNCH();
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n,
                     cudaStream_t stream) {
    if (n <= 0) return;
    swiglu_backward_kernel<<<detail::elementwise_grid(n, 256), 256, 0, stream>>>(dgate, dup, dout, gate, up, n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
