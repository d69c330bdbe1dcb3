// Each engine fault switch (tandem/engine/faults.h, docs/faults.md) changes the computation it names
// and nothing else (docs/faults.md). Two kinds of checks:
//   - op level: the op variant against the correct op on the same inputs (which outputs move, which
//     stay bit-identical), with an independent recomputation where one is cheap (the GQA mapping by
//     permuting the kv heads, the interleaved RoPE by permuting the head dimension, AdamW in double);
//   - trainer level: a tiny Qwen3 trained for a few updates with the fault and without it, and the
//     observables compared one by one — the held-out CE before training, each update's loss, its
//     pre-clip grad norm, its lr, the adapter after it, the held-out CE after training — asserting
//     exactly which of them the fault moves.
// The data/template faults are record-level tests in tests/spec/test_faults.cpp.
#include <gtest/gtest.h>

#include "finite_differences.h"
#include "random_batches.h"
#include "tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "tandem/engine/faults.h"
#include "tandem/engine/generate.h"
#include "tandem/engine/ops.h"
#include "tandem/engine/optim.h"
#include "tandem/engine/rope.h"
#include "tandem/engine/trainer.h"

using namespace tandem::engine;
using tandem::test::tiny_config;

namespace {

std::vector<double> randn(size_t n, uint64_t seed, double scale = 1.0) {
    std::mt19937_64 rng(seed);
    return tandem::test::normal_draws(n, rng, scale);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

// ---- op level ---------------------------------------------------------------------------------------

TEST(FaultOps, InterleavedRopeIsRotateHalfOnPermutedHeadDimensions) {
    // Interleaved pairs (2i, 2i+1); rotate-half pairs (i, i+D/2). Permuting the head dimension so that
    // 2i -> i and 2i+1 -> i + D/2 turns one into the other: an independent oracle for the variant.
    const int64_t B = 1, T = 5, H = 2, D = 8;
    std::vector<double> cos(T * D), sin(T * D);
    ops::rope_tables(cos.data(), sin.data(), T, D, 1e4);
    const auto x = randn(B * T * H * D, 1);
    std::vector<double> half(x.size()), inter(x.size());
    ops::rope_forward(half.data(), x.data(), cos.data(), sin.data(), B, T, H, D);
    ops::rope_forward(inter.data(), x.data(), cos.data(), sin.data(), B, T, H, D, RopePairing::Interleaved);
    EXPECT_GT(max_abs_diff(half, inter), 1e-3);  // the switch changes RoPE
    // oracle: x permuted, rotate-half, permuted back
    auto perm = [&](int64_t i) { return i % 2 == 0 ? i / 2 : i / 2 + D / 2; };  // interleaved index -> half index
    std::vector<double> xp(x.size()), yp(x.size()), back(x.size());
    for (int64_t row = 0; row < B * T * H; ++row)
        for (int64_t i = 0; i < D; ++i) xp[size_t(row * D + perm(i))] = x[size_t(row * D + i)];
    ops::rope_forward(yp.data(), xp.data(), cos.data(), sin.data(), B, T, H, D);
    for (int64_t row = 0; row < B * T * H; ++row)
        for (int64_t i = 0; i < D; ++i) back[size_t(row * D + i)] = yp[size_t(row * D + perm(i))];
    // the tables hold frequency i at both i and i + D/2 (rotate-half's layout), so the permuted form
    // uses the same angle per pair
    EXPECT_LT(max_abs_diff(back, inter), 1e-12);
    // backward of the variant is its transpose: <rope(x), g> == <x, rope_backward(g)>
    const auto g = randn(x.size(), 2);
    std::vector<double> dx(x.size());
    ops::rope_backward(dx.data(), g.data(), cos.data(), sin.data(), B, T, H, D, RopePairing::Interleaved);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < x.size(); ++i) lhs += inter[i] * g[i], rhs += x[i] * dx[i];
    EXPECT_NEAR(lhs, rhs, 1e-10 * std::fabs(lhs) + 1e-12);
}

TEST(FaultOps, GqaModuloChangesAttentionOnlyWhenKvHeadsAreBetweenOneAndHeads) {
    const int64_t B = 1, T = 6, D = 4, H = 4;
    const std::vector<int32_t> lengths = {6};
    for (int64_t KV : {1, 2, 4}) {
        const auto q = randn(B * T * H * D, 10 + KV), k = randn(B * T * KV * D, 20 + KV), v = randn(B * T * KV * D, 30 + KV);
        std::vector<double> grouped(q.size()), modulo(q.size()), probs(B * H * T * T), probs2(probs.size());
        ops::attention_forward(grouped.data(), probs.data(), q.data(), k.data(), v.data(), lengths.data(), B, T, H, KV, D);
        ops::attention_forward(modulo.data(), probs2.data(), q.data(), k.data(), v.data(), lengths.data(), B, T, H, KV, D,
                               KvHeadMapping::Modulo);
        if (KV == 1 || KV == H) {
            EXPECT_EQ(grouped, modulo) << "KV=" << KV << ": h % KV == h / (H/KV), the fault must change nothing";
            continue;
        }
        EXPECT_GT(max_abs_diff(grouped, modulo), 1e-3) << "KV=" << KV;
        // oracle: Modulo on (k, v) == Grouped on k, v with the query heads permuted so that head h
        // (which Modulo sends to h % KV) sits where Grouped sends it: query head h -> position p(h)
        // with p(h) / (H/KV) == h % KV. For H=4, KV=2: heads 0,1,2,3 -> positions 0,2,1,3.
        const int64_t G = H / KV;
        std::vector<int64_t> pos(H);
        std::vector<int64_t> used(KV, 0);
        for (int64_t h = 0; h < H; ++h) pos[h] = (h % KV) * G + used[h % KV]++;
        std::vector<double> qp(q.size()), outp(q.size()), back(q.size());
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t d = 0; d < D; ++d) qp[size_t((t * H + pos[h]) * D + d)] = q[size_t((t * H + h) * D + d)];
        ops::attention_forward(outp.data(), probs.data(), qp.data(), k.data(), v.data(), lengths.data(), B, T, H, KV, D);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t d = 0; d < D; ++d) back[size_t((t * H + h) * D + d)] = outp[size_t((t * H + pos[h]) * D + d)];
        EXPECT_LT(max_abs_diff(back, modulo), 1e-12);
    }
}

