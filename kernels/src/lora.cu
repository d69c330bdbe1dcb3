// LoRA linear forward / backward in peft's order of operations, all GEMMs on cuBLAS:
//   xd = dropout(x);  t = xd A^T [N,r];  y = x W^T  then  y += scaling * (t B^T)
// The scaling is folded into the second GEMM's alpha with beta = 1 (y accumulates), which rounds
// (B t) * scaling once inside the GEMM instead of as a separate multiply: identical up to the
// float32 rounding of that one product (the CPU tests' 1e-5 relative tolerance covers it).
// Backward (frozen W, trainable A, B):
//   db += scaling * dy^T t;   dt = scaling * dy B;   da += dt^T xd;   dx (=/+=) dy W + dropout'(dt A)
// where dropout'(z) = keep * scale * z, the same mask regenerated from (key, index).
// No kernels of its own: the mask and the masked add come from dropout.cu.
#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// kernels

// dx[i] += keep_i * scale * g[i] (dropout backward fused with the accumulation into dx)
__global__ void dropout_backward_accumulate_kernel(float* __restrict__ dx, const float* __restrict__ g, int64_t n,
                                                   uint64_t key, uint64_t first_index, uint32_t threshold,
                                                   float scale) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        if (dropout_keep(key, first_index + uint64_t(i), threshold)) dx[i] += g[i] * scale;
    }
}

// ---------------------------------------------------------------------------------------------
// launchers

void lora_linear_forward(cublasHandle_t h, cudaStream_t stream, float* y, float* t, float* xd, const float* x,
                         const float* w, const float* a, const float* b, const DropoutSpec& dropout, float scaling,
                         int64_t N, int64_t in, int64_t out, int64_t r) {
    linear_forward(h, y, x, w, N, in, out);
    if (!a) return;
    const float* adapter_in = x;
    if (dropout.active) {
        dropout_apply(xd, x, N * in, dropout.key, dropout.first_index, dropout.p, dropout.scale, stream);
        adapter_in = xd;
    }
    linear_forward(h, t, adapter_in, a, N, in, r);                 // t[N,r] = xd A^T
    linear_forward(h, y, t, b, N, r, out, 1.0f, scaling);          // y += scaling * t B^T
}

void lora_linear_backward(cublasHandle_t h, cudaStream_t stream, float* dx, float* da, float* db, float* dt, float* xd,
                          const float* dy, const float* x, const float* w, const float* a, const float* b,
                          const float* t, const DropoutSpec& dropout, float scaling, int64_t N, int64_t in,
                          int64_t out, int64_t r, bool accumulate_dx) {
    if (dx) linear_backward_input(h, dx, dy, w, N, out, in, accumulate_dx ? 1.0f : 0.0f);  // dx (=/+=) dy W
    if (!a) return;
    if (db) linear_backward_weight(h, db, dy, t, N, out, r, scaling);  // db += scaling dy^T t
    linear_backward_input(h, dt, dy, b, N, out, r, 0.0f, scaling);     // dt = scaling dy B   [N,r]
    if (da) {
        const float* adapter_in = x;
        if (dropout.active) {
            dropout_apply(xd, x, N * in, dropout.key, dropout.first_index, dropout.p, dropout.scale, stream);
            adapter_in = xd;
        }
        linear_backward_weight(h, da, dt, adapter_in, N, r, in);      // da += dt^T xd
    }
    if (!dx) return;
    if (dropout.active) {
        // dx += dropout'(dt A): dt A into the xd workspace (no longer needed), then the masked add.
        linear_backward_input(h, xd, dt, a, N, r, in);
        const int64_t n = N * in;
        dropout_backward_accumulate_kernel<<<detail::elementwise_grid(n, 256), 256, 0, stream>>>(
            dx, xd, n, dropout.key, dropout.first_index, dropout_threshold(dropout.p), dropout.scale);
        CUDA_CHECK_LAUNCH();
    } else {
        linear_backward_input(h, dx, dt, a, N, r, in, 1.0f);          // dx += dt A
    }
}

}  // namespace tandem::kernels
