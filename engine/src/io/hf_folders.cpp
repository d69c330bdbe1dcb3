// HF checkpoint folders, peft adapter folders, tensor names and parameter counts (io.h).
#include "tandem/engine/io.h"
#include "tandem/strict_json.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace tandem::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json_file(const fs::path& path) {
    const std::string text = read_file(path);
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        throw Error(path.string() + ": not valid JSON (" + tandem::json_error_text(e) + ")");
    }
}

bool ignorable_base_tensor(const std::string& name) {
    // Buffers some older exports stored; they are recomputed from the config, never trained.
    return name.size() >= 21 && name.compare(name.size() - 21, 21, "rotary_emb.inv_freq") == 0;
}

const char* kConfigFile = "config.json";
const char* kSingleFile = "model.safetensors";
const char* kIndexFile = "model.safetensors.index.json";

// (shard path, names the index assigns to it); a single-file checkpoint is one shard with no list.
std::vector<std::pair<fs::path, std::set<std::string>>> checkpoint_shards(const fs::path& dir) {
    if (fs::exists(dir / kSingleFile)) return {{dir / kSingleFile, {}}};
    const fs::path index = dir / kIndexFile;
    if (!fs::exists(index)) {
        if (!fs::is_directory(dir)) throw Error(dir.string() + ": not a folder");
        throw Error(dir.string() + ": holds neither " + kSingleFile + " nor " + kIndexFile);
    }
    const json j = read_json_file(index);
    const auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (wm == j.end() || !wm->is_object() || wm->empty())
        throw Error(index.string() + ": field 'weight_map' missing or not a non-empty object");
    std::map<std::string, std::set<std::string>> by_shard;
    for (const auto& [name, file] : wm->items()) {
        if (!file.is_string()) throw Error(index.string() + ": weight_map entry '" + name + "' is not a file name");
        const auto f = file.get<std::string>();
        // Shards live in the folder itself: no paths, so an index cannot point outside it.
        if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
            throw Error(index.string() + ": weight_map entry '" + name + "' names an invalid shard '" + f + "'");
        by_shard[f].insert(name);
    }
    std::vector<std::pair<fs::path, std::set<std::string>>> out;
    for (auto& [f, names] : by_shard) out.emplace_back(dir / f, std::move(names));
    return out;
}

void check_shard_names(const fs::path& shard, const std::set<std::string>& listed,
                       const std::vector<std::string>& present, const fs::path& dir) {
    if (listed.empty()) return;  // single file
    const std::set<std::string> have(present.begin(), present.end());
    for (const auto& n : listed)
        if (!have.count(n))
            throw Error(shard.string() + ": tensor '" + n + "' is assigned to this shard by " + (dir / kIndexFile).string() +
                        " but is not in it");
    for (const auto& n : have)
        if (!listed.count(n))
            throw Error(shard.string() + ": tensor '" + n + "' is not assigned to this shard by " +
                        (dir / kIndexFile).string());
}

}  // namespace

// ---- names and shapes ------------------------------------------------------------------------------

const char* projection_block(const std::string& target) {
    if (target == "q_proj" || target == "k_proj" || target == "v_proj" || target == "o_proj") return "self_attn";
    if (target == "gate_proj" || target == "up_proj" || target == "down_proj") return "mlp";
    throw Error("unknown projection '" + target + "' (known: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj)");
}

std::string hf_projection_name(int64_t layer, const std::string& target) {
    return "model.layers." + std::to_string(layer) + "." + projection_block(target) + "." + target + ".weight";
}

std::string peft_lora_name(int64_t layer, const std::string& target, char factor) {
    if (factor != 'A' && factor != 'B') throw Error(std::string("LoRA factor must be 'A' or 'B', got '") + factor + "'");
    return "base_model.model.model.layers." + std::to_string(layer) + "." + projection_block(target) + "." + target +
           ".lora_" + factor + ".weight";
}

std::vector<int64_t> projection_shape(const Qwen3Config& c, const std::string& target) {
    const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
    if (target == "q_proj") return {q, h};
    if (target == "k_proj" || target == "v_proj") return {kv, h};
    if (target == "o_proj") return {h, q};
    if (target == "gate_proj" || target == "up_proj") return {c.intermediate_size, h};
    if (target == "down_proj") return {h, c.intermediate_size};
    projection_block(target);  // throws with the list of known names
    return {};
}

std::map<std::string, std::vector<int64_t>> expected_base_shapes(const Qwen3Config& c) {
    std::map<std::string, std::vector<int64_t>> m;
    m["model.embed_tokens.weight"] = {c.vocab_size, c.hidden_size};
    m["model.norm.weight"] = {c.hidden_size};
    if (!c.tie_word_embeddings) m["lm_head.weight"] = {c.vocab_size, c.hidden_size};
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        m[p + "input_layernorm.weight"] = {c.hidden_size};
        m[p + "post_attention_layernorm.weight"] = {c.hidden_size};
        m[p + "self_attn.q_norm.weight"] = {c.head_dim};
        m[p + "self_attn.k_norm.weight"] = {c.head_dim};
        for (const auto& t : all_lora_targets()) m[hf_projection_name(l, t)] = projection_shape(c, t);
    }
    return m;
}

