// Every CUDA op (kernels/ops.h) against the CPU op of the same name (engine/ops.h, optim.h,
// dropout.h) on the same inputs: float32, max difference <= 1e-5 relative to the tensor's largest
// magnitude (docs/engine-cuda.md); the dropout masks and the embedding must be bit-identical, AdamW too (both
// sides do the same float32 operations in the same order, no FMA contraction). Shapes are
// deliberately awkward (sequence lengths that are not tile multiples, padding, GQA, odd row counts).
// Skips with a message when there is no CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "attention_cases.h"
#include "dropout_cases.h"
#include "gpu_test_util.h"
#include "tandem/engine/dropout.h"
#include "tandem/engine/ops.h"
#include "tandem/engine/optim.h"
#include "tandem/error.h"
#include "tandem/kernels/ops.h"

namespace {

using namespace tandem;
using gputest::max_rel_diff;
using gputest::random_vector;
namespace cpu = tandem::engine::ops;
namespace k = tandem::kernels;

constexpr double kTol = 1e-5;  // docs/engine-cuda.md: every op within 1e-5 relative of the CPU op (float32)

class GpuOps : public ::testing::Test {
protected:
    void SetUp() override {
        TANDEM_REQUIRE_GPU();
        env = std::make_unique<gputest::DeviceEnv>();
    }
    std::unique_ptr<gputest::DeviceEnv> env;
};

// ------------------------------------------------------------------------------------------------
TEST_F(GpuOps, AllocatorAccountsExactlyAndCaches) {
    k::DeviceAllocator a(0);
    void* w = a.allocate(1000, k::MemoryCategory::Weights);
    void* x = a.allocate(3 << 20, k::MemoryCategory::Activations);
    k::MemoryReport r = a.report();
    EXPECT_EQ(r.current_bytes, 1000u + (3u << 20));
    EXPECT_EQ(r.category_current[0], 1000u);
    EXPECT_EQ(r.category_current[2], 3u << 20);
    EXPECT_EQ(r.block_bytes, 1024u + (4u << 20));  // 512-byte and 2-MiB rounding
    EXPECT_EQ(r.cuda_malloc_calls, 2u);
    a.release(x);
    r = a.report();
    EXPECT_EQ(r.current_bytes, 1000u);
    EXPECT_EQ(r.peak_bytes, 1000u + (3u << 20));
    EXPECT_EQ(r.category_peak[2], 3u << 20);
    EXPECT_EQ(r.reserved_bytes, 1024u + (4u << 20));  // the block stays cached
    void* y = a.allocate((3 << 20) + 5, k::MemoryCategory::Workspace);  // served from the cache
    r = a.report();
    EXPECT_EQ(r.cuda_malloc_calls, 2u);
    EXPECT_EQ(r.cache_hits, 1u);
    EXPECT_EQ(r.category_current[3], (3u << 20) + 5);
    a.release(y);
    a.reset_peak();
    EXPECT_EQ(a.report().peak_bytes, 1000u);
    a.empty_cache();
    EXPECT_EQ(a.report().reserved_bytes, 1024u);
    a.release(w);
    EXPECT_THROW(a.allocate(size_t(1) << 52, k::MemoryCategory::Workspace), tandem::Error);
    EXPECT_EQ(a.report().current_bytes, 0u);
    EXPECT_NE(a.report().to_json().find("\"adapter_optimizer\""), std::string::npos);
}

// ------------------------------------------------------------------------------------------------
TEST_F(GpuOps, LinearForwardAndBackwardMatchCpu) {
    const int64_t N = 37, K = 96, M = 80;
    auto x = random_vector(N * K, 1), w = random_vector(M * K, 2), dy = random_vector(N * M, 3),
         y0 = random_vector(N * M, 4), dw0 = random_vector(M * K, 5);
    std::vector<float> y = y0, dx(N * K), dw = dw0;
    cpu::linear_forward(y.data(), x.data(), w.data(), N, K, M, 0.5f);
    cpu::linear_backward_input(dx.data(), dy.data(), w.data(), N, M, K);
    cpu::linear_backward_weight(dw.data(), dy.data(), x.data(), N, M, K);
    auto dx_d = env->zeros<float>(N * K);
    auto x_d = env->to_device(x), w_d = env->to_device(w), dy_d = env->to_device(dy), y_d = env->to_device(y0),
         dw_d = env->to_device(dw0);
    k::linear_forward(env->blas->get(), y_d.get(), x_d.get(), w_d.get(), N, K, M, 0.5f);
    k::linear_backward_input(env->blas->get(), dx_d.get(), dy_d.get(), w_d.get(), N, M, K);
    k::linear_backward_weight(env->blas->get(), dw_d.get(), dy_d.get(), x_d.get(), N, M, K);
    EXPECT_LE(max_rel_diff(env->to_host(y_d, N * M), y), kTol);
    EXPECT_LE(max_rel_diff(env->to_host(dx_d, N * K), dx), kTol);
    EXPECT_LE(max_rel_diff(env->to_host(dw_d, M * K), dw), kTol);
}

TEST_F(GpuOps, EmbeddingIsBitIdentical) {
    for (const int64_t C : {36, 37}) {  // float4 rows, and the scalar path
        const int64_t N = 29, V = 50;
        auto table = random_vector(V * C, 6);
        std::vector<int32_t> ids(N);
        for (int64_t i = 0; i < N; ++i) ids[i] = int32_t((i * 17 + 3) % V);
        std::vector<float> out(N * C);
        cpu::embedding_forward(out.data(), ids.data(), table.data(), N, C, V);
        auto t_d = env->to_device(table);
        auto ids_d = env->to_device(ids);
        auto o_d = env->zeros<float>(N * C);
        k::gather_rows(o_d.get(), t_d.get(), ids_d.get(), N, C, env->stream);  // the CUDA backend's embedding op
        EXPECT_EQ(env->to_host(o_d, N * C), out) << "C " << C;
    }
}

// ------------------------------------------------------------------------------------------------
TEST_F(GpuOps, RmsNormForwardBackwardMatchCpu) {
    for (const auto& [rows, C] : std::vector<std::pair<int64_t, int64_t>>{{37, 1024}, {37 * 4, 64}, {5, 96}}) {
        auto x = random_vector(rows * C, 7, 2.0f), w = random_vector(C, 8), dy = random_vector(rows * C, 9);
        std::vector<float> out(rows * C), rstd(rows), dx(rows * C), dw(C, 0.25f);
        cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), rows, C, 1e-6);
        cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), rows, C);
        auto x_d = env->to_device(x), w_d = env->to_device(w), dy_d = env->to_device(dy);
        auto o_d = env->zeros<float>(rows * C), r_d = env->zeros<float>(rows), dx_d = env->zeros<float>(rows * C);
        auto dw_d = env->to_device(std::vector<float>(C, 0.25f));
        k::rmsnorm_forward(o_d.get(), r_d.get(), x_d.get(), w_d.get(), rows, C, 1e-6, env->stream);
        k::rmsnorm_backward(dx_d.get(), dw_d.get(), dy_d.get(), x_d.get(), w_d.get(), r_d.get(), rows, C, env->stream);
        EXPECT_LE(max_rel_diff(env->to_host(o_d, rows * C), out), kTol) << rows << "x" << C;
        EXPECT_LE(max_rel_diff(env->to_host(r_d, rows), rstd), kTol) << rows << "x" << C;
        EXPECT_LE(max_rel_diff(env->to_host(dx_d, rows * C), dx), kTol) << rows << "x" << C;
        EXPECT_LE(max_rel_diff(env->to_host(dw_d, C), dw), kTol) << rows << "x" << C;
        // accumulate_din adds onto what is there
        auto acc_d = env->to_device(dy);
        k::rmsnorm_backward(acc_d.get(), nullptr, dy_d.get(), x_d.get(), w_d.get(), r_d.get(), rows, C, env->stream, true);
        std::vector<float> want(rows * C);
        for (int64_t i = 0; i < rows * C; ++i) want[i] = dy[i] + dx[i];
        EXPECT_LE(max_rel_diff(env->to_host(acc_d, rows * C), want), kTol);
    }
}

