// The vector kernels of the CPU ops (engine/src/model/simd.h), AVX-512 and AVX2, must return exactly the
// bits of the scalar loops they replace (speed without changing a number). Each op runs on the same
// inputs with the kernels off, then with each instruction set this CPU has, and the outputs are compared
// byte for byte; exp is compared with glibc's expf (std::exp) on a sample of every float bit pattern. An
// instruction set the CPU lacks is named and skipped (an AVX-512 machine runs both).
#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "finite_differences.h"
#include "simd.h"
#include "tandem/engine/dropout.h"
#include "tandem/engine/ops.h"

// gtest names a parameter by this (found by argument-dependent lookup): "AVX2", not its bytes.
namespace tandem::engine::simd {
void PrintTo(Kernels k, std::ostream* os) { *os << kernels_name(k); }
}  // namespace tandem::engine::simd

namespace {

using namespace tandem::engine;

std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
    std::mt19937_64 rng(seed);
    return tandem::test::normal_draws(n, rng, scale);
}

// Runs `op` (which writes into the vectors it is given) with the kernels off, then on, and
// expects every output float to have the same bits (any NaN matches any NaN: which operand's NaN an
// x86 instruction propagates depends on operand order, and no result reads a NaN's sign or payload).
void expect_same_bits(simd::Kernels kernels, const std::string& what,
                      const std::function<std::vector<std::vector<float>>()>& op) {
    ASSERT_TRUE(simd::set_kernels_for_testing(simd::Kernels::None));
    const auto scalar = op();
    ASSERT_TRUE(simd::set_kernels_for_testing(kernels));
    const auto vec = op();
    ASSERT_EQ(scalar.size(), vec.size());
    for (size_t k = 0; k < scalar.size(); ++k) {
        ASSERT_EQ(scalar[k].size(), vec[k].size());
        size_t differ = 0, first = 0;
        for (size_t i = 0; i < scalar[k].size(); ++i)
            if (!(std::isnan(scalar[k][i]) && std::isnan(vec[k][i])) &&
                std::bit_cast<uint32_t>(scalar[k][i]) != std::bit_cast<uint32_t>(vec[k][i]) && differ++ == 0)
                first = i;
        EXPECT_EQ(differ, 0u) << simd::kernels_name(kernels) << ", " << what << ", output " << k << ": " << differ << " of " << scalar[k].size()
                              << " floats differ, first at " << first << " (" << scalar[k][first] << " vs "
                              << vec[k][first] << ")";
    }
}

// One run of the suite per instruction set.
class SimdKernels : public ::testing::TestWithParam<simd::Kernels> {
protected:
    void SetUp() override {
        if (!simd::set_kernels_for_testing(GetParam()))
            GTEST_SKIP() << "this CPU has no " << simd::kernels_name(GetParam()) << ": those kernels never run here";
    }
    void TearDown() override { simd::set_kernels_for_testing(widest); }
    // Runs `op` with the kernels off, then with this run's kernels (expect_same_bits above).
    void same_bits(const std::string& what, const std::function<std::vector<std::vector<float>>()>& op) {
        expect_same_bits(GetParam(), what, op);
    }
    const simd::Kernels widest = simd::kernels();
};

INSTANTIATE_TEST_SUITE_P(InstructionSets, SimdKernels, ::testing::Values(simd::Kernels::Avx512, simd::Kernels::Avx2),
                         [](const ::testing::TestParamInfo<simd::Kernels>& info) {
                             return std::string(info.param == simd::Kernels::Avx512 ? "Avx512" : "Avx2");
                         });

// The CPU's widest instruction set is what runs unless TANDEM_ENGINE_SIMD caps it: on a machine with
// AVX2 and FMA, never the scalar loops.
TEST(SimdKernelChoice, TheWidestInstructionSetRuns) {
    if (std::getenv("TANDEM_ENGINE_SIMD") != nullptr) GTEST_SKIP() << "TANDEM_ENGINE_SIMD is set";
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    EXPECT_EQ(simd::kernels(), avx512 ? simd::Kernels::Avx512 : avx2 ? simd::Kernels::Avx2 : simd::Kernels::None);
    EXPECT_EQ(simd::enabled(), avx2);
}

TEST_P(SimdKernels, ExpIsGlibcExpfOnSampledBitPatterns) {
    // every 251st bit pattern (17 million floats: both signs, subnormals, the fast path |x| < 88, the
    // slow lanes beyond it, inf and NaN), plus the values near the fast path's edge
    std::vector<float> x;
    for (uint64_t b = 0; b <= 0xffffffffull; b += 251) x.push_back(std::bit_cast<float>(uint32_t(b)));
    for (float edge : {88.0f, -88.0f, 87.99f, -87.99f, 88.72f, -103.3f, -104.0f})
        for (int d = -40; d <= 40; ++d) x.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(edge) + uint32_t(d)));
    std::vector<float> y = x;
    simd::exp_minus(y.data(), int64_t(y.size()), 0.0f);
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const float want = std::exp(x[i]);
        const bool same = std::isnan(want) ? std::isnan(y[i]) : std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(y[i]);
        if (!same && differ++ < 5) ADD_FAILURE() << "exp(" << x[i] << "): expf " << want << ", kernel " << y[i];
    }
    EXPECT_EQ(differ, 0u) << "of " << x.size();
}

