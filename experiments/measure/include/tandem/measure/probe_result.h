#pragma once
// What a probe measured (docs/hdf5-layout.md /probes/<device>): the record the probes (probe.h)
// fill and the run file and the catalog store.
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::experiments {

// /probes/<device>: one bandwidth measurement of one device. `directions` holds the figures:
// CPU: "memcpy"; CUDA: "h2d", "d2h", "d2d".
struct ProbeDirection {
    std::string name;            // "memcpy" | "h2d" | "d2h" | "d2d"
    std::int64_t bytes_counted;  // bytes counted per copy: 2*bytes for memcpy and d2d (read+write), bytes for h2d/d2h
    double best_seconds;         // fastest repeat
    double median_seconds;       // median repeat
    double gbps;                 // bytes_counted / best_seconds / 1e9
};

// /probes/<device> sgemm_* attributes: the matrix library's float32 GEMM throughput at a thread
// count (the peak a leg's achieved FLOP/s is a fraction of).
struct SgemmFigure {
    std::int32_t threads = 0;          // host threads of a CPU GEMM; 0: a GPU's own GEMM (cuBLAS)
    std::int64_t m = 0, n = 0, k = 0;  // C[m,n] = A[m,k] B[k,n], row-major, no transposes
    double best_seconds = 0, median_seconds = 0;
    double flops_per_s = 0;            // 2 m n k / best_seconds
    double median_flops_per_s = 0;     // 2 m n k / median_seconds
};
// Where the figure was measured, for tables and the probe's lines: "2 threads", "1 thread", "device (cuBLAS)".
std::string sgemm_where(const SgemmFigure& s);


struct ProbeResult {
    std::string device;          // "cpu", "cuda:0", ...
    std::string device_name;     // CPU model or GPU name
    std::int64_t bytes = 0;      // buffer (copy) size in bytes
    // The MemAvailable the CPU buffer rule read when it chose `bytes` (cpu_probe_buffer), so the size can be
    // re-derived from the record; 0 for an explicit size and for device probes.
    std::int64_t memory_available_bytes = 0;
    std::int32_t repeats = 0;    // timed repeats (best of N)
    std::int32_t warmup = 0;     // untimed warm-up copies
    std::string method;          // how it was timed, one line
    std::vector<ProbeDirection> directions;
    std::string timestamp;       // ISO-8601 UTC, "2026-11-29T09:30:00Z"
    std::string pcie_link;       // "Gen5 x16 (32.0 GT/s)"; empty when unknown / not applicable
    std::string pcie_source;     // "nvml", "sysfs" or empty
    std::vector<SgemmFigure> sgemm;  // per thread count measured (CPU: OpenBLAS); empty: not measured
    std::string sgemm_method;        // library and how it was timed, one line

    const ProbeDirection* direction(const std::string& name) const;  // nullptr when absent
    const SgemmFigure* sgemm_at(int threads) const;                  // nullptr when not measured
};

}  // namespace tandem::experiments