TEST_F(GpuOps, RopeForwardBackwardMatchCpu) {
    const int64_t B = 2, T = 19, H = 3, D = 64;
    std::vector<float> cos(T * D), sin(T * D);
    cpu::rope_tables(cos.data(), sin.data(), T, D, 1e6);
    auto x = random_vector(B * T * H * D, 10), dy = random_vector(B * T * H * D, 11);
    std::vector<float> y(x.size()), dx(x.size());
    cpu::rope_forward(y.data(), x.data(), cos.data(), sin.data(), B, T, H, D);
    cpu::rope_backward(dx.data(), dy.data(), cos.data(), sin.data(), B, T, H, D);
    auto c_d = env->to_device(cos), s_d = env->to_device(sin), x_d = env->to_device(x), dy_d = env->to_device(dy);
    k::rope_forward(x_d.get(), x_d.get(), c_d.get(), s_d.get(), B, T, H, D, env->stream);  // in place
    k::rope_backward(dy_d.get(), dy_d.get(), c_d.get(), s_d.get(), B, T, H, D, env->stream);
    EXPECT_LE(max_rel_diff(env->to_host(x_d, x.size()), y), kTol);
    EXPECT_LE(max_rel_diff(env->to_host(dy_d, x.size()), dx), kTol);
}

