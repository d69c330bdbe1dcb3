// Private helpers shared by the kernel files: launch geometry and warp reductions.
#pragma once
#include <cstdint>

#include "tandem/kernels/device.h"

namespace tandem::kernels::detail {

inline unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

// Grid for a grid-stride elementwise loop: enough blocks to fill the device several times, capped
// so a launch never exceeds the 2^31-1 grid limit.
inline unsigned elementwise_grid(int64_t n, int threads) {
    const int64_t blocks = (n + threads - 1) / threads;
    return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, <= 1024) in a fixed order; every
// thread gets the result. `shared` holds 32 values.
template <typename T>
__device__ T block_sum(T v, T* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // shared may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T r = lane < nwarps ? shared[lane] : T(0);
    if (warp == 0) r = warp_sum(r);
    if (threadIdx.x == 0) shared[0] = r;
    __syncthreads();
    return shared[0];
}

}  // namespace tandem::kernels::detail
