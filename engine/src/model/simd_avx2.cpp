// The AVX2 + FMA kernels of simd.h, for CPUs without AVX-512 (AMD before Zen 4, Intel client parts): the
// vector type simd_lanes.inc's kernels run on (8 floats / 4 doubles a register) and the pieces AVX2 spells
// its own way (exp on 4 doubles with a gather, the 4 x 4 transposes, a 64-bit multiply from 32-bit ones),
// so the same bits as the scalar loops. This file alone is compiled with -mavx2 -mfma (and the engine's
// -ffp-contract=off); it is only entered after simd::kernels() checked the CPU. It includes nothing but
// intrinsics and C declarations, and keeps its helpers in an anonymous namespace, so no inline function
// compiled here for AVX2 can be picked by the linker for a baseline caller.
#if defined(TANDEM_ENGINE_AVX512)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "simd.h"
#include "simd_expf_data.h"
#include "simd_kernels.h"

namespace tandem::engine::simd::avx2 {
namespace {

#include "simd_lanes.inc"

// The double register of simd_lanes.inc's exp_fast_path on AVX2: 4 lanes, kTable looked up by a gather.
struct Doubles {
    using Reg = __m256d;
    using Int = __m256i;
    static Reg set1(double v) { return _mm256_set1_pd(v); }
    static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_pd(a, b, c); }
    static Reg fmsub(Reg a, Reg b, Reg c) { return _mm256_fmsub_pd(a, b, c); }
    static Int as_int(Reg v) { return _mm256_castpd_si256(v); }
    static Reg as_double(Int v) { return _mm256_castsi256_pd(v); }
    static Int table(Int idx) { return _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kTable), idx, 8); }
};

// 8 consecutive doubles of one row: columns 0-3 and 4-7.
struct Double8 {
    __m256d lo, hi;
};
inline Double8 widen(__m256 v) {
    return {_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))};
}

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
inline void add_column_block(RowSums& sums, int count, Terms&& terms) {
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

// The vector type of simd_lanes.inc on AVX2.
struct Lanes {
    using F = __m256;
    static constexpr int kWidth = 8;
    static F load(const float* p) { return _mm256_loadu_ps(p); }
    static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
    static F set1(float v) { return _mm256_set1_ps(v); }
    static F exp(F x) {  // two halves of 4 lanes as doubles
        const __m128 lo = _mm256_cvtpd_ps(lanes::exp_fast_path<Doubles>(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
        const __m128 hi = _mm256_cvtpd_ps(lanes::exp_fast_path<Doubles>(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
        return lanes::with_slow_lanes<Lanes>(x, _mm256_set_m128(hi, lo));
    }
    static unsigned slow_lanes(F x) {  // the sign bit cleared, so the signed compare is the unsigned one
        const __m256i a = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
        return unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x42b00000 - 1)))));
    }
    static F max(F v, F acc) { return _mm256_max_ps(v, acc); }
    static float reduce_max(F acc) {  // any order (simd_lanes.inc max_fold)
        alignas(32) float lane[8];
        _mm256_store_ps(lane, acc);
        float m = lane[0];
        for (int l = 1; l < 8; ++l) m = lane[l] > m ? lane[l] : m;
        return m;
    }
    static F kept(const uint8_t* keep, F v) {  // keep[i] != 0 as all-ones lanes; a dropped lane is +0
        const __m256i k = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(keep)));
        return _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k, _mm256_setzero_si256())), v);
    }

    using Double8 = avx2::Double8;  // the 8 doubles of one row's 8 columns
    static Double8 load8d(const float* p) { return {_mm256_cvtps_pd(_mm_loadu_ps(p)), _mm256_cvtps_pd(_mm_loadu_ps(p + 4))}; }
    static Double8 mul8d(Double8 a, Double8 b) { return {_mm256_mul_pd(a.lo, b.lo), _mm256_mul_pd(a.hi, b.hi)}; }
    using Sums = RowSums;
    static Sums zero_sums() { return RowSums{}; }
    template <class Terms>
    static void add_columns(Sums& sums, int count, Terms&& terms) { add_column_block(sums, count, terms); }
    static void add_float_columns(Sums& sums, int count, const F* e) {
        add_column_block(sums, count, [&](int k) { return widen(e[k]); });
    }
    static void store_sums(const Sums& sums, double* s) {
        _mm256_storeu_pd(s, sums.acc[0]);
        _mm256_storeu_pd(s + 4, sums.acc[1]);
    }

    static constexpr int kKeepWidth = 4;
    static void keep_block(uint8_t* keep, uint64_t key, uint64_t first, uint64_t threshold) {
        const __m256i idx = _mm256_add_epi64(_mm256_set1_epi64x(int64_t(first)), _mm256_set_epi64x(3, 2, 1, 0));
        const __m256i r = _mm256_srli_epi64(mix64x4(_mm256_xor_si256(_mm256_set1_epi64x(int64_t(key)), idx)), 40);
        // r >= threshold <=> r > threshold - 1: both below 2^26, so the signed compare is exact (-1 when 0)
        const __m256i over = _mm256_cmpgt_epi64(r, _mm256_set1_epi64x(int64_t(threshold) - 1));
        const int bits = _mm256_movemask_pd(_mm256_castsi256_pd(over));
        for (int l = 0; l < 4; ++l) keep[l] = uint8_t((bits >> l) & 1);
    }
};

}  // namespace

#include "simd_forward.inc"

}  // namespace tandem::engine::simd::avx2
#endif  // TANDEM_ENGINE_AVX512
