// Per-op checks of engine/src/model/ops.cpp (docs/spec.md §Levels L0), run on the double instantiation of the very
// templates the engine runs in float:
//   - every backward against central finite differences of the forward, in float64;
//   - every forward in float32 against the same op in float64.
// Tolerances (why): central differences with h = 1e-6 in double carry truncation error ~h^2*f''' and
// rounding error ~1e-16/h, i.e. ~1e-9 relative on these O(1) quantities; we require 1e-6 (relative
// to the largest gradient entry), which any wrong term (a missing factor, a sign, a transposed index)
// exceeds by orders of magnitude. float32 forwards: a few ulp of accumulated rounding on O(1)
// values, so 1e-5 relative to the largest |value|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "finite_differences.h"
#include "op_fd_checks.h"
#include "tandem/engine/ops.h"

namespace ops = tandem::engine::ops;

namespace {

using namespace tandem::test;  // the float64 yardsticks and the shared finite-difference problems

Vec randn(size_t n, std::mt19937_64& rng, double scale = 1.0) { return normal_draws(n, rng, scale); }

std::vector<float> to_float(const Vec& v) { return {v.begin(), v.end()}; }
Vec to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

constexpr double kFloatTol = 1e-5;

class OpsTest : public ::testing::Test {
protected:
    void SetUp() override { ops::set_num_threads(2); }
    std::mt19937_64 rng{20261129};
    const NormalDraws normal = [this](size_t n, double scale) { return randn(n, rng, scale); };
};

// ------------------------------------------------------------------------------------------------

TEST_F(OpsTest, RmsNormBackwardMatchesFiniteDifferences) {
    // layer norms (rows = tokens, C = hidden) and q_norm/k_norm (rows = tokens*heads, C = head_dim)
    for (auto [rows, C] : RmsNormFd::kShapes) {
        RmsNormFd n(rows, C, normal);
        n.check();
        const Vec &x = n.x, &w = n.w;

        // float32 forward vs float64
        auto xf = to_float(x), wf = to_float(w);
        std::vector<float> of(x.size()), rf(static_cast<size_t>(rows));
        ops::rmsnorm_forward(of.data(), rf.data(), xf.data(), wf.data(), rows, C, 1e-6);
        Vec od(x.size()), rd(static_cast<size_t>(rows));
        Vec xr = rounded(x), wr = rounded(w);
        ops::rmsnorm_forward(od.data(), rd.data(), xr.data(), wr.data(), rows, C, 1e-6);
        EXPECT_LT(rel_err(to_double(of), od), kFloatTol);
    }
}

TEST_F(OpsTest, RopeBackwardMatchesFiniteDifferences) {
    RopeFd r(normal);
    r.check();
    // rotation preserves norms per (token, head, pair)
    r.forward();
    EXPECT_NEAR(dot(r.out, r.out), dot(r.x, r.x), 1e-9 * dot(r.x, r.x));
}

TEST_F(OpsTest, RopeTablesFollowTransformersFloat32Recipe) {
    const int64_t T = 40, D = 16;
    std::vector<float> c(size_t(T * D)), s(size_t(T * D));
    ops::rope_tables(c.data(), s.data(), T, D, 1000000.0);
    Vec cd(size_t(T * D)), sd(size_t(T * D));
    ops::rope_tables(cd.data(), sd.data(), T, D, 1000000.0);
    // float tables round the angle to float32 like torch does: within ~T * ulp of the exact angle
    EXPECT_LT(rel_err(to_double(c), cd), 1e-5);
    EXPECT_LT(rel_err(to_double(s), sd), 1e-5);
    EXPECT_EQ(c[0], 1.0f);
    EXPECT_EQ(s[0], 0.0f);
    // rotate-half layout: the two halves share angles
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < D / 2; ++j) EXPECT_EQ(c[size_t(t * D + j)], c[size_t(t * D + j + D / 2)]);
}

