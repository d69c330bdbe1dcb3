// The AVX-512 kernels of simd.h: the vector type simd_lanes.inc's kernels run on (16 floats a register)
// and the pieces only AVX-512 spells this way (exp on 16 lanes, the 8 x 8 transpose, the 64-bit mix). This
// file alone is compiled with -mavx512f/dq/bw/vl -mfma (and the engine's -ffp-contract=off); it is only
// entered after simd::kernels() checked the CPU. It includes nothing but intrinsics and C declarations,
// and keeps its helpers in an anonymous namespace, so no inline function compiled here for AVX-512 can
// be picked by the linker for a baseline caller.
#if defined(TANDEM_ENGINE_AVX512)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "simd.h"
#include "simd_expf_data.h"
#include "simd_kernels.h"

namespace tandem::engine::simd::avx512 {
namespace {

#include "simd_lanes.inc"

// The double register of simd_lanes.inc's exp_fast_path on AVX-512: 8 lanes, kTable's 32 entries looked
// up by two two-register permutes and a blend.
struct Doubles {
    using Reg = __m512d;
    using Int = __m512i;
    static Reg set1(double v) { return _mm512_set1_pd(v); }
    static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_pd(a, b, c); }
    static Reg fmsub(Reg a, Reg b, Reg c) { return _mm512_fmsub_pd(a, b, c); }
    static Int as_int(Reg v) { return _mm512_castpd_si512(v); }
    static Reg as_double(Int v) { return _mm512_castsi512_pd(v); }
    static Int table(Int idx) {
        const __m512i t0 = _mm512_load_si512(kTable), t1 = _mm512_load_si512(kTable + 8),
                      t2 = _mm512_load_si512(kTable + 16), t3 = _mm512_load_si512(kTable + 24);
        const __m512i lo = _mm512_permutex2var_epi64(t0, idx, t1), hi = _mm512_permutex2var_epi64(t2, idx, t3);
        return _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
    }
};

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
inline __m512d add_column_block(__m512d acc, int count, Terms&& terms) {
    __m512d r[8], c[8];
    for (int k = 0; k < 8; ++k) r[k] = k < count ? terms(k) : _mm512_setzero_pd();
    transpose8(r, c);
    for (int k = 0; k < 8; ++k) acc = _mm512_add_pd(acc, c[k]);
    return acc;
}

// SplitMix64's mix on 8 lanes (dropout.cpp mix64), exact 64-bit integer arithmetic.
inline __m512i mix64x8(__m512i z) {
    z = _mm512_add_epi64(z, _mm512_set1_epi64(int64_t(0x9E3779B97F4A7C15ULL)));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), _mm512_set1_epi64(int64_t(0xBF58476D1CE4E5B9ULL)));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), _mm512_set1_epi64(int64_t(0x94D049BB133111EBULL)));
    return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

// The vector type of simd_lanes.inc on AVX-512.
struct Lanes {
    using F = __m512;
    static constexpr int kWidth = 16;
    static F load(const float* p) { return _mm512_loadu_ps(p); }
    static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
    static F set1(float v) { return _mm512_set1_ps(v); }
    static F exp(F x) {  // two halves of 8 lanes as doubles
        const __m256 lo = _mm512_cvtpd_ps(lanes::exp_fast_path<Doubles>(_mm512_cvtps_pd(_mm512_castps512_ps256(x))));
        const __m256 hi = _mm512_cvtpd_ps(
            lanes::exp_fast_path<Doubles>(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))));
        return lanes::with_slow_lanes<Lanes>(
            x, _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1)));
    }
    static unsigned slow_lanes(F x) {
        const __m512i a = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
        return _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x42b00000));
    }
    static F max(F v, F acc) { return _mm512_max_ps(v, acc); }
    static float reduce_max(F acc) { return _mm512_reduce_max_ps(acc); }
    static F kept(const uint8_t* keep, F v) {
        return _mm512_maskz_mov_ps(_mm_test_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i*>(keep)), _mm_set1_epi8(-1)), v);
    }

    using Double8 = __m512d;
    static Double8 load8d(const float* p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
    static Double8 mul8d(Double8 a, Double8 b) { return _mm512_mul_pd(a, b); }
    using Sums = __m512d;  // lane r: row r's running sum
    static Sums zero_sums() { return _mm512_setzero_pd(); }
    template <class Terms>
    static void add_columns(Sums& sums, int count, Terms&& terms) { sums = add_column_block(sums, count, terms); }
    static void add_float_columns(Sums& sums, int count, const F* e) {  // columns 0-7, then 8-15
        add_columns(sums, count, [&](int k) { return _mm512_cvtps_pd(_mm512_castps512_ps256(e[k])); });
        add_columns(sums, count, [&](int k) {
            return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e[k]), 1)));
        });
    }
    static void store_sums(const Sums& sums, double* s) { _mm512_storeu_pd(s, sums); }

    static constexpr int kKeepWidth = 8;
    static void keep_block(uint8_t* keep, uint64_t key, uint64_t first, uint64_t threshold) {
        const __m512i idx = _mm512_add_epi64(_mm512_set1_epi64(int64_t(first)), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
        const __m512i r = _mm512_srli_epi64(mix64x8(_mm512_xor_si512(_mm512_set1_epi64(int64_t(key)), idx)), 40);
        const __mmask8 k = _mm512_cmpge_epu64_mask(r, _mm512_set1_epi64(int64_t(threshold)));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(keep), _mm_maskz_set1_epi8(k, 1));
    }
};

}  // namespace

#include "simd_forward.inc"

}  // namespace tandem::engine::simd::avx512
#endif  // TANDEM_ENGINE_AVX512
