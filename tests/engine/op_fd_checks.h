#pragma once
// The finite-difference checks of the float64 CPU ops that both op suites run on the same shapes:
// test_backend_ops.cpp (the Float64Reference of its op table) and test_ops_gradcheck.cpp (which goes
// on to check more on the same inputs). Each problem draws its inputs through the suite's generator,
// and check() runs the op's backward against central differences of <forward, G> in every input.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "finite_differences.h"
#include "tandem/engine/ops.h"

namespace tandem::test {

// n draws of N(0, scale^2) from the calling suite's generator, in order.
using NormalDraws = std::function<Vec(size_t n, double scale)>;

// RMSNorm of layer norms (rows = tokens, C = hidden) and of q_norm/k_norm (rows = tokens*heads, C = head_dim);
// weights around 1.
struct RmsNormFd {
    static constexpr std::array<std::pair<int64_t, int64_t>, 2> kShapes{{{3, 7}, {12, 8}}};  // (rows, C)
    int64_t rows, C;
    Vec x, w, G, out, rstd;
    RmsNormFd(int64_t rows_, int64_t C_, const NormalDraws& normal)
        : rows(rows_), C(C_), x(normal(size_t(rows * C), 1.0)), w(normal(size_t(C), 0.5)),
          G(normal(size_t(rows * C), 1.0)), out(x.size()), rstd(size_t(rows)) {
        for (auto& v : w) v += 1.0;
    }
    double forward() {
        engine::ops::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), rows, C, 1e-6);
        return dot(out, G);
    }
    void check() {
        const auto f = [this] { return forward(); };
        f();
        Vec dx(x.size()), dw(w.size(), 0.0);
        engine::ops::rmsnorm_backward(dx.data(), dw.data(), G.data(), x.data(), w.data(), rstd.data(), rows, C);
        EXPECT_LT(rel_err(dx, numeric_grad(x, f)), kFdTol) << "dx rows=" << rows;
        EXPECT_LT(rel_err(dw, numeric_grad(w, f)), kFdTol) << "dweight rows=" << rows;
    }
};

// RoPE of 2 sequences of 5 tokens, 3 heads of head_dim 8 (theta 10000).
struct RopeFd {
    static constexpr int64_t B = 2, T = 5, H = 3, D = 8;
    Vec cos, sin, x, G, out;
    explicit RopeFd(const NormalDraws& normal)
        : cos(size_t(T * D)), sin(size_t(T * D)), x(normal(size_t(B * T * H * D), 1.0)), G(normal(x.size(), 1.0)),
          out(x.size()) {
        engine::ops::rope_tables(cos.data(), sin.data(), T, D, 10000.0);
    }
    double forward() {
        engine::ops::rope_forward(out.data(), x.data(), cos.data(), sin.data(), B, T, H, D);
        return dot(out, G);
    }
    void check() {
        Vec dx(x.size());
        engine::ops::rope_backward(dx.data(), G.data(), cos.data(), sin.data(), B, T, H, D);
        EXPECT_LT(rel_err(dx, numeric_grad(x, [this] { return forward(); })), kFdTol);
    }
};

// Causal attention of 2 sequences of 5 tokens (the second right-padded to 3), 4 query heads over 2 kv
// heads of head_dim 3; the gradients stay for the caller's own checks.
struct AttentionFd {
    static constexpr int64_t B = 2, T = 5, H = 4, KV = 2, D = 3;
    const std::vector<int32_t> lengths = {5, 3};
    Vec q, k, v, G, out, probs, dq, dk, dv;
    explicit AttentionFd(const NormalDraws& normal)
        : q(normal(size_t(B * T * H * D), 1.0)), k(normal(size_t(B * T * KV * D), 1.0)),
          v(normal(size_t(B * T * KV * D), 1.0)), G(normal(q.size(), 1.0)), out(q.size()), probs(size_t(B * H * T * T)),
          dq(q.size()), dk(k.size()), dv(v.size()) {}
    double forward() {
        engine::ops::attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), lengths.data(), B, T,
                                       H, KV, D);
        return dot(out, G);
    }
    void check() {
        const auto f = [this] { return forward(); };
        f();
        engine::ops::attention_backward(dq.data(), dk.data(), dv.data(), G.data(), q.data(), k.data(), v.data(),
                                        probs.data(), lengths.data(), B, T, H, KV, D);
        EXPECT_LT(rel_err(dq, numeric_grad(q, f)), kFdTol);
        EXPECT_LT(rel_err(dk, numeric_grad(k, f)), kFdTol);
        EXPECT_LT(rel_err(dv, numeric_grad(v, f)), kFdTol);
    }
};

