#pragma once
// The tiny Qwen3 the engine-level suites train (tests/ is on every suite's include path): 300 tokens,
// width 32, 4 query heads over 2 key/value heads (1 < KV < H, so the GQA head-mapping fault shows),
// head_dim 8, generated weights with std 0.1.
#include <cstdint>

#include "tandem/engine/config.h"

namespace tandem::test {

inline engine::Qwen3Config tiny_config(int64_t layers = 2) {
    return engine::Qwen3Config{.vocab_size = 300, .hidden_size = 32, .intermediate_size = 64,
                               .num_hidden_layers = layers, .num_attention_heads = 4, .num_key_value_heads = 2,
                               .head_dim = 8, .initializer_range = 0.1};
}

}  // namespace tandem::test
