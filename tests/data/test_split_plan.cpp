// Split stability, eval prefix, the plan's generator and the length-bucketed batch plan.
#include "tandem/data/batch_plan.h"
#include "tandem/data/corpus.h"
#include "tandem/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

using namespace tandem::data;

namespace {

std::vector<Record> synthetic_records(size_t n) {
    std::vector<Record> records(n);
    for (size_t i = 0; i < n; ++i) {
        records[i].index = i;
        records[i].id = "synthetic:row" + std::to_string(i * 7919 % 100003);
    }
    return records;
}

}  // namespace

TEST(CorpusSplit, FractionIsRespectedWithinBinomialTolerance) {
    const auto records = synthetic_records(20000);
    const Split s = split_records(records, 1234, 0.15);
    EXPECT_EQ(s.train.size() + s.heldout.size(), records.size());
    const double expected = 0.15 * 20000, sd = std::sqrt(20000 * 0.15 * 0.85);
    EXPECT_LT(std::abs(static_cast<double>(s.heldout.size()) - expected), 4 * sd);
    EXPECT_TRUE(std::is_sorted(s.heldout.begin(), s.heldout.end()));
    EXPECT_TRUE(std::is_sorted(s.train.begin(), s.train.end()));
    EXPECT_TRUE(split_records(records, 1, 0.0).heldout.empty());
    EXPECT_TRUE(split_records(records, 1, 1.0).train.empty());
    EXPECT_THROW(split_records(records, 1, 1.5), tandem::Error);
}

TEST(CorpusSplit, RecordsKeepTheirSideWhenOthersAreRemovedOrAdded) {
    const auto all = synthetic_records(5000);
    const Split full = split_records(all, 42, 0.2);
    std::map<std::string, bool> side;
    for (size_t i : full.heldout) side[all[i].id] = true;
    for (size_t i : full.train) side[all[i].id] = false;
    // Drop every 10th record and add new ones; every surviving record keeps its side.
    std::vector<Record> fewer;
    for (size_t i = 0; i < all.size(); ++i)
        if (i % 10 != 3) fewer.push_back(all[i]);
    for (size_t i = 0; i < 300; ++i) {
        Record r;
        r.id = "added:" + std::to_string(i);
        fewer.insert(fewer.begin() + static_cast<std::ptrdiff_t>(i * 13 % fewer.size()), r);
    }
    const Split changed = split_records(fewer, 42, 0.2);
    size_t checked = 0;
    for (size_t i : changed.heldout) {
        if (!side.count(fewer[i].id)) continue;
        EXPECT_TRUE(side[fewer[i].id]) << fewer[i].id;
        ++checked;
    }
    for (size_t i : changed.train) {
        if (!side.count(fewer[i].id)) continue;
        EXPECT_FALSE(side[fewer[i].id]) << fewer[i].id;
        ++checked;
    }
    EXPECT_EQ(checked, 4500u);
    // Another seed gives another split.
    EXPECT_NE(split_records(all, 43, 0.2).heldout, full.heldout);
}

TEST(CorpusSplit, EvalPrefixIsTheFirstHeldOutRecords) {
    const Split s = split_records(synthetic_records(1000), 7, 0.3);
    const auto prefix = eval_prefix(s, 50);
    ASSERT_EQ(prefix.size(), 50u);
    EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), s.heldout.begin()));
    EXPECT_THROW(eval_prefix(s, s.heldout.size() + 1), tandem::Error);
}

TEST(PlanRng, EngineIsTheStandardMt19937_64) {
    // The C++ standard fixes the 10000th output of a default-seeded mt19937_64 ([rand.predef]).
    PlanRng rng(5489u);
    uint64_t x = 0;
    for (int i = 0; i < 10000; ++i) x = rng.next();
    EXPECT_EQ(x, 9981545732273789042ull);
}

TEST(PlanRng, BoundedDrawsAreInRangeAndRoughlyUniform) {
    PlanRng rng(99);
    std::vector<size_t> counts(6, 0);
    const size_t n = 60000;
    for (size_t i = 0; i < n; ++i) {
        const uint64_t v = rng.below(6);
        ASSERT_LT(v, 6u);
        ++counts[v];
    }
    // Chi-square with 5 degrees of freedom; 20.5 is the 0.999 quantile.
    double chi2 = 0;
    for (size_t c : counts) chi2 += (static_cast<double>(c) - n / 6.0) * (static_cast<double>(c) - n / 6.0) / (n / 6.0);
    EXPECT_LT(chi2, 20.5);
    EXPECT_EQ(rng.below(1), 0u);
    EXPECT_THROW(rng.below(0), tandem::Error);
}

TEST(PlanRng, FisherYatesIsAPermutationAndDependsOnTheSeed) {
    std::vector<size_t> a(100), b(100);
    for (size_t i = 0; i < 100; ++i) a[i] = b[i] = i;
    PlanRng r1(1), r2(2);
    fisher_yates_shuffle(a, r1);
    fisher_yates_shuffle(b, r2);
    std::vector<size_t> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
    EXPECT_NE(a, b);
}

namespace {

struct PlanInput {
    std::vector<size_t> train;
    std::vector<size_t> lengths;
};

PlanInput plan_input(size_t n) {
    PlanInput in;
    for (size_t i = 0; i < n; ++i) {
        in.train.push_back(3 * i + 1);                      // record indices need not be contiguous
        in.lengths.push_back(20 + (i * 2654435761u) % 490);  // 20..509 tokens
    }
    return in;
}

}  // namespace

