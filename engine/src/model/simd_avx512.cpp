// The AVX-512 kernels of simd.h. This file alone is compiled with -mavx512f/dq/bw/vl -mfma (and the
// engine's -ffp-contract=off); it is only entered after simd::enabled() checked the CPU. It includes
// nothing but intrinsics and C declarations, and keeps its helpers in an anonymous namespace, so no
// inline function compiled here for AVX-512 can be picked by the linker for a baseline caller.
#if defined(TANDEM_ENGINE_AVX512)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "simd.h"
#include "simd_expf_data.h"
#include "simd_kernels.h"

namespace tandem::engine::simd::avx512 {
namespace {

// exp of 8 floats (as doubles in, float out), fast path only.
inline __m256 exp8(__m256 x) {
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d inv = _mm512_set1_pd(kInvLn2N), shift = _mm512_set1_pd(kShift);
    const __m512d kds = _mm512_fmadd_pd(inv, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kds);
    const __m512d kd = _mm512_sub_pd(kds, shift);
    const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512i t0 = _mm512_load_si512(kTable), t1 = _mm512_load_si512(kTable + 8),
                  t2 = _mm512_load_si512(kTable + 16), t3 = _mm512_load_si512(kTable + 24);
    const __m512i lo = _mm512_permutex2var_epi64(t0, idx, t1), hi = _mm512_permutex2var_epi64(t2, idx, t3);
    const __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
    const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(kC0), r, _mm512_set1_pd(kC1));
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(kC2), _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    y = _mm512_mul_pd(y, s);
    return _mm512_cvtpd_ps(y);
}

// Lanes of 16 floats outside expf's fast path (|x| >= 88 by glibc's test on the top bits, NaN, inf).
inline __mmask16 slow_lanes(__m512 x) {
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
    return _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x42b00000));
}

// exp of 16 floats; lanes outside the fast path go through ::expf.
inline __m512 exp16(__m512 x) {
    const __m256 lo = exp8(_mm512_castps512_ps256(x));
    const __m256 hi = exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    __m512 y = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
    const __mmask16 slow = slow_lanes(x);
    if (slow) {
        alignas(64) float xs[16], ys[16];
        _mm512_store_ps(xs, x);
        _mm512_store_ps(ys, y);
        for (int i = 0; i < 16; ++i)
            if (slow & (1u << i)) ys[i] = ::expf(xs[i]);
        y = _mm512_load_ps(ys);
    }
    return y;
}

// ---- 8 x 8 transpose of doubles: in r[k] = row k (8 consecutive columns), out c[k] = column k.
inline void transpose8(const __m512d r[8], __m512d c[8]) {
    __m512d t[8], u[8];
    for (int k = 0; k < 4; ++k) {
        t[2 * k] = _mm512_unpacklo_pd(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_pd(r[2 * k], r[2 * k + 1]);
    }
    for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
        const __m512d* s = t + 4 * h;
        u[4 * h + 0] = _mm512_shuffle_f64x2(s[0], s[2], 0x88);
        u[4 * h + 1] = _mm512_shuffle_f64x2(s[1], s[3], 0x88);
        u[4 * h + 2] = _mm512_shuffle_f64x2(s[0], s[2], 0xdd);
        u[4 * h + 3] = _mm512_shuffle_f64x2(s[1], s[3], 0xdd);
    }
    for (int k = 0; k < 4; ++k) {
        c[k] = _mm512_shuffle_f64x2(u[k], u[4 + k], 0x88);
        c[k + 4] = _mm512_shuffle_f64x2(u[k], u[4 + k], 0xdd);
    }
}

// acc[r] += term(r, j + 0), then term(r, j + 1), ... term(r, j + 7): `terms` gives, per row, the
// 8 doubles of columns j..j+7. Rows past `count` add zeros (their lanes are never read).
template <class Terms>
inline __m512d add_columns(__m512d acc, int count, Terms&& terms) {
    __m512d r[8], c[8];
    for (int k = 0; k < 8; ++k) r[k] = k < count ? terms(k) : _mm512_setzero_pd();
    transpose8(r, c);
    for (int k = 0; k < 8; ++k) acc = _mm512_add_pd(acc, c[k]);
    return acc;
}

// Sequential double sums of `count` rows: columns [0, common) 8 at a time in the lanes, then each
// row's remaining columns [common, n[r]) one by one (term1(r, j)), continuing the same running sum.
template <class Terms8, class Term1>
inline void lane_sums(int count, const int64_t* n, double* out, Terms8&& terms8, Term1&& term1) {
    int64_t common = n[0];
    for (int k = 1; k < count; ++k) common = n[k] < common ? n[k] : common;
    __m512d acc = _mm512_setzero_pd();
    int64_t j = 0;
    for (; j + 8 <= common; j += 8) acc = add_columns(acc, count, [&](int k) { return terms8(k, j); });
    alignas(64) double s[8];
    _mm512_store_pd(s, acc);
    for (int k = 0; k < count; ++k) {
        double v = s[k];
        for (int64_t i = j; i < n[k]; ++i) v += term1(k, i);
        out[k] = v;
    }
}

