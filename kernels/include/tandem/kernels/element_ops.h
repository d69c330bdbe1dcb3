#pragma once
// Per-element arithmetic shared by the device kernels and host code: the parts of the CUDA backend
// that must be BIT-IDENTICAL to the CPU engine (dropout masks, AdamW) are written once here as
// host+device inline functions, so tests/gpu/test_kernels_host.cpp can check them against the CPU
// engine on a machine without a GPU, and the kernels run exactly this code on the device.
//
// Float rounding: on the device every operation is an explicitly rounded intrinsic (__fadd_rn,
// __fmul_rn, __fdiv_rn: nvcc may not contract them into FMAs); on the host the same operations are
// plain float expressions, which GCC does not contract in ISO C++ mode (-std=c++20, -ffp-contract=off)
// — the CPU engine's own rule. sqrtf is correctly rounded on both (nvcc's default -prec-sqrt=true).
#include <cuda_runtime_api.h>  // __host__ / __device__ (empty attributes for the host compiler)

#include <cmath>
#include <cstdint>

namespace tandem::kernels {

#if defined(__CUDA_ARCH__)
#define TANDEM_ADD(a, b) __fadd_rn((a), (b))
#define TANDEM_SUB(a, b) __fsub_rn((a), (b))
#define TANDEM_MUL(a, b) __fmul_rn((a), (b))
#define TANDEM_DIV(a, b) __fdiv_rn((a), (b))
#define TANDEM_SQRT(a) __fsqrt_rn(a)
#else
#define TANDEM_ADD(a, b) ((a) + (b))
#define TANDEM_SUB(a, b) ((a) - (b))
#define TANDEM_MUL(a, b) ((a) * (b))
#define TANDEM_DIV(a, b) ((a) / (b))
#define TANDEM_SQRT(a) std::sqrt(a)
#endif

// SplitMix64's finaliser, host + device: the twin of engine::mix64 (engine/include/tandem/engine/dropout.h).
__host__ __device__ inline uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// keep_i = u_i >= p with u_i = (mix64(key ^ index) >> 40) * 2^-24, as the integer test
// top24 >= threshold, threshold = ceil(p * 2^24) (kernels::dropout_threshold).
__host__ __device__ inline bool dropout_keep(uint64_t key, uint64_t index, uint32_t threshold) {
    return static_cast<uint32_t>(mix64(key ^ index) >> 40) >= threshold;
}

// The float32 scalars of one AdamW step (see adamw_scalars in ops.h).
struct AdamWScalars {
    float one_minus_beta1;        // float(1 - b1)
    float beta2;                  // float(b2)
    float one_minus_beta2;        // float(1 - b2)
    float bias_correction2_sqrt;  // float(sqrt(1 - b2^step))
    float eps;                    // float(eps)
    float neg_step_size;          // float(-(lr / (1 - b1^step)))
    float decay;                  // float(1 - lr * wd)
    bool apply_decay;             // wd != 0 (torch skips the multiply otherwise)
};

// One element of torch.optim.AdamW (foreach, non-capturable), the CPU's adamw_step line by line.
__host__ __device__ inline void adamw_element(float& p, float g, float& m, float& v, const AdamWScalars& s) {
    if (s.apply_decay) p = TANDEM_MUL(p, s.decay);
    m = TANDEM_ADD(m, TANDEM_MUL(s.one_minus_beta1, TANDEM_SUB(g, m)));
    v = TANDEM_MUL(v, s.beta2);
    v = TANDEM_ADD(v, TANDEM_MUL(TANDEM_MUL(s.one_minus_beta2, g), g));
    const float denom = TANDEM_ADD(TANDEM_DIV(TANDEM_SQRT(v), s.bias_correction2_sqrt), s.eps);
    p = TANDEM_ADD(p, TANDEM_MUL(s.neg_step_size, TANDEM_DIV(m, denom)));
}

}  // namespace tandem::kernels
