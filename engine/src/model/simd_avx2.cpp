// The AVX2 + FMA kernels of simd.h, for CPUs without AVX-512 (AMD before Zen 4, Intel client parts): the
// same operations as simd_avx512.cpp on 8 floats / 4 doubles a register, so the same bits as the scalar
// loops. This file alone is compiled with -mavx2 -mfma (and the engine's -ffp-contract=off); it is only
// entered after simd::kernels() checked the CPU. It includes nothing but intrinsics and C declarations,
// and keeps its helpers in an anonymous namespace, so no inline function compiled here for AVX2 can be
// picked by the linker for a baseline caller.
#if defined(TANDEM_ENGINE_AVX512)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "simd.h"
#include "simd_expf_data.h"
#include "simd_kernels.h"

namespace tandem::engine::simd::avx2 {
namespace {

// exp of 4 floats (as doubles in, float out), fast path only: simd_expf_data.h's steps, 4 lanes.
inline __m128 exp4(__m128 x) {
    const __m256d xd = _mm256_cvtps_pd(x);
    const __m256d inv = _mm256_set1_pd(kInvLn2N), shift = _mm256_set1_pd(kShift);
    const __m256d kds = _mm256_fmadd_pd(inv, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kds);
    const __m256d kd = _mm256_sub_pd(kds, shift);
    const __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    const __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kTable), idx, 8);
    const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
    const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(kC2), _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    y = _mm256_mul_pd(y, s);
    return _mm256_cvtpd_ps(y);
}

// Lanes of 8 floats outside expf's fast path (|x| >= 88 by glibc's test on the top bits, NaN, inf), as
// a bit mask. The sign bit is cleared first, so a signed compare is the unsigned one.
inline int slow_lanes(__m256 x) {
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
    return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x42b00000 - 1))));
}

// exp of 8 floats; lanes outside the fast path go through ::expf.
inline __m256 exp8(__m256 x) {
    __m256 y = _mm256_set_m128(exp4(_mm256_extractf128_ps(x, 1)), exp4(_mm256_castps256_ps128(x)));
    const int slow = slow_lanes(x);
    if (slow) {
        alignas(32) float xs[8], ys[8];
        _mm256_store_ps(xs, x);
        _mm256_store_ps(ys, y);
        for (int i = 0; i < 8; ++i)
            if (slow & (1 << i)) ys[i] = ::expf(xs[i]);
        y = _mm256_load_ps(ys);
    }
    return y;
}

// 8 consecutive doubles of one row: columns 0-3 and 4-7.
struct Double8 {
    __m256d lo, hi;
};
inline Double8 load8d(const float* p) {
    return {_mm256_cvtps_pd(_mm_loadu_ps(p)), _mm256_cvtps_pd(_mm_loadu_ps(p + 4))};
}
inline Double8 widen(__m256 v) {
    return {_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))};
}
inline Double8 mul(Double8 a, Double8 b) { return {_mm256_mul_pd(a.lo, b.lo), _mm256_mul_pd(a.hi, b.hi)}; }

