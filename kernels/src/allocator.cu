// The caching device allocator (device.h) and the error/discovery helpers every kernel file uses.
// No kernels here; host code compiled by nvcc so the CUDA runtime headers stay in kernels/.
#include "tandem/kernels/device.h"

#include <algorithm>
#include <sstream>

#include "tandem/error.h"

namespace tandem::kernels {

// ---------------------------------------------------------------------------------------------
// errors and discovery

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
    std::ostringstream s;
    s << "CUDA error " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ") in " << expr << " at "
      << file << ":" << line;
    throw tandem::Error(s.str());
}

void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line) {
    std::ostringstream s;
    s << "cuBLAS error " << cublasGetStatusName(st) << " (" << cublasGetStatusString(st) << ") in " << expr
      << " at " << file << ":" << line;
    throw tandem::Error(s.str());
}

int device_count_or_zero() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no driver" error so later calls start clean
        return 0;
    }
    return n;
}

std::string no_device_reason() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    }
    if (n == 0) return "cudaGetDeviceCount returned 0 devices";
    return {};
}

const char* memory_category_name(MemoryCategory c) {
    switch (c) {
        case MemoryCategory::Weights: return "weights";
        case MemoryCategory::AdapterOptimizer: return "adapter_optimizer";
        case MemoryCategory::Activations: return "activations";
        case MemoryCategory::Workspace: return "workspace";
    }
    return "unknown";
}

std::string MemoryReport::to_json() const {
    std::ostringstream s;
    s << "{\"device\":" << device << ",\"current_bytes\":" << current_bytes << ",\"peak_bytes\":" << peak_bytes
      << ",\"block_bytes\":" << block_bytes << ",\"peak_block_bytes\":" << peak_block_bytes
      << ",\"reserved_bytes\":" << reserved_bytes << ",\"peak_reserved_bytes\":" << peak_reserved_bytes
      << ",\"categories\":{";
    for (int i = 0; i < kMemoryCategoryCount; ++i) {
        s << (i ? "," : "") << "\"" << memory_category_name(static_cast<MemoryCategory>(i)) << "\":{\"current_bytes\":"
          << category_current[i] << ",\"peak_bytes\":" << category_peak[i] << "}";
    }
    s << "},\"cuda_malloc_calls\":" << cuda_malloc_calls << ",\"cache_hits\":" << cache_hits << "}";
    return s.str();
}

// ---------------------------------------------------------------------------------------------
// DeviceAllocator

size_t DeviceAllocator::round_block(size_t bytes) {
    constexpr size_t kSmall = 512, kLarge = size_t{2} << 20, kSmallLimit = size_t{1} << 20;
    if (bytes == 0) bytes = 1;
    const size_t unit = bytes < kSmallLimit ? kSmall : kLarge;
    return (bytes + unit - 1) / unit * unit;
}

DeviceAllocator::DeviceAllocator(int device) : device_(device) { r_.device = device; }

DeviceAllocator::~DeviceAllocator() {
    // Live blocks at destruction are the owner's leak; free them with the cache rather than leak
    // device memory, and never throw from a destructor.
    std::lock_guard<std::mutex> g(mutex_);
    int prev = 0;
    if (cudaGetDevice(&prev) == cudaSuccess) {
        (void)cudaSetDevice(device_);
        for (auto& kv : cache_) (void)cudaFree(kv.second);
        for (auto& kv : live_) (void)cudaFree(kv.first);
        (void)cudaSetDevice(prev);
    }
}

