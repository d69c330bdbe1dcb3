#pragma once
// Host stand-ins for the device primitives of kernels/src/attention.cuh, so its kernels run on
// the CPU (test_attention_emulated.cpp). One block at a time; each of its threads is a fiber
// (ucontext) on the calling thread, switched only at the synchronisation points:
//   - block_sync / warp_sync park the fiber until every thread of the block / warp has arrived;
//     a barrier that some thread can never reach (it exited, or waits at another kind) is an error;
//   - shfl_xor goes through a per-thread slot between two warp barriers;
//   - cp_async16 records a 16-byte copy in the thread's open group; in Copies::Late mode the copy
//     happens only when cp_async_wait retires its group (the latest moment the hardware may
//     deliver it), in Copies::Early mode at once (the earliest: it lands in a buffer that slower
//     threads may still be reading). A wrong wait count or a missing barrier then gives a wrong
//     result in one of the two modes; running the threads in forward and in reverse order at each
//     barrier interval exposes a read of data another thread has not written yet.
// Shared memory starts as NaN (a read of a never-written float poisons the result) and is checked
// against its bounds on every async write; every async read must fall inside a registered global
// array. Nothing here is meant to be fast.
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#define TANDEM_KERNEL_EMULATION 1
#define __restrict__ __restrict
#define TANDEM_ATTN_GLOBAL inline
#define TANDEM_ATTN_DEVICE inline
#define TANDEM_ATTN_BOUNDS(threads, blocks_per_sm)
#define TANDEM_ATTN_SMEM(name) float* name = ::tandem::kernels::attention::emulator().smem()

namespace tandem::kernels::attention {

struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

class Emulator {
public:
    enum class Copies { Early, Late };
    static constexpr int kMaxThreads = 1024;

    // Global arrays the kernels may read asynchronously: [begin, end) in bytes.
    void allow_reads(const void* p, size_t bytes) { readable_.push_back({static_cast<const char*>(p), bytes}); }
    void clear_reads() { readable_.clear(); }

    // Runs kernel() as every one of `threads` threads of block (bx, by) with smem_floats of shared memory.
    void run_block(const std::function<void()>& kernel, int bx, int by, int threads, size_t smem_floats,
                   Copies copies, bool reverse) {
        if (threads % 32 != 0 || threads > kMaxThreads) return error("block size not a multiple of 32 up to 1024");
        threads_ = threads;
        bx_ = bx;
        by_ = by;
        copies_ = copies;
        kernel_ = &kernel;
        smem_.assign(smem_floats, std::numeric_limits<float>::quiet_NaN());
        if (fibers_.size() < size_t(threads)) fibers_.resize(size_t(threads));
        for (int t = 0; t < threads; ++t) {
            Fiber& f = fibers_[size_t(t)];
            f.state = State::Run;
            f.groups.clear();
            f.open.clear();
            f.stack.resize(256 * 1024);
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = f.stack.data();
            f.ctx.uc_stack.ss_size = f.stack.size();
            f.ctx.uc_link = &scheduler_;
            makecontext(&f.ctx, &Emulator::trampoline, 0);
        }
        for (;;) {
            for (int i = 0; i < threads; ++i) {
                const int t = reverse ? threads - 1 - i : i;
                if (fibers_[size_t(t)].state != State::Run) continue;
                current_ = t;
                swapcontext(&scheduler_, &fibers_[size_t(t)].ctx);
            }
            if (!release()) break;
        }
    }

    const std::vector<std::string>& errors() const { return errors_; }
    void clear_errors() { errors_.clear(); }

    // primitives
    int thread() const { return current_; }
    int bx() const { return bx_; }
    int by() const { return by_; }
    float* smem() { return smem_.data(); }
    void park(bool block) {
        Fiber& f = fibers_[size_t(current_)];
        f.state = block ? State::BlockBarrier : State::WarpBarrier;
        swapcontext(&f.ctx, &scheduler_);
    }
    float shfl_xor(float v, int mask) {
        const int t = current_;
        slots_[t] = v;
        park(false);
        const float r = slots_[(t & ~31) | ((t & 31) ^ mask)];
        park(false);
        return r;
    }
    void cp_async16(float* dst, const float* src, bool fill) {
        const char* d = reinterpret_cast<const char*>(dst);
        const char* s0 = reinterpret_cast<const char*>(smem_.data());
        if (d < s0 || d + 16 > s0 + smem_.size() * sizeof(float) || (d - s0) % 16 != 0)
            return error("cp.async writes outside shared memory or unaligned");
        if (fill && !readable(src)) return error("cp.async reads outside every global array");
        if (fill && reinterpret_cast<uintptr_t>(src) % 16 != 0) return error("cp.async reads an unaligned address");
        const Copy c{dst, src, fill};
        if (copies_ == Copies::Early) perform(c);
        fibers_[size_t(current_)].open.push_back(c);
    }
    void commit() {
        Fiber& f = fibers_[size_t(current_)];
        f.groups.push_back(std::move(f.open));
        f.open.clear();
    }
    void wait(int pending) {
        Fiber& f = fibers_[size_t(current_)];
        while (int(f.groups.size()) > pending) {
            if (copies_ == Copies::Late)
                for (const Copy& c : f.groups.front()) perform(c);
            f.groups.erase(f.groups.begin());
        }
    }

private:
    enum class State { Run, BlockBarrier, WarpBarrier, Done };
    struct Copy {
        float* dst;
        const float* src;
        bool fill;
    };
    struct Fiber {
        ucontext_t ctx{};
        std::vector<char> stack;
        State state = State::Done;
        std::vector<std::vector<Copy>> groups;
        std::vector<Copy> open;
    };
    struct Range {
        const char* p;
        size_t bytes;
    };