inline __m512d load8d(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
// -x (the sign bit flipped, as the scalar unary minus)
inline __m512 negate(__m512 x) { return _mm512_xor_ps(x, _mm512_set1_ps(-0.0f)); }

}  // namespace

namespace {
// SplitMix64's mix on 8 lanes (dropout.cpp mix64), exact 64-bit integer arithmetic.
inline __m512i mix64x8(__m512i z) {
    z = _mm512_add_epi64(z, _mm512_set1_epi64(int64_t(0x9E3779B97F4A7C15ULL)));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), _mm512_set1_epi64(int64_t(0xBF58476D1CE4E5B9ULL)));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), _mm512_set1_epi64(int64_t(0x94D049BB133111EBULL)));
    return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}
}  // namespace

void fill_dropout_keep(uint8_t* keep, int64_t n, uint64_t key, uint64_t first, double p) {
    // u >= p  <=>  (r >> 40) >= ceil(p * 2^24): u = (r >> 40) * 2^-24 is exact, and so is the
    // comparison of the integer with the smallest integer k for which k * 2^-24 >= p
    const double scaled = p * 16777216.0;  // exact: a power-of-two multiple
    double threshold_d = __builtin_ceil(scaled);
    if (threshold_d < 0) threshold_d = 0;
    // p > 1 or NaN: u >= p never holds (a threshold no 24-bit value reaches)
    const uint64_t threshold = !(threshold_d <= 16777216.0) ? (1ULL << 25) : uint64_t(threshold_d);
    const __m512i kv = _mm512_set1_epi64(int64_t(key)), th = _mm512_set1_epi64(int64_t(threshold));
    const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m512i idx = _mm512_add_epi64(_mm512_set1_epi64(int64_t(first + uint64_t(i))), lane);
        const __m512i r = _mm512_srli_epi64(mix64x8(_mm512_xor_si512(kv, idx)), 40);
        const __mmask8 k = _mm512_cmpge_epu64_mask(r, th);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(keep + i), _mm_maskz_set1_epi8(k, 1));
    }
    for (; i < n; ++i) {
        uint64_t z = key ^ (first + uint64_t(i));
        z += 0x9E3779B97F4A7C15ULL;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        keep[i] = double(z >> 40) * (1.0 / 16777216.0) >= p ? 1 : 0;
    }
}

void apply_dropout(float* xd, const float* x, const uint8_t* keep, float s, int64_t n) {
    const __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __mmask16 k = _mm_test_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i*>(keep + i)), _mm_set1_epi8(-1));
        _mm512_storeu_ps(xd + i, _mm512_maskz_mul_ps(k, _mm512_loadu_ps(x + i), sv));
    }
    for (; i < n; ++i) xd[i] = keep[i] ? x[i] * s : 0.0f;
}

void add_dropped(float* dx, const float* dxd, const uint8_t* keep, float s, int64_t n) {
    const __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __mmask16 k = _mm_test_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i*>(keep + i)), _mm_set1_epi8(-1));
        _mm512_storeu_ps(dx + i, _mm512_add_ps(_mm512_loadu_ps(dx + i), _mm512_maskz_mul_ps(k, _mm512_loadu_ps(dxd + i), sv)));
    }
    for (; i < n; ++i) dx[i] += keep[i] ? dxd[i] * s : 0.0f;
}

float max_fold(float* x, int64_t n, float init, float s, bool scale_first) {
    __m512 acc = _mm512_set1_ps(init);
    const __m512 sv = _mm512_set1_ps(s);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_loadu_ps(x + j);
        if (scale_first) {
            v = _mm512_mul_ps(v, sv);
            _mm512_storeu_ps(x + j, v);
        }
        acc = _mm512_max_ps(v, acc);  // v > acc ? v : acc == std::max(acc, v), NaN v keeps acc
    }
    // Lanes hold maxima of disjoint subsets; combining them in any order gives the same value
    // (up to the sign of a zero maximum, which no result depends on: x - (+0) and x - (-0) have the
    // same exp, and the loss adds the maximum to a log).
    float m = _mm512_reduce_max_ps(acc);
    for (; j < n; ++j) {
        if (scale_first) x[j] = x[j] * s;
        m = m < x[j] ? x[j] : m;
    }
    return m;
}

void exp_minus(float* x, int64_t n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(x + j, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv)));
    for (; j < n; ++j) x[j] = ::expf(x[j] - m);
}

void scale(float* x, int64_t n, float k) {
    const __m512 kv = _mm512_set1_ps(k);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_loadu_ps(x + j), kv));
    for (; j < n; ++j) x[j] = x[j] * k;
}