// ------------------------------------------------------------------------------------------------
using gputest::AttnCase;
using gputest::attn_name;

// The CPU op in double on the case's inputs: the device kernels are compared with the exact
// function, not with another float32 summation order.
struct AttnReference {
    std::vector<float> q, k, v, dout, out, dq, dk, dv;
};
AttnReference attn_reference(const AttnCase& c) {
    const int64_t nq = c.B * c.T * c.H * c.D, nk = c.B * c.T * c.KV * c.D;
    AttnReference r{random_vector(nq, 12), random_vector(nk, 13), random_vector(nk, 14), random_vector(nq, 15),
                    {}, {}, {}, {}};
    auto wide = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
    auto narrow = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
    const auto q = wide(r.q), k = wide(r.k), v = wide(r.v), dout = wide(r.dout);
    std::vector<double> out(nq), probs(size_t(c.B * c.H * c.T * c.T)), dq(nq), dk(nk), dv(nk);
    cpu::attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), c.lengths.data(), c.B, c.T, c.H,
                           c.KV, c.D);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), probs.data(),
                            c.lengths.data(), c.B, c.T, c.H, c.KV, c.D);
    r.out = narrow(out);
    r.dq = narrow(dq);
    r.dk = narrow(dk);
    r.dv = narrow(dv);
    return r;
}

class GpuAttention : public GpuOps, public ::testing::WithParamInterface<AttnCase> {};

TEST_P(GpuAttention, ForwardBackwardMatchCpu) {
    const AttnCase& c = GetParam();
    const AttnReference ref = attn_reference(c);
    const int64_t nq = c.B * c.T * c.H * c.D, nk = c.B * c.T * c.KV * c.D;
    auto q_d = env->to_device(ref.q), k_d = env->to_device(ref.k), v_d = env->to_device(ref.v),
         do_d = env->to_device(ref.dout);
    auto len_d = env->to_device(c.lengths);
    auto o_d = env->zeros<float>(nq), lse_d = env->zeros<float>(c.B * c.H * c.T), dq_d = env->zeros<float>(nq),
         dk_d = env->zeros<float>(nk), dv_d = env->zeros<float>(nk), ws = env->zeros<float>(c.B * c.H * c.T);
    k::attention_forward(o_d.get(), lse_d.get(), q_d.get(), k_d.get(), v_d.get(), len_d.get(), c.B, c.T, c.H, c.KV,
                         c.D, env->stream);
    k::attention_backward(dq_d.get(), dk_d.get(), dv_d.get(), ws.get(), do_d.get(), o_d.get(), q_d.get(), k_d.get(),
                          v_d.get(), lse_d.get(), len_d.get(), c.B, c.T, c.H, c.KV, c.D, env->stream);
    const auto out = env->to_host(o_d, nq), dq = env->to_host(dq_d, nq), dk = env->to_host(dk_d, nk),
               dv = env->to_host(dv_d, nk);
    EXPECT_LE(max_rel_diff(out, ref.out), kTol) << "out";
    EXPECT_LE(max_rel_diff(dq, ref.dq), kTol) << "dq";
    EXPECT_LE(max_rel_diff(dk, ref.dk), kTol) << "dk";
    EXPECT_LE(max_rel_diff(dv, ref.dv), kTol) << "dv";
    // no reduction depends on scheduling: a second run gives the same bits
    k::attention_forward(o_d.get(), lse_d.get(), q_d.get(), k_d.get(), v_d.get(), len_d.get(), c.B, c.T, c.H, c.KV,
                         c.D, env->stream);
    k::attention_backward(dq_d.get(), dk_d.get(), dv_d.get(), ws.get(), do_d.get(), o_d.get(), q_d.get(), k_d.get(),
                          v_d.get(), lse_d.get(), len_d.get(), c.B, c.T, c.H, c.KV, c.D, env->stream);
    EXPECT_EQ(env->to_host(o_d, nq), out);
    EXPECT_EQ(env->to_host(dq_d, nq), dq);
    EXPECT_EQ(env->to_host(dk_d, nk), dk);
    EXPECT_EQ(env->to_host(dv_d, nk), dv);
}

