#pragma once
// Bandwidth probes (docs/spec.md §Records): CPU memcpy and, when built with CUDA, host↔device through
// pinned memory and device→device copies. Results are ProbeResult (probe_result.h), written to
// /probes/<device> of a run file and to the catalog's `probes` table.
//
// Byte-counting convention (ProbeDirection::bytes_counted, docs/hdf5-layout.md):
//   memcpy (CPU) and d2d: a copy of B bytes reads B and writes B → counted 2*B (STREAM "Copy",
//   CUDA samples' bandwidthTest D2D); h2d and d2h: B (bytes that cross the link).
#include "tandem/measure/probe_result.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::experiments {

// The one buffer-size rule of the CPU memcpy probe, for `tandem probe` and the run's own probe alike:
// max(256 MiB, 8 × last-level cache) per buffer, well beyond the cache, capped so the two buffers
// together take at most a quarter of MemAvailable (each ≤ MemAvailable / 8; unknown memory: no cap),
// never below 16 MiB. `rule` says in words which bound chose `bytes`; it goes into ProbeResult::method.
struct CpuProbeBuffer {
    std::int64_t bytes = 0;
    std::string rule;
    std::int64_t memory_available_bytes = 0;  // the MemAvailable the rule read (0: unknown or not used)
};
CpuProbeBuffer cpu_probe_buffer(std::int64_t llc_bytes, std::int64_t memory_available_bytes);
CpuProbeBuffer cpu_probe_buffer();  // this machine: last_level_cache_bytes() and MemAvailable now

struct CpuProbeOptions {
    std::int64_t bytes = 0;   // 0: cpu_probe_buffer()
    int warmup = 2;
    int repeats = 10;
};

ProbeResult probe_cpu(const CpuProbeOptions& options = {});

// The float32 GEMM peak beside the memcpy probe: OpenBLAS cblas_sgemm of a square
// problem at each thread count (openblas_set_num_threads; the previous count is restored), best and
// median of `repeats` after one warm-up. Appends to probe.sgemm and sets probe.sgemm_method.
struct SgemmProbeOptions {
    std::int64_t size = 2048;  // m = n = k: 17.2 GFLOP per call, ~0.2 s on one AVX-512 core
    int repeats = 5;
};
void probe_cpu_sgemm(ProbeResult& probe, const std::vector<int>& threads, const SgemmProbeOptions& options = {});

struct CudaProbeOptions {
    std::int64_t bytes = 256LL * 1000 * 1000;  // "256 MB" (docs/spec.md §Records)
    int warmup = 3;
    int repeats = 20;
    // The cuBLAS float32 GEMM peak, recorded as the probe's sgemm figure with threads = 0 (a GPU's
    // GEMM has no host thread count): 8192^3 is large enough to reach an H100/H200's plateau.
    std::int64_t sgemm_size = 8192;
    int sgemm_warmup = 3;
    int sgemm_repeats = 10;
};

// true when this build has CUDA (TANDEM_WITH_CUDA).
bool built_with_cuda();
// Number of CUDA devices visible; 0 without CUDA or without a driver/device.
int cuda_device_count();
// Throws tandem::Error when built without CUDA, when no device `index` exists, or a CUDA call fails.
ProbeResult probe_cuda(int index, const CudaProbeOptions& options = {});

// What `tandem doctor` reports about CUDA. Never throws; problems go to `error`.
struct CudaDeviceSummary {
    std::string device;            // "cuda:0"
    std::string name;
    std::int64_t memory_bytes = 0;
    std::string compute_capability;  // "9.0"
    std::string pci_bus_id;
    std::string pcie_link;         // empty when unknown
};
struct CudaEnvironment {
    bool built_with_cuda = false;
    std::string driver_version;    // empty: no driver
    std::string runtime_version;
    std::string cublas_version;
    std::string cudnn_version;     // loaded libcudnn's cudnnGetVersion; empty when not loadable
    std::vector<CudaDeviceSummary> devices;
    std::string error;
};
CudaEnvironment cuda_environment();

// Parses a --device value: "cpu", "cuda:N", "all". Throws tandem::Error naming the value when
// malformed ("gpu", "cuda:", "cuda:x") or when it names a device this machine/build does not have.
// Returns the device names to probe ("cpu", "cuda:0", ...) in order.
std::vector<std::string> resolve_probe_devices(const std::string& value);

}  // namespace tandem::experiments
