// The residual adds judged per leg on its own fingerprints (compare judge/elementwise.h, docs/thresholds.md
// "2c. Residual adds"). The oracle: tensors built here, added in float32 (or exactly, in float64) and
// summarised by the engine's own Sketcher, so the sketch's linearity is the only thing assumed; a
// perturbation of a known size (a few eps32 of |y|) must read as that many bounds.
#include <gtest/gtest.h>

#include "finished_leg.h"

#include "tandem/compare/comparison.h"
#include "tandem/compare/judge/elementwise.h"
#include "tandem/engine/observe.h"
#include "tandem/float32.h"

#include <cmath>
#include <map>
#include <random>

using namespace tandem::experiments;

namespace {

constexpr int64_t kRows = 48, kWidth = 64;

FingerprintRow summary_row(tandem::engine::Sketcher& s, const std::vector<float>& x, int64_t update, int64_t micro_batch,
                           int64_t layer, const std::string& op) {
    const auto t = s.summarize(x.data(), kRows, kWidth);
    FingerprintRow r;
    r.update = update;
    r.micro_batch = micro_batch;
    r.layer = layer;
    r.op = op;
    r.pass = "forward";
    r.count = t.count;
    r.norm = t.norm;
    r.mean = t.mean;
    r.maxabs = t.maxabs;
    std::copy(t.sketch.begin(), t.sketch.end(), r.sketch.begin());
    return r;
}

std::vector<float> gaussian(std::mt19937_64& rng, double scale) {
    std::normal_distribution<double> n(0.0, scale);
    std::vector<float> x(static_cast<size_t>(kRows * kWidth));
    for (auto& v : x) v = static_cast<float>(n(rng));
    return x;
}

std::vector<float> float32_sum(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> y(a.size());
    for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
    return y;
}

// A finished leg whose every series agrees with its twin's (the same held-out CE, L1, loss and grad
// norm): only its fingerprints' own checks can make a pair of it `different`.
LegData leg(const std::string& name, const std::string& impl) {
    LegData l = tandem::test::finished_leg(name, impl, {"w", "base", {1}, 1.0, 1.0, 1.0, "aa"}, "pubmedqa:1");
    l.trace.evals = {{0, 3.0}, {2, 2.8}};
    l.trace.l1_ce = 3.0;
    return l;
}

// y with each element moved by `ulps` x eps32 x |y_i| in a random direction: |y' - y| = ulps x eps32 x |y|.
std::vector<float> moved(std::vector<float> y, double ulps, std::mt19937_64& rng) {
    for (auto& v : y) {
        const double s = (rng() & 1) ? 1.0 : -1.0;
        v = static_cast<float>(static_cast<double>(v) * (1.0 + s * ulps * tandem::kFloat32Epsilon));
    }
    return y;
}

// A leg's forward fingerprints of `layers` decoder layers over `updates` x `micro_batches`: the residual
// stream as the wiring computes it (float32 adds), the add of (update, layer, op) `perturbed` moved by
// `ulps` of its result (downstream adds then take the moved tensor as their operand, as a leg would).
struct Perturbed {
    int64_t update = -1, layer = -1;
    std::string op;
    double ulps = 0;
};
std::vector<FingerprintRow> leg_prints(uint64_t seed, int64_t updates, int64_t micro_batches, int64_t layers, const Perturbed& p = {}) {
    std::mt19937_64 rng(seed);
    tandem::engine::Sketcher s;
    std::vector<FingerprintRow> out;
    for (int64_t u = 0; u < updates; ++u)
        for (int64_t m = 0; m < micro_batches; ++m) {
            std::vector<float> h = gaussian(rng, 0.02);  // an embedding's scale
            out.push_back(summary_row(s, h, u, m, -1, "embed"));
            for (int64_t l = 0; l < layers; ++l) {
                for (const char* site : {"attn_residual", "mlp_residual"}) {
                    const std::string proj = std::string(site) == "attn_residual" ? "o_proj" : "down_proj";
                    const std::vector<float> b = gaussian(rng, 0.5 + static_cast<double>(l));
                    std::vector<float> y = float32_sum(h, b);
                    if (u == p.update && l == p.layer && site == p.op) y = moved(y, p.ulps, rng);
                    out.push_back(summary_row(s, b, u, m, l, proj));
                    out.push_back(summary_row(s, y, u, m, l, site));
                    h = y;
                }
            }
        }
    return out;
}

}  // namespace

