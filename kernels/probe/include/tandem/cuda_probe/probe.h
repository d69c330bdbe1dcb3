#pragma once
// CUDA side of the bandwidth probes and of `tandem doctor`'s device report (kernels/probe/probe.cu, target tandem_cuda_probe).
// Plain C++17 types only, so host code of any standard can include it. Errors are thrown as
// std::runtime_error with "probe.cu:<line>: <call> failed: <cuda error string>".
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::cuda_probe {

// Number of CUDA devices; 0 when there is no driver or no device (never throws).
int cuda_device_count() noexcept;

// "13.0" style versions; empty when unavailable (never throws).
std::string cuda_driver_version() noexcept;
std::string cuda_runtime_version() noexcept;
std::string cublas_version() noexcept;  // cublasGetProperty, e.g. "13.0.2"; empty when unavailable
std::string cudnn_version() noexcept;   // cudnn_version.h at compile time (the library is not linked)

struct CudaDeviceInfo {
    int index = 0;
    std::string name;
    std::string pci_bus_id;           // "0000:3b:00.0" (lower case, as in /sys/bus/pci/devices)
    int compute_major = 0, compute_minor = 0;
    std::int64_t total_memory_bytes = 0;
    int multiprocessors = 0;
};
CudaDeviceInfo cuda_device_info(int index);  // throws when `index` is not a device

// The negotiated PCIe link of a device: NVML (libnvidia-ml.so.1, loaded at run time) when present,
// else /sys/bus/pci/devices/<bus id>/current_link_{speed,width}. Empty `link` when neither says.
struct PcieLink {
    std::string link;    // "Gen5 x16" (NVML) or "32.0 GT/s PCIe x16" (sysfs); max appended when known
    std::string source;  // "nvml" | "sysfs" | ""
};
PcieLink pcie_link(const std::string& pci_bus_id) noexcept;

struct CopyTiming {
    double best_s = 0;
    double median_s = 0;
};

// Host→device and device→host through pinned host memory and a device→device copy of `bytes`
// bytes, `warmup` untimed copies then `repeats` copies each timed with CUDA events on one stream.
struct CudaBandwidth {
    CudaDeviceInfo device;
    std::int64_t bytes = 0;
    int warmup = 0, repeats = 0;
    CopyTiming h2d, d2h, d2d;
    PcieLink link;
};
CudaBandwidth measure_cuda_bandwidth(int index, std::int64_t bytes, int warmup, int repeats);

// The device's float32 GEMM peak as the engine's GEMMs see it: cublasSgemm under CUBLAS_DEFAULT_MATH
// (float32 FFMA, never TF32, the handle mode of kernels/src/allocator.cu), C[m,m] = A[m,m] B[m,m],
// `warmup` untimed products then `repeats` each timed with CUDA events. The product is checked (A = 0.5,
// B = 0.25: every element of C is exactly m / 8) so a library that returns early cannot post a figure.
struct CudaSgemm {
    std::int64_t m = 0;
    int warmup = 0, repeats = 0;
    CopyTiming time;
    std::string library;  // "cuBLAS 13.0.2"
};
CudaSgemm measure_cuda_sgemm(int index, std::int64_t m, int warmup, int repeats);

}  // namespace tandem::cuda_probe