    static void trampoline();

    void error(const std::string& what) {
        if (errors_.size() < 20)
            errors_.push_back(what + " (block " + std::to_string(bx_) + "," + std::to_string(by_) + " thread " +
                              std::to_string(current_) + ")");
    }
    bool readable(const float* src) const {
        const char* s = reinterpret_cast<const char*>(src);
        for (const Range& r : readable_)
            if (s >= r.p && s + 16 <= r.p + r.bytes) return true;
        return false;
    }
    static void perform(const Copy& c) {
        if (c.fill) std::memcpy(c.dst, c.src, 16);
        else std::memset(c.dst, 0, 16);
    }
    // After a pass in which every fiber ran until it parked or finished: lets a barrier go when all
    // its threads are there. False when the block is finished (or stuck: an error).
    bool release() {
        int done = 0, at_block = 0;
        for (int t = 0; t < threads_; ++t) {
            done += fibers_[size_t(t)].state == State::Done;
            at_block += fibers_[size_t(t)].state == State::BlockBarrier;
        }
        if (done == threads_) {
            for (int t = 0; t < threads_; ++t)
                if (!fibers_[size_t(t)].groups.empty() || !fibers_[size_t(t)].open.empty()) {
                    current_ = t;
                    error("thread exits with cp.async copies in flight");
                }
            return false;
        }
        bool released = false;
        for (int w = 0; w < threads_ / 32; ++w) {
            int at_warp = 0;
            for (int l = 0; l < 32; ++l) at_warp += fibers_[size_t(w * 32 + l)].state == State::WarpBarrier;
            if (at_warp == 32) {
                for (int l = 0; l < 32; ++l) fibers_[size_t(w * 32 + l)].state = State::Run;
                released = true;
            }
        }
        if (released) return true;
        // The kernels return only after their last block barrier: a thread that exited while others
        // wait at one is a bug (the hardware would let the barrier go without it).
        if (at_block > 0 && done == 0 && at_block == threads_) {
            for (int t = 0; t < threads_; ++t) fibers_[size_t(t)].state = State::Run;
            return true;
        }
        error(done > 0 ? "some threads exited while others wait at a barrier"
                       : "deadlock: a warp is split between a warp barrier and the block barrier");
        abandon();
        return false;
    }
    // A stuck block: its fibers are never resumed again (their stacks are reset by the next block).
    void abandon() {
        for (Fiber& f : fibers_) f.state = State::Done;
    }

    int bx_ = 0, by_ = 0, current_ = 0, threads_ = 0;
    Copies copies_ = Copies::Late;
    const std::function<void()>* kernel_ = nullptr;
    std::vector<float> smem_;
    std::vector<Fiber> fibers_;
    ucontext_t scheduler_{};
    float slots_[kMaxThreads] = {};
    std::vector<Range> readable_;
    std::vector<std::string> errors_;
};

inline Emulator& emulator() {
    static Emulator e;
    return e;
}

inline void Emulator::trampoline() {
    Emulator& e = emulator();
    (*e.kernel_)();
    e.fibers_[size_t(e.current_)].state = State::Done;  // uc_link returns to the scheduler
}

inline int thread_index() { return emulator().thread(); }
inline int block_x() { return emulator().bx(); }
inline int block_y() { return emulator().by(); }
inline void block_sync() { emulator().park(true); }
inline void warp_sync() { emulator().park(false); }
inline float shfl_xor(float v, int mask) { return emulator().shfl_xor(v, mask); }
inline float madd(float a, float b, float c) { return a * b + c; }
inline void cp_async16(float* smem, const float* gmem, bool fill) { emulator().cp_async16(smem, gmem, fill); }
inline void cp_async_commit() { emulator().commit(); }
template <int pending>
inline void cp_async_wait() {
    emulator().wait(pending);
}

}  // namespace tandem::kernels::attention