TEST_P(SimdKernels, RmsNormForwardAndBackward) {
    for (int64_t C : {7, 32, 37, 128, 1000}) {
        const int64_t rows = 29;  // 3 groups of 8 rows and a remainder
        const auto in = random_floats(size_t(rows * C), 1, 2.0f), w = random_floats(size_t(C), 2),
                   dy = random_floats(size_t(rows * C), 3);
        same_bits("rmsnorm C=" + std::to_string(C), [&] {
            std::vector<float> out(in.size()), rstd(static_cast<size_t>(rows)), din(in.size()), din_acc = random_floats(in.size(), 4);
            ops::rmsnorm_forward(out.data(), rstd.data(), in.data(), w.data(), rows, C, 1e-6);
            ops::rmsnorm_backward(din.data(), static_cast<float*>(nullptr), dy.data(), in.data(), w.data(), rstd.data(),
                                  rows, C, false);
            ops::rmsnorm_backward(din_acc.data(), static_cast<float*>(nullptr), dy.data(), in.data(), w.data(),
                                  rstd.data(), rows, C, true);
            return std::vector<std::vector<float>>{out, rstd, din, din_acc};
        });
    }
}

TEST_P(SimdKernels, AttentionForwardAndBackward) {
    const int64_t B = 2, T = 45, H = 6, KV = 2, D = 24;  // 3 query heads per kv head; rows of every length
    const std::vector<int32_t> lengths = {45, 29};
    const auto q = random_floats(size_t(B * T * H * D), 5, 3.0f), k = random_floats(size_t(B * T * KV * D), 6, 3.0f),
               v = random_floats(size_t(B * T * KV * D), 7), dout = random_floats(size_t(B * T * H * D), 8);
    same_bits("attention", [&] {
        std::vector<float> out(q.size()), probs(size_t(B * H * T * T)), dq(q.size()), dk(k.size()), dv(v.size());
        ops::attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), lengths.data(), B, T, H, KV, D);
        ops::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), probs.data(),
                                lengths.data(), B, T, H, KV, D);
        return std::vector<std::vector<float>>{out, probs, dq, dk, dv};
    });
}

TEST_P(SimdKernels, SwiGluForwardAndBackward) {
    auto gate = random_floats(10007, 9, 8.0f);
    gate[3] = 95.0f;   // beyond expf's fast path: the slow lanes
    gate[17] = -120.0f;
    gate[40] = std::numeric_limits<float>::quiet_NaN();
    gate[41] = std::numeric_limits<float>::infinity();
    const auto up = random_floats(gate.size(), 10), dout = random_floats(gate.size(), 11);
    same_bits("swiglu", [&] {
        std::vector<float> out(gate.size()), dgate(gate.size()), dup(gate.size());
        ops::swiglu_forward(out.data(), gate.data(), up.data(), int64_t(gate.size()));
        ops::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), int64_t(gate.size()));
        return std::vector<std::vector<float>>{out, dgate, dup};
    });
}

TEST_P(SimdKernels, CrossEntropySinglePassAndChunked) {
    const int64_t N = 21, C = 24, V = 1003;
    const auto h = random_floats(size_t(N * C), 12, 2.0f), emb = random_floats(size_t(V * C), 13);
    std::vector<int32_t> targets(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) targets[size_t(n)] = int32_t((n * 97) % V);
    for (int64_t token_chunk : {int64_t(0), int64_t(5)}) {
        for (int64_t vocab_chunk : {int64_t(0), int64_t(300)}) {
            same_bits("CE token_chunk " + std::to_string(token_chunk) + " vocab_chunk " + std::to_string(vocab_chunk), [&] {
                std::vector<float> dh(h.size());
                const double loss = ops::lm_head_cross_entropy(dh.data(), h.data(), emb.data(), targets.data(), N, C, V,
                                                               0.37, token_chunk, vocab_chunk);
                const double no_grad = ops::lm_head_cross_entropy(static_cast<float*>(nullptr), h.data(), emb.data(),
                                                                  targets.data(), N, C, V, 0.0, token_chunk, vocab_chunk);
                std::vector<float> loss_bits;  // the doubles' bits, 16 at a time (exact small integers)
                for (double v : {loss, no_grad})
                    for (int s = 0; s < 64; s += 16) loss_bits.push_back(float((std::bit_cast<uint64_t>(v) >> s) & 0xffff));
                return std::vector<std::vector<float>>{dh, loss_bits};
            });
        }
    }
}

TEST_P(SimdKernels, DropoutMasksAndTheLoraLinearsThatApplyThem) {
    for (double p : {0.0, 0.05, 0.5, 0.999, 1.0}) {
        same_bits("dropout keep p=" + std::to_string(p), [&] {
            std::vector<uint8_t> keep(100003);
            fill_dropout_keep(keep.data(), int64_t(keep.size()), 0x1234567890abcdefULL, 977, p);
            return std::vector<std::vector<float>>{std::vector<float>(keep.begin(), keep.end())};
        });
    }
    const int64_t N = 37, in = 53, out = 29, r = 4;
    const auto x = random_floats(size_t(N * in), 14), w = random_floats(size_t(out * in), 15), a = random_floats(size_t(r * in), 16),
               b = random_floats(size_t(out * r), 17), dy = random_floats(size_t(N * out), 18);
    std::vector<uint8_t> keep(size_t(N * in));
    fill_dropout_keep(keep.data(), N * in, 99, 0, 0.3);
    same_bits("lora linear with dropout", [&] {
        std::vector<float> y(size_t(N * out)), t(size_t(N * r)), dx = random_floats(size_t(N * in), 19), da(a.size()), db(b.size());
        ops::lora_linear_forward(y.data(), t.data(), x.data(), w.data(), a.data(), b.data(), keep.data(), 1.0f / 0.7f, 8.0f,
                                 N, in, out, r);
        ops::lora_linear_backward(dx.data(), da.data(), db.data(), dy.data(), x.data(), w.data(), a.data(), b.data(), t.data(),
                                  keep.data(), 1.0f / 0.7f, 8.0f, N, in, out, r, true);
        return std::vector<std::vector<float>>{y, t, dx, da, db};
    });
}

}  // namespace
