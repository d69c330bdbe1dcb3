#pragma once
// AVX-512 kernels for the CPU ops' row loops (internal to src/model/; ops.cpp calls them when
// simd::enabled(), else runs its scalar loops). Each kernel returns exactly the bits of the scalar
// loop it replaces, so the engine's numbers do not depend on which path ran:
//   - element-wise float arithmetic is the same IEEE operations in the same order (the engine is
//     built with -ffp-contract=off: no fused multiply-adds the scalar code does not have);
//   - exp is glibc's expf algorithm (x86-64 FMA variant, which std::exp calls on every CPU with
//     FMA and AVX2, i.e. every CPU these kernels run on) evaluated 8 doubles at a time with the same
//     fused operations, falling back to ::expf for the lanes outside its fast path (|x| >= 88, NaN);
//   - every double sum keeps its sequential order j = 0, 1, 2 ...: the vector lanes hold 8 ROWS, not
//     8 columns of one row (8 x 8 blocks are transposed in registers), so each row's running sum sees
//     the same additions in the same order as the scalar loop.
// test_backend_ops checks the bit identity kernel by kernel (SimdKernels.*), and
// test_engine_digest the whole engine's trajectories.
#include <cstdint>

namespace tandem::engine::simd {

// True when this CPU has AVX-512 F/DQ/BW/VL and FMA, and TANDEM_ENGINE_SIMD is not "off" (read once).
bool enabled();
// Tests: run the scalar loops (false) or the kernels (true, where supported) from now on; returns
// whether enabled() is now `on`. Not thread-safe: call between ops.
bool set_enabled_for_testing(bool on);

// Kernels below: only call when enabled(). Rows are given as pointers; `count` <= kLanes.
inline constexpr int kLanes = 8;

// acc = init; for j: acc = std::max(acc, x[j]); x[j] *= scale first when scale_first (attention's
// `(q k^T) * scaling` in place). Returns acc.
float max_fold(float* x, int64_t n, float init, float scale, bool scale_first);
// x[j] = expf(x[j] - m)
void exp_minus(float* x, int64_t n, float m);
// x[j] = x[j] * k
void scale(float* x, int64_t n, float k);
// expf of one value, the scalar twin of the vector exp (== ::expf)
float expf1(float x);

// out[r] = sum over j < n[r] of double(rows[r][j]), in j order.
void sum_rows(const float* const* rows, const int64_t* n, int count, double* out);
// The CE's single pass over `count` rows of length n: rows[r][j] = expf(rows[r][j] - m[r]) in place and
// out[r] = the sequential double sum of the new values.
void exp_sum_rows(float* const* rows, int64_t n, const float* m, int count, double* out);
// out[r] = sum over j < n[r] of double(a[r][j]) * double(b[r][j]), in j order (a == b: sum of squares).
void dot_rows(const float* const* a, const float* const* b, const int64_t* n, int count, double* out);
// out[r] = sum over j < n of (double(w[j]) * double(dy[r][j])) * double(x[r][j]), in j order.
void dot3_rows(const float* w, const float* const* dy, const float* const* x, int64_t n, int count, double* out);

// Dropout (dropout.cpp, ops.cpp), integer-exact: keep[i] = u(key, first + i) >= p with
// u = (mix64(key ^ (first + i)) >> 40) * 2^-24 (dropout.h), for i in [0, n).
void fill_dropout_keep(uint8_t* keep, int64_t n, uint64_t key, uint64_t first, double p);
// xd[i] = keep[i] ? x[i] * scale : 0
void apply_dropout(float* xd, const float* x, const uint8_t* keep, float scale, int64_t n);
// dx[i] += keep[i] ? dxd[i] * scale : 0
void add_dropped(float* dx, const float* dxd, const uint8_t* keep, float scale, int64_t n);

// Element-wise pieces of the ops (the same expressions as ops.cpp's scalar loops):
// o[c] = w[c] * (x[c] * r)
void rmsnorm_apply(float* o, const float* x, const float* w, float r, int64_t n);
// dx[c] (+)= r * (w[c] * dy[c]) - x[c] * k
void rmsnorm_grad(float* dx, const float* dy, const float* x, const float* w, float r, float k, int64_t n,
                  bool accumulate);
// row[j] = p[j] * (row[j] - d) * scale
void softmax_grad(float* row, const float* p, float d, float scale, int64_t n);
// out = (g / (1 + expf(-g))) * up
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
// sig = 1 / (1 + expf(-g)); dup = dout * (g * sig); dgate = dout * up * (sig * (1 + g * (1 - sig)))
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n);

}  // namespace tandem::engine::simd
