#pragma once
// The kernels of simd.h once per instruction set: simd_avx512.cpp defines simd::avx512, simd_avx2.cpp
// simd::avx2, and simd.cpp forwards simd.h's calls to the one simd::kernels() names.
#include <cstdint>

namespace tandem::engine::simd::avx512 {
#include "simd_kernels.inc"
}  // namespace tandem::engine::simd::avx512

namespace tandem::engine::simd::avx2 {
#include "simd_kernels.inc"
}  // namespace tandem::engine::simd::avx2
