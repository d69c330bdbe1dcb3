#pragma once
// float32's machine epsilon, the unit of every float32 bound: the error model and the lr check
// (compare), the optimizer replay (legs). One constant below both, so the bounds share one eps.

namespace tandem {

// float32 machine epsilon (2^-23): the gap between 1 and the next float32.
inline constexpr double kFloat32Epsilon = 1.1920928955078125e-07;
static_assert(kFloat32Epsilon == 1.0 / 8388608.0, "2^-23");

}  // namespace tandem
