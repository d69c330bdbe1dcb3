// Qwen3Config / LoraConfig JSON and parameter counting.
#include "tandem/engine/config.h"
#include "tandem/engine/io.h"
#include "tandem/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace tandem::engine;
using nlohmann::json;

namespace {

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const tandem::Error& e) {
        return e.what();
    }
    return "<no error>";
}

json real_qwen3_06b_config() {
    // The fields of Qwen/Qwen3-0.6B's config.json (transformers 4.51 era: top-level rope_theta).
    return json::parse(R"({
      "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
      "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
      "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
      "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
      "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
      "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

}  // namespace

TEST(Config, SpecCountsForQwen3_06bWithRank16OnSevenProjections) {
    // docs/spec.md §Recipe: 596,049,920 parameters; rsLoRA r 16 on all seven projections: 10,092,544 trainable.
    const auto c = Qwen3Config::named("qwen3-0.6b");
    LoraConfig l;
    l.rank = 16;
    const auto p = count_parameters(c, &l);
    EXPECT_EQ(p.total, 596049920);
    EXPECT_EQ(p.trainable, 10092544);
    EXPECT_EQ(p.lm_head, 0);
    EXPECT_EQ(p.embedding, 151936 * 1024);
    EXPECT_EQ(p.embedding + p.attention + p.mlp + p.norms, p.total);
    // The same numbers from the expected tensor shapes (independent of the group arithmetic).
    int64_t from_shapes = 0, lora_from_shapes = 0;
    for (const auto& [n, s] : expected_base_shapes(c)) from_shapes += Tensor::count(s);
    for (const auto& [n, s] : expected_adapter_shapes(c, l)) lora_from_shapes += Tensor::count(s);
    EXPECT_EQ(from_shapes, 596049920);
    EXPECT_EQ(lora_from_shapes, 10092544);
}

TEST(Config, ReadsTheRealQwen3ConfigAndTheNamedOneMatchesIt) {
    const auto c = Qwen3Config::from_json(real_qwen3_06b_config(), "Qwen3-0.6B/config.json");
    const auto n = Qwen3Config::named("qwen3-0.6b");
    EXPECT_EQ(c.to_json(), n.to_json());
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(Config, ToJsonRoundTrips) {
    for (const char* name : {"qwen3-0.6b", "bench-cpu", "tiny"}) {
        const auto c = Qwen3Config::named(name);
        const auto back = Qwen3Config::from_json(c.to_json(), name);
        EXPECT_EQ(back.to_json(), c.to_json()) << name;
        EXPECT_EQ(c.to_json()["rope_parameters"]["rope_theta"], 1e6) << name;
    }
    EXPECT_NE(error_of([] { Qwen3Config::named("qwen9"); }).find("known: qwen3-0.6b"), std::string::npos);
}

TEST(Config, DefaultsFollowTransformers) {
    json j = {{"model_type", "qwen3"}, {"vocab_size", 100}, {"hidden_size", 64}, {"intermediate_size", 96},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
    const auto c = Qwen3Config::from_json(j, "x");
    EXPECT_EQ(c.num_key_value_heads, 4);
    EXPECT_EQ(c.head_dim, 128);          // transformers 5.24's Qwen3Config default
    EXPECT_EQ(c.rope_theta, 10000.0);
    EXPECT_FALSE(c.tie_word_embeddings);
    j["head_dim"] = nullptr;
    EXPECT_EQ(Qwen3Config::from_json(j, "x").head_dim, 16);  // explicit null: hidden / heads
}

TEST(Config, ErrorsNameTheFileAndTheField) {
    auto j = real_qwen3_06b_config();
    j.erase("hidden_size");
    EXPECT_EQ(error_of([&] { Qwen3Config::from_json(j, "m/config.json"); }),
              "m/config.json: field 'hidden_size': missing (required)");
    j = real_qwen3_06b_config();
    j["num_key_value_heads"] = 3;
    EXPECT_NE(error_of([&] { Qwen3Config::from_json(j, "m/config.json"); }).find("'num_key_value_heads'"), std::string::npos);
    j = real_qwen3_06b_config();
    j["vocab_size"] = "big";
    EXPECT_EQ(error_of([&] { Qwen3Config::from_json(j, "f"); }), "f: field 'vocab_size': must be an integer, got \"big\"");
    j = real_qwen3_06b_config();
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
    EXPECT_NE(error_of([&] { Qwen3Config::from_json(j, "f"); }).find("rope_scaling"), std::string::npos);
    j = real_qwen3_06b_config();
    j["model_type"] = "llama";
    EXPECT_NE(error_of([&] { Qwen3Config::from_json(j, "f"); }).find("model_type"), std::string::npos);
    EXPECT_NE(error_of([&] { Qwen3Config::from_json(json::array(), "f"); }).find("f:"), std::string::npos);
    j = real_qwen3_06b_config();
    j["layer_types"] = {"full_attention", "sliding_attention"};
    EXPECT_NE(error_of([&] { Qwen3Config::from_json(j, "f"); }).find("f: field 'layer_types'"), std::string::npos);
}

TEST(LoraConfigJson, RoundTripsAndKeepsCanonicalTargetOrder) {
    LoraConfig l;
    l.rank = 16;
    l.alpha = 32;
    l.targets = {"v_proj", "q_proj"};
    auto j = l.to_peft_json("base");
    EXPECT_EQ(j["lora_alpha"], 32);
    EXPECT_TRUE(j["lora_alpha"].is_number_integer());
    EXPECT_EQ(j["peft_type"], "LORA");
    EXPECT_EQ(j["task_type"], "CAUSAL_LM");
    const auto back = LoraConfig::from_peft_json(j, "a.json");
    EXPECT_EQ(back.rank, 16);
    EXPECT_EQ(back.alpha, 32.0);
    EXPECT_TRUE(back.use_rslora);
    EXPECT_EQ(back.dropout, 0.05);
    EXPECT_EQ(back.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
    EXPECT_DOUBLE_EQ(back.scaling(), 8.0);
}

TEST(LoraConfigJson, RefusesOptionsThatChangeTheComputation) {
    const auto base = LoraConfig{}.to_peft_json("");
    for (auto [key, value] : std::vector<std::pair<std::string, json>>{
             {"use_dora", true}, {"bias", "all"}, {"rank_pattern", {{"q_proj", 4}}}, {"layers_to_transform", {0}},
             {"target_modules", {"lm_head"}}, {"peft_type", "IA3"}, {"r", 0}, {"lora_dropout", 1.5}}) {
        auto j = base;
        j[key] = value;
        const auto msg = error_of([&] { LoraConfig::from_peft_json(j, "ad/adapter_config.json"); });
        EXPECT_NE(msg.find("ad/adapter_config.json: field '" + key + "'"), std::string::npos) << key << ": " << msg;
    }
    auto j = base;
    j.erase("use_rslora");  // peft's default: plain LoRA scaling alpha / r
    EXPECT_FALSE(LoraConfig::from_peft_json(j, "x").use_rslora);
}
