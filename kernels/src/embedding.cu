// Token embedding lookup: out[n,:] = table[ids[n],:]. The table is frozen under LoRA, so there is no
// backward. One block per token row, 16-byte loads when C allows (Qwen3: C = 1024).
#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

__global__ void embedding_forward_kernel(float* __restrict__ out, const int32_t* __restrict__ ids,
                                         const float* __restrict__ table, int64_t C) {
    const int64_t n = blockIdx.x;
    const float* src = table + int64_t(ids[n]) * C;
    float* dst = out + n * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

__global__ void embedding_forward_vec4_kernel(float4* __restrict__ out, const int32_t* __restrict__ ids,
                                              const float4* __restrict__ table, int64_t C4) {
    const int64_t n = blockIdx.x;
    const float4* src = table + int64_t(ids[n]) * C4;
    float4* dst = out + n * C4;
    for (int64_t c = threadIdx.x; c < C4; c += blockDim.x) dst[c] = src[c];
}

// ---------------------------------------------------------------------------------------------
// launchers

void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C, int64_t /*vocab*/,
                       cudaStream_t stream) {
    if (N <= 0) return;
    // ids are validated on the host (MicroBatch::validate) before they reach the device.
    const bool aligned = C % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(table) % 16 == 0;
    if (aligned) {
        embedding_forward_vec4_kernel<<<static_cast<unsigned>(N), 256, 0, stream>>>(
            reinterpret_cast<float4*>(out), ids, reinterpret_cast<const float4*>(table), C / 4);
    } else {
        embedding_forward_kernel<<<static_cast<unsigned>(N), 256, 0, stream>>>(out, ids, table, C);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