void sum_rows(const float* const* rows, const int64_t* n, int count, double* out) {
    lane_sums(count, n, out, [&](int k, int64_t j) { return load8d(rows[k] + j); },
              [&](int k, int64_t j) { return double(rows[k][j]); });
}

void exp_sum_rows(float* const* rows, int64_t n, const float* m, int count, double* out) {
    __m512 mv[kLanes];
    for (int k = 0; k < count; ++k) mv[k] = _mm512_set1_ps(m[k]);
    __m512d acc = _mm512_setzero_pd();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e[kLanes];
        for (int k = 0; k < count; ++k) {
            e[k] = exp16(_mm512_sub_ps(_mm512_loadu_ps(rows[k] + j), mv[k]));
            _mm512_storeu_ps(rows[k] + j, e[k]);
        }
        acc = add_columns(acc, count, [&](int k) { return _mm512_cvtps_pd(_mm512_castps512_ps256(e[k])); });
        acc = add_columns(acc, count, [&](int k) {
            return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e[k]), 1)));
        });
    }
    alignas(64) double s[8];
    _mm512_store_pd(s, acc);
    for (int k = 0; k < count; ++k) {
        double v = s[k];
        for (int64_t i = j; i < n; ++i) {
            rows[k][i] = ::expf(rows[k][i] - m[k]);
            v += double(rows[k][i]);
        }
        out[k] = v;
    }
}

void dot_rows(const float* const* a, const float* const* b, const int64_t* n, int count, double* out) {
    lane_sums(count, n, out, [&](int k, int64_t j) { return _mm512_mul_pd(load8d(a[k] + j), load8d(b[k] + j)); },
              [&](int k, int64_t j) { return double(a[k][j]) * double(b[k][j]); });
}

void dot3_rows(const float* w, const float* const* dy, const float* const* x, int64_t n, int count, double* out) {
    int64_t len[kLanes];
    for (int k = 0; k < count; ++k) len[k] = n;
    lane_sums(count, len, out,
              [&](int k, int64_t j) { return _mm512_mul_pd(_mm512_mul_pd(load8d(w + j), load8d(dy[k] + j)), load8d(x[k] + j)); },
              [&](int k, int64_t j) { return double(w[j]) * double(dy[k][j]) * double(x[k][j]); });
}

void rmsnorm_apply(float* o, const float* x, const float* w, float r, int64_t n) {
    const __m512 rv = _mm512_set1_ps(r);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(o + j, _mm512_mul_ps(_mm512_loadu_ps(w + j), _mm512_mul_ps(_mm512_loadu_ps(x + j), rv)));
    for (; j < n; ++j) o[j] = w[j] * (x[j] * r);
}

void rmsnorm_grad(float* dx, const float* dy, const float* x, const float* w, float r, float k, int64_t n,
                  bool accumulate) {
    const __m512 rv = _mm512_set1_ps(r), kv = _mm512_set1_ps(k);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 g = _mm512_sub_ps(_mm512_mul_ps(rv, _mm512_mul_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(dy + j))),
                                       _mm512_mul_ps(_mm512_loadu_ps(x + j), kv));
        _mm512_storeu_ps(dx + j, accumulate ? _mm512_add_ps(_mm512_loadu_ps(dx + j), g) : g);
    }
    for (; j < n; ++j) {
        const float g = r * (w[j] * dy[j]) - x[j] * k;
        dx[j] = accumulate ? dx[j] + g : g;
    }
}

void softmax_grad(float* row, const float* p, float d, float s, int64_t n) {
    const __m512 dv = _mm512_set1_ps(d), sv = _mm512_set1_ps(s);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(row + j, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(p + j), _mm512_sub_ps(_mm512_loadu_ps(row + j), dv)), sv));
    for (; j < n; ++j) row[j] = p[j] * (row[j] - d) * s;
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 e = exp16(negate(g));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
    }
    for (; i < n; ++i) {
        const float g = gate[i];
        out[i] = (g / (1.0f + ::expf(-g))) * up[i];
    }
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i), d = _mm512_loadu_ps(dout + i);
        const __m512 sig = _mm512_div_ps(one, _mm512_add_ps(one, exp16(negate(g))));
        _mm512_storeu_ps(dup + i, _mm512_mul_ps(d, _mm512_mul_ps(g, sig)));
        const __m512 dsig = _mm512_mul_ps(sig, _mm512_add_ps(one, _mm512_mul_ps(g, _mm512_sub_ps(one, sig))));
        _mm512_storeu_ps(dgate + i, _mm512_mul_ps(_mm512_mul_ps(d, _mm512_loadu_ps(up + i)), dsig));
    }
    for (; i < n; ++i) {
        const float g = gate[i];
        const float sig = 1.0f / (1.0f + ::expf(-g));
        const float silu = g * sig;
        dup[i] = dout[i] * silu;
        dgate[i] = dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
    }
}

}  // namespace tandem::engine::simd::avx512
#endif  // TANDEM_ENGINE_AVX512
