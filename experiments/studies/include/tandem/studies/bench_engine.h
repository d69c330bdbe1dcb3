#pragma once
// `tandem bench engine` (docs/benchmarks.md "Engine vs PyTorch + peft across shapes"):
// tandem's CPU engine against the reference stack (transformers + peft, the reference leg's
// training step: experiments/legs/bench_reference.py) on the same generated micro-batches, each
// side a fresh process per repeat, interleaved engine, reference, engine, reference ..., at several
// thread counts; the sgemm probe beside every pair gives the peak the utilisation is read against.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/engine/batch.h"
#include "tandem/engine/config.h"
#include "tandem/compare/flops.h"

namespace tandem::experiments {

struct BenchShape {
    std::string name, description;
    engine::Qwen3Config config;
    int64_t seq = 0;  // padded length of every micro-batch (its first sequence is this long)
    int64_t micro_batch = 2, accumulation = 2;
};
// clinical-tiny (the main job's model), qwen3-0.6b-2l (two Qwen3-0.6B layers, seq 512), odd
// (untied, 3 query heads per kv head, heads x head_dim != hidden, seq 384); all with the real
// 151,936-row vocabulary.
const std::vector<BenchShape>& bench_shapes();
const BenchShape& bench_shape(const std::string& name);  // throws tandem::Error listing the known names

// The LoRA of every bench: the recipe's rsLoRA r 16 / alpha 32 on all seven projections, dropout 0.05.
engine::LoraConfig bench_lora();

// The request both sides read: {"config", "lora", "threads", "warmup_updates", "updates",
// "micro_batches": [{"batch", "seq", "ids", "supervised", "lengths"}]}. Sequences are right-padded
// (lengths 60-100 % of seq, the first one full), the first 20-40 % of each is an unsupervised
// prompt; ids are uniform over the vocabulary; everything from `seed`.
nlohmann::json bench_request(const BenchShape& shape, int threads, int updates, int warmup, uint64_t seed = 0);
// The request's micro-batches as the engine takes them.
std::vector<engine::MicroBatch> request_micro_batches(const nlohmann::json& request);
// The shapes of update u's micro-batches (for the FLOP formula).
std::vector<MicroBatchShape> request_update_shapes(const nlohmann::json& request, size_t update);

// The engine side of one repeat (what `tandem bench engine --worker REQUEST` prints): the CPU
// engine on the request's batches, generated base and adapter weights, native dropout masks.
// {"seconds": [timed updates], "cpu_seconds", "tokens", "losses", "setup_seconds", "peak_rss_bytes", "threads"}
nlohmann::json run_engine_bench_worker(const nlohmann::json& request);

struct BenchSideResult {
    std::vector<double> s_per_update;      // per repeat: mean wall seconds over the timed updates
    std::vector<double> cpu_s_per_update;  // per repeat: mean process CPU seconds (all threads)
    std::vector<int64_t> peak_rss_bytes;   // per repeat
    std::vector<double> setup_s;           // per repeat: process start to the first update
    double tokens_per_update = 0;          // real (non-padding) tokens of a timed update, mean
    std::string versions;                  // the stack (engine: tandem's; reference: torch/transformers/peft)
};
struct BenchCase {
    std::string shape;
    int threads = 0;
    double flops_per_update = 0;          // flops.h over the timed updates, mean
    std::vector<double> sgemm_flops_per_s;  // the sgemm probe before each repeat pair
    BenchSideResult engine, reference;
    BenchSideResult other;  // BenchOptions::other_engine_argv (another engine build), when given
};

struct BenchOptions {
    std::vector<std::string> shapes;  // empty: all
    std::vector<int> threads{1, 2};
    int repeats = 3;
    int updates = 3;  // timed updates per repeat
    int warmup = 1;   // untimed updates first
    std::vector<std::string> engine_argv;     // the engine worker command; the request path is appended
    std::vector<std::string> reference_argv;  // the reference worker command (python bench_reference.py)
    // Optional: another engine build's tests/engine/bench_engine (e.g. main's: the before figures),
    // timed third in every repeat (engine, other, reference). Its JSON is bench_engine's own.
    std::vector<std::string> other_engine_argv;
    std::string work_dir;                     // requests and worker logs
};

// Runs every (shape, threads) case: one request, then `repeats` x (sgemm probe, engine, reference).
// `progress` gets one line per process. Throws tandem::Error naming a worker that failed (its log).
std::vector<BenchCase> run_engine_bench(const BenchOptions& options, const std::function<void(const std::string&)>& progress);

// Summary figures of a side: min / median / max over the repeats.
struct Spread {
    double min = 0, median = 0, max = 0;
};
Spread spread(std::vector<double> values);

// The table `tandem bench engine` prints (format "text" or "md") and its JSON record.
std::string format_engine_bench(const std::vector<BenchCase>& cases, const std::string& format);
nlohmann::json engine_bench_json(const std::vector<BenchCase>& cases);

}  // namespace tandem::experiments