TEST_F(OpsTest, AttentionBackwardMatchesFiniteDifferences) {
    AttentionFd a(normal);  // the second sequence right-padded
    a.check();
    constexpr int64_t B = AttentionFd::B, T = AttentionFd::T, H = AttentionFd::H, KV = AttentionFd::KV,
                      D = AttentionFd::D;
    const std::vector<int32_t>& lengths = a.lengths;
    const Vec &q = a.q, &k = a.k, &v = a.v, &dk = a.dk, &dv = a.dv;
    Vec &out = a.out, &probs = a.probs;

    // masking: padded keys get no probability and no gradient; causal rows sum to 1
    a.forward();
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i) {
            double sum = 0;
            for (int64_t j = 0; j < T; ++j) {
                const double p = probs[size_t(((1 * H + h) * T + i) * T + j)];
                if (j > i || j >= lengths[1]) {
                    EXPECT_EQ(p, 0.0);
                }
                sum += p;
            }
            EXPECT_NEAR(sum, 1.0, 1e-12);
        }
    for (int64_t t = lengths[1]; t < T; ++t)
        for (int64_t c = 0; c < KV * D; ++c) {
            EXPECT_EQ(dk[size_t((1 * T + t) * KV * D + c)], 0.0);
            EXPECT_EQ(dv[size_t((1 * T + t) * KV * D + c)], 0.0);
        }

    // float32 forward vs float64
    auto qf = to_float(q), kf = to_float(k), vf = to_float(v);
    std::vector<float> of(q.size()), pf(probs.size());
    ops::attention_forward(of.data(), pf.data(), qf.data(), kf.data(), vf.data(), lengths.data(), B, T, H, KV, D);
    Vec qr = rounded(q), kr = rounded(k), vr = rounded(v);
    ops::attention_forward(out.data(), probs.data(), qr.data(), kr.data(), vr.data(), lengths.data(), B, T, H, KV, D);
    EXPECT_LT(rel_err(to_double(of), out), kFloatTol);
}

TEST_F(OpsTest, SwigluBackwardMatchesFiniteDifferences) {
    SwigluFd(33, 3.0, normal).check();
}

TEST_F(OpsTest, LoraLinearBackwardMatchesFiniteDifferencesWithDropoutMask) {
    const int64_t N = 4, in = 6, out = 5, r = 3;
    const double p = 0.3, dscale = 1.0 / (1.0 - p), scaling = 1.7;
    std::vector<uint8_t> keep(size_t(N * in));
    std::bernoulli_distribution bern(1.0 - p);
    for (auto& k : keep) k = bern(rng) ? 1 : 0;
    LoraFd l(N, in, out, r, dscale, scaling, normal);
    Vec &x = l.x, &w = l.w, &a = l.a, &b = l.b, &G = l.G;
    for (const uint8_t* mask : {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(keep.data())}) {
        l.check(mask);
        const Vec &dx = l.dx, &da = l.da, &db = l.db, &t = l.t;

        // accumulate_dx adds to what is there; parameter grads accumulate (+=) on a second call
        Vec dx2(x.size(), 1.0), da2 = da, db2 = db;
        ops::lora_linear_backward(dx2.data(), da2.data(), db2.data(), G.data(), x.data(), w.data(), a.data(), b.data(),
                                  t.data(), mask, dscale, scaling, N, in, out, r, true);
        for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx2[i], dx[i] + 1.0, 1e-12);
        for (size_t i = 0; i < da.size(); ++i) EXPECT_NEAR(da2[i], 2 * da[i], 1e-12);
        for (size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db2[i], 2 * db[i], 1e-12);
    }
    // a dropped input element has no influence on the adapter path
    {
        Vec y(size_t(N * out)), t(size_t(N * r)), zero_w(w.size(), 0.0);
        size_t dropped = 0;
        while (keep[dropped]) ++dropped;
        ops::lora_linear_forward(y.data(), t.data(), x.data(), zero_w.data(), a.data(), b.data(), keep.data(), dscale,
                                 scaling, N, in, out, r);
        Vec y0 = y;
        x[dropped] += 10.0;
        ops::lora_linear_forward(y.data(), t.data(), x.data(), zero_w.data(), a.data(), b.data(), keep.data(), dscale,
                                 scaling, N, in, out, r);
        EXPECT_EQ(y, y0);
    }
}

