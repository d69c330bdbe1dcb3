// The CPU engine's GEMM libraries (engine/src/model/gemm.h): every library this build offers computes the
// engine's GEMM kinds (plain, transposed operands, leading dimensions wider than the matrix, beta 0 and 1,
// shapes small enough for one call and large enough for the pool's split) within float32 rounding of a
// float64 recomputation, gives the same bits when run again at the same thread count, and TANDEM_GEMM picks a
// library or is refused in one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gemm.h"
#include "tandem/engine/gemm_library.h"
#include "tandem/engine/ops.h"
#include "tandem/error.h"

namespace {

using namespace tandem::engine;

struct Case {
    bool ta, tb;
    int64_t M, N, K;
    float beta;
};

std::vector<GemmLibrary> built_libraries() {
    std::vector<GemmLibrary> libs{GemmLibrary::OpenBlas};
    if (gemm_libraries_built().find("onednn") != std::string::npos) libs.push_back(GemmLibrary::OneDnn);
    return libs;
}

std::vector<float> draws(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// Largest |C - C64| / (K * eps32 * sum_k |a_ik b_kj| + |beta c|-term) over C: the float32 error model of a dot product.
double worst_ratio(GemmLibrary lib, const Case& c, std::vector<float>* out = nullptr) {
    const int64_t pad = 3;  // leading dimensions wider than the rows, as the engine's slices of wider buffers
    const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K, b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
    const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = c.N + pad;
    const auto A = draws(size_t(a_rows * lda), 1), B = draws(size_t(b_rows * ldb), 2);
    std::vector<float> C = draws(size_t(c.M * ldc), 3);
    const std::vector<float> C0 = C;
    blas::gemm_on(lib, c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
    double worst = 0;
    for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
            double exact = double(c.beta) * double(C0[size_t(i * ldc + j)]), mag = std::abs(exact);
            for (int64_t k = 0; k < c.K; ++k) {
                const double a = c.ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
                const double b = c.tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)];
                exact += a * b;
                mag += std::abs(a * b);
            }
            const double bound = double(c.K + 2) * 0x1.0p-24 * mag;
            worst = std::max(worst, std::abs(double(C[size_t(i * ldc + j)]) - exact) / bound);
        }
    for (int64_t i = 0; i < c.M; ++i)  // the padding columns are never written
        for (int64_t j = c.N; j < ldc; ++j) EXPECT_EQ(C[size_t(i * ldc + j)], C0[size_t(i * ldc + j)]) << i << "," << j;
    if (out) *out = C;
    return worst;
}

const std::vector<Case> kCases = {
    {false, true, 5, 7, 3, 0.0f},        // tiny: one call
    {false, true, 300, 160, 64, 0.0f},   // linear forward (NT), split over columns at 2 threads
    {false, false, 300, 64, 160, 1.0f},  // input gradient (NN), accumulating
    {true, false, 16, 96, 300, 1.0f},    // LoRA's weight gradient (TN), accumulating
    {false, true, 130, 520, 48, 0.0f},   // LM head chunk: N much larger than M
    {true, true, 200, 130, 70, 1.0f},    // both transposed
};

TEST(GemmLibrary, EveryLibraryIsWithinFloat32RoundingOfFloat64AtOneAndTwoThreads) {
    for (int threads : {1, 2}) {
        ops::set_num_threads(threads);
        for (GemmLibrary lib : built_libraries())
            for (const Case& c : kCases) {
                const double r = worst_ratio(lib, c);
                EXPECT_LT(r, 1.0) << "library " << int(lib) << " threads " << threads << " " << c.ta << c.tb << " " << c.M << "x"
                                  << c.N << "x" << c.K;
            }
    }
    ops::set_num_threads(0);
}

TEST(GemmLibrary, EveryLibraryGivesTheSameBitsAgainAtTheSameThreadCount) {
    for (int threads : {1, 2}) {
        ops::set_num_threads(threads);
        for (GemmLibrary lib : built_libraries())
            for (const Case& c : kCases) {
                std::vector<float> first, again;
                worst_ratio(lib, c, &first);
                worst_ratio(lib, c, &again);
                EXPECT_EQ(first, again) << "library " << int(lib) << " threads " << threads;
            }
    }
    ops::set_num_threads(0);
}

TEST(GemmLibrary, TandemGemmPicksALibraryOrIsRefusedInOneLine) {
    EXPECT_EQ(gemm_library_for("openblas"), GemmLibrary::OpenBlas);
    const bool have_onednn = gemm_libraries_built().find("onednn") != std::string::npos;
    if (have_onednn) {
        EXPECT_EQ(gemm_library_for("onednn"), GemmLibrary::OneDnn);
    }
    try {
        gemm_library_for("mkl");
        FAIL() << "TANDEM_GEMM=mkl was accepted";
    } catch (const tandem::Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("TANDEM_GEMM=mkl"), std::string::npos) << what;
        EXPECT_NE(what.find("openblas"), std::string::npos) << what;
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    // the default follows the CPU kind: oneDNN (when built) on the kinds where it was measured faster,
    // Intel with AVX-512 and AMD with AVX2 only; OpenBLAS on the others
    const std::string kind = cpu_kind();
    const bool onednn_kind = kind == "Intel AVX-512" || kind == "AMD AVX2";
    EXPECT_EQ(gemm_library_for(nullptr), have_onednn && onednn_kind ? GemmLibrary::OneDnn : GemmLibrary::OpenBlas) << kind;
    EXPECT_EQ(gemm_library_for(""), gemm_library_for(nullptr));
}

}  // namespace