// Awkward small shapes (padding, lengths 1, tiles + 1, MQA) and the long Qwen3 shapes of issue-size
// sequences (D 128, GQA 2:1 as Qwen3-0.6B's 16/8 heads and 8:1), some padded.
INSTANTIATE_TEST_SUITE_P(Shapes, GpuAttention,
                         ::testing::Values(AttnCase{2, 45, 4, 2, 64, {45, 30}},     // padding, GQA 2:1
                                           AttnCase{1, 70, 2, 2, 32, {70}},          // MHA, 3 key tiles
                                           AttnCase{2, 33, 16, 8, 128, {1, 33}},     // Qwen3 heads, length 1
                                           AttnCase{1, 129, 4, 1, 128, {100}},       // MQA, tile + 1
                                           AttnCase{3, 7, 3, 3, 32, {7, 2, 5}},      // 3 heads
                                           AttnCase{1, 75, 8, 1, 64, {61}},          // GQA 8:1
                                           AttnCase{1, 512, 16, 8, 128, {512}},
                                           AttnCase{2, 512, 16, 2, 128, {512, 300}},
                                           AttnCase{1, 1024, 16, 8, 128, {1000}},
                                           AttnCase{1, 1024, 8, 1, 128, {1024}},
                                           AttnCase{1, 2048, 16, 8, 128, {2048}},
                                           AttnCase{1, 2048, 16, 2, 128, {1500}}),
                         [](const ::testing::TestParamInfo<AttnCase>& i) { return attn_name(i.param); });

// ------------------------------------------------------------------------------------------------
TEST_F(GpuOps, SwigluForwardBackwardMatchCpu) {
    const int64_t n = 10007;
    auto g = random_vector(n, 16, 3.0f), u = random_vector(n, 17), dy = random_vector(n, 18);
    std::vector<float> out(n), dg(n), du(n);
    cpu::swiglu_forward(out.data(), g.data(), u.data(), n);
    cpu::swiglu_backward(dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
    auto g_d = env->to_device(g), u_d = env->to_device(u), dy_d = env->to_device(dy);
    auto o_d = env->zeros<float>(n), dg_d = env->zeros<float>(n), du_d = env->zeros<float>(n);
    k::swiglu_forward(o_d.get(), g_d.get(), u_d.get(), n, env->stream);
    k::swiglu_backward(dg_d.get(), du_d.get(), dy_d.get(), g_d.get(), u_d.get(), n, env->stream);
    EXPECT_LE(max_rel_diff(env->to_host(o_d, n), out), kTol);
    EXPECT_LE(max_rel_diff(env->to_host(dg_d, n), dg), kTol);
    EXPECT_LE(max_rel_diff(env->to_host(du_d, n), du), kTol);
}

// ------------------------------------------------------------------------------------------------
TEST_F(GpuOps, DropoutMasksAreBitIdenticalToCpu) {
    const int64_t n = 100003;
    for (const gputest::DropoutCase& c : gputest::dropout_cases()) {
        std::vector<uint8_t> want(n);
        engine::fill_dropout_keep(want.data(), n, c.key, c.first, c.p);
        auto keep_d = env->zeros<uint8_t>(n);
        k::dropout_keep_mask(keep_d.get(), n, c.key, c.first, c.p, env->stream);
        const auto got = env->to_host(keep_d, n);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), n), 0) << "p " << c.p << " first " << c.first;
        int64_t kept = 0;
        for (auto b : got) kept += b;
        EXPECT_NEAR(double(kept) / double(n), 1.0 - c.p, 0.01);  // and it is a sane mask
    }
    EXPECT_EQ(k::mix64(12345), engine::mix64(12345));
}