TEST_F(OpsTest, FusedCrossEntropyMatchesFiniteDifferencesAndDirectLoss) {
    const int64_t N = 5, C = 6, V = 23;
    Vec h = randn(size_t(N * C), rng), emb = randn(size_t(V * C), rng);
    const std::vector<int32_t> targets = {0, 22, 7, 7, 13};
    const double scale = 0.37;
    // direct: full logits, log-sum-exp
    auto direct = [&] {
        double total = 0;
        for (int64_t n = 0; n < N; ++n) {
            Vec l(static_cast<size_t>(V));
            for (int64_t v = 0; v < V; ++v)
                for (int64_t c = 0; c < C; ++c) l[size_t(v)] += h[size_t(n * C + c)] * emb[size_t(v * C + c)];
            const double m = *std::max_element(l.begin(), l.end());
            double s = 0;
            for (double x : l) s += std::exp(x - m);
            total += m + std::log(s) - l[size_t(targets[size_t(n)])];
        }
        return total;
    };
    // (token_chunk, vocab_chunk): one pass over the whole vocabulary, and two passes over vocab chunks
    for (auto [tc, vc] : {std::pair<int64_t, int64_t>{0, 0}, {2, 7}, {3, 23}, {1, 1}}) {
        auto f = [&] {
            return scale * ops::lm_head_cross_entropy(static_cast<double*>(nullptr), h.data(), emb.data(),
                                                      targets.data(), N, C, V, 0.0, tc, vc);
        };
        EXPECT_NEAR(f() / scale, direct(), 1e-12 * direct()) << "chunks " << tc << "," << vc;
        Vec dh(h.size());
        const double loss =
            ops::lm_head_cross_entropy(dh.data(), h.data(), emb.data(), targets.data(), N, C, V, scale, tc, vc);
        EXPECT_NEAR(loss, direct(), 1e-12 * direct());
        EXPECT_LT(rel_err(dh, numeric_grad(h, f)), kFdTol) << "chunks " << tc << "," << vc;
    }
    // float32 loss vs float64
    auto hf = to_float(h), ef = to_float(emb);
    Vec hr = rounded(h), er = rounded(emb);
    const double lf = ops::lm_head_cross_entropy(static_cast<float*>(nullptr), hf.data(), ef.data(), targets.data(), N,
                                                 C, V, 0.0, 2, 7);
    const double ld = ops::lm_head_cross_entropy(static_cast<double*>(nullptr), hr.data(), er.data(), targets.data(), N,
                                                 C, V, 0.0, 2, 7);
    EXPECT_NEAR(lf, ld, 1e-6 * ld);
}

TEST_F(OpsTest, CrossEntropyRejectsTargetOutsideVocabulary) {
    Vec h(4, 0.1), emb(8, 0.2);
    const std::vector<int32_t> bad = {4};
    EXPECT_THROW(ops::lm_head_cross_entropy(static_cast<double*>(nullptr), h.data(), emb.data(), bad.data(), 1, 4, 2,
                                            0.0, 0, 0),
                 std::exception);
}

TEST_F(OpsTest, LinearGradientsMatchFiniteDifferences) {
    const int64_t N = 3, K = 4, M = 5;
    Vec x = randn(size_t(N * K), rng), w = randn(size_t(M * K), rng), G = randn(size_t(N * M), rng), y(size_t(N * M));
    auto f = [&] {
        ops::linear_forward(y.data(), x.data(), w.data(), N, K, M);
        return dot(y, G);
    };
    Vec dx(x.size()), dw(w.size(), 0.0);
    ops::linear_backward_input(dx.data(), G.data(), w.data(), N, M, K);
    ops::linear_backward_weight(dw.data(), G.data(), x.data(), N, M, K);
    EXPECT_LT(rel_err(dx, numeric_grad(x, f)), kFdTol);
    EXPECT_LT(rel_err(dw, numeric_grad(w, f)), kFdTol);
}

}  // namespace
