#pragma once
// Random micro-batches for the engine's trainer tests (tests/ is on every suite's include path): two
// rows of 9 tokens, the second `second_length` long, every token from position 2 on supervised.
#include <cstdint>
#include <random>
#include <vector>

#include "tandem/engine/batch.h"

namespace tandem::test {

inline engine::MicroBatch random_micro_batch(std::mt19937_64& rng, int64_t vocab, int32_t second_length = 6) {
    engine::MicroBatch mb;
    mb.batch = 2;
    mb.seq = 9;
    mb.lengths = {9, second_length};
    mb.ids.resize(18);
    mb.supervised.assign(18, 0);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(vocab - 1));
    for (auto& id : mb.ids) id = tok(rng);
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 2; t < mb.lengths[size_t(b)]; ++t) mb.supervised[size_t(b * 9 + t)] = 1;
    return mb;
}

// `updates` updates of two random micro-batches each, from a fixed seed (99).
inline std::vector<std::vector<engine::MicroBatch>> random_plan(int updates, int64_t vocab) {
    std::mt19937_64 rng(99);
    std::vector<std::vector<engine::MicroBatch>> out;
    for (int u = 0; u < updates; ++u) out.push_back({random_micro_batch(rng, vocab), random_micro_batch(rng, vocab)});
    return out;
}

}  // namespace tandem::test