// A float32 add rounds each element by at most eps32/2 of it: its sketch defect stays within half the
// bound; the exact (float64) sum of the same operands is within the float64 term alone.
TEST(ResidualAdds, Float32AddsStayWithinHalfTheBoundAndExactSumsNearZero) {
    tandem::engine::Sketcher s;
    double largest = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        std::mt19937_64 rng(seed);
        const auto x = gaussian(rng, 1.0), b = gaussian(rng, 0.01 * static_cast<double>(seed));
        const auto y = float32_sum(x, b);
        const double r = residual_add_ratio(summary_row(s, x, 0, 0, 0, "x"), summary_row(s, b, 0, 0, 0, "b"),
                                            summary_row(s, y, 0, 0, 0, "y"));
        EXPECT_GT(r, 0) << seed;  // the adds did round
        largest = std::max(largest, r);
        // the exact sum: held to float32 rounding only through the double sketches
        std::vector<double> xd(x.begin(), x.end()), bd(b.begin(), b.end()), yd(x.size());
        for (size_t i = 0; i < x.size(); ++i) yd[i] = xd[i] + bd[i];
        auto row = [&](const std::vector<double>& v) {
            const auto t = s.summarize(v.data(), kRows, kWidth);
            FingerprintRow f;
            f.count = t.count;
            f.norm = t.norm;
            std::copy(t.sketch.begin(), t.sketch.end(), f.sketch.begin());
            return f;
        };
        EXPECT_LT(residual_add_ratio(row(xd), row(bd), row(yd)), 1e-3) << seed;
    }
    EXPECT_LE(largest, 0.5);
}

// A result moved by k x eps32 x |y| reads as about k bounds (the sketch estimates the norm of the
// difference, within a factor 0.4-1.7 over 16 values): 4 ulp of y is over, 0.1 ulp is not.
TEST(ResidualAdds, AResultOffByAFewUlpOfItselfIsOverTheBound) {
    tandem::engine::Sketcher s;
    for (uint64_t seed = 1; seed <= 10; ++seed) {
        std::mt19937_64 rng(seed);
        const auto x = gaussian(rng, 1.0), b = gaussian(rng, 0.3);
        const auto y = float32_sum(x, b);
        const auto fx = summary_row(s, x, 0, 0, 0, "x"), fb = summary_row(s, b, 0, 0, 0, "b");
        const double four = residual_add_ratio(fx, fb, summary_row(s, moved(y, 4, rng), 0, 0, 0, "y"));
        EXPECT_GT(four, 1.0) << seed;
        EXPECT_LT(four, 8.0) << seed;
        EXPECT_LE(residual_add_ratio(fx, fb, summary_row(s, moved(y, 0.1, rng), 0, 0, 0, "y")), 1.0) << seed;
    }
    // element counts that differ, or a non-finite summary: never within
    FingerprintRow a, b, y;
    a.count = b.count = 4;
    y.count = 5;
    EXPECT_TRUE(std::isinf(residual_add_ratio(a, b, y)));
    y.count = 4;
    y.norm = std::nan("");
    EXPECT_FALSE(residual_add_ratio(a, b, y) <= 1.0);
}

