// bench_gemm: the engine's float32 GEMM libraries (engine/src/model/gemm.h) at the engine's real shapes, interleaved
// library by library within each shape (A B A B), at the thread counts given; prints GFLOP/s by wall clock and by
// process CPU time (the steadier figure on a shared machine), best of the repeats, and each library's ratio to
// OpenBLAS. Not a test: docs/benchmarks.md "GEMM libraries at the engine's shapes" keeps its figures per CPU kind.
//   bench_gemm [--threads 1,2] [--rounds 2] [--seconds 0.3]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gemm.h"
#include "tandem/engine/gemm_library.h"
#include "tandem/engine/ops.h"

namespace {

using namespace tandem::engine;

struct Shape {
    const char* name;
    bool ta, tb;
    int64_t M, N, K;
};

// Qwen3-0.6B's layer (hidden 1024, 16/8 heads x 128, intermediate 3072) at 1024 and 300 tokens, LoRA rank 16,
// one attention head at sequence 512, and the LM head over 1024 supervised rows of the 151,936-token vocabulary.
const std::vector<Shape> kShapes = {
    {"q_proj forward (NT)", false, true, 1024, 2048, 1024},    {"k/v_proj forward (NT)", false, true, 1024, 1024, 1024},
    {"o_proj forward (NT)", false, true, 1024, 1024, 2048},    {"up_proj forward (NT)", false, true, 1024, 3072, 1024},
    {"down_proj forward (NT)", false, true, 1024, 1024, 3072}, {"up_proj input grad (NN)", false, false, 1024, 1024, 3072},
    {"down_proj input grad (NN)", false, false, 1024, 3072, 1024}, {"up_proj forward, 300 tokens", false, true, 300, 3072, 1024},
    {"LoRA x A^T (NT)", false, true, 1024, 16, 1024},          {"LoRA u B^T (NT)", false, true, 1024, 3072, 16},
    {"LoRA dA (TN)", true, false, 16, 1024, 1024},             {"LoRA dB (TN)", true, false, 3072, 16, 1024},
    {"LoRA input grad (NN)", false, false, 1024, 1024, 16},    {"attention Q K^T (NT)", false, true, 512, 512, 128},
    {"attention P V (NN)", false, false, 512, 128, 512},       {"attention dK (TN)", true, false, 512, 128, 512},
    {"LM head logits (NT)", false, true, 1024, 151936, 1024},  {"LM head input grad (NN)", false, false, 1024, 1024, 151936},
};

double cpu_now() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::vector<int> int_list(const char* text) {
    std::vector<int> v;
    for (const char* p = text; *p;) {
        v.push_back(std::atoi(p));
        p = std::strchr(p, ',');
        if (!p) break;
        ++p;
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> threads{1, 2};
    int rounds = 2;
    double seconds = 0.3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--threads")) threads = int_list(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: bench_gemm [--threads 1,2] [--rounds 2] [--seconds 0.3]\n");
            return 2;
        }
    }
    std::vector<GemmLibrary> libs{GemmLibrary::OpenBlas};
    std::vector<std::string> names{"openblas"};
    if (gemm_libraries_built().find("onednn") != std::string::npos) {
        libs.push_back(GemmLibrary::OneDnn);
        names.push_back("onednn");
    }
    std::printf("CPU kind: %s; libraries: %s; the default here: %s\n", cpu_kind().c_str(), gemm_libraries_built().c_str(),
                gemm_library_text().c_str());
    std::printf("| threads | shape | M x N x K | %s |\n|---|---|---|", [&] {
        std::string h;
        for (size_t l = 0; l < libs.size(); ++l) h += (l ? " | " : "") + names[l] + " GFLOP/s wall / CPU" + (l ? " (x OpenBLAS CPU)" : "");
        return h;
    }().c_str());
    for (size_t l = 0; l < libs.size(); ++l) std::printf("---|");
    std::printf("\n");
    for (int t : threads) {
        ops::set_num_threads(t);
        blas::set_library_threads(t);
        for (const Shape& s : kShapes) {
            const int64_t ar = s.ta ? s.K : s.M, ac = s.ta ? s.M : s.K, br = s.tb ? s.N : s.K, bc = s.tb ? s.K : s.N;
            std::vector<float> A(size_t(ar * ac)), B(size_t(br * bc)), C(size_t(s.M * s.N));
            for (size_t i = 0; i < A.size(); ++i) A[i] = float(int64_t(i * 2654435761u % 1000)) * 1e-3f - 0.5f;
            for (size_t i = 0; i < B.size(); ++i) B[i] = float(int64_t(i * 40503u % 1000)) * 1e-3f - 0.5f;
            std::vector<double> best_wall(libs.size(), 1e30), best_cpu(libs.size(), 1e30);
            for (int r = 0; r < rounds; ++r)
                for (size_t l = 0; l < libs.size(); ++l) {
                    auto run = [&] { blas::gemm_on(libs[l], s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), ac, B.data(), bc, 0.0f, C.data(), s.N); };
                    run();  // warm: packing buffers, JIT kernels
                    double spent = 0;
                    for (int k = 0; spent < seconds || k < 2; ++k) {
                        const auto w0 = std::chrono::steady_clock::now();
                        const double c0 = cpu_now();
                        run();
                        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
                        best_wall[l] = std::min(best_wall[l], wall);
                        best_cpu[l] = std::min(best_cpu[l], cpu_now() - c0);
                        spent += wall;
                    }
                }
            const double flop = 2.0 * double(s.M) * double(s.N) * double(s.K);
            std::printf("| %d | %s | %lld x %lld x %lld |", t, s.name, (long long)s.M, (long long)s.N, (long long)s.K);
            for (size_t l = 0; l < libs.size(); ++l) {
                std::printf(" %.1f / %.1f", flop / best_wall[l] / 1e9, flop / best_cpu[l] / 1e9);
                if (l) std::printf(" (%.2fx)", best_cpu[0] / best_cpu[l]);
                std::printf(" |");
            }
            std::printf("\n");
            std::fflush(stdout);
        }
    }
    return 0;
}
