// Host-side checks of the CUDA backend's bit-exact parts (label `unit`: runs WITHOUT a GPU). The
// per-element functions of kernels/include/tandem/kernels/element_ops.h are the very code the device
// kernels run; here they run on the host against the CPU engine:
//   - the dropout generator and the integer form of its keep test (top24 >= ceil(p * 2^24)) against
//     engine::fill_dropout_keep (u >= p in double), for many keys, indices and p, including p values
//     whose p * 2^24 is an exact integer (where an off-by-one in the threshold would show);
//   - the AdamW element update against engine::adamw_step over several steps, bit for bit.
// What this cannot check: the device compiler's rounding of the same expressions (the intrinsics
// __fadd_rn etc. are IEEE round-to-nearest, as the host's float operations) — test_gpu_ops does that
// on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "dropout_cases.h"
#include "tandem/engine/dropout.h"
#include "tandem/engine/optim.h"
#include "tandem/kernels/ops.h"

namespace {

using namespace tandem;
namespace k = tandem::kernels;

TEST(KernelsHost, Mix64IsTheEnginesMix64) {
    std::mt19937_64 rng(1);
    for (int i = 0; i < 100000; ++i) {
        const uint64_t z = rng();
        ASSERT_EQ(k::mix64(z), engine::mix64(z)) << z;
    }
    EXPECT_EQ(k::mix64(0), engine::mix64(0));
    EXPECT_EQ(k::mix64(~0ull), engine::mix64(~0ull));
}

TEST(KernelsHost, DropoutThresholdMatchesTheDoubleComparison) {
    // every 24-bit value m against thresholds of awkward p: m * 2^-24 >= p  <=>  m >= threshold
    const double ps[] = {0.0, 0.05, 0.1, 0.5, 1.0 / 3.0, 0.25, 1.0 / 16777216.0, 3.0 / 16777216.0,
                         0.5 + 1.0 / 16777216.0, 0.999999, 1e-9};
    for (double p : ps) {
        const uint32_t th = k::dropout_threshold(p);
        for (uint32_t m = 0; m < (1u << 24); m += (m % 4096 == 0 ? 1 : 997)) {
            const bool want = static_cast<double>(m) * (1.0 / 16777216.0) >= p;
            ASSERT_EQ(m >= th, want) << "p " << p << " m " << m << " threshold " << th;
        }
        // the boundary itself
        if (th > 0) {
            EXPECT_LT(static_cast<double>(th - 1) / 16777216.0, p) << p;
        }
        if (th < (1u << 24)) {
            EXPECT_GE(static_cast<double>(th) / 16777216.0, p) << p;
        }
    }
}

TEST(KernelsHost, DropoutMasksAreTheEnginesMasks) {
    std::vector<gputest::DropoutCase> cases = gputest::dropout_cases();
    cases.push_back({engine::shared_dropout_key(3, 10535, 7, 27, 6), 0, 0.25});
    const int64_t n = 200003;
    for (const gputest::DropoutCase& c : cases) {
        // in pieces below the CPU's parallel grain (32768): serial fills, and the pieces exercise
        // first_index offsets as the native counter does
        std::vector<uint8_t> want(n);
        for (int64_t o = 0; o < n; o += 32000)
            engine::fill_dropout_keep(want.data() + o, std::min<int64_t>(32000, n - o), c.key, c.first + uint64_t(o), c.p);
        const uint32_t th = k::dropout_threshold(c.p);
        int64_t mismatches = 0, kept = 0;
        for (int64_t i = 0; i < n; ++i) {
            const bool keep = k::dropout_keep(c.key, c.first + uint64_t(i), th);
            mismatches += keep != (want[size_t(i)] != 0);
            kept += keep;
        }
        EXPECT_EQ(mismatches, 0) << "p " << c.p;
        EXPECT_NEAR(double(kept) / double(n), 1.0 - c.p, 0.01);
    }
}

TEST(KernelsHost, AdamWElementIsBitIdenticalToTheEngine) {
    const int64_t n = 16000;  // below the CPU adamw_step's parallel grain (16384): a serial reference
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> p(n), g(n), m(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
        p[size_t(i)] = 0.1f * d(rng);
        g[size_t(i)] = (i % 97 == 0 ? 1e-30f : 0.01f) * d(rng);  // include tiny gradients
        m[size_t(i)] = 0.01f * d(rng);
        v[size_t(i)] = m[size_t(i)] * m[size_t(i)];
    }
    for (double wd : {0.0, 0.01}) {
        std::vector<float> p1 = p, m1 = m, v1 = v, p2 = p, m2 = m, v2 = v;
        engine::AdamWOptions o;
        o.weight_decay = wd;
        for (int64_t step = 1; step <= 5; ++step) {
            const double lr = 1e-4 * double(step);
            engine::adamw_step(p1.data(), g.data(), m1.data(), v1.data(), n, step, lr, o);
            const k::AdamWScalars s = k::adamw_scalars(step, lr, o.beta1, o.beta2, o.eps, o.weight_decay);
            for (int64_t i = 0; i < n; ++i) k::adamw_element(p2[size_t(i)], g[size_t(i)], m2[size_t(i)], v2[size_t(i)], s);
        }
        EXPECT_EQ(std::memcmp(p1.data(), p2.data(), sizeof(float) * size_t(n)), 0) << "wd " << wd;
        EXPECT_EQ(std::memcmp(m1.data(), m2.data(), sizeof(float) * size_t(n)), 0) << "wd " << wd;
        EXPECT_EQ(std::memcmp(v1.data(), v2.data(), sizeof(float) * size_t(n)), 0) << "wd " << wd;
        EXPECT_NE(p1, p);  // the step moved the parameters
    }
}

}  // namespace
