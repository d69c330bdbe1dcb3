#pragma once
// RoPE tables, computed on the host for every backend (the CUDA backend uploads them), so both
// rotate with bit-identical tables. Rotate-half convention, as transformers computes them in float32:
//   inv_freq[j] = 1 / (theta ** (float(2j) / D)), angle[t, j] = float(t) * inv_freq[j] (float32),
//   cos/sin[t, :] = cos/sin(cat(angle, angle)).
// cos[T,D], sin[T,D]. The double overload computes the exact angles (the float64 reference).
#include <cstdint>

namespace tandem::engine::ops {

void rope_tables(float* cos, float* sin, int64_t T, int64_t D, double theta);
void rope_tables(double* cos, double* sin, int64_t T, int64_t D, double theta);

}  // namespace tandem::engine::ops