TEST_F(GpuOps, LoraLinearWithDropoutMatchesCpu) {
    const int64_t N = 21, in = 64, out = 48, r = 8;
    const double p = 0.3;
    const float scaling = 2.0f, dscale = engine::dropout_scale(p);
    const uint64_t key = engine::shared_dropout_key(9, 1, 0, 2, 4);
    auto x = random_vector(N * in, 19), w = random_vector(out * in, 20), a = random_vector(r * in, 21),
         b = random_vector(out * r, 22), dy = random_vector(N * out, 23), dx0 = random_vector(N * in, 24);
    std::vector<uint8_t> keep(N * in);
    engine::fill_dropout_keep(keep.data(), N * in, key, 0, p);
    for (bool accumulate : {false, true}) {
        std::vector<float> y(N * out), t(N * r), dx = dx0, da(r * in, 0.5f), db(out * r, -0.5f);
        cpu::lora_linear_forward(y.data(), t.data(), x.data(), w.data(), a.data(), b.data(), keep.data(), dscale,
                                 scaling, N, in, out, r);
        cpu::lora_linear_backward(dx.data(), da.data(), db.data(), dy.data(), x.data(), w.data(), a.data(), b.data(),
                                  t.data(), keep.data(), dscale, scaling, N, in, out, r, accumulate);
        k::DropoutSpec spec{true, key, 0, p, dscale};
        auto x_d = env->to_device(x), w_d = env->to_device(w), a_d = env->to_device(a), b_d = env->to_device(b),
             dy_d = env->to_device(dy), dx_d = env->to_device(dx0);
        auto da_d = env->to_device(std::vector<float>(r * in, 0.5f)), db_d = env->to_device(std::vector<float>(out * r, -0.5f));
        auto y_d = env->zeros<float>(N * out), t_d = env->zeros<float>(N * r), xd_d = env->zeros<float>(N * in),
             dt_d = env->zeros<float>(N * r);
        k::lora_linear_forward(env->blas->get(), env->stream, y_d.get(), t_d.get(), xd_d.get(), x_d.get(), w_d.get(),
                               a_d.get(), b_d.get(), spec, scaling, N, in, out, r);
        k::lora_linear_backward(env->blas->get(), env->stream, dx_d.get(), da_d.get(), db_d.get(), dt_d.get(),
                                xd_d.get(), dy_d.get(), x_d.get(), w_d.get(), a_d.get(), b_d.get(), t_d.get(), spec,
                                scaling, N, in, out, r, accumulate);
        EXPECT_LE(max_rel_diff(env->to_host(y_d, N * out), y), kTol);
        EXPECT_LE(max_rel_diff(env->to_host(t_d, N * r), t), kTol);
        EXPECT_LE(max_rel_diff(env->to_host(dx_d, N * in), dx), kTol) << "accumulate " << accumulate;
        EXPECT_LE(max_rel_diff(env->to_host(da_d, r * in), da), kTol);
        EXPECT_LE(max_rel_diff(env->to_host(db_d, out * r), db), kTol);
    }
}

