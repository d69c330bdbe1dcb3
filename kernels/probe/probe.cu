// Bandwidth probes and device facts (docs/spec.md §Records): host→device and device→host through pinned memory,
// device→device copies, timed with CUDA events; the negotiated PCIe link from NVML or sysfs.
// No kernels of our own: cudaMemcpyAsync and cublasSgemm are what is measured.
#include "tandem/cuda_probe/probe.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn_version.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::cuda_probe {
namespace {

// Every CUDA runtime call goes through this: file, line, call text and CUDA's message.
#define TANDEM_CUDA_CHECK(call)                                                                          \
    do {                                                                                                 \
        const cudaError_t tandem_cuda_status = (call);                                                   \
        if (tandem_cuda_status != cudaSuccess)                                                           \
            throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #call \
                                     " failed: " + cudaGetErrorString(tandem_cuda_status));              \
    } while (0)

std::string version_text(int packed) {  // CUDA packs 13000 + 10*minor
    return std::to_string(packed / 1000) + "." + std::to_string((packed % 1000) / 10);
}

// RAII owners so an exception mid-probe frees everything. Their destructors cannot throw, so the
// status of the free/destroy calls is deliberately ignored (an earlier checked call has reported any fault).
struct DeviceBuffer {
    void* ptr = nullptr;
    explicit DeviceBuffer(std::size_t bytes) { TANDEM_CUDA_CHECK(cudaMalloc(&ptr, bytes)); }
    ~DeviceBuffer() { cudaFree(ptr); }
};
struct PinnedBuffer {
    void* ptr = nullptr;
    explicit PinnedBuffer(std::size_t bytes) { TANDEM_CUDA_CHECK(cudaMallocHost(&ptr, bytes)); }
    ~PinnedBuffer() { cudaFreeHost(ptr); }
};
struct Stream {
    cudaStream_t stream = nullptr;
    Stream() { TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
    ~Stream() { cudaStreamDestroy(stream); }
};
struct Event {
    cudaEvent_t event = nullptr;
    Event() { TANDEM_CUDA_CHECK(cudaEventCreate(&event)); }
    ~Event() { cudaEventDestroy(event); }
};

struct Cublas {
    cublasHandle_t handle = nullptr;
    Cublas() {
        if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("probe.cu: cublasCreate failed");
    }
    ~Cublas() { cublasDestroy(handle); }
};

#define TANDEM_CUBLAS_PROBE_CHECK(call)                                                                        \
    do {                                                                                                       \
        const cublasStatus_t tandem_cublas_status = (call);                                                    \
        if (tandem_cublas_status != CUBLAS_STATUS_SUCCESS)                                                     \
            throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #call         \
                                     " failed: " + cublasGetStatusString(tandem_cublas_status));                \
    } while (0)

CopyTiming best_and_median(std::vector<double> seconds) {
    std::sort(seconds.begin(), seconds.end());
    CopyTiming t;
    t.best_s = seconds.front();
    t.median_s = seconds.size() % 2 ? seconds[seconds.size() / 2]
                                    : 0.5 * (seconds[seconds.size() / 2 - 1] + seconds[seconds.size() / 2]);
    return t;
}

CopyTiming time_copies(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, int warmup, int repeats,
                       cudaStream_t stream) {
    for (int i = 0; i < warmup; ++i) TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
    Event start, stop;
    std::vector<double> seconds;
    for (int i = 0; i < repeats; ++i) {
        TANDEM_CUDA_CHECK(cudaEventRecord(start.event, stream));
        TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
        TANDEM_CUDA_CHECK(cudaEventRecord(stop.event, stream));
        TANDEM_CUDA_CHECK(cudaEventSynchronize(stop.event));
        float ms = 0;
        TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event, stop.event));
        seconds.push_back(ms / 1000.0);
    }
    return best_and_median(std::move(seconds));
}

std::string read_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

