#pragma once
// The engine's one GEMM entry point (internal to src/model/): row-major C[M,N] = alpha * op(A) @ op(B) + beta * C.
// float goes to the process's GEMM library (tandem/engine/gemm_library.h), double to OpenBLAS.
#include <cstdint>

#include "tandem/engine/gemm_library.h"

namespace tandem::engine::blas {

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc);
// The float GEMM on a given library (tests compare the libraries; gemm() runs gemm_library()'s).
void gemm_on(GemmLibrary library, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda, const double* B,
          int64_t ldb, double beta, double* C, int64_t ldc);

// OpenBLAS's own thread count (the pool's size, or 1 inside SerialGemm). oneDNN needs none: its calls are
// single-threaded and the engine's pool splits the output between them.
void set_library_threads(int n);

// While alive, the GEMMs run single-threaded (the pool's threads split the work instead: attention's
// per-head GEMMs are too small to split well, and two pools on the same cores hand off and spin).
// OpenBLAS partitions a GEMM over its output only, so its bits do not depend on this (on the AVX-512
// kernels; the AVX2 kernels' rounding may follow the blocking, as with any thread count). oneDNN calls
// made inside a pool job are single-threaded anyway (a nested parallel_for runs serially).
struct SerialGemm {
    SerialGemm();
    ~SerialGemm();
    SerialGemm(const SerialGemm&) = delete;
    SerialGemm& operator=(const SerialGemm&) = delete;
    const int threads;
};

}  // namespace tandem::engine::blas