// A leg's adds: every (update, micro-batch, layer, site) checked against its own operands; the layer
// input is embed in layer 0 and the previous layer's mlp_residual after.
TEST(ResidualAdds, ALegsAddsAreCheckedAndTheFirstOffAddIsNamed) {
    const ResidualCheck clean = residual_check("engine", leg_prints(7, 2, 2, 3));
    EXPECT_TRUE(clean.recorded);
    EXPECT_EQ(clean.checked, 2 * 2 * 3 * 2);
    EXPECT_EQ(clean.updates, (std::vector<int64_t>{0, 1}));
    EXPECT_FALSE(clean.off());
    EXPECT_GT(clean.max_ratio, 0);
    EXPECT_LE(clean.max_ratio, 0.5);
    EXPECT_TRUE(clean.missing.empty());
    EXPECT_EQ(clean.not_checked(), "");

    const ResidualCheck bad = residual_check("noisy", leg_prints(7, 2, 2, 3, {1, 2, "attn_residual", 30}));
    ASSERT_TRUE(bad.off());
    EXPECT_EQ(bad.first_off_update, 1);
    EXPECT_EQ(bad.layer, 2);
    EXPECT_EQ(bad.op, "attn_residual");
    EXPECT_EQ(bad.micro_batch, 0);
    EXPECT_EQ(bad.over, 2);  // both micro-batches of update 1; the mlp add after it takes the moved tensor as given
    EXPECT_GT(bad.ratio, 10);
    EXPECT_EQ(bad.describe().rfind("residual add of noisy at update 1: ", 0), 0u) << bad.describe();
    EXPECT_NE(bad.describe().find("x its float32 bound (layer 2, attn_residual, micro-batch 0;"), std::string::npos) << bad.describe();
}

// Sites a leg lacks are listed, never passed: no o_proj point leaves the attention adds unchecked; a
// leg with no forward fingerprints checks nothing and says so.
TEST(ResidualAdds, MissingSitesAreListed) {
    auto prints = leg_prints(3, 1, 1, 2);
    std::erase_if(prints, [](const FingerprintRow& r) { return r.op == "o_proj"; });
    const ResidualCheck c = residual_check("mine", prints);
    EXPECT_EQ(c.checked, 2);  // the mlp adds of the two layers
    EXPECT_EQ(c.missing, (std::vector<std::string>{"o_proj"}));
    EXPECT_EQ(c.not_checked(), "mine's residual adds not checked where it records no o_proj (forward) (2 others checked)");

    const ResidualCheck none = residual_check("go", {});
    EXPECT_FALSE(none.recorded);
    EXPECT_EQ(none.checked, 0);
    EXPECT_FALSE(none.off());
    EXPECT_EQ(none.not_checked(), "go records no forward fingerprints: its residual adds are not checked");
}

// The one judging path: judge_legs checks each leg's adds on its fingerprints; an add beyond its bound
// makes every pair of the leg `different` at that update, paired or not; within, the equivalent reason
// gives each leg's largest ratio; a leg without fingerprints beside one with them is named.
TEST(ResidualAdds, JudgeLegsMakesEveryPairOfALegWithAnOffAddDifferent) {
    ExperimentSpec spec;
    spec.model_config = "tiny";
    spec.dropout_masks = "shared";  // paired, and within every other bound: only the adds can fail it
    const std::vector<LegData> legs{leg("engine", "engine"), leg("reference", "reference")};
    std::map<std::string, std::vector<FingerprintRow>> prints{{"engine", leg_prints(5, 2, 1, 2)}, {"reference", leg_prints(6, 2, 1, 2)}};
    Judging j;
    j.fingerprints = [&prints](const std::string& l) { return prints[l]; };

    Comparison ok = judge_legs(legs, spec, j);
    ASSERT_EQ(ok.l4.size(), 1u);
    EXPECT_EQ(ok.l4[0].verdict, PairVerdict::Equivalent) << ok.l4[0].verdict_reason;
    EXPECT_NE(ok.l4[0].verdict_reason.find("; engine's residual adds within float32 rounding at 8 adds of 2 updates (largest "),
              std::string::npos) << ok.l4[0].verdict_reason;
    EXPECT_NE(ok.l4[0].verdict_reason.find("; reference's residual adds within float32 rounding at 8 adds"), std::string::npos);

    prints["engine"] = leg_prints(5, 2, 1, 2, {1, 0, "mlp_residual", 30});
    Comparison bad = judge_legs(legs, spec, j);
    EXPECT_EQ(bad.l4[0].verdict, PairVerdict::Different);
    EXPECT_EQ(bad.l4[0].first_different_update, 1);
    EXPECT_EQ(bad.l4[0].verdict_reason.rfind("engine~reference: L4 residual add of engine at update 1: ", 0), 0u)
        << bad.l4[0].verdict_reason;
    // the same leg beside a leg with the same fingerprints order: every pair of it
    const std::vector<LegData> three{legs[0], legs[1], leg("other", "reference")};
    prints["other"] = leg_prints(8, 2, 1, 2);
    Comparison all = judge_legs(three, spec, j);
    ASSERT_EQ(all.l4.size(), 3u);
    EXPECT_EQ(all.l4[0].verdict, PairVerdict::Different);  // engine~reference
    EXPECT_EQ(all.l4[1].verdict, PairVerdict::Different);  // engine~other
    EXPECT_EQ(all.l4[2].verdict, PairVerdict::Equivalent) << all.l4[2].verdict_reason;  // reference~other

    // a leg that records none beside one that does: named, not passed silently
    prints["engine"] = {};
    Comparison blind = judge_legs(legs, spec, j);
    EXPECT_EQ(blind.l4[0].verdict, PairVerdict::Equivalent) << blind.l4[0].verdict_reason;
    EXPECT_NE(blind.l4[0].verdict_reason.find("; engine records no forward fingerprints: its residual adds are not checked"),
              std::string::npos) << blind.l4[0].verdict_reason;
    // no fingerprints at all (no `observe`): nothing claimed
    prints["reference"] = {};
    EXPECT_EQ(judge_legs(legs, spec, j).l4[0].verdict_reason.find("residual add"), std::string::npos);
    // the fault matrix's path (compare_legs_against without checks) does not judge them
    prints["engine"] = leg_prints(5, 2, 1, 2, {1, 0, "mlp_residual", 30});
    EXPECT_EQ(compare_legs_against(legs, spec, "reference").l4[0].verdict, PairVerdict::Equivalent);
}

