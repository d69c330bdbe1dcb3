#pragma once
// A small fixed-size thread pool for the engine's non-GEMM loops (internal to src/model/).
// parallel_for splits [0, n) into at most num_threads() contiguous, equal chunks; chunk k always
// covers the same indices for a given (n, threads), so per-chunk reductions combined in chunk order
// are bit-reproducible.
#include <cstdint>
#include <functional>

namespace tandem::engine::detail {

// fn(begin, end) is called once per non-empty chunk, possibly concurrently.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
// Like parallel_for but never splits finer than `grain` items per chunk (small loops stay serial).
void parallel_for_grain(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
// Resizes the pool to n threads (n <= 0: hardware concurrency); returns the size.
int set_pool_size(int n);

}  // namespace tandem::engine::detail