TEST(FaultOps, LoraBGradTransposedOperandMovesOnlyDb) {
    const int64_t N = 6, in = 5, out = 7, r = 3;
    const auto x = randn(N * in, 1), w = randn(out * in, 2), a = randn(r * in, 3), b = randn(out * r, 4), dy = randn(N * out, 5);
    std::vector<double> y(N * out), t(N * r);
    ops::lora_linear_forward(y.data(), t.data(), x.data(), w.data(), a.data(), b.data(), nullptr, 1.0, 2.0, N, in, out, r);
    auto run = [&](LoraBGrad mode, std::vector<double>& dx, std::vector<double>& da, std::vector<double>& db) {
        dx.assign(N * in, 0);
        da.assign(r * in, 0);
        db.assign(out * r, 0);
        ops::lora_linear_backward(dx.data(), da.data(), db.data(), dy.data(), x.data(), w.data(), a.data(), b.data(),
                                  t.data(), nullptr, 1.0, 2.0, N, in, out, r, false, mode);
    };
    std::vector<double> dx0, da0, db0, dx1, da1, db1;
    run(LoraBGrad::Correct, dx0, da0, db0);
    run(LoraBGrad::TransposedOperand, dx1, da1, db1);
    EXPECT_EQ(dx0, dx1);
    EXPECT_EQ(da0, da1);
    EXPECT_GT(max_abs_diff(db0, db1), 1e-3);
    // oracle: db[o,k] = scaling * sum_n dy[n,o] * t'[n,k], t'[n,k] = t[k*N + n]
    std::vector<double> expect(out * r, 0);
    for (int64_t o = 0; o < out; ++o)
        for (int64_t k = 0; k < r; ++k)
            for (int64_t n = 0; n < N; ++n) expect[size_t(o * r + k)] += 2.0 * dy[size_t(n * out + o)] * t[size_t(k * N + n)];
    EXPECT_LT(max_abs_diff(expect, db1), 1e-10);
}

