// Fixed-size thread pool behind detail::parallel_for and ops::num_threads. Workers sleep on a
// condition variable between jobs; the calling thread runs chunk 0 itself.
#include "parallel.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "tandem/engine/ops.h"

namespace tandem::engine::detail {
namespace {

class Pool {
public:
    explicit Pool(int n) { start(n); }
    ~Pool() { stop(); }

    int size() const { return static_cast<int>(workers_.size()) + 1; }

    void resize(int n) {
        if (n == size()) return;
        stop();
        start(n);
    }

    void run(int chunks, const std::function<void(int)>& job) {
        if (chunks <= 1 || in_job_) {  // nested parallel_for runs serially (the pool is busy with us):
            for (int k = 0; k < chunks; ++k) job(k);  // every chunk, in order, on this thread
            return;
        }
        std::lock_guard<std::mutex> serial(run_mutex_);  // one job at a time
        {
            std::lock_guard<std::mutex> lk(m_);
            job_ = &job;
            chunks_ = chunks;
            pending_ = chunks - 1;
            error_ = nullptr;
            ++generation_;
        }
        cv_.notify_all();
        std::exception_ptr mine;
        try {
            in_job_ = true;
            job(0);
        } catch (...) {
            mine = std::current_exception();
        }
        in_job_ = false;
        std::unique_lock<std::mutex> lk(m_);
        done_cv_.wait(lk, [&] { return pending_ == 0; });
        job_ = nullptr;
        if (mine) std::rethrow_exception(mine);
        if (error_) std::rethrow_exception(error_);
    }

private:
    void start(int n) {
        quit_ = false;
        // Each worker starts from the generation current NOW: a job posted before the thread first
        // runs must still be seen as new (reading generation_ inside the thread would lose it).
        const uint64_t gen = generation_;
        for (int i = 1; i < n; ++i) workers_.emplace_back([this, i, gen] { loop(i, gen); });
    }
    void stop() {
        {
            std::lock_guard<std::mutex> lk(m_);
            quit_ = true;
            ++generation_;
        }
        cv_.notify_all();
        for (auto& w : workers_) w.join();
        workers_.clear();
    }
    void loop(int index, uint64_t seen) {
        for (;;) {
            const std::function<void(int)>* job = nullptr;
            {
                std::unique_lock<std::mutex> lk(m_);
                cv_.wait(lk, [&] { return quit_ || generation_ != seen; });
                if (quit_) return;
                seen = generation_;
                if (index >= chunks_) continue;
                job = job_;
            }
            std::exception_ptr err;
            try {
                in_job_ = true;
                (*job)(index);
            } catch (...) {
                err = std::current_exception();
            }
            in_job_ = false;
            {
                std::lock_guard<std::mutex> lk(m_);
                if (err && !error_) error_ = err;
                if (--pending_ == 0) done_cv_.notify_all();
            }
        }
    }

    static thread_local bool in_job_;
    std::vector<std::thread> workers_;
    std::mutex m_, run_mutex_;
    std::condition_variable cv_, done_cv_;
    const std::function<void(int)>* job_ = nullptr;
    int chunks_ = 0;
    int pending_ = 0;
    uint64_t generation_ = 0;
    bool quit_ = false;
    std::exception_ptr error_;
};

thread_local bool Pool::in_job_ = false;

int default_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

Pool& pool() {
    static Pool p(default_threads());
    return p;
}

}  // namespace

void parallel_for_grain(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    const int64_t threads = pool().size();
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(threads, n / std::max<int64_t>(1, grain)));
    const int64_t per = (n + chunks - 1) / chunks;
    pool().run(static_cast<int>(chunks), [&](int k) {
        const int64_t b = k * per;
        const int64_t e = std::min(n, b + per);
        if (b < e) fn(b, e);
    });
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) { parallel_for_grain(n, 1, fn); }

int set_pool_size(int n) {
    if (n <= 0) n = default_threads();
    pool().resize(n);
    return n;
}

}  // namespace tandem::engine::detail

namespace tandem::engine::ops {

int num_threads() { return detail::pool().size(); }

}  // namespace tandem::engine::ops
