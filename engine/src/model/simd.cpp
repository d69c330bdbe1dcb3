// simd::enabled(): whether the AVX-512 kernels (simd_avx512.cpp) may run. Compiled for the baseline
// x86-64, like every engine file except simd_avx512.cpp, so the check itself runs on any CPU.
#include "simd.h"

#include <cstdlib>
#include <cstring>

namespace tandem::engine::simd {

namespace {
int forced = -1;  // set_enabled_for_testing: -1 none, 0 off, 1 on (when supported)

bool supported() {
#if defined(__x86_64__) && defined(TANDEM_ENGINE_AVX512)
    static const bool on = [] {
        const char* env = std::getenv("TANDEM_ENGINE_SIMD");
        if (env && std::strcmp(env, "off") == 0) return false;
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
    }();
    return on;
#else
    return false;
#endif
}
}  // namespace

bool enabled() { return forced < 0 ? supported() : (forced == 1 && supported()); }

bool set_enabled_for_testing(bool on) {
    forced = on ? 1 : 0;
    return enabled() == on;
}

}  // namespace tandem::engine::simd