// AdamW in double: torch's formula, and the two fault variants written out separately.
TEST(FaultOps, AdamWVariantsMoveOnlyTheParameterAndMatchTheirFormulas) {
    const int64_t n = 64;
    const auto g0 = randn(n, 7, 0.1);
    std::vector<float> grad(g0.begin(), g0.end());
    for (int variant = 0; variant < 3; ++variant) {
        AdamWOptions o;
        o.eps = 1e-3;  // large, so its placement shows
        o.bias_correction = variant != 1;
        o.eps_inside_sqrt = variant == 2;
        std::vector<float> p(n, 0.5f), m(n, 0.0f), v(n, 0.0f);
        const double lr = 1e-2;
        const int64_t steps = 3;
        std::vector<double> pd(n, 0.5), md(n, 0), vd(n, 0);
        for (int64_t s = 1; s <= steps; ++s) {
            adamw_step(p.data(), grad.data(), m.data(), v.data(), n, s, lr, o);
            const double bc1 = o.bias_correction ? 1 - std::pow(o.beta1, double(s)) : 1.0;
            const double bc2 = o.bias_correction ? 1 - std::pow(o.beta2, double(s)) : 1.0;
            for (int64_t i = 0; i < n; ++i) {
                const double gi = grad[size_t(i)];
                md[i] = o.beta1 * md[i] + (1 - o.beta1) * gi;
                vd[i] = o.beta2 * vd[i] + (1 - o.beta2) * gi * gi;
                const double denom = o.eps_inside_sqrt ? std::sqrt(vd[i] / bc2 + o.eps) : std::sqrt(vd[i] / bc2) + o.eps;
                pd[i] -= lr / bc1 * md[i] / denom;
            }
        }
        for (int64_t i = 0; i < n; ++i) {
            EXPECT_NEAR(p[size_t(i)], pd[size_t(i)], 1e-5) << "variant " << variant << " i " << i;
            EXPECT_NEAR(m[size_t(i)], md[size_t(i)], 1e-6);  // the moments are the same formula in every variant
            EXPECT_NEAR(v[size_t(i)], vd[size_t(i)], 1e-7);
        }
    }
}

TEST(FaultOps, TruncateMantissaIsBf16Truncation) {
    std::vector<float> x = {1.0f, -3.14159265f, 1e-20f, 123456.789f, 0.0f, -0.0f};
    const std::vector<float> orig = x;
    truncate_mantissa(x.data(), int64_t(x.size()), 16);
    for (size_t i = 0; i < x.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &orig[i], 4);
        std::memcpy(&b, &x[i], 4);
        EXPECT_EQ(b, a & 0xFFFF0000u) << i;  // the top 16 bits kept: bfloat16 by truncation
        EXPECT_LE(std::fabs(x[i]), std::fabs(orig[i]));  // toward zero
        EXPECT_LE(std::fabs(x[i] - orig[i]), std::ldexp(std::fabs(orig[i]), -7));
    }
    EXPECT_NE(x[1], orig[1]);
    EXPECT_EQ(x[0], orig[0]);  // exact in bf16
    std::vector<float> y = orig;
    truncate_mantissa(y.data(), int64_t(y.size()), 1);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_LE(std::fabs(y[i] - orig[i]), std::ldexp(std::fabs(orig[i]), -22));
}

