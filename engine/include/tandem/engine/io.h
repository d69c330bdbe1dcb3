#pragma once
// HuggingFace checkpoint folders and peft adapter folders, tensor names, parameter counting.
//
// Base checkpoint folder (HF): config.json + model.safetensors, or model.safetensors.index.json
// ({"weight_map": {name: shard file}}) + shards. Tensor names are HF's ("model.layers.3.mlp.up_proj.weight").
// Adapter folder (peft): adapter_config.json + adapter_model.safetensors with peft's names
// ("base_model.model.model.layers.3.mlp.up_proj.lora_A.weight", A [r, in], B [out, r]).
#include "tandem/engine/config.h"
#include "tandem/engine/safetensors.h"
#include "tandem/engine/tensor.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tandem::engine {

// ---- names and shapes --------------------------------------------------------------------------

// "self_attn" for q/k/v/o_proj, "mlp" for gate/up/down_proj; throws for anything else.
const char* projection_block(const std::string& target);
// HF name of a base projection weight: model.layers.<layer>.<block>.<target>.weight
std::string hf_projection_name(int64_t layer, const std::string& target);
// peft name of a LoRA factor: base_model.model.model.layers.<layer>.<block>.<target>.lora_<A|B>.weight
std::string peft_lora_name(int64_t layer, const std::string& target, char factor);
// {out, in} of a projection's weight (nn.Linear layout).
std::vector<int64_t> projection_shape(const Qwen3Config& c, const std::string& target);

// Every tensor a Qwen3ForCausalLM checkpoint holds, with its shape (lm_head.weight only when untied).
std::map<std::string, std::vector<int64_t>> expected_base_shapes(const Qwen3Config& c);
// Every tensor a peft LoRA adapter for this model holds.
std::map<std::string, std::vector<int64_t>> expected_adapter_shapes(const Qwen3Config& c, const LoraConfig& l);

// ---- base checkpoints ----------------------------------------------------------------------------

struct HfCheckpoint {
    Qwen3Config config;
    TensorMap tensors;  // HF names, float32; no lm_head.weight when the embeddings are tied
};

Qwen3Config read_hf_config(const std::filesystem::path& dir);  // dir/config.json

// Loads config.json and the (possibly sharded) safetensors, converts to float32, and checks the
// tensor set against the config: every expected name present with its shape, nothing unknown.
// A tied checkpoint that still stores lm_head.weight loads without it (transformers ties it to the
// embedding and ignores the stored copy); rotary inv_freq buffers of old exports are ignored.
HfCheckpoint load_hf_checkpoint(const std::filesystem::path& dir);

// Every tensor entry of a checkpoint folder's safetensors header(s) (all shards), read without
// loading any weight: names, dtypes and shapes (for `tandem inspect --model`).
std::map<std::string, SafetensorsEntry> read_hf_checkpoint_entries(const std::filesystem::path& dir);

// Checks the safetensors headers (no weight is read) against config.json: every tensor the config
// implies, with its shape, and nothing else (the ignorable buffers and a tied lm_head aside). Throws
// tandem::Error naming the shard, the tensor, both shapes and the config fields they follow from.
void check_hf_checkpoint_shapes(const std::filesystem::path& dir);

// Writes dir/model.safetensors (F32; metadata {"format": "pt"} as transformers writes it) and then
// dir/config.json. Creates dir. Checks the tensors against the config first.
void save_hf_checkpoint(const std::filesystem::path& dir, const Qwen3Config& config, const TensorMap& tensors,
                        const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// ---- peft adapters -------------------------------------------------------------------------------

struct LoraAdapter {
    LoraConfig config;
    TensorMap tensors;  // peft names
};

// Loads adapter_config.json + adapter_model.safetensors and checks every factor's name and shape
// against `model` and the adapter's config.
LoraAdapter load_peft_adapter(const std::filesystem::path& dir, const Qwen3Config& model);

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (metadata {"format": "pt"}), the
// way PeftModel.save_pretrained does. Checks the tensors against `model` first. Creates dir.
void save_peft_adapter(const std::filesystem::path& dir, const LoraConfig& lora, const TensorMap& tensors,
                       const Qwen3Config& model, const std::string& base_model_path = "");

// Throws tandem::Error naming `source` and the first tensor (in name order) holding a NaN or an
// infinity: "<file>: tensor 'model.norm.weight' holds non-finite values (1 NaN, 0 infinite of 128;
// first at flat index 5)". load_hf_checkpoint and load_peft_adapter call it on every file they read
// (a NaN weight would otherwise surface as a NaN loss, or, in the reference leg, as an L2 digest
// no parser reads).
void check_finite(const TensorMap& tensors, const std::string& source);

// Throws tandem::Error naming `source` and the first offending tensor when `tensors` does not hold
// exactly `expected` (missing, unexpected, or wrong shape).
void check_tensor_set(const TensorMap& tensors, const std::map<std::string, std::vector<int64_t>>& expected,
                      const std::string& source);

// ---- parameter counts (config arithmetic, no weights) --------------------------------------------

struct ParameterCounts {
    int64_t embedding = 0;   // embed_tokens
    int64_t attention = 0;   // q/k/v/o projections
    int64_t mlp = 0;         // gate/up/down projections
    int64_t norms = 0;       // input/post-attention layernorms, q_norm, k_norm, final norm
    int64_t lm_head = 0;     // 0 when tied
    int64_t total = 0;       // the base model's parameters
    int64_t trainable = 0;   // LoRA parameters (A and B of every adapted projection)
};

ParameterCounts count_parameters(const Qwen3Config& c, const LoraConfig* lora);

}  // namespace tandem::engine
