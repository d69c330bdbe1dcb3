// LoRA dropout masks: the counter-based generator of engine/include/tandem/engine/dropout.h, same
// integer arithmetic, so "shared" masks are bit-identical between the CPU and the GPU (and the
// Python legs): keep_i = u_i >= p with u_i = (mix64(key ^ (first_index + i)) >> 40) * 2^-24.
// Since u_i = m_i * 2^-24 exactly (m_i the top 24 bits), u_i >= p  <=>  m_i >= ceil(p * 2^24), an
// integer comparison (p * 2^24 is exact in double): no float rounding can differ between devices.
// The mask is never stored: dropout_apply regenerates it (forward and again in backward).
#include <cmath>

#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

__global__ void dropout_keep_kernel(uint8_t* __restrict__ keep, int64_t n, uint64_t key, uint64_t first_index,
                                    uint32_t threshold) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        keep[i] = dropout_keep(key, first_index + uint64_t(i), threshold) ? 1 : 0;
}

__global__ void dropout_apply_kernel(float* __restrict__ xd, const float* __restrict__ x, int64_t n, uint64_t key,
                                     uint64_t first_index, uint32_t threshold, float scale) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        xd[i] = dropout_keep(key, first_index + uint64_t(i), threshold) ? x[i] * scale : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// launchers

uint32_t dropout_threshold(double p) {
    if (!(p >= 0.0) || p > 1.0) return 0;
    return static_cast<uint32_t>(std::ceil(p * 16777216.0));  // 2^24; p = 1 gives 2^24: nothing kept
}

void dropout_keep_mask(uint8_t* keep, int64_t n, uint64_t key, uint64_t first_index, double p, cudaStream_t stream) {
    if (n <= 0) return;
    dropout_keep_kernel<<<detail::elementwise_grid(n, 256), 256, 0, stream>>>(keep, n, key, first_index,
                                                                               dropout_threshold(p));
    CUDA_CHECK_LAUNCH();
}

void dropout_apply(float* xd, const float* x, int64_t n, uint64_t key, uint64_t first_index, double p, float scale,
                   cudaStream_t stream) {
    if (n <= 0) return;
    dropout_apply_kernel<<<detail::elementwise_grid(n, 256), 256, 0, stream>>>(xd, x, n, key, first_index,
                                                                                dropout_threshold(p), scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
