// RMSNorm forward / backward (HF Qwen3RMSNorm): rstd = 1/sqrt(mean(x^2) + eps), out = w * (x * rstd).
// Used for the layer norms (rows = N, C = hidden) and for q_norm / k_norm (rows = N*heads, C = D).
// One warp per row: Qwen3's rows are 128 (head norms) or 1024 (layer norms) wide, which a warp covers
// in 4 or 32 steps without shared memory. The mean of squares is accumulated in double as the CPU op
// does, then rounded to float; the rest is float32 arithmetic.
// dweight is only needed by tests (the base model is frozen): a column kernel sums it over rows in a
// fixed order, deterministic and slow.
#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

constexpr int kRowsPerBlock = 8;  // warps per block

__global__ void rmsnorm_forward_kernel(float* __restrict__ out, float* __restrict__ rstd, const float* __restrict__ in,
                                       const float* __restrict__ weight, int64_t rows, int64_t C, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float* x = in + row * C;
    double ss = 0.0;
    for (int64_t c = lane; c < C; c += 32) ss += double(x[c]) * double(x[c]);
    ss = detail::warp_sum(ss);
    const float mean = static_cast<float>(ss / double(C));
    const float r = 1.0f / sqrtf(mean + eps);
    float* y = out + row * C;
    for (int64_t c = lane; c < C; c += 32) y[c] = weight[c] * (x[c] * r);
    if (lane == 0) rstd[row] = r;
}

// din = r * (w*dout) - (r^3 / C) * x * sum_j (w_j dout_j x_j)
__global__ void rmsnorm_backward_kernel(float* __restrict__ din, const float* __restrict__ dout,
                                        const float* __restrict__ in, const float* __restrict__ weight,
                                        const float* __restrict__ rstd, int64_t rows, int64_t C, bool accumulate) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float* x = in + row * C;
    const float* dy = dout + row * C;
    double dot = 0.0;
    for (int64_t c = lane; c < C; c += 32) dot += double(weight[c]) * double(dy[c]) * double(x[c]);
    dot = detail::warp_sum(dot);
    const float r = rstd[row];
    const float coef = static_cast<float>(dot * double(r) * double(r) * double(r) / double(C));
    float* dx = din + row * C;
    for (int64_t c = lane; c < C; c += 32) {
        const float g = r * (weight[c] * dy[c]) - coef * x[c];
        dx[c] = accumulate ? dx[c] + g : g;
    }
}

// dweight[c] += sum_rows dout[row,c] * x[row,c] * rstd[row]; one thread per column, rows in order.
__global__ void rmsnorm_dweight_kernel(float* __restrict__ dweight, const float* __restrict__ dout,
                                       const float* __restrict__ in, const float* __restrict__ rstd, int64_t rows,
                                       int64_t C) {
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0;
    for (int64_t row = 0; row < rows; ++row) s += double(dout[row * C + c]) * double(in[row * C + c] * rstd[row]);
    dweight[c] += static_cast<float>(s);
}

// ---------------------------------------------------------------------------------------------
// launchers

void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int64_t rows, int64_t C,
                     double eps, cudaStream_t stream) {
    if (rows <= 0) return;
    rmsnorm_forward_kernel<<<detail::ceil_div(rows, kRowsPerBlock), 32 * kRowsPerBlock, 0, stream>>>(
        out, rstd, in, weight, rows, C, static_cast<float>(eps));
    CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(float* din, float* dweight, const float* dout, const float* in, const float* weight,
                      const float* rstd, int64_t rows, int64_t C, cudaStream_t stream, bool accumulate_din) {
    if (rows <= 0) return;
    if (din) {
        rmsnorm_backward_kernel<<<detail::ceil_div(rows, kRowsPerBlock), 32 * kRowsPerBlock, 0, stream>>>(
            din, dout, in, weight, rstd, rows, C, accumulate_din);
        CUDA_CHECK_LAUNCH();
    }
    if (dweight) {
        rmsnorm_dweight_kernel<<<detail::ceil_div(C, 128), 128, 0, stream>>>(dweight, dout, in, rstd, rows, C);
        CUDA_CHECK_LAUNCH();
    }
}

}  // namespace tandem::kernels