// ------------------------------------------------------------------------------------------------
TEST_F(GpuOps, LmHeadCrossEntropyMatchesCpu) {
    const int64_t N = 23, C = 64, V = 1000;
    auto h = random_vector(N * C, 25), emb = random_vector(V * C, 26, 0.3f);
    std::vector<int32_t> targets(N);
    for (int64_t i = 0; i < N; ++i) targets[i] = int32_t((i * 131 + 7) % V);
    const double grad_scale = 1.0 / 37.0;
    std::vector<float> dh(N * C);
    const double loss = cpu::lm_head_cross_entropy(dh.data(), h.data(), emb.data(), targets.data(), N, C, V,
                                                   grad_scale, 0, 0);
    auto h_d = env->to_device(h), e_d = env->to_device(emb);
    auto t_d = env->to_device(targets);
    auto dh_d = env->zeros<float>(N * C), ws = env->zeros<float>(7 * V);
    auto losses = env->zeros<double>(N), acc = env->zeros<double>(1);
    k::lm_head_cross_entropy(env->blas->get(), env->stream, losses.get(), dh_d.get(), ws.get(), h_d.get(), e_d.get(),
                             t_d.get(), N, C, V, static_cast<float>(grad_scale), 7);  // 4 chunks, last partial
    k::sum_losses(acc.get(), losses.get(), N, env->stream);
    EXPECT_LE(gputest::rel_diff(env->to_host(acc, 1)[0], loss), kTol);
    EXPECT_LE(max_rel_diff(env->to_host(dh_d, N * C), dh), kTol);
}

// ------------------------------------------------------------------------------------------------
TEST_F(GpuOps, AdamWIsBitIdenticalToCpu) {
    const int64_t n = 50001;
    auto p = random_vector(n, 27, 0.1f), m = random_vector(n, 28, 0.01f), g = random_vector(n, 30, 0.01f);
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = m[i] * m[i];
    engine::AdamWOptions o;
    o.weight_decay = 0.01;
    auto p_d = env->to_device(p), m_d = env->to_device(m), v_d = env->to_device(v), g_d = env->to_device(g);
    for (int64_t step = 1; step <= 3; ++step) {
        const double lr = 1e-4 * double(step);
        engine::adamw_step(p.data(), g.data(), m.data(), v.data(), n, step, lr, o);
        k::adamw_step(p_d.get(), g_d.get(), m_d.get(), v_d.get(), n,
                      k::adamw_scalars(step, lr, o.beta1, o.beta2, o.eps, o.weight_decay), env->stream);
    }
    EXPECT_EQ(env->to_host(p_d, n), p);
    EXPECT_EQ(env->to_host(m_d, n), m);
    EXPECT_EQ(env->to_host(v_d, n), v);
}

TEST_F(GpuOps, GlobalNormAndClipMatchCpu) {
    // segments like the adapter's: many tensors of different sizes, one of them > one slice
    std::vector<std::pair<int64_t, int64_t>> segs = {{0, 1000}, {1000, 20000}, {21000, 7}, {21007, 8193}};
    const int64_t n = 21007 + 8193;
    auto g = random_vector(n, 31, 0.02f);
    for (double max_norm : {1.0, 1e9}) {
        std::vector<float> want = g;
        const double norm = engine::global_grad_norm(want.data(), segs);
        const float coef = engine::clip_grad(want.data(), n, norm, max_norm);
        std::vector<int64_t> offs, counts;
        int64_t maxc = 0;
        for (auto [o, c] : segs) {
            offs.push_back(o);
            counts.push_back(c);
            maxc = std::max(maxc, c);
        }
        auto g_d = env->to_device(g);
        auto o_d = env->to_device(offs), c_d = env->to_device(counts);
        auto part = env->zeros<double>(k::global_norm_partials(maxc, int64_t(segs.size())));
        auto norm_d = env->zeros<double>(1);
        auto coef_d = env->zeros<float>(1);
        k::global_grad_norm(norm_d.get(), coef_d.get(), part.get(), g_d.get(), o_d.get(), c_d.get(),
                            int64_t(segs.size()), maxc, max_norm, env->stream);
        k::clip_grad(g_d.get(), n, coef_d.get(), env->stream);
        EXPECT_LE(gputest::rel_diff(env->to_host(norm_d, 1)[0], norm), 1e-12);  // both sum squares in double
        EXPECT_NEAR(env->to_host(coef_d, 1)[0], coef, 1e-6 * coef);
        EXPECT_LE(max_rel_diff(env->to_host(g_d, n), want), kTol);
    }
}

}  // namespace
