// Trainer-level checks: bit-identical resume (interrupted at update k and restored into a fresh
// Trainer == the uninterrupted run, every bit of metrics, adapter and AdamW moments), the schedule
// against docs/spec.md §Recipe's closed form, AdamW against a float64 re-derivation of torch's update, chunked CE
// against the unchunked one, dropout generators and input validation.
#include <gtest/gtest.h>

#include "random_batches.h"

#include <cmath>
#include <cstring>
#include <random>

#include "tandem/engine/dropout.h"
#include "tandem/engine/generate.h"
#include "tandem/engine/ops.h"
#include "tandem/engine/trainer.h"
#include "tandem/error.h"

using namespace tandem::engine;

namespace {

Qwen3Config tiny_config() {
    Qwen3Config c;
    c.vocab_size = 300;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.initializer_range = 0.1;
    return c;
}

LoraConfig tiny_lora(double dropout) {
    LoraConfig l;
    l.rank = 4;
    l.alpha = 8;
    l.dropout = dropout;
    return l;
}

MicroBatch random_mb(std::mt19937_64& rng, int64_t vocab) { return tandem::test::random_micro_batch(rng, vocab); }

std::vector<std::vector<MicroBatch>> plan(int updates, int64_t vocab) { return tandem::test::random_plan(updates, vocab); }

Trainer make_trainer(DropoutMode mode, double dropout, int total, int threads) {
    const Qwen3Config c = tiny_config();
    const LoraConfig l = tiny_lora(dropout);
    TrainOptions o;
    o.lr = 5e-3;
    o.total_updates = total;
    o.dropout_mode = mode;
    o.seed = 17;
    o.threads = threads;
    o.model.ce_token_chunk = 5;
    o.model.ce_vocab_chunk = 64;
    Trainer t = Trainer::create(c, generate_base_weights(c, 3), l, o);
    TensorMap adapter = generate_initial_adapter(c, l, 4);
    // B non-zero so every gradient is non-trivial from the first update
    for (auto& [name, tensor] : adapter)
        if (name.find("lora_B") != std::string::npos) fill_normal(tensor.ptr(), tensor.data.size(), 0.05, mix64(name.size()));
    t.load_adapter(adapter);
    return t;
}

bool same_bits(const TensorMap& a, const TensorMap& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [name, t] : a) {
        auto it = b.find(name);
        if (it == b.end() || it->second.shape != t.shape) return false;
        if (std::memcmp(t.ptr(), it->second.ptr(), t.data.size() * sizeof(float)) != 0) return false;
    }
    return true;
}

struct ResumeCase {
    DropoutMode mode;
    double dropout;
    int threads;
};

class ResumeTest : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(ResumeTest, InterruptedAndResumedRunEqualsUninterruptedBitForBit) {
    const auto [mode, dropout, threads] = GetParam();
    const int total = 6, k = 3;
    const auto updates = plan(total, tiny_config().vocab_size);

    Trainer full = make_trainer(mode, dropout, total, threads);
    std::vector<UpdateMetrics> full_metrics;
    for (const auto& u : updates) full_metrics.push_back(full.train_update(u));

    Trainer first = make_trainer(mode, dropout, total, threads);
    std::vector<UpdateMetrics> resumed_metrics;
    for (int u = 0; u < k; ++u) resumed_metrics.push_back(first.train_update(updates[size_t(u)]));
    const TrainerState saved = first.state();
    EXPECT_EQ(saved.step, k);

    Trainer second = make_trainer(mode, dropout, total, threads);  // a fresh process would build this
    second.restore(saved);
    for (int u = k; u < total; ++u) resumed_metrics.push_back(second.train_update(updates[size_t(u)]));

