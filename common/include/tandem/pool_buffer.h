#pragma once
// The one move-only owner of a typed allocation from a pool: the engine's Buffer<T> (a Backend) and
// the kernels' DeviceBuffer<T> (a DeviceAllocator) are this template. Pool provides
// `void* allocate(size_t bytes, Kind kind)` (throws when out of memory) and `void release(void*)`;
// the pool must outlive the buffer. A count of zero allocates nothing (get() is nullptr).
#include <cstddef>
#include <cstdint>

namespace tandem {

template <class T, class Pool, class Kind>
class PoolBuffer {
public:
    PoolBuffer() = default;
    PoolBuffer(Pool& pool, int64_t count, Kind kind)
        : pool_(&pool),
          count_(count > 0 ? count : 0),
          ptr_(count > 0 ? static_cast<T*>(pool.allocate(size_t(count) * sizeof(T), kind)) : nullptr) {}
    ~PoolBuffer() { reset(); }
    PoolBuffer(PoolBuffer&& o) noexcept : pool_(o.pool_), count_(o.count_), ptr_(o.ptr_) {
        o.ptr_ = nullptr;
        o.count_ = 0;
    }
    PoolBuffer& operator=(PoolBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            pool_ = o.pool_;
            count_ = o.count_;
            ptr_ = o.ptr_;
            o.ptr_ = nullptr;
            o.count_ = 0;
        }
        return *this;
    }
    PoolBuffer(const PoolBuffer&) = delete;
    PoolBuffer& operator=(const PoolBuffer&) = delete;

    void reset() {
        if (ptr_) pool_->release(ptr_);
        ptr_ = nullptr;
        count_ = 0;
    }
    T* get() const { return ptr_; }
    int64_t size() const { return count_; }
    size_t bytes() const { return size_t(count_) * sizeof(T); }

private:
    Pool* pool_ = nullptr;
    int64_t count_ = 0;
    T* ptr_ = nullptr;
};

}  // namespace tandem
