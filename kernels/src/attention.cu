// Causal grouped-query attention, float32, flash-attention style: no [T,T] score or probability
// matrix is ever materialised; the forward keeps a running max / sum per query row (online softmax)
// and caches only lse = m + log(l) per row; the backward recomputes probabilities tile by tile.
//
// Mask (the CPU op's): query i of sequence b attends to key j iff j <= i and j < lengths[b].
//
// The three kernels (forward, dq, dk/dv) and their design are in attention.cuh, a header so that
// the host emulation test (tests/gpu/test_attention_emulated.cpp) compiles the very same text. This
// file holds the backward's delta kernel and the launchers:
//   forward   forward_kernel: grid (B*H/heads, query position blocks), 128 threads, dynamic shared
//             memory (112 KB at D 128);
//   backward  delta[b,h,i] = dot(dout_i, out_i) (double, below); dq_kernel: the forward's grid
//             (104 KB); dkv_kernel: grid (B*KV, 64-key blocks), 256 threads (160 KB). No atomics:
//             deterministic.
// FFMA on CUDA cores only: TF32 is forbidden, and Hopper has no float32 tensor-core path. Every
// pointer must be 16-byte aligned (every device allocation and the engine's activation slices are).
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "attention.cuh"
#include "common.cuh"
#include "tandem/error.h"
#include "tandem/kernels/ops.h"

namespace tandem::kernels {

namespace {

// ---------------------------------------------------------------------------------------------
// kernels

constexpr int kWarps = 4;  // delta: one warp per row, 4 rows per block

// delta[b,h,i] = sum_d dout[b,i,h,d] * out[b,i,h,d]; one warp per (b, i, h) row, double accumulation.
__global__ void attention_delta_kernel(float* __restrict__ delta, const float* __restrict__ dout,
                                       const float* __restrict__ out, int64_t rows, int T, int H, int D) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);  // (b*T + i)*H + h
    if (row >= rows) return;
    const float* a = dout + row * D;
    const float* o = out + row * D;
    double s = 0.0;
    for (int d = lane; d < D; d += 32) s += double(a[d]) * double(o[d]);
    s = detail::warp_sum(s);
    const int64_t h = row % H, bi = row / H, i = bi % T, b = bi / T;
    if (lane == 0) delta[(b * H + h) * T + i] = static_cast<float>(s);
}

// ---------------------------------------------------------------------------------------------
// launch helpers

void check_shapes(int64_t H, int64_t KV, int64_t D) {
    if (D != 32 && D != 64 && D != 128)
        throw tandem::Error("attention (CUDA): head_dim " + std::to_string(D) + " not supported (32, 64 or 128)");
    if (KV <= 0 || H % KV != 0)
        throw tandem::Error("attention (CUDA): heads " + std::to_string(H) + " not a multiple of kv heads " + std::to_string(KV));
}

void check_launch(int64_t T, const attention::Grid& grid, std::initializer_list<const void*> pointers) {
    for (const void* p : pointers)
        if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
            throw tandem::Error("attention (CUDA): a tensor is not 16-byte aligned");
    if (grid.y > 65535 || grid.x > 0x7fffffff || T > (int64_t(1) << 30))
        throw tandem::Error("attention (CUDA): batch*heads or sequence " + std::to_string(T) +
                            " too large for the grid");
}

// Above 48 KB a kernel must opt in to its dynamic shared memory; the carveout preference asks for
// the largest shared-memory split so that two 112 KB blocks (forward, dq) fit on one SM.
template <class Kernel>
void prepare(Kernel kernel, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)));
}

template <int D>
void forward_d(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* lengths,
               int64_t B, int64_t T, int64_t H, int64_t KV, cudaStream_t stream) {
    const attention::Grid grid = attention::query_grid(B, T, H, KV);
    check_launch(T, grid, {out, q, k, v});
    const size_t bytes = sizeof(float) * attention::forward_smem_floats<D>();
    prepare(attention::forward_kernel<D>, bytes);
    attention::forward_kernel<D><<<dim3(unsigned(grid.x), unsigned(grid.y)), attention::kThreads, bytes, stream>>>(
        out, lse, q, k, v, lengths, int(T), int(H), int(KV), grid.heads, 1.0f / std::sqrt(float(D)));
    CUDA_CHECK_LAUNCH();
}

template <int D>
void backward_d(float* dq, float* dk, float* dv, float* delta, const float* dout, const float* out, const float* q,
                const float* k, const float* v, const float* lse, const int32_t* lengths, int64_t B, int64_t T,
                int64_t H, int64_t KV, cudaStream_t stream) {
    const float scale = 1.0f / std::sqrt(float(D));
    const attention::Grid qg = attention::query_grid(B, T, H, KV), kg = attention::key_grid(B, T, KV);
    check_launch(T, qg, {dq, dk, dv, dout, q, k, v});
    check_launch(T, kg, {});
    const int64_t rows = B * T * H;
    attention_delta_kernel<<<detail::ceil_div(rows, kWarps), kWarps * 32, 0, stream>>>(delta, dout, out, rows, int(T),
                                                                                       int(H), int(D));
    CUDA_CHECK_LAUNCH();
    const size_t dq_bytes = sizeof(float) * attention::dq_smem_floats<D>(),
                 dkv_bytes = sizeof(float) * attention::dkv_smem_floats<D>();
    prepare(attention::dq_kernel<D>, dq_bytes);
    prepare(attention::dkv_kernel<D>, dkv_bytes);
    attention::dq_kernel<D><<<dim3(unsigned(qg.x), unsigned(qg.y)), attention::kThreads, dq_bytes, stream>>>(
        dq, dout, q, k, v, lse, delta, lengths, int(T), int(H), int(KV), qg.heads, scale);
    CUDA_CHECK_LAUNCH();
    attention::dkv_kernel<D><<<dim3(unsigned(kg.x), unsigned(kg.y)), attention::kDkvThreads, dkv_bytes, stream>>>(
        dk, dv, dout, q, k, v, lse, delta, lengths, int(T), int(H), int(KV), scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                       cudaStream_t stream) {
    if (B <= 0 || T <= 0) return;
    check_shapes(H, KV, D);
    switch (D) {
        case 32: forward_d<32>(out, lse, q, k, v, lengths, B, T, H, KV, stream); break;
        case 64: forward_d<64>(out, lse, q, k, v, lengths, B, T, H, KV, stream); break;
        default: forward_d<128>(out, lse, q, k, v, lengths, B, T, H, KV, stream); break;
    }
}

void attention_backward(float* dq, float* dk, float* dv, float* workspace, const float* dout, const float* out,
                        const float* q, const float* k, const float* v, const float* lse, const int32_t* lengths,
                        int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, cudaStream_t stream) {
    if (B <= 0 || T <= 0) return;
    check_shapes(H, KV, D);
    switch (D) {
        case 32: backward_d<32>(dq, dk, dv, workspace, dout, out, q, k, v, lse, lengths, B, T, H, KV, stream); break;
        case 64: backward_d<64>(dq, dk, dv, workspace, dout, out, q, k, v, lse, lengths, B, T, H, KV, stream); break;
        default: backward_d<128>(dq, dk, dv, workspace, dout, out, q, k, v, lse, lengths, B, T, H, KV, stream); break;
    }
}

}  // namespace tandem::kernels