    ASSERT_EQ(full_metrics.size(), resumed_metrics.size());
    for (size_t i = 0; i < full_metrics.size(); ++i) {
        EXPECT_EQ(std::memcmp(&full_metrics[i].loss, &resumed_metrics[i].loss, sizeof(double)), 0) << "update " << i;
        EXPECT_EQ(std::memcmp(&full_metrics[i].grad_norm, &resumed_metrics[i].grad_norm, sizeof(double)), 0);
        EXPECT_EQ(full_metrics[i].lr, resumed_metrics[i].lr);
        EXPECT_EQ(full_metrics[i].supervised_tokens, resumed_metrics[i].supervised_tokens);
    }
    const TrainerState a = full.state(), b = second.state();
    EXPECT_TRUE(same_bits(a.adapter, b.adapter));
    EXPECT_TRUE(same_bits(a.adam_m, b.adam_m));
    EXPECT_TRUE(same_bits(a.adam_v, b.adam_v));
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.native_rng_counter, b.native_rng_counter);
    // the run trained (a resume test of a frozen run would prove nothing)
    EXPECT_FALSE(same_bits(a.adapter, make_trainer(mode, dropout, total, threads).adapter_tensors()));
    if (mode == DropoutMode::Native && dropout > 0) {
        EXPECT_GT(a.native_rng_counter, 0u);
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, ResumeTest,
                         ::testing::Values(ResumeCase{DropoutMode::Off, 0.0, 1}, ResumeCase{DropoutMode::Native, 0.1, 2},
                                           ResumeCase{DropoutMode::Shared, 0.1, 2}));

TEST(Trainer, ResultsDoNotDependOnWhetherTheRunWasSplit_NativeRngStateMatters) {
    // Restoring the adapter and moments but NOT the native RNG counter must change the run: the
    // counter is real state (otherwise the resume test could not catch a missing RNG restore).
    const int total = 4;
    const auto updates = plan(total, tiny_config().vocab_size);
    Trainer full = make_trainer(DropoutMode::Native, 0.1, total, 1);
    for (const auto& u : updates) full.train_update(u);
    Trainer first = make_trainer(DropoutMode::Native, 0.1, total, 1);
    first.train_update(updates[0]);
    TrainerState st = first.state();
    st.native_rng_counter = 0;
    Trainer second = make_trainer(DropoutMode::Native, 0.1, total, 1);
    second.restore(st);
    for (int u = 1; u < total; ++u) second.train_update(updates[size_t(u)]);
    EXPECT_FALSE(same_bits(full.state().adapter, second.state().adapter));
}

TEST(Trainer, RestoreRejectsMismatchedState) {
    Trainer t = make_trainer(DropoutMode::Off, 0.0, 3, 1);
    TrainerState st = t.state();
    st.seed = 18;
    EXPECT_THROW(t.restore(st), tandem::Error);
    st = t.state();
    st.adam_m.erase(st.adam_m.begin());
    EXPECT_THROW(t.restore(st), tandem::Error);
}

TEST(Trainer, UpdateWithoutSupervisedTokensAndMalformedBatchesThrow) {
    Trainer t = make_trainer(DropoutMode::Off, 0.0, 3, 1);
    std::mt19937_64 rng(1);
    MicroBatch mb = random_mb(rng, 300);
    MicroBatch none = mb;
    std::fill(none.supervised.begin(), none.supervised.end(), 0);
    EXPECT_THROW(t.train_update({none}), tandem::Error);
    MicroBatch pad_label = mb;
    pad_label.supervised[size_t(9 + 7)] = 1;  // sequence 1 has length 6
    EXPECT_THROW(t.train_update({pad_label}), tandem::Error);
    MicroBatch bad_id = mb;
    bad_id.ids[3] = 300;
    EXPECT_THROW(t.train_update({bad_id}), tandem::Error);
    MicroBatch first_label = mb;
    first_label.supervised[0] = 1;
    EXPECT_THROW(t.train_update({first_label}), tandem::Error);
    EXPECT_EQ(t.step(), 0);
}