std::map<std::string, std::vector<int64_t>> expected_adapter_shapes(const Qwen3Config& c, const LoraConfig& l) {
    std::map<std::string, std::vector<int64_t>> m;
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer)
        for (const auto& t : l.targets) {
            const auto w = projection_shape(c, t);  // {out, in}
            m[peft_lora_name(layer, t, 'A')] = {l.rank, w[1]};
            m[peft_lora_name(layer, t, 'B')] = {w[0], l.rank};
        }
    return m;
}

void check_tensor_set(const TensorMap& tensors, const std::map<std::string, std::vector<int64_t>>& expected,
                      const std::string& source) {
    for (const auto& [name, shape] : expected) {
        const auto it = tensors.find(name);
        if (it == tensors.end()) throw Error(source + ": tensor '" + name + "' is missing (expected shape " + shape_text(shape) + ")");
        if (it->second.shape != shape)
            throw Error(source + ": tensor '" + name + "' has shape " + shape_text(it->second.shape) + ", expected " +
                        shape_text(shape));
        if (it->second.numel() != Tensor::count(shape))
            throw Error(source + ": tensor '" + name + "' holds " + std::to_string(it->second.numel()) +
                        " values for shape " + shape_text(shape));
    }
    for (const auto& [name, t] : tensors)
        if (!expected.count(name)) throw Error(source + ": unexpected tensor '" + name + "' (shape " + shape_text(t.shape) + ")");
}

void check_finite(const TensorMap& tensors, const std::string& source) {
    for (const auto& [name, t] : tensors) {
        int64_t nan = 0, inf = 0, first = -1;
        for (size_t i = 0; i < t.data.size(); ++i) {
            const float x = t.data[i];
            if (std::isfinite(x)) continue;
            (std::isnan(x) ? nan : inf) += 1;
            if (first < 0) first = static_cast<int64_t>(i);
        }
        if (first >= 0)
            throw Error(source + ": tensor '" + name + "' holds non-finite values (" + std::to_string(nan) + " NaN, " +
                        std::to_string(inf) + " infinite of " + std::to_string(t.data.size()) + "; first at flat index " +
                        std::to_string(first) + ")");
    }
}

// ---- base checkpoints ------------------------------------------------------------------------------

Qwen3Config read_hf_config(const fs::path& dir) {
    const fs::path p = dir / kConfigFile;
    if (!fs::exists(p)) throw Error(dir.string() + ": no " + kConfigFile + " (not a HuggingFace checkpoint folder)");
    return Qwen3Config::from_json(read_json_file(p), p.string());
}

HfCheckpoint load_hf_checkpoint(const fs::path& dir) {
    HfCheckpoint ck;
    ck.config = read_hf_config(dir);
    for (const auto& [shard, listed] : checkpoint_shards(dir)) {
        TensorMap part = read_safetensors(shard);
        check_finite(part, shard.string());
        std::vector<std::string> names;
        for (const auto& [n, t] : part) names.push_back(n);
        check_shard_names(shard, listed, names, dir);
        for (auto& [n, t] : part)
            if (!ck.tensors.emplace(n, std::move(t)).second)
                throw Error(shard.string() + ": tensor '" + n + "' also appears in another shard");
    }
    for (auto it = ck.tensors.begin(); it != ck.tensors.end();) {
        const bool drop = ignorable_base_tensor(it->first) || (ck.config.tie_word_embeddings && it->first == "lm_head.weight");
        it = drop ? ck.tensors.erase(it) : std::next(it);
    }
    check_tensor_set(ck.tensors, expected_base_shapes(ck.config), dir.string());
    return ck;
}

std::map<std::string, SafetensorsEntry> read_hf_checkpoint_entries(const fs::path& dir) {
    std::map<std::string, SafetensorsEntry> out;
    for (const auto& [shard, listed] : checkpoint_shards(dir)) {
        const SafetensorsHeader h = read_safetensors_header(shard);
        std::vector<std::string> names;
        for (const auto& e : h.tensors) names.push_back(e.name);
        check_shard_names(shard, listed, names, dir);
        for (const auto& e : h.tensors)
            if (!out.emplace(e.name, e).second)
                throw Error(shard.string() + ": tensor '" + e.name + "' also appears in another shard");
    }
    return out;
}

namespace {
// The config.json fields a base tensor's shape follows from (HF's view and the engine's are the same
// formula, expected_base_shapes): named in the message so a user knows which field to fix.
std::string shape_fields(const std::string& name, const Qwen3Config& c) {
    auto f = [](const char* k, int64_t v) { return std::string(k) + " " + std::to_string(v); };
    const std::string hidden = f("hidden_size", c.hidden_size);
    if (name.find("embed_tokens") != std::string::npos || name == "lm_head.weight") return f("vocab_size", c.vocab_size) + ", " + hidden;
    if (name.find("q_norm") != std::string::npos || name.find("k_norm") != std::string::npos) return f("head_dim", c.head_dim);
    if (name.find("q_proj") != std::string::npos || name.find("o_proj") != std::string::npos)
        return f("num_attention_heads", c.num_attention_heads) + ", " + f("head_dim", c.head_dim) + ", " + hidden;
    if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos)
        return f("num_key_value_heads", c.num_key_value_heads) + ", " + f("head_dim", c.head_dim) + ", " + hidden;
    if (name.find("mlp.") != std::string::npos) return f("intermediate_size", c.intermediate_size) + ", " + hidden;
    return hidden;
}
}  // namespace

