// Attention version 3 (attention_v3.cuh: the kernels, attention_v3.cu: these launchers), called by
// attention.cu's public launchers when set_attention_{forward,backward}_version(3) is in effect.
// Same contract as attention_forward / attention_backward in ops.h; delta is the backward's row
// dot(dout, out) [B,H,T], already computed. Pointers must be 16-byte aligned (every device
// allocation and the engine's activation slices are).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::kernels::attention_v3 {

void forward(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* lengths,
             int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, cudaStream_t stream);
void backward(float* dq, float* dk, float* dv, const float* delta, const float* dout, const float* q, const float* k,
              const float* v, const float* lse, const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV,
              int64_t D, cudaStream_t stream);

}  // namespace tandem::kernels::attention_v3
