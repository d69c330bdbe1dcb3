// LM head fused with cross-entropy, chunked over tokens so at most token_chunk x V logits exist at
// once (Qwen3: V = 151,936; a 256-token chunk is 155 MB instead of 622 MB for a 2 x 512 micro-batch).
// Per chunk:
//   1. logits[n, V] = h[n, C] emb[V, C]^T                       (cuBLAS Sgemm, float32, no TF32)
//   2. one block per row: max, sum exp (double), loss_n = max + log(sum) - logit[target] (double);
//      if a gradient is wanted, the row is overwritten in place with
//      grad_scale * (softmax - onehot(target))                   (float32)
//   3. dh[n, C] = dlogits[n, V] emb[V, C]                         (cuBLAS Sgemm)
// The embedding is the tied, frozen LM head: no d(emb). Per-token losses stay on the device
// (double); sum_losses adds them in a fixed order so the update's loss is deterministic.
// cuDNN has no fused LM-head CE; the GEMMs dominate (2 N C V flops each), the row kernel is
// memory-bound (~4 passes over the chunk).
#include <algorithm>

#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

constexpr int kCeThreads = 1024;

__global__ void __launch_bounds__(kCeThreads)
softmax_ce_rows_kernel(double* __restrict__ losses, float* __restrict__ logits, const int32_t* __restrict__ targets,
                       int64_t V, float grad_scale, bool want_grad) {
    __shared__ float fshared[32];
    __shared__ double dshared[32];
    const int64_t n = blockIdx.x;
    float* row = logits + n * V;
    // max
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, row[i]);
    {
        mx = detail::warp_max(mx);
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (lane == 0) fshared[warp] = mx;
        __syncthreads();
        float r = lane < int(blockDim.x >> 5) ? fshared[lane] : -INFINITY;
        r = detail::warp_max(r);
        mx = __shfl_sync(0xffffffffu, r, 0);
    }
    // sum of exp in double (fixed order)
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) s += double(expf(row[i] - mx));
    s = detail::block_sum(s, dshared);
    const int32_t target = targets[n];
    const double lse = double(mx) + log(s);
    if (threadIdx.x == 0) losses[n] = lse - double(row[target]);
    if (!want_grad) return;
    __syncthreads();  // row[target] read before it is overwritten
    const float inv_sum = static_cast<float>(1.0 / s);
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
        const float p = expf(row[i] - mx) * inv_sum;
        row[i] = grad_scale * (p - (i == target ? 1.0f : 0.0f));
    }
}

__global__ void sum_losses_kernel(double* __restrict__ acc, const double* __restrict__ losses, int64_t n) {
    __shared__ double shared[32];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += losses[i];
    s = detail::block_sum(s, shared);
    if (threadIdx.x == 0) acc[0] += s;
}

// ---------------------------------------------------------------------------------------------
// launchers

void lm_head_cross_entropy(cublasHandle_t h, cudaStream_t stream, double* losses, float* dh, float* workspace,
                           const float* hidden, const float* emb, const int32_t* targets, int64_t N, int64_t C,
                           int64_t V, float grad_scale, int64_t token_chunk) {
    if (N <= 0) return;
    const int64_t chunk = token_chunk <= 0 ? N : std::min(token_chunk, N);
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
        const int64_t n = std::min(chunk, N - n0);
        linear_forward(h, workspace, hidden + n0 * C, emb, n, C, V);  // logits[n,V]
        softmax_ce_rows_kernel<<<static_cast<unsigned>(n), kCeThreads, 0, stream>>>(losses + n0, workspace,
                                                                                     targets + n0, V, grad_scale,
                                                                                     dh != nullptr);
        CUDA_CHECK_LAUNCH();
        if (dh) linear_backward_input(h, dh + n0 * C, workspace, emb, n, V, C);  // dh[n,C] = dlogits emb
    }
}

void sum_losses(double* acc, const double* losses, int64_t n, cudaStream_t stream) {
    sum_losses_kernel<<<1, 1024, 0, stream>>>(acc, losses, n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
