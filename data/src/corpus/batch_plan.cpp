// The length-bucketed batch plan (algorithm in batch_plan.h and docs/data-corpus.md).
#include "tandem/data/batch_plan.h"
#include "tandem/strict_json.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_set>

namespace tandem::data {

uint64_t PlanRng::below(uint64_t n) {
    if (n == 0) throw Error("PlanRng::below(0)");
    // OpenBSD-style debiased modulo: reject the 2^64 mod n smallest raw values, so the accepted range
    // holds a whole multiple of n values and x % n is uniform.
    const uint64_t threshold = (uint64_t{0} - n) % n;  // == 2^64 mod n
    for (;;) {
        const uint64_t x = engine_();
        if (x >= threshold) return x % n;
    }
}

void fisher_yates_shuffle(std::vector<size_t>& values, PlanRng& rng) {
    for (size_t i = values.size(); i > 1; --i) {
        const size_t j = static_cast<size_t>(rng.below(i));
        std::swap(values[i - 1], values[j]);
    }
}

size_t BatchPlan::sequence_count() const {
    size_t n = 0;
    for (const auto& u : updates)
        for (const auto& m : u) n += m.size();
    return n;
}

BatchPlan make_batch_plan(const std::vector<size_t>& train_indices, const std::vector<size_t>& lengths,
                          const PlanOptions& options) {
    if (train_indices.size() != lengths.size())
        throw Error("batch plan: " + std::to_string(train_indices.size()) + " train indices but " +
                    std::to_string(lengths.size()) + " lengths");
    if (options.micro_batch == 0) throw Error("batch plan: micro_batch must be at least 1");
    if (options.accumulation == 0) throw Error("batch plan: accumulation must be at least 1");
    if (options.epochs == 0) throw Error("batch plan: epochs must be at least 1");
    if (options.bucket_updates == 0) throw Error("batch plan: bucket_updates must be at least 1");
    std::unordered_set<size_t> seen;
    for (size_t idx : train_indices)
        if (!seen.insert(idx).second) throw Error("batch plan: record index " + std::to_string(idx) + " appears twice");

    BatchPlan plan;
    static_cast<PlanOptions&>(plan) = options;

    // Work on positions 0..n-1 so lengths are looked up directly; map back to record indices last.
    PlanRng rng(options.seed);
    const size_t bucket = options.micro_batch * options.accumulation * options.bucket_updates;
    for (size_t epoch = 0; epoch < options.epochs; ++epoch) {
        std::vector<size_t> order(train_indices.size());
        std::iota(order.begin(), order.end(), size_t{0});
        fisher_yates_shuffle(order, rng);
        for (size_t b = 0; b < order.size(); b += bucket) {
            auto first = order.begin() + static_cast<std::ptrdiff_t>(b);
            auto last = order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), b + bucket));
            std::stable_sort(first, last, [&](size_t x, size_t y) { return lengths[x] > lengths[y]; });
        }
        std::vector<std::vector<size_t>> micro_batches;
        for (size_t m = 0; m < order.size(); m += options.micro_batch) {
            std::vector<size_t> mb;
            for (size_t k = m; k < std::min(order.size(), m + options.micro_batch); ++k) mb.push_back(train_indices[order[k]]);
            micro_batches.push_back(std::move(mb));
        }
        for (size_t u = 0; u < micro_batches.size(); u += options.accumulation) {
            std::vector<std::vector<size_t>> update(
                micro_batches.begin() + static_cast<std::ptrdiff_t>(u),
                micro_batches.begin() + static_cast<std::ptrdiff_t>(std::min(micro_batches.size(), u + options.accumulation)));
            plan.updates.push_back(std::move(update));
        }
    }
    return plan;
}

// plan.json's fields (docs/run-folder.md), each under its member's name. The macro's from_json goes
// unused: plan.json is read by plan_from_json, which checks every field and names the one at fault.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(BatchPlan, version, seed, micro_batch, accumulation, max_len, epochs, bucket_updates, updates)

nlohmann::json plan_to_json(const BatchPlan& plan) { return plan; }

namespace {
size_t plan_size(const nlohmann::json& j, const char* field, const std::string& where) {
    auto it = j.find(field);
    if (it == j.end()) throw Error(where + ": field \"" + field + "\": missing");
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
        throw Error(where + ": field \"" + field + "\": expected a non-negative integer");
    return it->get<size_t>();
}
}  // namespace

BatchPlan plan_from_json(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    BatchPlan plan;
    plan.version = static_cast<int>(plan_size(j, "version", where));
    if (plan.version != 1) throw Error(where + ": field \"version\": " + std::to_string(plan.version) + " is not supported (1 is)");
    plan.seed = plan_size(j, "seed", where);
    plan.micro_batch = plan_size(j, "micro_batch", where);
    plan.accumulation = plan_size(j, "accumulation", where);
    plan.max_len = plan_size(j, "max_len", where);
    plan.epochs = j.contains("epochs") ? plan_size(j, "epochs", where) : 1;
    plan.bucket_updates = j.contains("bucket_updates") ? plan_size(j, "bucket_updates", where) : 0;
    auto it = j.find("updates");
    if (it == j.end() || !it->is_array()) throw Error(where + ": field \"updates\": missing or not a list");
    for (size_t u = 0; u < it->size(); ++u) {
        const auto& update = (*it)[u];
        const std::string field = "updates[" + std::to_string(u) + "]";
        if (!update.is_array()) throw Error(where + ": field \"" + field + "\": expected a list of micro-batches");
        std::vector<std::vector<size_t>> mbs;
        for (size_t m = 0; m < update.size(); ++m) {
            const auto& mb = update[m];
            if (!mb.is_array()) throw Error(where + ": field \"" + field + "[" + std::to_string(m) + "]\": expected a list of record indices");
            std::vector<size_t> indices;
            for (const auto& v : mb) {
                if (!v.is_number_unsigned())
                    throw Error(where + ": field \"" + field + "[" + std::to_string(m) + "]\": expected non-negative integers");
                indices.push_back(v.get<size_t>());
            }
            mbs.push_back(std::move(indices));
        }
        plan.updates.push_back(std::move(mbs));
    }
    return plan;
}

void write_plan(const BatchPlan& plan, const std::filesystem::path& path) {
    write_file_atomic(path, plan_to_json(plan).dump() + "\n");
}

BatchPlan read_plan(const std::filesystem::path& path) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
        throw Error(path.string() + ": malformed JSON: " + tandem::json_error_text(e));
    }
    return plan_from_json(j, path.string());
}

}  // namespace tandem::data
