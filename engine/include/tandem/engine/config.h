#pragma once
// Model and adapter configuration shared by every engine piece (io/ and model/).
// The JSON side follows HuggingFace's config.json (Qwen3) and peft's adapter_config.json.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem::engine {

struct Qwen3Config {
    int64_t vocab_size = 151936;
    int64_t hidden_size = 1024;
    int64_t intermediate_size = 3072;
    int64_t num_hidden_layers = 28;
    int64_t num_attention_heads = 16;
    int64_t num_key_value_heads = 8;
    int64_t head_dim = 128;
    int64_t max_position_embeddings = 40960;
    double rms_norm_eps = 1e-6;
    double rope_theta = 1000000.0;
    double initializer_range = 0.02;
    bool tie_word_embeddings = true;
    bool attention_bias = false;

    // Parses HF config.json; `source` (a path) is named in errors. Implemented in src/io/config.cpp.
    static Qwen3Config from_json(const nlohmann::json& j, const std::string& source);
    nlohmann::json to_json() const;  // a config.json transformers' Qwen3ForCausalLM loads
    // Named architectures: "qwen3-0.6b" (docs/spec.md §Recipe) and the small test/CPU configs documented in
    // docs/engine.md. Throws tandem::Error for an unknown name, listing the known ones.
    static Qwen3Config named(std::string_view name);
};

// The seven projections LoRA may adapt, in peft's module names.
inline const std::vector<std::string>& all_lora_targets() {
    static const std::vector<std::string> t = {"q_proj", "k_proj", "v_proj", "o_proj",
                                               "gate_proj", "up_proj", "down_proj"};
    return t;
}

struct LoraConfig {
    int64_t rank = 16;
    double alpha = 32.0;
    bool use_rslora = true;  // scaling = alpha / sqrt(r) (rsLoRA), else alpha / r
    double dropout = 0.05;   // on the adapter input
    std::vector<std::string> targets = all_lora_targets();

    double scaling() const {
        return use_rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
    }
    // peft adapter_config.json (LoraConfig fields peft reads). Implemented in src/io/.
    static LoraConfig from_peft_json(const nlohmann::json& j, const std::string& source);
    nlohmann::json to_peft_json(const std::string& base_model_path) const;
};

}  // namespace tandem::engine