TEST(Trainer, LossIsTokenWeightedOverTheWholeUpdate) {
    // docs/spec.md §Recipe: sum of token losses over all micro-batches / supervised tokens of the update, which is
    // what evaluate() computes for the same batches with the same (untouched) adapter.
    Trainer t = make_trainer(DropoutMode::Off, 0.0, 3, 1);
    std::mt19937_64 rng(5);
    MicroBatch a = random_mb(rng, 300), b = random_mb(rng, 300);
    std::fill(b.supervised.begin() + 9, b.supervised.end(), 0);  // unequal counts: mean of means would differ
    const EvalResult e = t.evaluate({a, b});
    const double la = t.model().loss_sum(a), lb = t.model().loss_sum(b);
    const int64_t na = a.validate(300), nb = b.validate(300);
    EXPECT_NEAR(e.loss, (la + lb) / double(na + nb), 1e-12);
    const UpdateMetrics m = t.train_update({a, b});
    EXPECT_EQ(m.supervised_tokens, na + nb);
    EXPECT_NEAR(m.loss, e.loss, 1e-12);  // update 0 runs the same forward, dropout off
    EXPECT_EQ(m.lr, 0.0);                // update 0 of a warmup schedule
}

TEST(Trainer, ChunkedCrossEntropyEqualsUnchunked) {
    const Qwen3Config c = tiny_config();
    const LoraConfig l = tiny_lora(0.0);
    std::mt19937_64 rng(8);
    const MicroBatch mb = random_mb(rng, c.vocab_size);
    ModelOptions whole{0, 0}, chunked{3, 37};
    Qwen3LoraModel m1(c, generate_base_weights(c, 3), l, whole), m2(c, generate_base_weights(c, 3), l, chunked);
    const TensorMap ad = generate_initial_adapter(c, l, 4);
    m1.load_adapter(ad);
    m2.load_adapter(ad);
    const double s1 = m1.forward_backward(mb, DropoutContext{}, 0.1), s2 = m2.forward_backward(mb, DropoutContext{}, 0.1);
    EXPECT_NEAR(s1, s2, 1e-6 * s1);
    double diff = 0, ref = 0;
    for (int64_t i = 0; i < m1.num_trainable(); ++i) {
        diff = std::max(diff, double(std::abs(m1.grads()[i] - m2.grads()[i])));
        ref = std::max(ref, double(std::abs(m1.grads()[i])));
    }
    EXPECT_GT(ref, 0.0);
    EXPECT_LT(diff, 1e-5 * ref);
    // and the materialised logits give the same loss
    const std::vector<float> logits = m1.logits(mb);
    double direct = 0;
    for (int64_t b = 0; b < mb.batch; ++b)
        for (int64_t t = 1; t < mb.seq; ++t) {
            if (!mb.supervised[size_t(b * mb.seq + t)]) continue;
            const float* row = logits.data() + (b * mb.seq + t - 1) * c.vocab_size;
            double mx = row[0], s = 0;
            for (int64_t v = 1; v < c.vocab_size; ++v) mx = std::max(mx, double(row[v]));
            for (int64_t v = 0; v < c.vocab_size; ++v) s += std::exp(double(row[v]) - mx);
            direct += mx + std::log(s) - row[mb.ids[size_t(b * mb.seq + t)]];
        }
    EXPECT_NEAR(s1, direct, 1e-5 * direct);
}

TEST(Schedule, CosineWithWarmupFollowsSpecFormula) {
    const double lr = 1e-4;
    const int64_t T = 10536, W = warmup_updates(0.03, T);
    EXPECT_EQ(W, 317);  // ceil(316.08)
    EXPECT_EQ(cosine_with_warmup_lr(lr, 0, W, T), 0.0);
    EXPECT_DOUBLE_EQ(cosine_with_warmup_lr(lr, 100, W, T), lr * 100.0 / 317.0);
    EXPECT_DOUBLE_EQ(cosine_with_warmup_lr(lr, W, W, T), lr);
    const int64_t t = 5000;
    EXPECT_DOUBLE_EQ(cosine_with_warmup_lr(lr, t, W, T),
                     lr * 0.5 * (1.0 + std::cos(M_PI * double(t - W) / double(T - W))));
    EXPECT_NEAR(cosine_with_warmup_lr(lr, T, W, T), 0.0, 1e-20);
    EXPECT_EQ(warmup_updates(0.03, 10), 1);
    EXPECT_EQ(cosine_with_warmup_lr(lr, 0, 0, 1), lr);  // no warmup: W = 0
}