TEST(FaultOps, EffectiveConfigAndScaling) {
    Qwen3Config c;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1e6;
    FaultConfig f;
    EXPECT_FALSE(f.any());
    EXPECT_EQ(effective_config(c, f).rms_norm_eps, 1e-6);
    EXPECT_EQ(effective_config(c, f).rope_theta, 1e6);
    f.rms_norm_eps_factor = 10;
    f.rope_theta_divisor = 100;
    EXPECT_TRUE(f.any());
    EXPECT_NEAR(effective_config(c, f).rms_norm_eps, 1e-5, 1e-20);
    EXPECT_NEAR(effective_config(c, f).rope_theta, 1e4, 1e-9);
    LoraConfig l;
    l.rank = 16;
    l.alpha = 32;
    l.use_rslora = true;
    FaultConfig g;
    EXPECT_DOUBLE_EQ(effective_lora_scaling(l, g), 32.0 / 4.0);
    g.lora_scaling = LoraScaling::AlphaOverRank;
    EXPECT_DOUBLE_EQ(effective_lora_scaling(l, g), 2.0);
    g.lora_scaling = LoraScaling::RawAlpha;
    EXPECT_DOUBLE_EQ(effective_lora_scaling(l, g), 32.0);
}

// ---- trainer level -------------------------------------------------------------------------------------

// Micro-batches with different supervised counts (the accumulation fault shows only then) unless
// `equal_counts`.
MicroBatch random_mb(std::mt19937_64& rng, int64_t vocab, int32_t len1) { return tandem::test::random_micro_batch(rng, vocab, len1); }

std::vector<std::vector<MicroBatch>> make_plan(int updates, bool equal_counts) {
    std::mt19937_64 rng(99);
    std::vector<std::vector<MicroBatch>> out;
    for (int u = 0; u < updates; ++u)
        out.push_back({random_mb(rng, 300, 6), random_mb(rng, 300, equal_counts ? 6 : 3)});
    return out;
}

struct RunSetup {
    double max_grad_norm = 1e-3;  // small: clipping is active
    bool b_zero = false;          // peft's init (B = 0) instead of a non-zero B
    double dropout = 0.1;
    bool equal_counts = false;
    int updates = 3;
};

// What a short run shows: the observables the checks compare.
struct Observed {
    double eval_before = 0, eval_after = 0;
    std::vector<double> loss, grad_norm, lr, wall;
    std::vector<TensorMap> adapter;  // after each update
};

Observed train(const FaultConfig& faults, const RunSetup& s = {}) {
    const Qwen3Config c = tiny_config();
    LoraConfig l;
    l.rank = 4;
    l.alpha = 8;
    l.dropout = s.dropout;
    l.use_rslora = true;
    TrainOptions o;
    o.lr = 5e-3;
    o.total_updates = 20;
    o.warmup_updates = 4;
    o.max_grad_norm = s.max_grad_norm;
    o.dropout_mode = DropoutMode::Shared;
    o.seed = 17;
    o.threads = 1;
    o.model.faults = faults;
    Trainer t = Trainer::create(c, generate_base_weights(c, 3), l, o);
    TensorMap adapter = generate_initial_adapter(c, l, 4);
    if (!s.b_zero)
        for (auto& [name, tensor] : adapter)
            if (name.find("lora_B") != std::string::npos) fill_normal(tensor.ptr(), tensor.data.size(), 0.05, mix64(name.size()));
    t.load_adapter(adapter);
    std::mt19937_64 rng(5);
    const std::vector<MicroBatch> heldout = {random_mb(rng, 300, 7), random_mb(rng, 300, 4)};
    Observed r;
    r.eval_before = t.evaluate(heldout).loss;
    for (const auto& u : make_plan(s.updates, s.equal_counts)) {
        const UpdateMetrics m = t.train_update(u);
        r.loss.push_back(m.loss);
        r.grad_norm.push_back(m.grad_norm);
        r.lr.push_back(m.lr);
        r.wall.push_back(m.wall_seconds);
        r.adapter.push_back(t.adapter_tensors());
    }
    r.eval_after = t.evaluate(heldout).loss;
    return r;
}

