// Qwen3Config <-> HuggingFace config.json, LoraConfig <-> peft adapter_config.json, named configs.
// Where a field is absent we use transformers 5.24's Qwen3Config default, so both legs read the same
// architecture from the same file (docs/spec.md: "where this page is silent, match the reference stack").
#include "tandem/engine/config.h"

#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

namespace tandem::engine {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& field, const std::string& what) {
    throw Error(source + ": field '" + field + "': " + what);
}

const json* find(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
}

// Upper bounds on sizes read from files: far above any real Qwen3 (hidden 5120, 64 layers, vocab
// 151,936, context 131,072), low enough that shape arithmetic cannot overflow int64 and that code
// iterating over layers or ids (shape tables, parameter counts) finishes at once on a hostile file.
constexpr int64_t kMaxSize = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;

int64_t positive_int(const json& j, const char* key, const std::string& source, std::optional<int64_t> dflt,
                     int64_t max_value = kMaxSize) {
    const json* v = find(j, key);
    if (!v || v->is_null()) {
        if (!dflt) fail(source, key, "missing (required)");
        return *dflt;
    }
    if (!v->is_number_integer()) fail(source, key, "must be an integer, got " + v->dump());
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(max_value))
        fail(source, key, "must be at most " + std::to_string(max_value) + ", got " + v->dump());
    const auto x = v->get<int64_t>();
    if (x <= 0) fail(source, key, "must be positive, got " + std::to_string(x));
    if (x > max_value) fail(source, key, "must be at most " + std::to_string(max_value) + ", got " + std::to_string(x));
    return x;
}

double positive_number(const json& j, const char* key, const std::string& source, double dflt) {
    const json* v = find(j, key);
    if (!v || v->is_null()) return dflt;
    if (!v->is_number()) fail(source, key, "must be a number, got " + v->dump());
    const auto x = v->get<double>();
    if (!(x > 0.0) || !std::isfinite(x)) fail(source, key, "must be a positive finite number, got " + v->dump());
    return x;
}

bool boolean(const json& j, const char* key, const std::string& source, bool dflt) {
    const json* v = find(j, key);
    if (!v || v->is_null()) return dflt;
    if (!v->is_boolean()) fail(source, key, "must be true or false, got " + v->dump());
    return v->get<bool>();
}

// RoPE theta: transformers 5 writes rope_parameters {rope_theta, rope_type}; older files (the real
// Qwen3-0.6B config.json) have a top-level rope_theta and rope_scaling null. Scaled RoPE variants are
// not implemented, so any rope_type other than "default" is rejected rather than silently ignored.
double rope_theta_of(const json& j, const std::string& source) {
    double theta = 10000.0;  // transformers' default when neither form is present
    if (const json* t = find(j, "rope_theta"); t && !t->is_null()) theta = positive_number(j, "rope_theta", source, theta);
    if (const json* p = find(j, "rope_parameters"); p && !p->is_null()) {
        if (!p->is_object()) fail(source, "rope_parameters", "must be an object, got " + p->dump());
        if (const json* type = find(*p, "rope_type"); type && !type->is_null() && *type != "default")
            fail(source, "rope_parameters.rope_type", "only \"default\" RoPE is supported, got " + type->dump());
        if (find(*p, "rope_theta")) theta = positive_number(*p, "rope_theta", source + " (rope_parameters)", theta);
    }
    if (const json* s = find(j, "rope_scaling"); s && !s->is_null()) {
        const json* type = s->is_object() ? find(*s, "rope_type") : nullptr;
        if (!type) type = s->is_object() ? find(*s, "type") : nullptr;
        if (!type || *type != "default")
            fail(source, "rope_scaling", "scaled RoPE is not supported, got " + s->dump());
    }
    return theta;
}

}  // namespace