// 4 x 4 transpose of doubles: in a..d = rows, out c[k] = column k.
inline void transpose4(__m256d a, __m256d b, __m256d c, __m256d d, __m256d out[4]) {
    const __m256d t0 = _mm256_unpacklo_pd(a, b), t1 = _mm256_unpackhi_pd(a, b);  // a0 b0 a2 b2 | a1 b1 a3 b3
    const __m256d t2 = _mm256_unpacklo_pd(c, d), t3 = _mm256_unpackhi_pd(c, d);
    out[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
    out[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
    out[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
    out[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}

// Running sums of 8 rows: rows 0-3 in acc[0], rows 4-7 in acc[1].
struct RowSums {
    __m256d acc[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
};

// sums[r] += term(r, j + 0), then term(r, j + 1), ... term(r, j + 7): `terms` gives, per row, the 8
// doubles of columns j..j+7. Rows past `count` add zeros (their lanes are never read).
template <class Terms>
inline void add_columns(RowSums& sums, int count, Terms&& terms) {
    Double8 r[8];
    for (int k = 0; k < 8; ++k) r[k] = k < count ? terms(k) : Double8{_mm256_setzero_pd(), _mm256_setzero_pd()};
    for (int h = 0; h < 2; ++h) {  // rows 0-3, then 4-7
        const Double8* b = r + 4 * h;
        __m256d c[4];
        transpose4(b[0].lo, b[1].lo, b[2].lo, b[3].lo, c);  // columns 0-3, in order
        for (int k = 0; k < 4; ++k) sums.acc[h] = _mm256_add_pd(sums.acc[h], c[k]);
        transpose4(b[0].hi, b[1].hi, b[2].hi, b[3].hi, c);  // then columns 4-7
        for (int k = 0; k < 4; ++k) sums.acc[h] = _mm256_add_pd(sums.acc[h], c[k]);
    }
}

inline void store(const RowSums& sums, double s[8]) {
    _mm256_storeu_pd(s, sums.acc[0]);
    _mm256_storeu_pd(s + 4, sums.acc[1]);
}

// Sequential double sums of `count` rows: columns [0, common) 8 at a time in the lanes, then each
// row's remaining columns [common, n[r]) one by one (term1(r, j)), continuing the same running sum.
template <class Terms8, class Term1>
inline void lane_sums(int count, const int64_t* n, double* out, Terms8&& terms8, Term1&& term1) {
    int64_t common = n[0];
    for (int k = 1; k < count; ++k) common = n[k] < common ? n[k] : common;
    RowSums sums;
    int64_t j = 0;
    for (; j + 8 <= common; j += 8) add_columns(sums, count, [&](int k) { return terms8(k, j); });
    double s[8];
    store(sums, s);
    for (int k = 0; k < count; ++k) {
        double v = s[k];
        for (int64_t i = j; i < n[k]; ++i) v += term1(k, i);
        out[k] = v;
    }
}

// -x (the sign bit flipped, as the scalar unary minus)
inline __m256 negate(__m256 x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }

// keep[i..i+7] != 0 as 8 all-ones / all-zeros float lanes
inline __m256 keep_mask(const uint8_t* keep) {
    const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(keep)));
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(k, _mm256_setzero_si256()));
}

// a * b mod 2^64 on 4 lanes (AVX2 has no 64-bit multiply): the three 32 x 32 partial products that
// reach the low 64 bits, exact integer arithmetic.
inline __m256i mullo64(__m256i a, __m256i b) {
    const __m256i low = _mm256_mul_epu32(a, b);
    const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                           _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
}

// SplitMix64's mix on 4 lanes (dropout.cpp mix64).
inline __m256i mix64x4(__m256i z) {
    z = _mm256_add_epi64(z, _mm256_set1_epi64x(int64_t(0x9E3779B97F4A7C15ULL)));
    z = mullo64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), _mm256_set1_epi64x(int64_t(0xBF58476D1CE4E5B9ULL)));
    z = mullo64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), _mm256_set1_epi64x(int64_t(0x94D049BB133111EBULL)));
    return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

}  // namespace

void fill_dropout_keep(uint8_t* keep, int64_t n, uint64_t key, uint64_t first, double p) {
    // u >= p  <=>  (r >> 40) >= ceil(p * 2^24), as in simd_avx512.cpp
    const double scaled = p * 16777216.0;  // exact: a power-of-two multiple
    double threshold_d = __builtin_ceil(scaled);
    if (threshold_d < 0) threshold_d = 0;
    // p > 1 or NaN: u >= p never holds (a threshold no 24-bit value reaches)
    const uint64_t threshold = !(threshold_d <= 16777216.0) ? (1ULL << 25) : uint64_t(threshold_d);
    // r >= threshold <=> r > threshold - 1: both below 2^26, so the signed compare is exact (-1 when 0)
    const __m256i kv = _mm256_set1_epi64x(int64_t(key)), below = _mm256_set1_epi64x(int64_t(threshold) - 1);
    const __m256i lane = _mm256_set_epi64x(3, 2, 1, 0);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m256i idx = _mm256_add_epi64(_mm256_set1_epi64x(int64_t(first + uint64_t(i))), lane);
        const __m256i r = _mm256_srli_epi64(mix64x4(_mm256_xor_si256(kv, idx)), 40);
        const int bits = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(r, below)));
        for (int l = 0; l < 4; ++l) keep[i + l] = uint8_t((bits >> l) & 1);
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
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)  // a dropped lane is +0, as the scalar `keep ? x * s : 0`
        _mm256_storeu_ps(xd + i, _mm256_and_ps(keep_mask(keep + i), _mm256_mul_ps(_mm256_loadu_ps(x + i), sv)));
    for (; i < n; ++i) xd[i] = keep[i] ? x[i] * s : 0.0f;
}

void add_dropped(float* dx, const float* dxd, const uint8_t* keep, float s, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 add = _mm256_and_ps(keep_mask(keep + i), _mm256_mul_ps(_mm256_loadu_ps(dxd + i), sv));
        _mm256_storeu_ps(dx + i, _mm256_add_ps(_mm256_loadu_ps(dx + i), add));
    }
    for (; i < n; ++i) dx[i] += keep[i] ? dxd[i] * s : 0.0f;
}

float max_fold(float* x, int64_t n, float init, float s, bool scale_first) {
    __m256 acc = _mm256_set1_ps(init);
    const __m256 sv = _mm256_set1_ps(s);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        if (scale_first) {
            v = _mm256_mul_ps(v, sv);
            _mm256_storeu_ps(x + j, v);
        }
        acc = _mm256_max_ps(v, acc);  // v > acc ? v : acc == std::max(acc, v), NaN v keeps acc
    }
    // Lanes hold maxima of disjoint subsets; combining them in any order gives the same value (as in
    // simd_avx512.cpp: only the sign of a zero maximum could differ, which no result reads).
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    float m = lanes[0];
    for (int l = 1; l < 8; ++l) m = lanes[l] > m ? lanes[l] : m;
    for (; j < n; ++j) {
        if (scale_first) x[j] = x[j] * s;
        m = m < x[j] ? x[j] : m;
    }
    return m;
}