bool same_bits(const TensorMap& a, const TensorMap& b, const std::string& only = "") {
    for (const auto& [name, t] : a) {
        if (!only.empty() && name.find(only) == std::string::npos) continue;
        auto it = b.find(name);
        if (it == b.end() || std::memcmp(t.ptr(), it->second.ptr(), t.data.size() * sizeof(float)) != 0) return false;
    }
    return true;
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(1e-300, std::fabs(b)); }

// Which observables a fault moves (beyond `tol` relative; "same" means within it — bit-identical when
// tol is 0).
struct Moves {
    bool eval_before, loss, grad_norm, lr, adapter;
};

void expect_moves(const char* name, const Observed& clean, const Observed& f, const Moves& m, double tol = 0) {
    SCOPED_TRACE(name);
    auto check = [&](bool moves, double a, double b, const char* what) {
        if (moves) {
            EXPECT_GT(rel(a, b), 1e-6) << what << " should move";
        } else if (tol == 0) {
            EXPECT_EQ(a, b) << what << " should not move";
        } else {
            EXPECT_LE(rel(a, b), tol) << what << " should not move";
        }
    };
    check(m.eval_before, f.eval_before, clean.eval_before, "held-out CE before training");
    check(m.loss, f.loss[0], clean.loss[0], "loss of update 0");
    check(m.grad_norm, f.grad_norm[0], clean.grad_norm[0], "grad norm of update 0");
    for (size_t i = 0; i < clean.lr.size(); ++i) check(m.lr, f.lr[i], clean.lr[i], "lr");
    if (m.adapter) {
        EXPECT_FALSE(same_bits(f.adapter.back(), clean.adapter.back())) << "adapter after training should move";
    } else if (tol == 0) {
        EXPECT_TRUE(same_bits(f.adapter.back(), clean.adapter.back())) << "adapter after training should not move";
    }
}

class FaultTrainer : public ::testing::Test {
protected:
    static const Observed& clean() {
        static const Observed c = train(FaultConfig{});
        return c;
    }
};

TEST_F(FaultTrainer, DefaultConfigIsTheCleanEngine) {
    const Observed again = train(FaultConfig{});
    expect_moves("no fault", clean(), again, {false, false, false, false, false});
    EXPECT_EQ(again.eval_after, clean().eval_after);
}

TEST_F(FaultTrainer, LoadingFaultsMoveTheForwardFromTheStart) {
    // rmsnorm-eps, rope-theta, rope-interleaved, qk-norm-skipped, gqa-modulo: the model computes a
    // different function, so the held-out CE before training moves, and everything downstream; the
    // schedule does not.
    for (int k = 0; k < 5; ++k) {
        FaultConfig f;
        const char* name = "";
        switch (k) {
            case 0: f.rms_norm_eps_factor = 1e4, name = "rmsnorm-eps"; break;  // large: tiny weights, eps shows
            case 1: f.rope_theta_divisor = 100, name = "rope-theta"; break;
            case 2: f.rope_pairing = RopePairing::Interleaved, name = "rope-interleaved"; break;
            case 3: f.skip_qk_norm = true, name = "qk-norm-skipped"; break;
            case 4: f.kv_heads = KvHeadMapping::Modulo, name = "gqa-modulo"; break;
        }
        expect_moves(name, clean(), train(f), {true, true, true, false, true});
    }
}

TEST_F(FaultTrainer, LabelShiftFaultsMoveTheLoss) {
    for (auto shift : {LabelShift::None, LabelShift::Two}) {
        const FaultConfig f{.label_shift = shift};
        expect_moves(shift == LabelShift::None ? "labels-unshifted" : "labels-shifted-twice", clean(), train(f),
                     {true, true, true, false, true});
    }
}