Qwen3Config Qwen3Config::from_json(const json& j, const std::string& source) {
    if (!j.is_object()) throw Error(source + ": a config.json must be a JSON object");
    if (const json* mt = find(j, "model_type"); mt && *mt != "qwen3")
        fail(source, "model_type", "expected \"qwen3\", got " + mt->dump());
    if (const json* act = find(j, "hidden_act"); act && !act->is_null() && *act != "silu")
        fail(source, "hidden_act", "only \"silu\" is supported, got " + act->dump());
    if (boolean(j, "use_sliding_window", source, false))
        fail(source, "use_sliding_window", "sliding-window attention is not supported");
    if (const json* lt = find(j, "layer_types"); lt && !lt->is_null()) {
        if (!lt->is_array()) fail(source, "layer_types", "must be a list, got " + lt->dump());
        for (const auto& t : *lt)
            if (t != "full_attention")
                fail(source, "layer_types", "only \"full_attention\" layers are supported, got " + t.dump());
    }

    Qwen3Config c;
    c.vocab_size = positive_int(j, "vocab_size", source, std::nullopt);
    c.hidden_size = positive_int(j, "hidden_size", source, std::nullopt);
    c.intermediate_size = positive_int(j, "intermediate_size", source, std::nullopt);
    c.num_hidden_layers = positive_int(j, "num_hidden_layers", source, std::nullopt, kMaxLayers);
    c.num_attention_heads = positive_int(j, "num_attention_heads", source, std::nullopt);
    c.num_key_value_heads = positive_int(j, "num_key_value_heads", source, c.num_attention_heads);
    // transformers 5.24's Qwen3Config has head_dim = 128 as its dataclass default, and its attention
    // module reads config.head_dim; an absent head_dim therefore means 128 there, not hidden/heads.
    // An explicit null falls back to hidden/heads like its rotary embedding does.
    if (const json* hd = find(j, "head_dim"); hd && hd->is_null()) {
        if (c.hidden_size % c.num_attention_heads != 0)
            fail(source, "head_dim", "null, and hidden_size is not divisible by num_attention_heads");
        c.head_dim = c.hidden_size / c.num_attention_heads;
    } else {
        c.head_dim = positive_int(j, "head_dim", source, int64_t{128});
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        fail(source, "num_key_value_heads",
             "num_attention_heads (" + std::to_string(c.num_attention_heads) + ") must be a multiple of it (" +
                 std::to_string(c.num_key_value_heads) + ")");
    c.max_position_embeddings = positive_int(j, "max_position_embeddings", source, int64_t{32768});
    c.rms_norm_eps = positive_number(j, "rms_norm_eps", source, 1e-6);
    c.rope_theta = rope_theta_of(j, source);
    c.initializer_range = positive_number(j, "initializer_range", source, 0.02);
    c.tie_word_embeddings = boolean(j, "tie_word_embeddings", source, false);
    c.attention_bias = boolean(j, "attention_bias", source, false);
    if (c.attention_bias) fail(source, "attention_bias", "attention biases are not supported (Qwen3 has none)");
    return c;
}

json Qwen3Config::to_json() const {
    // Field names and layout as transformers 5.24 writes them with save_pretrained().
    json layer_types = json::array();
    for (int64_t i = 0; i < num_hidden_layers; ++i) layer_types.push_back("full_attention");
    return json{
        {"architectures", json::array({"Qwen3ForCausalLM"})},
        {"attention_bias", attention_bias},
        {"attention_dropout", 0.0},
        {"bos_token_id", nullptr},
        {"dtype", "float32"},
        {"eos_token_id", nullptr},
        {"head_dim", head_dim},
        {"hidden_act", "silu"},
        {"hidden_size", hidden_size},
        {"initializer_range", initializer_range},
        {"intermediate_size", intermediate_size},
        {"layer_types", layer_types},
        {"max_position_embeddings", max_position_embeddings},
        {"max_window_layers", num_hidden_layers},
        {"model_type", "qwen3"},
        {"num_attention_heads", num_attention_heads},
        {"num_hidden_layers", num_hidden_layers},
        {"num_key_value_heads", num_key_value_heads},
        {"pad_token_id", nullptr},
        {"rms_norm_eps", rms_norm_eps},
        {"rope_parameters", {{"rope_theta", rope_theta}, {"rope_type", "default"}}},
        {"sliding_window", nullptr},
        {"tie_word_embeddings", tie_word_embeddings},
        {"use_cache", true},
        {"use_sliding_window", false},
        {"vocab_size", vocab_size},
    };
}

Qwen3Config Qwen3Config::named(std::string_view name) {
    // The struct defaults are the Qwen3-0.6B architecture (docs/spec.md §Recipe); the others change its sizes.
    if (name == "qwen3-0.6b") return Qwen3Config{};
    if (name == "bench-cpu") {
        // The CPU benchmark size (docs/benchmarks.md) (hidden 512, 4 layers, the real vocabulary).
        return Qwen3Config{.hidden_size = 512, .intermediate_size = 1536, .num_hidden_layers = 4,
                           .num_attention_heads = 8, .num_key_value_heads = 4, .head_dim = 64};
    }
    if (name == "tiny") {
        // clinical-tiny: small enough for a CPU run of a few hundred updates in minutes, keeps GQA
        // (2 query heads per kv head) and the real vocabulary so the real tokenizer's ids are valid.
        return Qwen3Config{.hidden_size = 128, .intermediate_size = 384, .num_hidden_layers = 2,
                           .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 32};
    }
    throw Error("unknown model config name '" + std::string(name) + "' (known: qwen3-0.6b, bench-cpu, tiny)");
}

// ---------------------------------------------------------------------------------------------
// peft adapter_config.json

LoraConfig LoraConfig::from_peft_json(const json& j, const std::string& source) {
    if (!j.is_object()) throw Error(source + ": an adapter_config.json must be a JSON object");
    if (const json* t = find(j, "peft_type"); !t || *t != "LORA")
        fail(source, "peft_type", "expected \"LORA\", got " + (t ? t->dump() : std::string("nothing")));
    LoraConfig c;
    c.rank = positive_int(j, "r", source, int64_t{8});  // peft's default r is 8
    const json* alpha = find(j, "lora_alpha");
    c.alpha = alpha ? positive_number(j, "lora_alpha", source, 8.0) : 8.0;  // peft's default lora_alpha is 8
    c.use_rslora = boolean(j, "use_rslora", source, false);
    c.dropout = 0.0;
    if (const json* d = find(j, "lora_dropout"); d && !d->is_null()) {
        if (!d->is_number() || d->get<double>() < 0.0 || d->get<double>() >= 1.0)
            fail(source, "lora_dropout", "must be a number in [0, 1), got " + d->dump());
        c.dropout = d->get<double>();
    }
    // target_modules: a list of module names, or one name. A string other than a plain projection
    // name is a regex (or "all-linear") in peft; we accept the one that means all seven projections.
    const json* tm = find(j, "target_modules");
    if (!tm || tm->is_null()) fail(source, "target_modules", "missing (required)");
    std::set<std::string> chosen;
    const auto& known = all_lora_targets();
    auto add = [&](const json& v) {
        if (!v.is_string()) fail(source, "target_modules", "entries must be strings, got " + v.dump());
        const auto s = v.get<std::string>();
        if (std::find(known.begin(), known.end(), s) == known.end())
            fail(source, "target_modules", "unsupported module '" + s +
                                               "' (supported: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj)");
        chosen.insert(s);
    };
    if (tm->is_string() && *tm == "all-linear") {
        chosen.insert(known.begin(), known.end());
    } else if (tm->is_string()) {
        add(*tm);
    } else if (tm->is_array()) {
        for (const auto& v : *tm) add(v);
    } else {
        fail(source, "target_modules", "must be a list of module names, got " + tm->dump());
    }
    if (chosen.empty()) fail(source, "target_modules", "is empty");
    c.targets.clear();
    for (const auto& t : known)  // canonical order, whatever order the file lists them in
        if (chosen.count(t)) c.targets.push_back(t);

    // Options peft supports that change the computation and that this engine does not implement:
    // refuse them rather than train something different.
    if (const json* b = find(j, "bias"); b && !b->is_null() && *b != "none")
        fail(source, "bias", "only \"none\" is supported, got " + b->dump());
    for (const char* key : {"use_dora", "fan_in_fan_out", "lora_bias", "use_qalora"})
        if (boolean(j, key, source, false)) fail(source, key, "is not supported (must be false)");
    for (const char* key : {"rank_pattern", "alpha_pattern"})
        if (const json* p = find(j, key); p && !p->is_null() && !p->empty())
            fail(source, key, "per-module ranks/alphas are not supported, got " + p->dump());
    for (const char* key : {"layers_to_transform", "modules_to_save", "layer_replication", "exclude_modules",
                            "target_parameters", "trainable_token_indices"})
        if (const json* p = find(j, key); p && !p->is_null() && !(p->is_array() && p->empty()))
            fail(source, key, "is not supported (must be null), got " + p->dump());
    return c;
}

json LoraConfig::to_peft_json(const std::string& base_model_path) const {
    // The fields peft 0.21.2 writes for LoraConfig(r, lora_alpha, use_rslora, lora_dropout,
    // target_modules, task_type="CAUSAL_LM"); every field not listed takes peft's default on load.
    return json{
        {"base_model_name_or_path", base_model_path.empty() ? json(nullptr) : json(base_model_path)},
        {"bias", "none"},
        {"fan_in_fan_out", false},
        {"inference_mode", true},
        {"init_lora_weights", true},
        {"layers_pattern", nullptr},
        {"layers_to_transform", nullptr},
        // peft writes lora_alpha as the int the user gave; keep integral values integral.
        {"lora_alpha", alpha == std::floor(alpha) && std::abs(alpha) < 1e15 ? json(static_cast<int64_t>(alpha)) : json(alpha)},
        {"lora_bias", false},
        {"lora_dropout", dropout},
        {"modules_to_save", nullptr},
        {"peft_type", "LORA"},
        {"r", rank},
        {"rank_pattern", json::object()},
        {"alpha_pattern", json::object()},
        {"revision", nullptr},
        {"target_modules", targets},
        {"task_type", "CAUSAL_LM"},
        {"use_dora", false},
        {"use_rslora", use_rslora},
    };
}

}  // namespace tandem::engine