void check_hf_checkpoint_shapes(const fs::path& dir) {
    const Qwen3Config config = read_hf_config(dir);
    const auto expected = expected_base_shapes(config);
    const std::string cfg = (dir / kConfigFile).string();
    std::set<std::string> seen;
    fs::path first_shard;
    for (const auto& [shard, listed] : checkpoint_shards(dir)) {
        if (first_shard.empty()) first_shard = shard;
        const SafetensorsHeader h = read_safetensors_header(shard);
        for (const auto& e : h.tensors) {
            if (ignorable_base_tensor(e.name) || (config.tie_word_embeddings && e.name == "lm_head.weight")) continue;
            seen.insert(e.name);
            const auto it = expected.find(e.name);
            if (it == expected.end())
                throw Error(shard.string() + ": tensor '" + e.name + "' (shape " + shape_text(e.shape) + ") is not part of the model " +
                            cfg + " describes (num_hidden_layers " + std::to_string(config.num_hidden_layers) + ", tie_word_embeddings " +
                            (config.tie_word_embeddings ? "true" : "false") + ")");
            if (e.shape != it->second)
                throw Error(shard.string() + ": tensor '" + e.name + "' has shape " + shape_text(e.shape) + ", but " + cfg + " (" +
                            shape_fields(e.name, config) + ") gives " + shape_text(it->second) +
                            "; the config does not describe these weights");
        }
    }
    for (const auto& [name, shape] : expected)
        if (!seen.count(name))
            throw Error((first_shard.empty() ? dir : first_shard).string() + ": tensor '" + name + "' is missing (" + cfg + " (" +
                        shape_fields(name, config) + ") expects it with shape " + shape_text(shape) + ")");
}

void save_hf_checkpoint(const fs::path& dir, const Qwen3Config& config, const TensorMap& tensors,
                        const std::map<std::string, std::string>& metadata) {
    check_tensor_set(tensors, expected_base_shapes(config), "base checkpoint for " + dir.string());
    fs::create_directories(dir);
    write_safetensors(dir / kSingleFile, tensors, metadata);
    write_file_atomic(dir / kConfigFile, config.to_json().dump(2) + "\n");
}

// ---- peft adapters ---------------------------------------------------------------------------------

LoraAdapter load_peft_adapter(const fs::path& dir, const Qwen3Config& model) {
    const fs::path cfg = dir / "adapter_config.json";
    const fs::path st = dir / "adapter_model.safetensors";
    if (!fs::exists(cfg)) throw Error(dir.string() + ": no adapter_config.json (not a peft adapter folder)");
    if (!fs::exists(st)) {
        if (fs::exists(dir / "adapter_model.bin"))
            throw Error(dir.string() + ": adapter_model.bin (pickle) is not supported; save the adapter with safetensors");
        throw Error(dir.string() + ": no adapter_model.safetensors");
    }
    LoraAdapter a;
    a.config = LoraConfig::from_peft_json(read_json_file(cfg), cfg.string());
    a.tensors = read_safetensors(st);
    check_finite(a.tensors, st.string());
    check_tensor_set(a.tensors, expected_adapter_shapes(model, a.config), st.string());
    return a;
}

void save_peft_adapter(const fs::path& dir, const LoraConfig& lora, const TensorMap& tensors, const Qwen3Config& model,
                       const std::string& base_model_path) {
    check_tensor_set(tensors, expected_adapter_shapes(model, lora), "adapter for " + dir.string());
    fs::create_directories(dir);
    write_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
    write_file_atomic(dir / "adapter_config.json", lora.to_peft_json(base_model_path).dump(2) + "\n");
}

// ---- parameter counts -------------------------------------------------------------------------------

ParameterCounts count_parameters(const Qwen3Config& c, const LoraConfig* lora) {
    ParameterCounts p;
    p.embedding = c.vocab_size * c.hidden_size;
    p.lm_head = c.tie_word_embeddings ? 0 : c.vocab_size * c.hidden_size;
    for (const auto& t : all_lora_targets()) {
        const auto s = projection_shape(c, t);
        (std::string(projection_block(t)) == "mlp" ? p.mlp : p.attention) += c.num_hidden_layers * s[0] * s[1];
    }
    p.norms = c.num_hidden_layers * (2 * c.hidden_size + 2 * c.head_dim) + c.hidden_size;
    p.total = p.embedding + p.attention + p.mlp + p.norms + p.lm_head;
    if (lora)
        for (const auto& t : lora->targets) {
            const auto s = projection_shape(c, t);
            p.trainable += c.num_hidden_layers * lora->rank * (s[0] + s[1]);
        }
    return p;
}

}  // namespace tandem::engine