// The SiLU gate over n elements, gates drawn with the given spread (silu's curved part and its tails).
struct SwigluFd {
    int64_t n;
    Vec g, u, G, out;
    SwigluFd(int64_t n_, double gate_scale, const NormalDraws& normal)
        : n(n_), g(normal(size_t(n), gate_scale)), u(normal(size_t(n), 1.0)), G(normal(size_t(n), 1.0)),
          out(size_t(n)) {}
    double forward() {
        engine::ops::swiglu_forward(out.data(), g.data(), u.data(), n);
        return dot(out, G);
    }
    void check() {
        const auto f = [this] { return forward(); };
        Vec dg(g.size()), du(u.size());
        engine::ops::swiglu_backward(dg.data(), du.data(), G.data(), g.data(), u.data(), n);
        EXPECT_LT(rel_err(dg, numeric_grad(g, f)), kFdTol);
        EXPECT_LT(rel_err(du, numeric_grad(u, f)), kFdTol);
    }
};

// The LoRA linear y = x w^T + (b (a dropout(x))) * scaling of N rows, in -> out, rank r; keep is the
// dropout mask (nullptr: none) whose kept elements are scaled by dscale. The gradients of the last
// check() stay for the caller's own checks.
struct LoraFd {
    int64_t N, in, out, r;
    double dscale, scaling;
    Vec x, w, a, b, G, y, t, dx, da, db;
    LoraFd(int64_t N_, int64_t in_, int64_t out_, int64_t r_, double dscale_, double scaling_, const NormalDraws& normal)
        : N(N_), in(in_), out(out_), r(r_), dscale(dscale_), scaling(scaling_), x(normal(size_t(N * in), 1.0)),
          w(normal(size_t(out * in), 1.0)), a(normal(size_t(r * in), 1.0)), b(normal(size_t(out * r), 1.0)),
          G(normal(size_t(N * out), 1.0)) {}
    double forward(const uint8_t* keep) {
        engine::ops::lora_linear_forward(y.data(), t.data(), x.data(), w.data(), a.data(), b.data(), keep, dscale,
                                         scaling, N, in, out, r);
        return dot(y, G);
    }
    void check(const uint8_t* keep) {
        y.assign(size_t(N * out), 0.0);
        t.assign(size_t(N * r), 0.0);
        const auto f = [this, keep] { return forward(keep); };
        f();
        dx.assign(x.size(), 0.0);
        da.assign(a.size(), 0.0);
        db.assign(b.size(), 0.0);
        engine::ops::lora_linear_backward(dx.data(), da.data(), db.data(), G.data(), x.data(), w.data(), a.data(),
                                          b.data(), t.data(), keep, dscale, scaling, N, in, out, r, false);
        EXPECT_LT(rel_err(dx, numeric_grad(x, f)), kFdTol) << (keep ? "with mask" : "no mask");
        EXPECT_LT(rel_err(da, numeric_grad(a, f)), kFdTol) << (keep ? "with mask" : "no mask");
        EXPECT_LT(rel_err(db, numeric_grad(b, f)), kFdTol) << (keep ? "with mask" : "no mask");
    }
};

}  // namespace tandem::test