TEST_F(FaultTrainer, AdapterScalingFaultsAreInvisibleWhileBIsZero) {
    // rslora-ignored / raw-alpha change the LoRA scaling: with peft's B = 0 the forward (held-out CE
    // before training, update 0's loss) is bit-identical and only the gradient moves; with B != 0 the
    // forward moves too.
    RunSetup zero;
    zero.b_zero = true;
    const Observed clean_zero = train(FaultConfig{}, zero);
    for (auto sc : {LoraScaling::AlphaOverRank, LoraScaling::RawAlpha}) {
        const FaultConfig f{.lora_scaling = sc};
        const char* name = sc == LoraScaling::AlphaOverRank ? "rslora-ignored" : "raw-alpha";
        expect_moves(name, clean_zero, train(f, zero), {false, false, true, false, true});
        expect_moves(name, clean(), train(f), {true, true, true, false, true});
    }
}

TEST_F(FaultTrainer, AdapterOnWrongProjectionTrainsVNotK) {
    const FaultConfig f{.k_proj_uses_v_adapter = true};
    RunSetup zero;
    zero.b_zero = true;
    const Observed clean_zero = train(FaultConfig{}, zero);
    const Observed o = train(f, zero);
    // B = 0: the forward is unchanged; k_proj's own adapter gets no gradient (unchanged by AdamW with
    // zero gradient and no weight decay), v_proj's gets k's gradient on top of its own.
    expect_moves("adapter-wrong-projection", clean_zero, o, {false, false, true, false, true});
    const TensorMap init = [&] {
        LoraConfig l;
        l.rank = 4;
        l.alpha = 8;
        l.dropout = 0.1;
        l.use_rslora = true;
        return generate_initial_adapter(tiny_config(), l, 4);
    }();
    EXPECT_TRUE(same_bits(o.adapter.back(), init, "k_proj"));
    EXPECT_FALSE(same_bits(clean_zero.adapter.back(), init, "k_proj"));
    EXPECT_FALSE(same_bits(o.adapter.back(), clean_zero.adapter.back(), "v_proj"));
    // With B != 0 the forward moves from the start.
    expect_moves("adapter-wrong-projection (B != 0)", clean(), train(f), {true, true, true, false, true});
}

TEST_F(FaultTrainer, LoraBGradTransposedMovesTheGradientNotTheForward) {
    const FaultConfig f{.lora_b_grad = LoraBGrad::TransposedOperand};
    expect_moves("lora-b-grad-transposed", clean(), train(f), {false, false, true, false, true});
}

TEST_F(FaultTrainer, MeanOfMicroBatchMeansMovesOnlyWhenCountsDiffer) {
    const FaultConfig f{.mean_of_micro_batch_means = true};
    // different supervised counts per micro-batch: the update's loss and gradient are weighted wrongly
    expect_moves("grad-accum-mean-of-means", clean(), train(f), {false, true, true, false, true});
    // equal counts: mean of means == sum / tokens (up to rounding: accumulated one micro-batch at a time)
    RunSetup eq;
    eq.equal_counts = true;
    const Observed ce = train(FaultConfig{}, eq), fe = train(f, eq);
    EXPECT_LE(rel(fe.loss[0], ce.loss[0]), 1e-6);
    EXPECT_LE(rel(fe.grad_norm[0], ce.grad_norm[0]), 1e-5);
}

