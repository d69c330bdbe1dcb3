// The engine's GEMM entry point and the choice of float32 GEMM library (tandem/engine/gemm_library.h).
//
// OpenBLAS threads its own GEMMs (openblas_set_num_threads follows the pool's size). oneDNN's dnnl_sgemm is
// called single-threaded: the engine's pool splits C into one block of rows (or columns) per thread and each
// thread runs one call, so there is one thread pool on the cores, and the split (hence every bit of C)
// depends only on the shape and the thread count.
#include "gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "parallel.h"
#include "simd.h"
#include "tandem/engine/gemm_library.h"
#include "tandem/engine/ops.h"
#include "tandem/error.h"

#if defined(TANDEM_ENGINE_ONEDNN)
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);

namespace tandem::engine {
namespace {

constexpr bool kHaveOneDnn =
#if defined(TANDEM_ENGINE_ONEDNN)
    true;
#else
    false;
#endif

bool is_intel() {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel");
}

bool is_amd() {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd");
}

bool has_avx512() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

bool has_avx2() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

// The measured winner per CPU kind (docs/benchmarks.md "GEMM libraries at the engine's shapes"): oneDNN on
// the two kinds measured, Intel with AVX-512 and AMD with AVX2 only (as fast or faster on every bench shape
// at 1 and 2 threads, with less memory); OpenBLAS, the library the engine began on, on kinds not measured
// yet (AMD with AVX-512, Intel without it, other x86-64).
GemmLibrary default_library() {
    const bool measured_onednn_wins = (is_intel() && has_avx512()) || (is_amd() && !has_avx512() && has_avx2());
    return kHaveOneDnn && measured_onednn_wins ? GemmLibrary::OneDnn : GemmLibrary::OpenBlas;
}

}  // namespace

GemmLibrary gemm_library_for(const char* env) {
    if (env == nullptr || *env == '\0') return default_library();
    const std::string want = env;
    if (want == "openblas") return GemmLibrary::OpenBlas;
    if (want == "onednn" && kHaveOneDnn) return GemmLibrary::OneDnn;
    throw Error("TANDEM_GEMM=" + want + ": this build runs " + gemm_libraries_built() +
                (want == "onednn" ? " (it was built without oneDNN: install libdnnl-dev and rebuild)" : ""));
}

GemmLibrary gemm_library() {
    static const GemmLibrary chosen = gemm_library_for(std::getenv("TANDEM_GEMM"));
    return chosen;
}

std::string gemm_libraries_built() { return kHaveOneDnn ? "openblas, onednn" : "openblas"; }

std::string gemm_library_text() {
#if defined(TANDEM_ENGINE_ONEDNN)
    if (gemm_library() == GemmLibrary::OneDnn) {
        const dnnl_version_t* v = dnnl_version();
        return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
               " dnnl_sgemm";
    }
#endif
    std::string config = openblas_get_config();
    return config + " (kernel " + openblas_get_corename() + ")";
}

std::string row_kernels_text() { return simd::kernels_name(simd::kernels()); }

std::string cpu_kind() {
    __builtin_cpu_init();
    const std::string vendor = __builtin_cpu_is("intel") ? "Intel" : __builtin_cpu_is("amd") ? "AMD" : "other x86-64";
    return vendor + (has_avx512() ? " AVX-512" : has_avx2() ? " AVX2" : "");
}

namespace blas {
namespace {

void openblas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
                static_cast<int>(ldc));
}

#if defined(TANDEM_ENGINE_ONEDNN)
// Below this many multiply-adds a GEMM runs as one call: a thread hand-off costs more than it saves.
constexpr int64_t kSplitMacs = int64_t(1) << 21;
// Blocks are whole multiples of this many rows or columns (the micro-kernels' widths divide it).
constexpr int64_t kBlockAlign = 64;

void onednn_call(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    omp_set_num_threads(1);  // per calling thread: oneDNN never starts a second pool
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success) throw Error("oneDNN dnnl_sgemm failed (status " + std::to_string(int(st)) + ")");
}

void onednn_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    const bool split_cols = N >= M;  // split the longer side of C
    const int64_t extent = split_cols ? N : M;
    int64_t blocks = std::min<int64_t>(ops::num_threads(), extent / kBlockAlign);
    if (M * N * K < kSplitMacs || blocks <= 1) return onednn_call(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    const int64_t per = (extent + blocks - 1) / blocks;
    const int64_t block = (per + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
    blocks = (extent + block - 1) / block;
    detail::parallel_for(blocks, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t first = b * block, count = std::min(block, extent - first);
            if (split_cols)  // columns [first, first + count) of C: columns of op(B)
                onednn_call(ta, tb, M, count, K, alpha, A, lda, tb ? B + first * ldb : B + first, ldb, beta, C + first, ldc);
            else  // rows of C: rows of op(A)
                onednn_call(ta, tb, count, N, K, alpha, ta ? A + first : A + first * lda, lda, B, ldb, beta, C + first * ldc, ldc);
        }
    });
}
#endif

}  // namespace

void gemm_on(GemmLibrary library, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    if (M == 0 || N == 0) return;
#if defined(TANDEM_ENGINE_ONEDNN)
    if (library == GemmLibrary::OneDnn) return onednn_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    if (library == GemmLibrary::OneDnn) throw Error("this build has no oneDNN");
#endif
    openblas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
    gemm_on(gemm_library(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda, const double* B,
          int64_t ldb, double beta, double* C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
                static_cast<int>(ldc));
}

void set_library_threads(int n) { openblas_set_num_threads(n); }

}  // namespace blas

// ops' thread count: the pool's size, and OpenBLAS's threads with it
void ops::set_num_threads(int n) { blas::set_library_threads(detail::set_pool_size(n)); }

namespace blas {

SerialGemm::SerialGemm() : threads(ops::num_threads()) {
    if (threads > 1) set_library_threads(1);
}

SerialGemm::~SerialGemm() {
    if (threads > 1) set_library_threads(threads);
}

}  // namespace blas
}  // namespace tandem::engine
