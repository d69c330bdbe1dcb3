#pragma once
// Helpers for the `gpu` tests: skip cleanly without a device, move vectors to and from the device,
// and compare against the CPU backend with a relative tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tandem/kernels/device.h"

// Every gpu test starts with this: on a machine without a CUDA driver or device it skips with the
// reason (cudaGetDeviceCount's error), never fails.
#define TANDEM_REQUIRE_GPU()                                                                             \
    do {                                                                                                 \
        const std::string tandem_why_ = ::tandem::kernels::no_device_reason();                           \
        if (!tandem_why_.empty())                                                                        \
            GTEST_SKIP() << "no CUDA device (" << tandem_why_                                            \
                         << "); gpu tests run on a machine with an NVIDIA GPU, see scripts/gpu-check";   \
    } while (0)

namespace tandem::gputest {

inline std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// max |got - want| / max |want|: the error relative to the tensor's magnitude (elementwise relative
// error is meaningless for entries that are zero or cancel).
inline double max_rel_diff(const std::vector<float>& got, const std::vector<float>& want) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::fabs(double(got[i]) - double(want[i])));
        mag = std::max(mag, std::fabs(double(want[i])));
    }
    return mag > 0.0 ? diff / mag : diff;
}

inline double rel_diff(double got, double want) {
    return std::fabs(got - want) / std::max(std::fabs(want), 1e-300);
}

// A stream, an allocator and a cuBLAS handle on device 0.
struct DeviceEnv {
    cudaStream_t stream = nullptr;
    kernels::DeviceAllocator alloc{0};
    kernels::BlasHandle* blas = nullptr;
    DeviceEnv() {
        CUDA_CHECK(cudaSetDevice(0));
        CUDA_CHECK(cudaStreamCreate(&stream));
        blas = new kernels::BlasHandle(stream);
    }
    ~DeviceEnv() {
        delete blas;
        (void)cudaStreamDestroy(stream);
    }
    template <class T>
    kernels::DeviceBuffer<T> to_device(const std::vector<T>& v,
                                       kernels::MemoryCategory c = kernels::MemoryCategory::Workspace) {
        kernels::DeviceBuffer<T> b(alloc, std::max<size_t>(v.size(), 1), c);
        if (!v.empty())
            CUDA_CHECK(cudaMemcpyAsync(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
        return b;
    }
    template <class T>
    kernels::DeviceBuffer<T> zeros(size_t n) {
        kernels::DeviceBuffer<T> b(alloc, std::max<size_t>(n, 1), kernels::MemoryCategory::Workspace);
        CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), stream));
        return b;
    }
    template <class T>
    std::vector<T> to_host(const kernels::DeviceBuffer<T>& b, size_t n) {
        std::vector<T> v(n);
        if (n) CUDA_CHECK(cudaMemcpyAsync(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return v;
    }
};

}  // namespace tandem::gputest