// NVML through dlopen: the toolkit here ships neither nvml.h nor a stub library, and the real
// libnvidia-ml.so.1 comes with the driver. These four entry points have had this C ABI since NVML 2.
PcieLink pcie_link_from_nvml(const std::string& bus_id) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return {};
    using Init = int (*)();
    using Shutdown = int (*)();
    using ByBus = int (*)(const char*, void**);
    using Query = int (*)(void*, unsigned*);
    auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    auto shutdown = reinterpret_cast<Shutdown>(dlsym(lib, "nvmlShutdown"));
    auto by_bus = reinterpret_cast<ByBus>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    auto gen = reinterpret_cast<Query>(dlsym(lib, "nvmlDeviceGetCurrPcieLinkGeneration"));
    auto width = reinterpret_cast<Query>(dlsym(lib, "nvmlDeviceGetCurrPcieLinkWidth"));
    auto max_gen = reinterpret_cast<Query>(dlsym(lib, "nvmlDeviceGetMaxPcieLinkGeneration"));
    auto max_width = reinterpret_cast<Query>(dlsym(lib, "nvmlDeviceGetMaxPcieLinkWidth"));
    PcieLink out;
    if (init && shutdown && by_bus && gen && width && init() == 0) {
        void* device = nullptr;
        unsigned g = 0, w = 0, mg = 0, mw = 0;
        if (by_bus(bus_id.c_str(), &device) == 0 && gen(device, &g) == 0 && width(device, &w) == 0) {
            out.link = "Gen" + std::to_string(g) + " x" + std::to_string(w);
            if (max_gen && max_width && max_gen(device, &mg) == 0 && max_width(device, &mw) == 0)
                out.link += " (max Gen" + std::to_string(mg) + " x" + std::to_string(mw) + ")";
            out.source = "nvml";
        }
        shutdown();
    }
    dlclose(lib);
    return out;
}

PcieLink pcie_link_from_sysfs(const std::string& bus_id) {
    const std::string dir = "/sys/bus/pci/devices/" + bus_id + "/";
    const std::string speed = read_line(dir + "current_link_speed");
    const std::string width = read_line(dir + "current_link_width");
    if (speed.empty() || width.empty()) return {};
    PcieLink out;
    out.link = speed + " x" + width;
    const std::string max_speed = read_line(dir + "max_link_speed");
    const std::string max_width = read_line(dir + "max_link_width");
    if (!max_speed.empty() && !max_width.empty()) out.link += " (max " + max_speed + " x" + max_width + ")";
    out.source = "sysfs";
    return out;
}

}  // namespace

int cuda_device_count() noexcept {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" / "no device" status
        return 0;
    }
    return count;
}

std::string cuda_driver_version() noexcept {
    int v = 0;
    if (cudaDriverGetVersion(&v) != cudaSuccess || v == 0) return {};
    return version_text(v);
}

std::string cuda_runtime_version() noexcept {
    int v = 0;
    if (cudaRuntimeGetVersion(&v) != cudaSuccess) return {};
    return version_text(v);
}

std::string cublas_version() noexcept {
    int major = 0, minor = 0, patch = 0;
    if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
        return {};
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string cudnn_version() noexcept {
    // cuDNN is not linked by tandem yet; ask the installed library when one is loadable.
    const std::string name = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string out;
    if (lib) {
        using GetVersion = std::size_t (*)();
        if (auto get = reinterpret_cast<GetVersion>(dlsym(lib, "cudnnGetVersion"))) {
            const std::size_t v = get();  // major*10000 + minor*100 + patch since cuDNN 9
            out = std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
        }
        dlclose(lib);
    }
    return out;
}

CudaDeviceInfo cuda_device_info(int index) {
    const int count = cuda_device_count();
    if (index < 0 || index >= count)
        throw std::runtime_error("no CUDA device cuda:" + std::to_string(index) + " (this machine has " +
                                 std::to_string(count) + ")");
    cudaDeviceProp prop{};
    TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    char bus_id[32] = {};
    TANDEM_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, index));
    CudaDeviceInfo info;
    info.index = index;
    info.name = prop.name;
    info.pci_bus_id = bus_id;
    std::transform(info.pci_bus_id.begin(), info.pci_bus_id.end(), info.pci_bus_id.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.total_memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
    info.multiprocessors = prop.multiProcessorCount;
    return info;
}

PcieLink pcie_link(const std::string& pci_bus_id) noexcept {
    try {
        PcieLink link = pcie_link_from_nvml(pci_bus_id);
        if (link.link.empty()) link = pcie_link_from_sysfs(pci_bus_id);
        return link;
    } catch (...) {
        return {};
    }
}