void exp_minus(float* x, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv)));
    for (; j < n; ++j) x[j] = ::expf(x[j] - m);
}

void scale(float* x, int64_t n, float k) {
    const __m256 kv = _mm256_set1_ps(k);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), kv));
    for (; j < n; ++j) x[j] = x[j] * k;
}

void sum_rows(const float* const* rows, const int64_t* n, int count, double* out) {
    lane_sums(count, n, out, [&](int k, int64_t j) { return load8d(rows[k] + j); },
              [&](int k, int64_t j) { return double(rows[k][j]); });
}

void exp_sum_rows(float* const* rows, int64_t n, const float* m, int count, double* out) {
    __m256 mv[kLanes];
    for (int k = 0; k < count; ++k) mv[k] = _mm256_set1_ps(m[k]);
    RowSums sums;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e[kLanes];
        for (int k = 0; k < count; ++k) {
            e[k] = exp8(_mm256_sub_ps(_mm256_loadu_ps(rows[k] + j), mv[k]));
            _mm256_storeu_ps(rows[k] + j, e[k]);
        }
        add_columns(sums, count, [&](int k) { return widen(e[k]); });
    }
    double s[8];
    store(sums, s);
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
    lane_sums(count, n, out, [&](int k, int64_t j) { return mul(load8d(a[k] + j), load8d(b[k] + j)); },
              [&](int k, int64_t j) { return double(a[k][j]) * double(b[k][j]); });
}

void dot3_rows(const float* w, const float* const* dy, const float* const* x, int64_t n, int count, double* out) {
    int64_t len[kLanes];
    for (int k = 0; k < count; ++k) len[k] = n;
    lane_sums(count, len, out, [&](int k, int64_t j) { return mul(mul(load8d(w + j), load8d(dy[k] + j)), load8d(x[k] + j)); },
              [&](int k, int64_t j) { return double(w[j]) * double(dy[k][j]) * double(x[k][j]); });
}

void rmsnorm_apply(float* o, const float* x, const float* w, float r, int64_t n) {
    const __m256 rv = _mm256_set1_ps(r);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(o + j, _mm256_mul_ps(_mm256_loadu_ps(w + j), _mm256_mul_ps(_mm256_loadu_ps(x + j), rv)));
    for (; j < n; ++j) o[j] = w[j] * (x[j] * r);
}

void rmsnorm_grad(float* dx, const float* dy, const float* x, const float* w, float r, float k, int64_t n,
                  bool accumulate) {
    const __m256 rv = _mm256_set1_ps(r), kv = _mm256_set1_ps(k);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 g = _mm256_sub_ps(_mm256_mul_ps(rv, _mm256_mul_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(dy + j))),
                                       _mm256_mul_ps(_mm256_loadu_ps(x + j), kv));
        _mm256_storeu_ps(dx + j, accumulate ? _mm256_add_ps(_mm256_loadu_ps(dx + j), g) : g);
    }
    for (; j < n; ++j) {
        const float g = r * (w[j] * dy[j]) - x[j] * k;
        dx[j] = accumulate ? dx[j] + g : g;
    }
}

void softmax_grad(float* row, const float* p, float d, float s, int64_t n) {
    const __m256 dv = _mm256_set1_ps(d), sv = _mm256_set1_ps(s);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_sub_ps(_mm256_loadu_ps(row + j), dv)), sv));
    for (; j < n; ++j) row[j] = p[j] * (row[j] - d) * s;
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp8(negate(g));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    for (; i < n; ++i) {
        const float g = gate[i];
        out[i] = (g / (1.0f + ::expf(-g))) * up[i];
    }
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i), d = _mm256_loadu_ps(dout + i);
        const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(negate(g))));
        _mm256_storeu_ps(dup + i, _mm256_mul_ps(d, _mm256_mul_ps(g, sig)));
        const __m256 dsig = _mm256_mul_ps(sig, _mm256_add_ps(one, _mm256_mul_ps(g, _mm256_sub_ps(one, sig))));
        _mm256_storeu_ps(dgate + i, _mm256_mul_ps(_mm256_mul_ps(d, _mm256_loadu_ps(up + i)), dsig));
    }
    for (; i < n; ++i) {
        const float g = gate[i];
        const float sig = 1.0f / (1.0f + ::expf(-g));
        const float silu = g * sig;
        dup[i] = dout[i] * silu;
        dgate[i] = dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
    }
}

}  // namespace tandem::engine::simd::avx2
#endif  // TANDEM_ENGINE_AVX512