// ---- LoRA adds: PROJ = PROJ.base + scaling x PROJ.lora_B.out (peft's Linear.forward) ----------------------

namespace {

constexpr int64_t kRank = 16;

// peft's order: u = lora_B(t) summed over the rank, then result + u * scaling, all float32. With
// `fused`, y takes s x (t B^T) summed in the reverse order, as a GEMM that adds into y would.
struct LoraSide {
    std::vector<float> base, u, y;
};
LoraSide lora_side(std::mt19937_64& rng, float scaling, double u_scale, bool fused = false, float applied = 0) {
    LoraSide s;
    s.base = gaussian(rng, 1.0);
    std::normal_distribution<double> n(0.0, 1.0);
    std::vector<float> t(static_cast<size_t>(kRows * kRank)), b(static_cast<size_t>(kWidth * kRank));
    for (auto& v : t) v = static_cast<float>(n(rng));
    for (auto& v : b) v = static_cast<float>(n(rng) * u_scale / 4.0);  // |u_i| ~ u_scale
    s.u.resize(s.base.size());
    s.y.resize(s.base.size());
    const float used = applied != 0 ? applied : scaling;  // the scaling the leg really multiplies by
    for (int64_t i = 0; i < kRows; ++i)
        for (int64_t j = 0; j < kWidth; ++j) {
            float fwd = 0, rev = 0;
            for (int64_t k = 0; k < kRank; ++k) fwd += t[size_t(i * kRank + k)] * b[size_t(j * kRank + k)];
            for (int64_t k = kRank - 1; k >= 0; --k) rev += t[size_t(i * kRank + k)] * b[size_t(j * kRank + k)];
            const size_t e = size_t(i * kWidth + j);
            s.u[e] = fwd;
            s.y[e] = s.base[e] + (fused ? used * rev : s.u[e] * used);
        }
    return s;
}

double lora_ratio(tandem::engine::Sketcher& sk, const LoraSide& s, float scaling) {
    return lora_add_ratio(summary_row(sk, s.base, 0, 0, 0, "q_proj.base"), summary_row(sk, s.u, 0, 0, 0, "q_proj.lora_B.out"),
                          static_cast<double>(scaling), kRank, summary_row(sk, s.y, 0, 0, 0, "q_proj"));
}

// A leg's forward points of `layers` layers, `targets` adapted, over updates x micro-batches; the
// LoRA add of (update, layer) `off_update`/`off_layer` at q_proj multiplies by `applied` instead.
std::vector<FingerprintRow> lora_prints(uint64_t seed, int64_t updates, int64_t layers, const std::vector<std::string>& targets,
                                        float scaling, int64_t off_update = -1, float applied = 0) {
    std::mt19937_64 rng(seed);
    tandem::engine::Sketcher sk;
    std::vector<FingerprintRow> out;
    for (int64_t u = 0; u < updates; ++u)
        for (int64_t l = 0; l < layers; ++l)
            for (const auto& t : targets) {
                const bool off = u == off_update && l == 0 && t == "q_proj";
                const LoraSide s = lora_side(rng, scaling, 0.05, false, off ? applied : 0);
                out.push_back(summary_row(sk, s.base, u, 0, l, t + ".base"));
                out.push_back(summary_row(sk, s.u, u, 0, l, t + ".lora_B.out"));
                out.push_back(summary_row(sk, s.y, u, 0, l, t));
            }
    return out;
}

}  // namespace