CudaBandwidth measure_cuda_bandwidth(int index, std::int64_t bytes, int warmup, int repeats) {
    if (bytes <= 0 || repeats <= 0 || warmup < 0)
        throw std::runtime_error("CUDA probe: bytes and repeats must be positive, warmup non-negative");
    CudaBandwidth out;
    out.device = cuda_device_info(index);
    out.bytes = bytes;
    out.warmup = warmup;
    out.repeats = repeats;
    TANDEM_CUDA_CHECK(cudaSetDevice(index));
    const auto size = static_cast<std::size_t>(bytes);
    {
        PinnedBuffer host(size);
        DeviceBuffer device_a(size);
        DeviceBuffer device_b(size);
        Stream stream;
        // Initialise both sides so no copy reads untouched pages (first-touch costs stay out of timing).
        std::fill_n(static_cast<unsigned char*>(host.ptr), size, static_cast<unsigned char>(0x5a));
        TANDEM_CUDA_CHECK(cudaMemsetAsync(device_a.ptr, 1, size, stream.stream));
        TANDEM_CUDA_CHECK(cudaMemsetAsync(device_b.ptr, 2, size, stream.stream));
        TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
        out.h2d = time_copies(device_a.ptr, host.ptr, size, cudaMemcpyHostToDevice, warmup, repeats, stream.stream);
        out.d2h = time_copies(host.ptr, device_a.ptr, size, cudaMemcpyDeviceToHost, warmup, repeats, stream.stream);
        out.d2d = time_copies(device_b.ptr, device_a.ptr, size, cudaMemcpyDeviceToDevice, warmup, repeats,
                              stream.stream);
        // The last copies must have landed: check one byte round-tripped through the device.
        unsigned char probe_byte = 0;
        TANDEM_CUDA_CHECK(cudaMemcpy(&probe_byte, static_cast<unsigned char*>(device_b.ptr) + size - 1, 1,
                                     cudaMemcpyDeviceToHost));
        if (probe_byte != 0x5a) throw std::runtime_error("CUDA probe: copied data does not match on cuda:" + std::to_string(index));
    }
    out.link = pcie_link(out.device.pci_bus_id);
    return out;
}

CudaSgemm measure_cuda_sgemm(int index, std::int64_t m, int warmup, int repeats) {
    if (m <= 0 || repeats <= 0 || warmup < 0)
        throw std::runtime_error("CUDA sgemm probe: size and repeats must be positive, warmup non-negative");
    TANDEM_CUDA_CHECK(cudaSetDevice(index));
    CudaSgemm out;
    out.m = m;
    out.warmup = warmup;
    out.repeats = repeats;
    out.library = "cuBLAS " + cublas_version();
    const auto count = static_cast<std::size_t>(m * m);
    const int n = static_cast<int>(m);
    DeviceBuffer a(count * sizeof(float)), b(count * sizeof(float)), c(count * sizeof(float));
    {
        std::vector<float> fill(count, 0.5f);
        TANDEM_CUDA_CHECK(cudaMemcpy(a.ptr, fill.data(), count * sizeof(float), cudaMemcpyHostToDevice));
        std::fill(fill.begin(), fill.end(), 0.25f);
        TANDEM_CUDA_CHECK(cudaMemcpy(b.ptr, fill.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    }
    Stream stream;
    Cublas blas;
    TANDEM_CUBLAS_PROBE_CHECK(cublasSetStream(blas.handle, stream.stream));
    TANDEM_CUBLAS_PROBE_CHECK(cublasSetMathMode(blas.handle, CUBLAS_DEFAULT_MATH));
    const float one = 1.0f, zero = 0.0f;
    // Row-major C = A B is column-major C^T = B^T A^T: the operands swap, no transposes.
    auto product = [&] {
        TANDEM_CUBLAS_PROBE_CHECK(cublasSgemm(blas.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one,
                                              static_cast<const float*>(b.ptr), n, static_cast<const float*>(a.ptr), n,
                                              &zero, static_cast<float*>(c.ptr), n));
    };
    for (int i = 0; i < warmup; ++i) product();
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
    Event start, stop;
    std::vector<double> seconds;
    for (int i = 0; i < repeats; ++i) {
        TANDEM_CUDA_CHECK(cudaEventRecord(start.event, stream.stream));
        product();
        TANDEM_CUDA_CHECK(cudaEventRecord(stop.event, stream.stream));
        TANDEM_CUDA_CHECK(cudaEventSynchronize(stop.event));
        float ms = 0;
        TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event, stop.event));
        seconds.push_back(ms / 1000.0);
    }
    float last = 0;
    TANDEM_CUDA_CHECK(cudaMemcpy(&last, static_cast<float*>(c.ptr) + count - 1, sizeof(float), cudaMemcpyDeviceToHost));
    if (last != 0.125f * static_cast<float>(m))
        throw std::runtime_error("CUDA sgemm probe: wrong product on cuda:" + std::to_string(index) + " (" +
                                 std::to_string(last) + ", expected " + std::to_string(0.125 * double(m)) + ")");
    out.time = best_and_median(std::move(seconds));
    return out;
}

}  // namespace tandem::cuda_probe
