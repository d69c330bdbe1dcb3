#pragma once
// Vector kernels for the CPU ops' row loops (internal to src/model/; ops.cpp calls them when
// simd::enabled(), else runs its scalar loops), in two instruction sets: AVX-512 (simd_avx512.cpp) and
// AVX2 + FMA (simd_avx2.cpp, for the CPUs without AVX-512: AMD before Zen 4, Intel client parts), the
// widest the CPU has. Each kernel returns exactly the bits of the scalar loop it replaces, so the
// engine's numbers do not depend on which path ran:
//   - element-wise float arithmetic is the same IEEE operations in the same order (the engine is
//     built with -ffp-contract=off: no fused multiply-adds the scalar code does not have);
//   - exp is glibc's expf algorithm (x86-64 FMA variant, which std::exp calls on every CPU with
//     FMA and AVX2, i.e. every CPU these kernels run on) evaluated 8 (AVX-512) or 4 (AVX2) doubles at
//     a time with the same fused operations, falling back to ::expf for the lanes outside its fast path
//     (|x| >= 88, NaN);
//   - every double sum keeps its sequential order j = 0, 1, 2 ...: the vector lanes hold ROWS, not
//     columns of one row (8 x 8 or 4 x 4 blocks are transposed in registers), so each row's running sum
//     sees the same additions in the same order as the scalar loop.
// test_simd_kernels checks the bit identity kernel by kernel for each instruction set the CPU has,
// and test_engine_digest the whole engine's trajectories.
#include <cstdint>

namespace tandem::engine::simd {

// The instruction set the kernels run: the widest the CPU has (AVX-512 F/DQ/BW/VL with FMA, else
// AVX2 with FMA, else none), capped by TANDEM_ENGINE_SIMD=off|avx2 (read once).
enum class Kernels { None, Avx2, Avx512 };
Kernels kernels();
// "AVX-512", "AVX2" or "scalar" (what a report names).
const char* kernels_name(Kernels k);
// True when kernels() is not None.
bool enabled();
// Tests: run the scalar loops (None) or one instruction set's kernels from now on; returns whether
// that is now what runs (false when the CPU lacks it). Not thread-safe: call between ops.
bool set_kernels_for_testing(Kernels k);

// Kernels below: only call when enabled(). Rows are given as pointers; `count` <= kLanes.
inline constexpr int kLanes = 8;

#include "simd_kernels.inc"

}  // namespace tandem::engine::simd