// peft's float32 add, at rsLoRA's 8, at a scaling that is not a power of two (its product rounds
// too), and with u summed in another order inside the add (the CUDA engine's fused GEMM): within
// the bound, the first two within half of it.
TEST(LoraAdds, PeftsFloat32AddAndAFusedOneStayWithinTheBound) {
    tandem::engine::Sketcher sk;
    double peft = 0, fused = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        std::mt19937_64 rng(seed);
        for (float s : {8.0f, static_cast<float>(32.0 / std::sqrt(8.0)), 2.0f}) {
            const double u_scale = 0.002 * static_cast<double>(seed);
            peft = std::max(peft, lora_ratio(sk, lora_side(rng, s, u_scale), s));
            fused = std::max(fused, lora_ratio(sk, lora_side(rng, s, u_scale, true), s));
        }
    }
    EXPECT_GT(peft, 0);
    EXPECT_LE(peft, 0.5);
    EXPECT_LE(fused, 1.0);
}

// A leg whose adapter output is scaled otherwise than the spec says: rsLoRA ignored (alpha/r = 2 for
// the spec's 8) is over by orders of magnitude; a scaling off by 1e-4 of itself still by > 10x when
// the adapter's output is 5 % of the base's; one float32 ulp of the scaling is not caught.
TEST(LoraAdds, AScalingOtherThanTheSpecsIsOverTheBound) {
    tandem::engine::Sketcher sk;
    for (uint64_t seed = 1; seed <= 10; ++seed) {
        std::mt19937_64 rng(seed);
        EXPECT_GT(lora_ratio(sk, lora_side(rng, 8.0f, 0.05, false, 2.0f), 8.0f), 1e3) << seed;
        EXPECT_GT(lora_ratio(sk, lora_side(rng, 8.0f, 0.05, false, 8.0f * (1.0f + 1e-4f)), 8.0f), 10.0) << seed;
        EXPECT_LE(lora_ratio(sk, lora_side(rng, 8.0f, 0.05, false, std::nextafter(8.0f, 9.0f)), 8.0f), 1.0) << seed;
    }
}

