// Launchers of attention version 3 (the kernels and their design: attention_v3.cuh).
#include "attention_v3.h"

#include <cmath>
#include <string>

#include "attention_v3.cuh"
#include "tandem/error.h"
#include "tandem/kernels/device.h"

namespace tandem::kernels::attention_v3 {

namespace {

// Above 48 KB a kernel must opt in to its dynamic shared memory; the carveout preference asks for
// the largest shared-memory split so that two 112 KB blocks (forward, dq) fit on one SM.
template <class Kernel>
void prepare(Kernel kernel, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)));
}

void check(int64_t T, const Grid& grid, std::initializer_list<const void*> pointers) {
    for (const void* p : pointers)
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
            throw tandem::Error("attention v3 (CUDA): a tensor is not 16-byte aligned");
    if (grid.y > 65535 || grid.x > 0x7fffffff || T > (int64_t(1) << 30))
        throw tandem::Error("attention v3 (CUDA): sequence " + std::to_string(T) + " too long for the grid");
}

template <int D>
void forward_d(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* lengths,
               int64_t B, int64_t T, int64_t H, int64_t KV, cudaStream_t stream) {
    const Grid grid = query_grid(B, T, H, KV);
    check(T, grid, {out, q, k, v});
    const size_t bytes = sizeof(float) * forward_smem_floats<D>();
    prepare(forward_kernel<D>, bytes);
    forward_kernel<D><<<dim3(unsigned(grid.x), unsigned(grid.y)), kThreads, bytes, stream>>>(
        out, lse, q, k, v, lengths, int(T), int(H), int(KV), grid.heads, 1.0f / std::sqrt(float(D)));
    CUDA_CHECK_LAUNCH();
}

template <int D>
void backward_d(float* dq, float* dk, float* dv, const float* delta, const float* dout, const float* q, const float* k,
                const float* v, const float* lse, const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV,
                cudaStream_t stream) {
    const float scale = 1.0f / std::sqrt(float(D));
    const Grid qg = query_grid(B, T, H, KV), kg = key_grid(B, T, KV);
    check(T, qg, {dq, dk, dv, dout, q, k, v});
    check(T, kg, {});
    const size_t dq_bytes = sizeof(float) * dq_smem_floats<D>(), dkv_bytes = sizeof(float) * dkv_smem_floats<D>();
    prepare(dq_kernel<D>, dq_bytes);
    prepare(dkv_kernel<D>, dkv_bytes);
    dq_kernel<D><<<dim3(unsigned(qg.x), unsigned(qg.y)), kThreads, dq_bytes, stream>>>(
        dq, dout, q, k, v, lse, delta, lengths, int(T), int(H), int(KV), qg.heads, scale);
    CUDA_CHECK_LAUNCH();
    dkv_kernel<D><<<dim3(unsigned(kg.x), unsigned(kg.y)), kDkvThreads, dkv_bytes, stream>>>(
        dk, dv, dout, q, k, v, lse, delta, lengths, int(T), int(H), int(KV), scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void forward(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* lengths,
             int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, cudaStream_t stream) {
    switch (D) {
        case 32: forward_d<32>(out, lse, q, k, v, lengths, B, T, H, KV, stream); break;
        case 64: forward_d<64>(out, lse, q, k, v, lengths, B, T, H, KV, stream); break;
        default: forward_d<128>(out, lse, q, k, v, lengths, B, T, H, KV, stream); break;
    }
}

void backward(float* dq, float* dk, float* dv, const float* delta, const float* dout, const float* q, const float* k,
              const float* v, const float* lse, const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV,
              int64_t D, cudaStream_t stream) {
    switch (D) {
        case 32: backward_d<32>(dq, dk, dv, delta, dout, q, k, v, lse, lengths, B, T, H, KV, stream); break;
        case 64: backward_d<64>(dq, dk, dv, delta, dout, q, k, v, lse, lengths, B, T, H, KV, stream); break;
        default: backward_d<128>(dq, dk, dv, delta, dout, q, k, v, lse, lengths, B, T, H, KV, stream); break;
    }
}

}  // namespace tandem::kernels::attention_v3
