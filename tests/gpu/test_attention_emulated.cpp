// The attention kernels (kernels/src/attention.cuh) run on the host through
// kernel_emulation.h — every block of the real launch geometry, 128 fiber threads each — against
// the CPU op (label `unit`: no GPU needed). What this checks: the tiling and index arithmetic, the
// causal and padding masks on partial tiles, the GQA head mapping, lse, the zero gradients of keys
// nobody sees, the barrier and cp.async wait placement (copies delivered as late and as early as the
// hardware may, threads run forwards and backwards between barriers; every schedule must give the
// same bits), bounds of every asynchronous read and of the writes (guard zones around the outputs).
// What it cannot check: the device compiler, cp.async's hardware behaviour, timing, shared-memory
// capacity and register limits (ptxas and test_gpu_ops on a GPU do).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernel_emulation.h"  // first: attention.cuh then takes its primitives from it
#include "attention.cuh"
#include "attention_cases.h"
#include "tandem/engine/ops.h"

namespace {

namespace cpu = tandem::engine::ops;
namespace attn = tandem::kernels::attention;
using Emu = attn::Emulator;

constexpr double kTol = 1e-5;  // as test_gpu_ops: relative to the tensor's largest magnitude
constexpr size_t kGuard = 64;  // floats of guard zone before and after every output
constexpr float kCanary = -12345.5f;

std::vector<float> random_vector(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

double max_rel_diff(const float* got, const std::vector<float>& want) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::fabs(double(got[i]) - double(want[i])));
        mag = std::max(mag, std::fabs(double(want[i])));
    }
    return mag > 0.0 ? diff / mag : diff;
}

// An output array with canary-filled guard zones on both sides; 16-byte aligned data.
struct Guarded {
    explicit Guarded(size_t n) : n(n), mem(n + 2 * kGuard, kCanary) {}
    float* data() { return mem.data() + kGuard; }
    bool guards_intact() const {
        for (size_t i = 0; i < kGuard; ++i)
            if (mem[i] != kCanary || mem[kGuard + n + i] != kCanary) return false;
        return true;
    }
    std::vector<float> values() const { return {mem.begin() + kGuard, mem.begin() + long(kGuard + n)}; }
    size_t n;
    std::vector<float> mem;
};

using Case = tandem::gputest::AttnCase;
using tandem::gputest::attn_name;

// One schedule of the emulator: copy timing and thread order.
struct Schedule {
    Emu::Copies copies;
    bool reverse;
};
const Schedule kSchedules[] = {{Emu::Copies::Late, false}, {Emu::Copies::Early, true},
                               {Emu::Copies::Early, false}, {Emu::Copies::Late, true}};

// Runs every block of a grid through the emulator.
void run_grid(int64_t gx, int64_t gy, int threads, size_t smem_floats, const Schedule& s,
              const std::function<void()>& kernel) {
    for (int64_t y = 0; y < gy; ++y)
        for (int64_t x = 0; x < gx; ++x)
            attn::emulator().run_block(kernel, int(x), int(y), threads, smem_floats, s.copies, s.reverse);
}