void* DeviceAllocator::allocate(size_t bytes, MemoryCategory category) {
    std::lock_guard<std::mutex> g(mutex_);
    const size_t block = round_block(bytes);
    void* ptr = nullptr;
    size_t got = 0;
    auto it = cache_.lower_bound(block);
    if (it != cache_.end() && it->first - block <= it->first / 4) {
        ptr = it->second;
        got = it->first;
        cache_.erase(it);
        ++r_.cache_hits;
    } else {
        CUDA_CHECK(cudaSetDevice(device_));
        cudaError_t e = cudaMalloc(&ptr, block);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            free_cache_locked();  // give the cache back and try once more
            e = cudaMalloc(&ptr, block);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            std::ostringstream s;
            s << "device cuda:" << device_ << ": cannot allocate " << bytes << " bytes for "
              << memory_category_name(category) << " (" << cudaGetErrorString(e) << "); allocator state "
              << r_.to_json();
            throw tandem::Error(s.str());
        }
        got = block;
        ++r_.cuda_malloc_calls;
        r_.reserved_bytes += got;
        r_.peak_reserved_bytes = std::max(r_.peak_reserved_bytes, r_.reserved_bytes);
    }
    live_.emplace(ptr, Live{bytes, got, category});
    const int c = static_cast<int>(category);
    r_.current_bytes += bytes;
    r_.block_bytes += got;
    r_.category_current[c] += bytes;
    r_.peak_bytes = std::max(r_.peak_bytes, r_.current_bytes);
    r_.peak_block_bytes = std::max(r_.peak_block_bytes, r_.block_bytes);
    r_.category_peak[c] = std::max(r_.category_peak[c], r_.category_current[c]);
    return ptr;
}

void DeviceAllocator::release(void* ptr) {
    if (!ptr) return;
    std::lock_guard<std::mutex> g(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end())
        throw tandem::Error("device allocator cuda:" + std::to_string(device_) + ": release of a pointer it did not allocate");
    const Live l = it->second;
    live_.erase(it);
    r_.current_bytes -= l.requested;
    r_.block_bytes -= l.block;
    r_.category_current[static_cast<int>(l.category)] -= l.requested;
    cache_.emplace(l.block, ptr);
}

void DeviceAllocator::free_cache_locked() {
    for (auto& kv : cache_) {
        CUDA_CHECK(cudaFree(kv.second));
        r_.reserved_bytes -= kv.first;
    }
    cache_.clear();
}

void DeviceAllocator::empty_cache() {
    std::lock_guard<std::mutex> g(mutex_);
    CUDA_CHECK(cudaSetDevice(device_));
    free_cache_locked();
}

void DeviceAllocator::reset_peak() {
    std::lock_guard<std::mutex> g(mutex_);
    r_.peak_bytes = r_.current_bytes;
    r_.peak_block_bytes = r_.block_bytes;
    r_.peak_reserved_bytes = r_.reserved_bytes;
    r_.category_peak = r_.category_current;
}

MemoryReport DeviceAllocator::report() const {
    std::lock_guard<std::mutex> g(mutex_);
    return r_;
}

// ---------------------------------------------------------------------------------------------
// cuBLAS handle and copies

BlasHandle::BlasHandle(cudaStream_t stream) {
    CUBLAS_CHECK(cublasCreate(&h_));
    CUBLAS_CHECK(cublasSetStream(h_, stream));
    // docs/spec.md §Recipe: float32 everywhere, no TF32. CUBLAS_DEFAULT_MATH never uses TF32 for Sgemm (TF32 needs
    // CUBLAS_TF32_TENSOR_OP_MATH or a TF32 compute type, neither of which appears in this code).
    CUBLAS_CHECK(cublasSetMathMode(h_, CUBLAS_DEFAULT_MATH));
    // Deterministic results for the same inputs: no atomics-based split-K reductions.
    CUBLAS_CHECK(cublasSetAtomicsMode(h_, CUBLAS_ATOMICS_NOT_ALLOWED));
}

BlasHandle::~BlasHandle() {
    if (h_) (void)cublasDestroy(h_);
}

void copy_to_device(float* dst, const float* src, size_t count, cudaStream_t stream) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyHostToDevice, stream));
}

void copy_to_host(float* dst, const float* src, size_t count, cudaStream_t stream) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace tandem::kernels