TEST(BatchPlan, SameSeedSamePlanOtherSeedOtherPlan) {
    const PlanInput in = plan_input(1001);
    PlanOptions o;
    o.seed = 1234;
    const BatchPlan a = make_batch_plan(in.train, in.lengths, o);
    const BatchPlan b = make_batch_plan(in.train, in.lengths, o);
    EXPECT_EQ(a.updates, b.updates);
    EXPECT_EQ(plan_to_json(a).dump(), plan_to_json(b).dump());
    o.seed = 1235;
    EXPECT_NE(make_batch_plan(in.train, in.lengths, o).updates, a.updates);
}

TEST(BatchPlan, CoversEveryTrainRecordOncePerEpoch) {
    const PlanInput in = plan_input(1001);
    PlanOptions o;
    o.micro_batch = 2;
    o.accumulation = 8;
    o.epochs = 2;
    const BatchPlan p = make_batch_plan(in.train, in.lengths, o);
    // 1001 records -> 501 micro-batches (last one holds 1) -> 63 updates per epoch (last holds 5).
    ASSERT_EQ(p.updates.size(), 2 * 63u);
    EXPECT_EQ(p.updates[62].size(), 5u);
    EXPECT_EQ(p.updates[62].back().size(), 1u);
    EXPECT_EQ(p.sequence_count(), 2 * 1001u);
    for (size_t epoch = 0; epoch < 2; ++epoch) {
        std::multiset<size_t> seen;
        for (size_t u = epoch * 63; u < (epoch + 1) * 63; ++u)
            for (const auto& mb : p.updates[u]) {
                EXPECT_LE(mb.size(), 2u);
                seen.insert(mb.begin(), mb.end());
            }
        EXPECT_EQ(seen, std::multiset<size_t>(in.train.begin(), in.train.end())) << "epoch " << epoch;
    }
    // The two epochs are shuffled differently.
    EXPECT_NE(std::vector(p.updates.begin(), p.updates.begin() + 63), std::vector(p.updates.begin() + 63, p.updates.end()));
}

TEST(BatchPlan, BucketsAreSortedLongestFirst) {
    const PlanInput in = plan_input(300);
    std::map<size_t, size_t> length_of;
    for (size_t k = 0; k < in.train.size(); ++k) length_of[in.train[k]] = in.lengths[k];
    PlanOptions o;
    o.micro_batch = 2;
    o.accumulation = 4;
    o.bucket_updates = 3;  // buckets of 24 records
    const BatchPlan p = make_batch_plan(in.train, in.lengths, o);
    std::vector<size_t> flat;
    for (const auto& u : p.updates)
        for (const auto& mb : u)
            for (size_t idx : mb) flat.push_back(length_of.at(idx));
    ASSERT_EQ(flat.size(), 300u);
    size_t descents_broken = 0;
    for (size_t b = 0; b < flat.size(); b += 24) {
        const auto first = flat.begin() + static_cast<std::ptrdiff_t>(b);
        const auto last = flat.begin() + static_cast<std::ptrdiff_t>(std::min(flat.size(), b + 24));
        EXPECT_TRUE(std::is_sorted(first, last, std::greater<size_t>())) << "bucket at " << b;
        if (b > 0 && flat[b] > flat[b - 1]) ++descents_broken;
    }
    // Buckets are independent: across bucket borders the order starts again (not one global sort).
    EXPECT_GT(descents_broken, 0u);
    // Padding waste inside micro-batches is small compared with an unbucketed plan's.
    size_t waste = 0;
    for (const auto& u : p.updates)
        for (const auto& mb : u) {
            size_t longest = 0;
            for (size_t idx : mb) longest = std::max(longest, length_of.at(idx));
            for (size_t idx : mb) waste += longest - length_of.at(idx);
        }
    EXPECT_LT(waste, 300u * 40u);  // unbucketed pairs of lengths uniform on 20..509 waste ~ 300 * 80
}

TEST(BatchPlan, RejectsBadInputs) {
    PlanOptions o;
    EXPECT_THROW(make_batch_plan({1, 2}, {5}, o), tandem::Error);
    EXPECT_THROW(make_batch_plan({1, 1}, {5, 5}, o), tandem::Error);
    o.micro_batch = 0;
    EXPECT_THROW(make_batch_plan({1}, {5}, o), tandem::Error);
}

TEST(BatchPlan, JsonRoundTripAndErrorsNameTheField) {
    const PlanInput in = plan_input(50);
    const BatchPlan p = make_batch_plan(in.train, in.lengths, PlanOptions{});
    const auto j = plan_to_json(p);
    EXPECT_EQ(j["version"], 1);
    const BatchPlan q = plan_from_json(j, "plan.json");
    EXPECT_EQ(q.updates, p.updates);
    EXPECT_EQ(q.seed, p.seed);
    EXPECT_EQ(q.bucket_updates, p.bucket_updates);
    auto bad = j;
    bad["updates"][1][0] = "x";
    try {
        plan_from_json(bad, "run/plan.json");
        FAIL() << "no error";
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find("run/plan.json: field \"updates[1][0]\""), std::string::npos) << e.what();
    }
    bad = j;
    bad.erase("micro_batch");
    EXPECT_THROW(plan_from_json(bad, "plan.json"), tandem::Error);
}