template <int D>
void check_case(const Case& c) {
    SCOPED_TRACE(attn_name(c));
    const int64_t nq = c.B * c.T * c.H * D, nk = c.B * c.T * c.KV * D, nrow = c.B * c.H * c.T;
    const auto q = random_vector(size_t(nq), 12), k = random_vector(size_t(nk), 13), v = random_vector(size_t(nk), 14),
               dout = random_vector(size_t(nq), 15);
    std::vector<float> out(static_cast<size_t>(nq)), probs(static_cast<size_t>(c.B * c.H * c.T * c.T)),
        dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nk)), dv(static_cast<size_t>(nk));
    cpu::attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), c.lengths.data(), c.B, c.T, c.H,
                           c.KV, int64_t(D));
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), probs.data(),
                            c.lengths.data(), c.B, c.T, c.H, c.KV, int64_t(D));
    // the reference lse (double) and delta = rowsum(dout * out), as the delta kernel computes it
    std::vector<float> lse_ref(static_cast<size_t>(nrow)), delta(static_cast<size_t>(nrow));
    const double scale = 1.0 / std::sqrt(double(D));
    for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.H; ++h)
            for (int64_t i = 0; i < c.T; ++i) {
                const int64_t g = h / (c.H / c.KV), keys = std::min<int64_t>(i + 1, c.lengths[size_t(b)]);
                std::vector<double> sc(static_cast<size_t>(keys));
                double mx = -INFINITY;
                for (int64_t j = 0; j < keys; ++j) {
                    double s = 0.0;
                    for (int d = 0; d < D; ++d)
                        s += double(q[size_t(((b * c.T + i) * c.H + h) * D + d)]) *
                             double(k[size_t(((b * c.T + j) * c.KV + g) * D + d)]);
                    sc[size_t(j)] = s * scale;
                    mx = std::max(mx, sc[size_t(j)]);
                }
                double sum = 0.0;
                for (double s : sc) sum += std::exp(s - mx);
                lse_ref[size_t((b * c.H + h) * c.T + i)] = float(mx + std::log(sum));
                double dot = 0.0;
                for (int d = 0; d < D; ++d) {
                    const size_t at = size_t(((b * c.T + i) * c.H + h) * D + d);
                    dot += double(dout[at]) * double(out[at]);
                }
                delta[size_t((b * c.H + h) * c.T + i)] = float(dot);
            }

    const attn::Grid qg = attn::query_grid(c.B, c.T, c.H, c.KV), kg = attn::key_grid(c.B, c.T, c.KV);
    const float fscale = 1.0f / std::sqrt(float(D));
    std::vector<float> first_out, first_lse, first_dq, first_dk, first_dv;
    for (const Schedule& s : kSchedules) {
        SCOPED_TRACE(std::string(s.copies == Emu::Copies::Late ? "late" : "early") + " copies, " +
                     (s.reverse ? "reverse" : "forward") + " thread order");
        Emu& e = attn::emulator();
        e.clear_errors();
        e.clear_reads();
        for (const std::vector<float>* a : {&q, &k, &v, &dout}) e.allow_reads(a->data(), a->size() * sizeof(float));
        Guarded o{size_t(nq)}, lse{size_t(nrow)}, gq{size_t(nq)}, gk{size_t(nk)}, gv{size_t(nk)};
        run_grid(qg.x, qg.y, attn::kThreads, size_t(attn::forward_smem_floats<D>()), s, [&] {
            attn::forward_kernel<D>(o.data(), lse.data(), q.data(), k.data(), v.data(), c.lengths.data(), int(c.T),
                                  int(c.H), int(c.KV), qg.heads, fscale);
        });
        // the backward recomputes from the emulated forward's lse, as on the device
        const std::vector<float> fwd_lse = lse.values();
        run_grid(qg.x, qg.y, attn::kThreads, size_t(attn::dq_smem_floats<D>()), s, [&] {
            attn::dq_kernel<D>(gq.data(), dout.data(), q.data(), k.data(), v.data(), fwd_lse.data(), delta.data(),
                             c.lengths.data(), int(c.T), int(c.H), int(c.KV), qg.heads, fscale);
        });
        run_grid(kg.x, kg.y, attn::kDkvThreads, size_t(attn::dkv_smem_floats<D>()), s, [&] {
            attn::dkv_kernel<D>(gk.data(), gv.data(), dout.data(), q.data(), k.data(), v.data(), fwd_lse.data(),
                              delta.data(), c.lengths.data(), int(c.T), int(c.H), int(c.KV), fscale);
        });
        for (const std::string& err : e.errors()) ADD_FAILURE() << err;
        for (Guarded* g : {&o, &lse, &gq, &gk, &gv}) EXPECT_TRUE(g->guards_intact()) << "a write outside its tensor";
        EXPECT_LE(max_rel_diff(o.data(), out), kTol) << "out";
        EXPECT_LE(max_rel_diff(lse.data(), lse_ref), kTol) << "lse";
        EXPECT_LE(max_rel_diff(gq.data(), dq), kTol) << "dq";
        EXPECT_LE(max_rel_diff(gk.data(), dk), kTol) << "dk";
        EXPECT_LE(max_rel_diff(gv.data(), dv), kTol) << "dv";
        if (first_out.empty()) {
            first_out = o.values();
            first_lse = lse.values();
            first_dq = gq.values();
            first_dk = gk.values();
            first_dv = gv.values();
        } else {  // fixed reduction orders: the schedule changes no bit
            EXPECT_EQ(o.values(), first_out);
            EXPECT_EQ(lse.values(), first_lse);
            EXPECT_EQ(gq.values(), first_dq);
            EXPECT_EQ(gk.values(), first_dk);
            EXPECT_EQ(gv.values(), first_dv);
        }
    }
}

void check(const Case& c) {
    switch (c.D) {
        case 32: check_case<32>(c); break;
        case 64: check_case<64>(c); break;
        default: check_case<128>(c); break;
    }
}

class AttentionEmulated : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionEmulated, MatchesCpuUnderEverySchedule) { check(GetParam()); }

// test_gpu_ops' shapes, the op table's head_dim 32/64 shapes, GQA 8:1 (8 heads per block, 8
// positions each), several key blocks with padding in the middle of a tile, a length-1 sequence.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionEmulated,
                         ::testing::Values(Case{2, 45, 4, 2, 64, {45, 30}},     // padding, GQA 2:1
                                           Case{1, 70, 2, 2, 32, {70}},          // MHA, 2 forward key tiles
                                           Case{2, 33, 16, 8, 128, {1, 33}},     // Qwen3 heads, length 1
                                           Case{1, 129, 4, 1, 128, {100}},       // MQA (4:1), tile + 1
                                           Case{3, 7, 3, 3, 32, {7, 2, 5}},      // 3 heads: 1 per block
                                           Case{1, 1, 2, 2, 32, {1}},            // one token
                                           Case{1, 75, 8, 1, 64, {61}},          // GQA 8:1
                                           Case{2, 150, 4, 2, 128, {150, 97}}),  // 3 key blocks, 5 dq tiles
                         [](const ::testing::TestParamInfo<Case>& i) { return attn_name(i.param); });

TEST(AttentionGeometry, HeadsPerBlockDivideTheGroup) {
    EXPECT_EQ(attn::heads_per_block(1), 1);
    EXPECT_EQ(attn::heads_per_block(2), 2);
    EXPECT_EQ(attn::heads_per_block(3), 1);
    EXPECT_EQ(attn::heads_per_block(4), 4);
    EXPECT_EQ(attn::heads_per_block(6), 2);
    EXPECT_EQ(attn::heads_per_block(8), 8);
    EXPECT_EQ(attn::heads_per_block(16), 8);
    const attn::Grid g = attn::query_grid(2, 512, 16, 8);  // the benchmark's shape
    EXPECT_EQ(g.heads, 2);
    EXPECT_EQ(g.x, 16);
    EXPECT_EQ(g.y, 16);
    EXPECT_EQ(attn::forward_smem_floats<128>() * 4, 112 * 1024);  // two blocks per 228 KB SM
    EXPECT_EQ(attn::dq_smem_floats<128>() * 4, 104 * 1024);
    EXPECT_EQ(attn::dkv_smem_floats<128>() * 4, 160 * 1024);  // one 8-warp block per SM
}

}  // namespace
