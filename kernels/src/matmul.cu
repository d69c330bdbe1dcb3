// GEMM glue: the CPU engine's linear_* wrappers on cuBLAS (row-major semantics on a column-major
// library). float32 compute only: cublasSgemm under CUBLAS_DEFAULT_MATH (BlasHandle sets it) never
// takes a TF32 path, so results carry float32's 24-bit mantissa products as docs/spec.md §Recipe demands.
//
// Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: call Sgemm with the
// operands swapped and the leading dimensions of the row-major storage.
#include <climits>

#include "tandem/error.h"
#include "tandem/kernels/ops.h"
#include "common.cuh"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// launchers

static int to_int(int64_t v, const char* what) {
    if (v < 0 || v > INT_MAX) throw tandem::Error(std::string("gemm: dimension ") + what + " = " + std::to_string(v) + " out of cuBLAS int range");
    return static_cast<int>(v);
}

void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const float* A, const float* B, float beta, float* C) {
    if (M == 0 || N == 0) return;
    const int m = to_int(M, "M"), n = to_int(N, "N"), k = to_int(K, "K");
    // A stored row-major as [M,K] (no trans) or [K,M] (trans); B as [K,N] or [N,K].
    const int lda = trans_a ? m : k;
    const int ldb = trans_b ? k : n;
    CUBLAS_CHECK(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                             &alpha, B, ldb, A, lda, &beta, C, n));
}

void linear_forward(cublasHandle_t h, float* y, const float* x, const float* w, int64_t N, int64_t K, int64_t M,
                    float beta, float alpha) {
    gemm_rm(h, false, true, N, M, K, alpha, x, w, beta, y);  // y[N,M] = x[N,K] w[M,K]^T
}

void linear_backward_input(cublasHandle_t h, float* dx, const float* dy, const float* w, int64_t N, int64_t M,
                           int64_t K, float beta, float alpha) {
    gemm_rm(h, false, false, N, K, M, alpha, dy, w, beta, dx);  // dx[N,K] = dy[N,M] w[M,K]
}

void linear_backward_weight(cublasHandle_t h, float* dw, const float* dy, const float* x, int64_t N, int64_t M,
                            int64_t K, float alpha) {
    gemm_rm(h, true, false, M, K, N, alpha, dy, x, 1.0f, dw);  // dw[M,K] += dy^T[M,N] x[N,K]
}

}  // namespace tandem::kernels
