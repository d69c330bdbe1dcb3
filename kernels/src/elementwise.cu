// Small elementwise and row-movement kernels the model glues ops with: residual adds, fills, and
// gathering / scattering token rows (the embedding lookup is a gather of table rows; the LM head only
// sees supervised positions).
#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

__global__ void add_inplace_kernel(float* __restrict__ y, const float* __restrict__ x, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] += x[i];
}

__global__ void fill_kernel(float* __restrict__ y, float value, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = value;
}

// one block per output row; T = float4 when rows are 16-byte aligned (C counts T elements)
template <class T>
__global__ void gather_rows_kernel(T* __restrict__ out, const T* __restrict__ in, const int32_t* __restrict__ rows,
                                   int64_t C) {
    const int64_t j = blockIdx.x;
    const T* src = in + int64_t(rows[j]) * C;
    T* dst = out + j * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

__global__ void scatter_rows_kernel(float* __restrict__ out, const float* __restrict__ in,
                                    const int32_t* __restrict__ rows, int64_t C) {
    const int64_t j = blockIdx.x;
    float* dst = out + int64_t(rows[j]) * C;
    const float* src = in + j * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

// ---------------------------------------------------------------------------------------------
// launchers

void add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    add_inplace_kernel<<<detail::elementwise_grid(n, 256), 256, 0, stream>>>(y, x, n);
    CUDA_CHECK_LAUNCH();
}

void fill(float* y, float value, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    fill_kernel<<<detail::elementwise_grid(n, 256), 256, 0, stream>>>(y, value, n);
    CUDA_CHECK_LAUNCH();
}

void gather_rows(float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C, cudaStream_t stream) {
    if (n_rows <= 0) return;
    // rows were validated on the host (MicroBatch::validate, the supervised-row lists)
    const bool aligned =
        C % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0;
    if (aligned) {
        gather_rows_kernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(
            reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(in), rows, C / 4);
    } else {
        gather_rows_kernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(out, in, rows, C);
    }
    CUDA_CHECK_LAUNCH();
}

void scatter_rows(float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C, cudaStream_t stream) {
    if (n_rows <= 0) return;
    scatter_rows_kernel<<<static_cast<unsigned>(n_rows), 256, 0, stream>>>(out, in, rows, C);
    CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels
