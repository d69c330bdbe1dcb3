#pragma once
// Device basics for the CUDA backend: checked calls (CUDA_CHECK / CUBLAS_CHECK carry file and line
// and throw tandem::Error), device discovery that never throws (tests and `probe` must run on
// machines without a driver), and the caching device allocator with exact accounting.
//
// Accounting contract (what the leg's memory events carry):
//   - current_bytes: bytes the engine asked for and has not released, exact (not rounded);
//   - peak_bytes: the high-water mark of current_bytes since construction or reset_peak();
//   - per category (weights, adapter+optimizer, activations, workspace): current and peak, same rule;
//   - reserved_bytes / peak_reserved_bytes: what the allocator holds from cudaMalloc (live blocks plus
//     the cache), the figure comparable to torch.cuda.max_memory_reserved();
//   - block_bytes / peak_block_bytes: live blocks at their rounded size, the figure comparable to
//     torch.cuda.max_memory_allocated() (PyTorch also counts rounded blocks).
// The allocator never frees to the driver during training (cache), except on an out-of-memory retry
// and in empty_cache(); that keeps cudaMalloc's implicit device synchronisation out of the step.
#include <cuda_runtime_api.h>
#include <cublas_v2.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "tandem/pool_buffer.h"

namespace tandem::kernels {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line);

}  // namespace tandem::kernels

// One checked call: `expr` returns a status of type Status; anything but `ok` throws through
// tandem::kernels::thrower with the call's text, file and line.
#define TANDEM_KERNELS_CHECK_STATUS_(Status, ok, thrower, expr, text)                               \
    do {                                                                                          \
        const Status tandem_status_ = (expr);                                                     \
        if (tandem_status_ != ok) ::tandem::kernels::thrower(tandem_status_, text, __FILE__, __LINE__); \
    } while (0)

#define CUDA_CHECK(expr) TANDEM_KERNELS_CHECK_STATUS_(cudaError_t, cudaSuccess, throw_cuda_error, expr, #expr)
#define CUBLAS_CHECK(expr) \
    TANDEM_KERNELS_CHECK_STATUS_(cublasStatus_t, CUBLAS_STATUS_SUCCESS, throw_cublas_error, expr, #expr)

// After every kernel launch: a launch error (bad configuration, no device) surfaces here, at the
// launcher's line, not at the next synchronising call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace tandem::kernels {

// Number of CUDA devices; 0 when there is no driver or no device (never throws).
int device_count_or_zero();
// Why there is no usable device ("cudaGetDeviceCount: no CUDA-capable device is detected", ...),
// empty when there is one. GPU tests print this in their skip message.
std::string no_device_reason();

enum class MemoryCategory : int { Weights = 0, AdapterOptimizer = 1, Activations = 2, Workspace = 3 };
inline constexpr int kMemoryCategoryCount = 4;
const char* memory_category_name(MemoryCategory c);  // "weights", "adapter_optimizer", ...

struct MemoryReport {
    int device = -1;
    size_t current_bytes = 0;
    size_t peak_bytes = 0;
    size_t block_bytes = 0;
    size_t peak_block_bytes = 0;
    size_t reserved_bytes = 0;
    size_t peak_reserved_bytes = 0;
    std::array<size_t, kMemoryCategoryCount> category_current{};
    std::array<size_t, kMemoryCategoryCount> category_peak{};
    size_t cuda_malloc_calls = 0;  // blocks obtained from the driver
    size_t cache_hits = 0;         // allocations served from the cache
    // One JSON object (no trailing newline), keys as in docs/engine-cuda.md, for the memory events.
    std::string to_json() const;
};

// A caching allocator for one device. Thread-safe. Sizes are rounded up to 512 bytes (< 1 MiB) or
// 2 MiB (larger) for the block; a cached block is reused for a request of at most its size when it
// wastes no more than a quarter of it. Memory is not stream-ordered: the engine uses one stream per
// device, so a block released by a kernel's owner may be handed out again to later work in the same
// stream.
class DeviceAllocator {
public:
    explicit DeviceAllocator(int device);
    ~DeviceAllocator();
    DeviceAllocator(const DeviceAllocator&) = delete;
    DeviceAllocator& operator=(const DeviceAllocator&) = delete;

    void* allocate(size_t bytes, MemoryCategory category);  // throws tandem::Error on OOM (with report)
    void release(void* ptr);                                 // nullptr is a no-op
    void empty_cache();                                      // returns cached blocks to the driver
    void reset_peak();                                       // peaks := current values
    MemoryReport report() const;
    int device() const { return device_; }

    static size_t round_block(size_t bytes);

private:
    struct Live {
        size_t requested;
        size_t block;
        MemoryCategory category;
    };
    void free_cache_locked();
    int device_;
    mutable std::mutex mutex_;
    std::unordered_map<void*, Live> live_;
    std::multimap<size_t, void*> cache_;  // block size -> pointer
    MemoryReport r_{};
};

// An owning typed buffer from a DeviceAllocator (move-only; tandem/pool_buffer.h). count elements of T.
template <class T>
using DeviceBuffer = PoolBuffer<T, DeviceAllocator, MemoryCategory>;

// A cuBLAS handle bound to a stream, in CUBLAS_DEFAULT_MATH (float32 compute, never TF32: docs/spec.md §Recipe).
class BlasHandle {
public:
    explicit BlasHandle(cudaStream_t stream);
    ~BlasHandle();
    BlasHandle(const BlasHandle&) = delete;
    BlasHandle& operator=(const BlasHandle&) = delete;
    cublasHandle_t get() const { return h_; }

private:
    cublasHandle_t h_ = nullptr;
};

// Host <-> device copies on a stream (synchronous w.r.t. the host for the D2H direction).
void copy_to_device(float* dst, const float* src, size_t count, cudaStream_t stream);
void copy_to_host(float* dst, const float* src, size_t count, cudaStream_t stream);

}  // namespace tandem::kernels