TEST(AdamW, MatchesFloat64TorchFormulaOverSeveralSteps) {
    const int n = 50;
    std::mt19937_64 rng(3);
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<float> p(n), m(n, 0.f), v(n, 0.f);
    std::vector<double> pd(n), md(n, 0.0), vd(n, 0.0);
    for (int i = 0; i < n; ++i) pd[size_t(i)] = p[size_t(i)] = d(rng);
    AdamWOptions o;
    o.weight_decay = 0.01;
    for (int step = 1; step <= 5; ++step) {
        std::vector<float> g(n);
        for (auto& x : g) x = d(rng);
        const double lr = 1e-2 * step;
        adamw_step(p.data(), g.data(), m.data(), v.data(), n, step, lr, o);
        for (int i = 0; i < n; ++i) {
            const size_t k = size_t(i);
            pd[k] *= 1 - lr * o.weight_decay;
            md[k] = o.beta1 * md[k] + (1 - o.beta1) * g[k];
            vd[k] = o.beta2 * vd[k] + (1 - o.beta2) * double(g[k]) * g[k];
            const double mhat = md[k] / (1 - std::pow(o.beta1, step));
            const double vhat = vd[k] / (1 - std::pow(o.beta2, step));
            pd[k] -= lr * mhat / (std::sqrt(vhat) + o.eps);
        }
    }
    for (int i = 0; i < n; ++i) EXPECT_NEAR(p[size_t(i)], pd[size_t(i)], 1e-6 * (1 + std::abs(pd[size_t(i)])));
}

TEST(Clip, TorchCoefficient) {
    std::vector<float> g = {3.f, 4.f};
    const double norm = global_grad_norm(g.data(), {{0, 2}});
    EXPECT_DOUBLE_EQ(norm, 5.0);
    const float coef = clip_grad(g.data(), 2, norm, 1.0);
    EXPECT_FLOAT_EQ(coef, 1.0f / (5.0f + 1e-6f));
    EXPECT_NEAR(std::sqrt(g[0] * g[0] + g[1] * g[1]), 1.0, 1e-6);
    std::vector<float> small = {0.3f};
    EXPECT_EQ(clip_grad(small.data(), 1, 0.3, 1.0), 1.0f);
    EXPECT_EQ(small[0], 0.3f);
}

TEST(Dropout, SharedMaskDependsOnEveryKeyPartAndNotOnThreads) {
    const int64_t n = 10000;
    auto mask = [&](uint64_t u, uint64_t mb, uint64_t l, uint64_t p, int threads) {
        ops::set_num_threads(threads);
        std::vector<uint8_t> k(static_cast<size_t>(n));
        fill_dropout_keep(k.data(), n, shared_dropout_key(5, u, mb, l, p), 0, 0.1);
        return k;
    };
    const auto base = mask(1, 0, 0, 0, 1);
    EXPECT_EQ(base, mask(1, 0, 0, 0, 2));
    EXPECT_NE(base, mask(2, 0, 0, 0, 1));
    EXPECT_NE(base, mask(1, 1, 0, 0, 1));
    EXPECT_NE(base, mask(1, 0, 1, 0, 1));
    EXPECT_NE(base, mask(1, 0, 0, 1, 1));
    double kept = 0;
    for (auto k : base) kept += k;
    EXPECT_NEAR(kept / n, 0.9, 0.01);
    // mix64 is SplitMix64: the first output of the reference generator seeded with 0
    EXPECT_EQ(mix64(0), 0xE220A8397B1DCDAFULL);
    EXPECT_EQ(projection_index("down_proj"), 6);
    EXPECT_THROW(projection_index("lm_head"), tandem::Error);
}

}  // namespace
