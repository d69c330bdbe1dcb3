// Bandwidth probes: CPU memcpy here; CUDA through tandem_cuda_probe when built with CUDA.
#include "tandem/measure/probe.h"

#include "tandem/error.h"
#include "tandem/measure/host_info.h"
#include "tandem/utc_time.h"

#ifdef TANDEM_WITH_CUDA
#include "tandem/cuda_probe/probe.h"
#endif

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace tandem::experiments {
namespace {

struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};

double median_of_sorted(const std::vector<double>& sorted) {
    const std::size_t n = sorted.size();
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

ProbeDirection make_direction(const std::string& name, std::int64_t bytes_counted, double best_s, double median_s) {
    return {name, bytes_counted, best_s, median_s, static_cast<double>(bytes_counted) / best_s / 1e9};
}

}  // namespace

CpuProbeBuffer cpu_probe_buffer(std::int64_t llc_bytes, std::int64_t memory_available_bytes) {
    constexpr std::int64_t kMin = 256LL << 20, kFloor = 16LL << 20;
    CpuProbeBuffer b;
    b.memory_available_bytes = memory_available_bytes;
    const std::int64_t want = std::max<std::int64_t>(kMin, 8 * llc_bytes);
    b.bytes = want;
    b.rule = "max(256 MiB, 8 x LLC " + format_bytes(llc_bytes) + ")";
    if (memory_available_bytes > 0) {
        const std::int64_t cap = std::max<std::int64_t>(kFloor, memory_available_bytes / 8);
        if (cap < want) {
            b.bytes = cap;
            b.rule += " capped at MemAvailable " + format_bytes(memory_available_bytes) + " / 8";
        }
    }
    b.bytes = b.bytes / 4096 * 4096;  // whole pages
    return b;
}

CpuProbeBuffer cpu_probe_buffer() {
    return cpu_probe_buffer(last_level_cache_bytes(), collect_host_info().memory_available_bytes);
}

ProbeResult probe_cpu(const CpuProbeOptions& options) {
    if (options.repeats <= 0 || options.warmup < 0) throw Error("CPU probe: repeats must be positive");
    const CpuProbeBuffer rule = options.bytes > 0 ? CpuProbeBuffer{options.bytes, "explicit size"} : cpu_probe_buffer();
    const std::int64_t bytes = rule.bytes;
    const auto size = static_cast<std::size_t>(bytes);
    const std::size_t alloc_size = (size + 4095) / 4096 * 4096;
    std::unique_ptr<void, FreeDeleter> src(std::aligned_alloc(4096, alloc_size));
    std::unique_ptr<void, FreeDeleter> dst(std::aligned_alloc(4096, alloc_size));
    if (!src || !dst) throw Error("CPU probe: cannot allocate 2 x " + format_bytes(bytes));
    // Touch every page of both buffers first so page faults are not timed.
    std::memset(src.get(), 0x5a, size);
    std::memset(dst.get(), 0x00, size);

    for (int i = 0; i < options.warmup; ++i) std::memcpy(dst.get(), src.get(), size);
    std::vector<double> seconds;
    for (int i = 0; i < options.repeats; ++i) {
        // Alternate the last byte so no copy is a no-op the compiler or CPU could skip.
        static_cast<unsigned char*>(src.get())[size - 1] = static_cast<unsigned char>(i);
        const auto start = std::chrono::steady_clock::now();
        std::memcpy(dst.get(), src.get(), size);
        const auto stop = std::chrono::steady_clock::now();
        if (static_cast<volatile unsigned char*>(dst.get())[size - 1] != static_cast<unsigned char>(i))
            throw Error("CPU probe: memcpy result does not match its source");
        seconds.push_back(std::chrono::duration<double>(stop - start).count());
    }
    std::sort(seconds.begin(), seconds.end());

    ProbeResult r;
    r.device = "cpu";
    r.device_name = collect_host_info().cpu_model;
    r.bytes = bytes;
    r.memory_available_bytes = options.bytes > 0 ? 0 : rule.memory_available_bytes;
    r.repeats = options.repeats;
    r.warmup = options.warmup;
    r.method = "std::memcpy between two page-aligned, pre-touched buffers of " + format_bytes(bytes) + " each (" +
               rule.rule + "); steady_clock per copy; best of repeats after warm-up; read+write bytes counted (2 x size)";
    r.directions.push_back(make_direction("memcpy", 2 * bytes, seconds.front(), median_of_sorted(seconds)));
    r.timestamp = utc_timestamp_now();
    return r;
}

bool built_with_cuda() {
#ifdef TANDEM_WITH_CUDA
    return true;
#else
    return false;
#endif
}

int cuda_device_count() {
#ifdef TANDEM_WITH_CUDA
    return cuda_probe::cuda_device_count();
#else
    return 0;
#endif
}

#ifdef TANDEM_WITH_CUDA
namespace {
// The device's sgemm figure (threads 0: the GPU's own GEMM; sgemm_at(0) finds it for a GPU leg).
void add_cuda_sgemm(ProbeResult& r, int index, const CudaProbeOptions& options) {
    const auto g = cuda_probe::measure_cuda_sgemm(index, options.sgemm_size, options.sgemm_warmup, options.sgemm_repeats);
    SgemmFigure f;
    f.threads = 0;
    f.m = f.n = f.k = g.m;
    f.best_seconds = g.time.best_s;
    f.median_seconds = g.time.median_s;
    const double flop = 2.0 * double(g.m) * double(g.m) * double(g.m);
    f.flops_per_s = flop / g.time.best_s;
    f.median_flops_per_s = flop / g.time.median_s;
    r.sgemm.push_back(f);
    r.sgemm_method = g.library + " cublasSgemm, CUBLAS_DEFAULT_MATH (float32, no TF32), row-major " + std::to_string(g.m) +
                     "^3, no transposes, timed with CUDA events; best of " + std::to_string(g.repeats) + " after " +
                     std::to_string(g.warmup) + " warm-up products; the product is checked";
}
}  // namespace
#endif

ProbeResult probe_cuda(int index, const CudaProbeOptions& options) {
#ifdef TANDEM_WITH_CUDA
    try {
        const auto m = cuda_probe::measure_cuda_bandwidth(index, options.bytes, options.warmup, options.repeats);
        ProbeResult r;
        r.device = "cuda:" + std::to_string(index);
        r.device_name = m.device.name;
        r.bytes = m.bytes;
        r.repeats = m.repeats;
        r.warmup = m.warmup;
        r.method = "cudaMemcpyAsync on one stream, pinned host memory (cudaMallocHost), timed with CUDA events; "
                   "best of repeats after warm-up; h2d/d2h count size, d2d counts read+write (2 x size)";
        r.directions.push_back(make_direction("h2d", m.bytes, m.h2d.best_s, m.h2d.median_s));
        r.directions.push_back(make_direction("d2h", m.bytes, m.d2h.best_s, m.d2h.median_s));
        r.directions.push_back(make_direction("d2d", 2 * m.bytes, m.d2d.best_s, m.d2d.median_s));
        r.timestamp = utc_timestamp_now();
        r.pcie_link = m.link.link;
        r.pcie_source = m.link.source;
        add_cuda_sgemm(r, index, options);
        return r;
    } catch (const std::runtime_error& e) {
        throw Error(std::string("CUDA probe of cuda:") + std::to_string(index) + ": " + e.what());
    }
#else
    (void)options;
    throw Error("cannot probe cuda:" + std::to_string(index) + ": this tandem was built without CUDA");
#endif
}

CudaEnvironment cuda_environment() {
    CudaEnvironment env;
    env.built_with_cuda = built_with_cuda();
#ifdef TANDEM_WITH_CUDA
    env.driver_version = cuda_probe::cuda_driver_version();
    env.runtime_version = cuda_probe::cuda_runtime_version();
    env.cublas_version = cuda_probe::cublas_version();
    env.cudnn_version = cuda_probe::cudnn_version();
    const int count = cuda_probe::cuda_device_count();
    for (int i = 0; i < count; ++i) {
        try {
            const auto info = cuda_probe::cuda_device_info(i);
            env.devices.push_back({"cuda:" + std::to_string(i), info.name, info.total_memory_bytes,
                                   std::to_string(info.compute_major) + "." + std::to_string(info.compute_minor),
                                   info.pci_bus_id, cuda_probe::pcie_link(info.pci_bus_id).link});
        } catch (const std::exception& e) {
            env.error = e.what();
        }
    }
#endif
    return env;
}

std::vector<std::string> resolve_probe_devices(const std::string& value) {
    if (value == "cpu") return {"cpu"};
    if (value == "all") {
        std::vector<std::string> devices{"cpu"};
        for (int i = 0; i < cuda_device_count(); ++i) devices.push_back("cuda:" + std::to_string(i));
        return devices;
    }
    if (value.rfind("cuda:", 0) == 0) {
        const std::string digits = value.substr(5);
        if (digits.empty() || digits.size() > 4 ||
            !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
            throw Error("invalid --device value '" + value + "' (expected cpu, cuda:N or all)");
        const int index = std::stoi(digits);
        if (!built_with_cuda())
            throw Error("--device " + value + ": this tandem was built without CUDA (use --device cpu)");
        const int count = cuda_device_count();
        if (index >= count)
            throw Error("--device " + value + ": no such CUDA device (this machine has " + std::to_string(count) +
                        (count == 1 ? " device)" : " devices)"));
        return {value};
    }
    throw Error("invalid --device value '" + value + "' (expected cpu, cuda:N or all)");
}

}  // namespace tandem::experiments