// A leg's LoRA adds: every (update, micro-batch, layer, adapted projection) checked; the first off one
// is named with its projection; a projection without lora_B.out is listed, never passed.
TEST(LoraAdds, ALegsLoraAddsAreCheckedAndMissingOnesListed) {
    const std::vector<std::string> targets{"q_proj", "k_proj", "down_proj"};
    const ResidualCheck clean = lora_add_check("engine", lora_prints(3, 2, 2, targets, 8.0f), targets, 8.0, kRank);
    EXPECT_EQ(clean.kind, "LoRA add");
    EXPECT_EQ(clean.checked, 2 * 2 * 3);
    EXPECT_FALSE(clean.off());
    EXPECT_LE(clean.max_ratio, 0.5);
    EXPECT_EQ(clean.not_checked(), "");

    const ResidualCheck bad = lora_add_check("mine", lora_prints(3, 2, 2, targets, 8.0f, 1, 2.0f), targets, 8.0, kRank);
    ASSERT_TRUE(bad.off());
    EXPECT_EQ(bad.first_off_update, 1);
    EXPECT_EQ(bad.op, "q_proj");
    EXPECT_EQ(bad.over, 1);
    EXPECT_EQ(bad.describe().rfind("LoRA add of mine at update 1: ", 0), 0u) << bad.describe();
    EXPECT_NE(bad.describe().find("(layer 0, q_proj, micro-batch 0; the leg's own fingerprints, sketch(q_proj) against "
                                  "sketch(q_proj.base) + scaling x sketch(q_proj.lora_B.out); 1 of 12 adds over)"),
              std::string::npos) << bad.describe();

    auto prints = lora_prints(3, 1, 2, targets, 8.0f);
    std::erase_if(prints, [](const FingerprintRow& r) { return r.op == "k_proj.lora_B.out"; });
    const ResidualCheck old = lora_add_check("old-sdk", prints, targets, 8.0, kRank);
    EXPECT_EQ(old.checked, 2 * 2);
    EXPECT_EQ(old.missing, (std::vector<std::string>{"k_proj.lora_B.out"}));
    EXPECT_EQ(old.not_checked(), "old-sdk's LoRA adds not checked where it records no k_proj.lora_B.out (forward) (4 others checked)");
    EXPECT_EQ(lora_add_check("go", {}, targets, 8.0, kRank).not_checked(),
              "go records no forward fingerprints: its LoRA adds are not checked");
}

// judge_legs checks the LoRA adds at the spec's scaling (rsLoRA: alpha / sqrt(r) = 8 here): a leg
// that ignores rsLoRA is `different` at the update its adapter first moves; within, the reason says so.
TEST(LoraAdds, JudgeLegsChecksTheSpecsScaling) {
    ExperimentSpec spec;
    spec.model_config = "tiny";
    spec.dropout_masks = "shared";
    spec.lora_targets = {"q_proj", "v_proj"};
    ASSERT_TRUE(spec.lora_use_rslora);
    ASSERT_EQ(spec.lora_rank, 16);
    ASSERT_EQ(spec.lora_alpha, 32.0);
    const std::vector<LegData> legs{leg("engine", "engine"), leg("reference", "reference")};
    std::map<std::string, std::vector<FingerprintRow>> prints{{"engine", lora_prints(5, 2, 1, spec.lora_targets, 8.0f)},
                                                              {"reference", lora_prints(6, 2, 1, spec.lora_targets, 8.0f)}};
    Judging j;
    j.fingerprints = [&prints](const std::string& l) { return prints[l]; };
    const Comparison ok = judge_legs(legs, spec, j);
    ASSERT_EQ(ok.l4.size(), 1u);
    EXPECT_EQ(ok.l4[0].verdict, PairVerdict::Equivalent) << ok.l4[0].verdict_reason;
    EXPECT_NE(ok.l4[0].verdict_reason.find("; engine's LoRA adds within float32 rounding at 4 adds of 2 updates (largest "),
              std::string::npos) << ok.l4[0].verdict_reason;

    prints["engine"] = lora_prints(5, 2, 1, spec.lora_targets, 8.0f, 1, 2.0f);
    const Comparison bad = judge_legs(legs, spec, j);
    EXPECT_EQ(bad.l4[0].verdict, PairVerdict::Different);
    EXPECT_EQ(bad.l4[0].first_different_update, 1);
    EXPECT_NE(bad.l4[0].verdict_reason.find("L4 LoRA add of engine at update 1: "), std::string::npos) << bad.l4[0].verdict_reason;

    // the same prints judged against alpha / r (rsLoRA off in the spec): now the clean legs are off
    spec.lora_use_rslora = false;
    prints["engine"] = lora_prints(5, 2, 1, spec.lora_targets, 8.0f);
    EXPECT_EQ(judge_legs(legs, spec, j).l4[0].verdict, PairVerdict::Different);
}
