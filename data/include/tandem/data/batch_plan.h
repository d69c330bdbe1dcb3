#pragma once
// The length-bucketed batch plan (docs/spec.md §Recipe "batching"; file format in docs/run-folder.md, algorithm in
// docs/data-corpus.md). Computed once from the seed and handed to every leg as plan.json.
//
// Algorithm, per epoch e = 0, 1, ...:
//   1. shuffle the train indices with Fisher–Yates driven by PlanRng (std::mt19937_64 seeded with
//      `seed`, one generator for all epochs, bounded draws by rejection — see PlanRng);
//   2. cut the shuffled list into buckets of micro_batch * accumulation * bucket_updates records
//      (the last bucket may be smaller);
//   3. inside each bucket, sort by token length, longest first (stable: equal lengths keep their
//      shuffled order);
//   4. cut each bucket into micro-batches of micro_batch records, in order;
//   5. group the epoch's micro-batches, in order, into updates of `accumulation` micro-batches
//      (the epoch's last update may have fewer micro-batches, its last micro-batch fewer records).
// Every train index appears exactly once per epoch.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem::data {

struct PlanOptions {
    uint64_t seed = 1234;
    size_t micro_batch = 2;
    size_t accumulation = 8;
    size_t max_len = 512;        // recorded in the plan; lengths passed in are already truncated
    size_t epochs = 1;
    size_t bucket_updates = 4;   // bucket = micro_batch * accumulation * bucket_updates records
};

// The options it was made with (plan.json records them beside its updates) and the updates.
struct BatchPlan : PlanOptions {
    int version = 1;
    // updates[u][m] = record indices (into records.jsonl) of micro-batch m of update u, in order.
    std::vector<std::vector<std::vector<size_t>>> updates;

    size_t sequence_count() const;
};

// Deterministic generator for the plan: std::mt19937_64 (its output sequence is fixed by the C++
// standard) and an unbiased bounded draw by rejection: below(n) returns x % n for the first raw
// output x >= (2^64 mod n). (std::uniform_int_distribution is implementation-defined.)
class PlanRng {
public:
    explicit PlanRng(uint64_t seed) : engine_(seed) {}
    uint64_t next() { return engine_(); }
    uint64_t below(uint64_t n);  // uniform in [0, n), n >= 1

private:
    std::mt19937_64 engine_;
};

// Fisher–Yates, from the back: for i = n-1 down to 1, swap(v[i], v[rng.below(i + 1)]).
void fisher_yates_shuffle(std::vector<size_t>& values, PlanRng& rng);

// `train_indices[k]` has `lengths[k]` tokens (after truncation). Throws tandem::Error when the sizes
// differ, an option is zero or an index repeats.
BatchPlan make_batch_plan(const std::vector<size_t>& train_indices, const std::vector<size_t>& lengths,
                          const PlanOptions& options);

nlohmann::json plan_to_json(const BatchPlan& plan);
BatchPlan plan_from_json(const nlohmann::json& j, const std::string& where);  // `where` names the file
void write_plan(const BatchPlan& plan, const std::filesystem::path& path);    // atomic
BatchPlan read_plan(const std::filesystem::path& path);

}  // namespace tandem::data
