// Rotary position embedding, rotate-half convention (transformers' apply_rotary_pos_emb):
//   out[..., j]       = x[j] * cos[t,j]       - x[j+D/2] * sin[t,j]
//   out[..., j + D/2] = x[j+D/2] * cos[t,j+D/2] + x[j] * sin[t,j+D/2]
// The cos/sin tables [T,D] are computed on the host by engine::ops::rope_tables (float32, as
// transformers computes inv_freq and the angles) and copied to the device, so the tables are the
// CPU's bits; only the multiply-adds run here. Backward is the transpose rotation:
//   din[j] = dout[j] cos + dout[j+D/2] sin,  din[j+D/2] = dout[j+D/2] cos - dout[j] sin.
// Positions are 0..T-1 in every sequence (right padding, no packing). In-place is allowed: each
// thread reads its pair before writing it.
#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

// one thread per (b, t, h, j) pair, j < D/2
template <bool kBackward>
__global__ void rope_kernel(float* out, const float* in, const float* __restrict__ cos, const float* __restrict__ sin,
                            int64_t total_pairs, int64_t T, int64_t H, int64_t D) {
    const int64_t half = D / 2;
    for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < total_pairs;
         p += int64_t(gridDim.x) * blockDim.x) {
        const int64_t j = p % half;
        const int64_t row = p / half;          // (b, t, h) row of D elements
        const int64_t t = (row / H) % T;
        const float* x = in + row * D;
        float* y = out + row * D;
        const float x1 = x[j], x2 = x[j + half];
        const float c1 = cos[t * D + j], s1 = sin[t * D + j];
        const float c2 = cos[t * D + j + half], s2 = sin[t * D + j + half];
        if (!kBackward) {
            // q*cos + rotate_half(q)*sin, rotate_half(q) = cat(-x2, x1)
            y[j] = x1 * c1 + (-x2) * s1;
            y[j + half] = x2 * c2 + x1 * s2;
        } else {
            y[j] = x1 * c1 + x2 * s2;
            y[j + half] = x2 * c2 - x1 * s1;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// launchers

void rope_forward(float* out, const float* in, const float* cos, const float* sin, int64_t B, int64_t T, int64_t H,
                  int64_t D, cudaStream_t stream) {
    const int64_t pairs = B * T * H * (D / 2);
    if (pairs <= 0) return;
    rope_kernel<false><<<detail::elementwise_grid(pairs, 256), 256, 0, stream>>>(out, in, cos, sin, pairs, T, H, D);
    CUDA_CHECK_LAUNCH();
}

void rope_backward(float* din, const float* dout, const float* cos, const float* sin, int64_t B, int64_t T, int64_t H,
                   int64_t D, cudaStream_t stream) {
    const int64_t pairs = B * T * H * (D / 2);
    if (pairs <= 0) return;
    rope_kernel<true><<<detail::elementwise_grid(pairs, 256), 256, 0, stream>>>(din, dout, cos, sin, pairs, T, H, D);
    CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
