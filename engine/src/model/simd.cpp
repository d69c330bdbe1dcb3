// simd::kernels(): which instruction set's kernels run (simd_avx512.cpp, simd_avx2.cpp), and the calls of
// simd.h forwarded to them. Compiled for the baseline x86-64, like every engine file except those two,
// so the check itself runs on any CPU.
#include "simd.h"

#include <cstdlib>
#include <cstring>

#include "simd_kernels.h"

namespace tandem::engine::simd {

namespace {

Kernels widest_supported() {
#if defined(__x86_64__) && defined(TANDEM_ENGINE_AVX512)
    __builtin_cpu_init();
    // FMA and AVX2 under both: the vector exp is glibc's FMA variant of expf, which std::exp runs on
    // exactly these CPUs (simd.h)
    if (!__builtin_cpu_supports("fma") || !__builtin_cpu_supports("avx2")) return Kernels::None;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return Kernels::Avx512;
    return Kernels::Avx2;
#else
    return Kernels::None;
#endif
}

bool supported(Kernels k) { return k <= widest_supported(); }

Kernels from_environment() {
    const char* env = std::getenv("TANDEM_ENGINE_SIMD");
    const Kernels widest = widest_supported();
    if (env && std::strcmp(env, "off") == 0) return Kernels::None;
    if (env && std::strcmp(env, "avx2") == 0 && widest >= Kernels::Avx2) return Kernels::Avx2;
    return widest;
}

Kernels& active() {
    static Kernels k = from_environment();
    return k;
}

}  // namespace

Kernels kernels() { return active(); }

const char* kernels_name(Kernels k) {
    switch (k) {
        case Kernels::Avx512: return "AVX-512";
        case Kernels::Avx2: return "AVX2";
        case Kernels::None: break;
    }
    return "scalar";
}

bool enabled() { return active() != Kernels::None; }

bool set_kernels_for_testing(Kernels k) {
    if (!supported(k)) return false;
    active() = k;
    return true;
}

// Each call goes to the kernels in use; only called when enabled() (simd.h), which a build without the
// x86 kernels never is.
#if defined(TANDEM_ENGINE_AVX512)
#define TANDEM_SIMD_FORWARD(call) return active() == Kernels::Avx512 ? avx512::call : avx2::call
#else
#define TANDEM_SIMD_FORWARD(call) std::abort()
#endif

float max_fold(float* x, int64_t n, float init, float scale, bool scale_first) {
    TANDEM_SIMD_FORWARD(max_fold(x, n, init, scale, scale_first));
}
void exp_minus(float* x, int64_t n, float m) { TANDEM_SIMD_FORWARD(exp_minus(x, n, m)); }
void scale(float* x, int64_t n, float k) { TANDEM_SIMD_FORWARD(scale(x, n, k)); }
void sum_rows(const float* const* rows, const int64_t* n, int count, double* out) {
    TANDEM_SIMD_FORWARD(sum_rows(rows, n, count, out));
}
void exp_sum_rows(float* const* rows, int64_t n, const float* m, int count, double* out) {
    TANDEM_SIMD_FORWARD(exp_sum_rows(rows, n, m, count, out));
}
void dot_rows(const float* const* a, const float* const* b, const int64_t* n, int count, double* out) {
    TANDEM_SIMD_FORWARD(dot_rows(a, b, n, count, out));
}
void dot3_rows(const float* w, const float* const* dy, const float* const* x, int64_t n, int count, double* out) {
    TANDEM_SIMD_FORWARD(dot3_rows(w, dy, x, n, count, out));
}
void fill_dropout_keep(uint8_t* keep, int64_t n, uint64_t key, uint64_t first, double p) {
    TANDEM_SIMD_FORWARD(fill_dropout_keep(keep, n, key, first, p));
}
void apply_dropout(float* xd, const float* x, const uint8_t* keep, float scale, int64_t n) {
    TANDEM_SIMD_FORWARD(apply_dropout(xd, x, keep, scale, n));
}
void add_dropped(float* dx, const float* dxd, const uint8_t* keep, float scale, int64_t n) {
    TANDEM_SIMD_FORWARD(add_dropped(dx, dxd, keep, scale, n));
}
void rmsnorm_apply(float* o, const float* x, const float* w, float r, int64_t n) {
    TANDEM_SIMD_FORWARD(rmsnorm_apply(o, x, w, r, n));
}
void rmsnorm_grad(float* dx, const float* dy, const float* x, const float* w, float r, float k, int64_t n,
                  bool accumulate) {
    TANDEM_SIMD_FORWARD(rmsnorm_grad(dx, dy, x, w, r, k, n, accumulate));
}
void softmax_grad(float* row, const float* p, float d, float scale, int64_t n) {
    TANDEM_SIMD_FORWARD(softmax_grad(row, p, d, scale, n));
}
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
    TANDEM_SIMD_FORWARD(swiglu_forward(out, gate, up, n));
}
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n) {
    TANDEM_SIMD_FORWARD(swiglu_backward(dgate, dup, dout, gate, up, n));
}

#undef TANDEM_SIMD_FORWARD

}  // namespace tandem::engine::simd
