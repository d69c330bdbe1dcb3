// The sgemm probe (probe.h): OpenBLAS's float32 GEMM throughput at given thread counts, the peak
// that achieved FLOP/s is read against (docs/benchmarks.md "FLOPs and utilisation").
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tandem/error.h"
#include "tandem/measure/probe.h"

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace tandem::experiments {
namespace {

struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
};
using Matrix = std::unique_ptr<float, FreeDeleter>;

Matrix matrix(std::int64_t n, float value) {
    const size_t bytes = (size_t(n) * size_t(n) * sizeof(float) + 63) / 64 * 64;
    Matrix m(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!m) throw Error("sgemm probe: cannot allocate " + std::to_string(bytes) + " bytes");
    std::fill(m.get(), m.get() + n * n, value);
    return m;
}

}  // namespace

void probe_cpu_sgemm(ProbeResult& probe, const std::vector<int>& threads, const SgemmProbeOptions& options) {
    if (options.size <= 0 || options.repeats <= 0) throw Error("sgemm probe: size and repeats must be positive");
    const std::int64_t n = options.size;
    const int nn = static_cast<int>(n);
    // Values that neither overflow nor go subnormal over k additions (a denormal slow path would
    // understate the peak).
    Matrix a = matrix(n, 0.5f), b = matrix(n, 0.25f), c = matrix(n, 0.0f);
    const int before = openblas_get_num_threads();
    const double flops = 2.0 * double(n) * double(n) * double(n);
    for (int t : threads) {
        if (t <= 0) continue;
        openblas_set_num_threads(t);
        auto gemm = [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nn, nn, nn, 1.0f, a.get(), nn, b.get(), nn, 0.0f,
                        c.get(), nn);
        };
        gemm();  // warm-up: OpenBLAS starts its threads and allocates its buffers
        std::vector<double> seconds;
        for (int r = 0; r < options.repeats; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            gemm();
            seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        if (c.get()[n * n - 1] != 0.5f * 0.25f * float(n)) throw Error("sgemm probe: wrong product (library fault?)");
        std::sort(seconds.begin(), seconds.end());
        const size_t m = seconds.size();
        const double median = m % 2 ? seconds[m / 2] : 0.5 * (seconds[m / 2 - 1] + seconds[m / 2]);
        SgemmFigure f;
        f.threads = t;
        f.m = f.n = f.k = n;
        f.best_seconds = seconds.front();
        f.median_seconds = median;
        f.flops_per_s = flops / f.best_seconds;
        f.median_flops_per_s = flops / median;
        probe.sgemm.erase(std::remove_if(probe.sgemm.begin(), probe.sgemm.end(), [&](const SgemmFigure& s) { return s.threads == t; }),
                          probe.sgemm.end());
        probe.sgemm.push_back(f);
    }
    openblas_set_num_threads(before);
    std::string config = openblas_get_config();
    probe.sgemm_method = "OpenBLAS cblas_sgemm (" + config + ", kernel " + openblas_get_corename() + "), row-major " +
                         std::to_string(n) + "^3, best of " + std::to_string(options.repeats) +
                         " after one warm-up, 2 n^3 FLOPs per call";
}

}  // namespace tandem::experiments