TEST_F(FaultTrainer, ClippingFaultsMoveTheUpdateOnlyWhenClippingIsActive) {
    const FaultConfig skip{.clipping = Clipping::Skipped};
    // max norm 1e-3: clipping active; the pre-clip norm and the loss are the same, the update is not
    expect_moves("clip-skipped", clean(), train(skip), {false, false, false, false, true});
    const FaultConfig per{.clipping = Clipping::PerMicroBatch};
    // per micro-batch: the recorded norm is the norm of the sum of clipped shares; the loss is the same
    // number summed one micro-batch at a time
    expect_moves("clip-per-micro-batch", clean(), train(per), {false, false, true, false, true}, 1e-6);
    // clipping inactive (max norm 1e6): skipping it changes nothing at all
    RunSetup loose;
    loose.max_grad_norm = 1e6;
    const Observed cl = train(FaultConfig{}, loose);
    expect_moves("clip-skipped, inactive", cl, train(skip, loose), {false, false, false, false, false});
}

TEST_F(FaultTrainer, AdamWFaultsMoveOnlyTheUpdate) {
    const FaultConfig a{.adamw_no_bias_correction = true};
    expect_moves("adamw-no-bias-correction", clean(), train(a), {false, false, false, false, true});
    const FaultConfig b{.adamw_eps_inside_sqrt = true};
    expect_moves("adamw-eps-inside-sqrt", clean(), train(b), {false, false, false, false, true});
}

TEST_F(FaultTrainer, WarmupOffsetShiftsTheSchedule) {
    const FaultConfig f{.warmup_offset = 1};
    const Observed o = train(f);
    expect_moves("warmup-off-by-one", clean(), o, {false, false, false, true, true});
    for (size_t i = 0; i + 1 < o.lr.size(); ++i) EXPECT_EQ(o.lr[i], clean().lr[i + 1]);  // update t runs with t+1's lr
}

TEST_F(FaultTrainer, EvaluationFaultsMoveOnlyTheEvaluation) {
    const FaultConfig d{.eval_dropout = 0.3};
    const Observed od = train(d);
    expect_moves("dropout-in-eval", clean(), od, {true, false, false, false, false});
    EXPECT_NE(od.eval_after, clean().eval_after);
    EXPECT_TRUE(same_bits(od.adapter.back(), clean().adapter.back()));  // training untouched

    const FaultConfig w{.eval_without_adapter = true};
    const Observed ow = train(w);
    expect_moves("eval-without-adapter", clean(), ow, {true, false, false, false, false});
    EXPECT_TRUE(same_bits(ow.adapter.back(), clean().adapter.back()));
    // oracle: evaluation without the adapter is the clean engine's evaluation with B = 0 (base alone)
    RunSetup zero;
    zero.b_zero = true;
    EXPECT_EQ(ow.eval_before, train(FaultConfig{}, zero).eval_before);
    EXPECT_EQ(ow.eval_after, ow.eval_before);  // training does not reach the base
}

TEST_F(FaultTrainer, ReusedDropoutMaskMovesTrainingOnlyWithDropout) {
    const FaultConfig f{.same_mask_every_micro_batch = true};
    expect_moves("dropout-mask-reused", clean(), train(f), {false, true, true, false, true});
    RunSetup none;
    none.dropout = 0;
    expect_moves("dropout-mask-reused, no dropout", train(FaultConfig{}, none), train(f, none),
                 {false, false, false, false, false});
}

TEST_F(FaultTrainer, SlowAfterEvalChangesTimeNotNumbers) {
    const FaultConfig f{.slow_after_eval = 40};
    RunSetup s;
    s.updates = 5;
    const Observed base = train(FaultConfig{}, s);
    const Observed o = train(f, s);
    expect_moves("slow-after-eval", base, o, {false, false, false, false, false});
    EXPECT_EQ(o.eval_after, base.eval_after);
    for (size_t i = 0; i < o.adapter.size(); ++i) EXPECT_TRUE(same_bits(o.adapter[i], base.adapter[i]));
    // the first update after the evaluation (update 0 here) is slow, the later ones are not
    std::vector<double> later(o.wall.begin() + 1, o.wall.end());
    std::sort(later.begin(), later.end());
    EXPECT_GT(o.wall[0], 10 * later[later.size() / 2]) << o.wall[0] << " vs median " << later[later.size() / 2];
}

}  // namespace
