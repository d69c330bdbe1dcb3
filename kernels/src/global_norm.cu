// Global gradient L2 norm and clipping (torch.nn.utils.clip_grad_norm_ semantics), deterministic:
//   pass 1: block (segment s, slice k) sums squares of a fixed kSlice-element slice in double, with
//           a fixed in-block reduction order -> partials[s * slices + k];
//   pass 2: one block; thread i takes segments i, i+blockDim, ... and sums each segment's slices in
//           order, then its segments, then a fixed block reduction -> norm = sqrt(total) (the CPU's
//           global_grad_norm: a double sum of squares per tensor, summed over tensors);
//   coef = min(1, float(max_norm) / (float(norm) + 1e-6f)) in float32, stored on the device so the
//   clip kernel reads it without a host round trip.
// No atomics anywhere: the same gradients give the same bits.
#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

constexpr int64_t kSlice = 8192;
constexpr int kNormThreads = 256;

__global__ void sumsq_slices_kernel(double* __restrict__ partials, const float* __restrict__ grad,
                                    const int64_t* __restrict__ offsets, const int64_t* __restrict__ counts,
                                    int64_t slices) {
    __shared__ double shared[32];
    const int64_t s = blockIdx.y, k = blockIdx.x;
    const int64_t begin = k * kSlice, end = min(counts[s], begin + kSlice);
    const float* g = grad + offsets[s];
    double acc = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += double(g[i]) * double(g[i]);
    acc = detail::block_sum(acc, shared);
    if (threadIdx.x == 0) partials[s * slices + k] = acc;
}

__global__ void norm_finish_kernel(double* __restrict__ norm, float* __restrict__ coef,
                                   const double* __restrict__ partials, int64_t n_segments, int64_t slices,
                                   double max_norm) {
    __shared__ double shared[32];
    double acc = 0.0;
    for (int64_t s = threadIdx.x; s < n_segments; s += blockDim.x) {
        double seg = 0.0;
        for (int64_t k = 0; k < slices; ++k) seg += partials[s * slices + k];
        acc += seg;
    }
    acc = detail::block_sum(acc, shared);
    if (threadIdx.x == 0) {
        const double total = sqrt(acc);
        norm[0] = total;
        const float c = static_cast<float>(max_norm) / (static_cast<float>(total) + 1e-6f);
        coef[0] = fminf(c, 1.0f);
    }
}

__global__ void clip_kernel(float* __restrict__ grad, int64_t n, const float* __restrict__ coef) {
    const float c = coef[0];
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        grad[i] *= c;
}

// ---------------------------------------------------------------------------------------------
// launchers

int64_t global_norm_partials(int64_t max_segment_count, int64_t n_segments) {
    return ((max_segment_count + kSlice - 1) / kSlice) * n_segments;
}

void global_grad_norm(double* norm, float* coef, double* partials, const float* grad, const int64_t* seg_offsets,
                      const int64_t* seg_counts, int64_t n_segments, int64_t max_segment_count, double max_norm,
                      cudaStream_t stream) {
    const int64_t slices = (max_segment_count + kSlice - 1) / kSlice;
    if (n_segments > 0 && slices > 0) {
        sumsq_slices_kernel<<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(n_segments)), kNormThreads, 0,
                              stream>>>(partials, grad, seg_offsets, seg_counts, slices);
        CUDA_CHECK_LAUNCH();
    }
    norm_finish_kernel<<<1, 1024, 0, stream>>>(norm, coef, partials, n_segments, slices, max_norm);
    CUDA_CHECK_LAUNCH();
}

void clip_grad(float* grad, int64_t n, const float* coef, cudaStream_t stream) {
    if (n <= 0) return;
    clip_kernel<<<detail::elementwise_grid(n, 256), 256, 0, stream>>>(grad, n, coef);
    CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
