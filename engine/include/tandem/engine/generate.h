#pragma once
// Deterministic weights from a seed: a generated base checkpoint (so experiments run without
// downloaded weights) and the initial LoRA adapter every leg loads (docs/spec.md §Recipe "adapter init").
//
// The generator (documented precisely so any language can reproduce it; see docs/engine-io.md):
//   mix(z)        = SplitMix64's finaliser: z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
//                   z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31   (all mod 2^64)
//   fnv1a64(s)    = FNV-1a 64 over the bytes of s (offset 0xCBF29CE484222325, prime 0x100000001B3)
//   key(seed, domain, name) = mix(seed ^ fnv1a64(domain + "/" + name))
//   value(key, k) = mix(key + (k + 1) * 0x9E3779B97F4A7C15)       (SplitMix64's k-th output)
//   uniform(x)    = (x >> 11) * 2^-53                                 (a double in [0, 1))
// normal, element pair j (elements 2j and 2j+1 of the flat row-major tensor):
//   u1 = 1 - uniform(value(key, 2j)), u2 = uniform(value(key, 2j + 1)), r = sqrt(-2 ln u1)
//   e[2j] = std * r * cos(2 pi u2), e[2j+1] = std * r * sin(2 pi u2)  (double, then rounded to float)
// uniform(lo, hi), element k: lo + (hi - lo) * uniform(value(key, k))  (double, then float)
// Domains: "tandem.base" (base weights), "tandem.lora-init" (initial adapter); name = the tensor's
// file name (HF or peft). Each tensor is its own stream, so order and threading do not matter.
#include "tandem/engine/config.h"
#include "tandem/engine/tensor.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tandem::engine {

uint64_t splitmix64_mix(uint64_t z);
uint64_t fnv1a64(std::string_view bytes);
uint64_t generator_key(uint64_t seed, std::string_view domain, std::string_view name);
inline uint64_t generator_value(uint64_t key, uint64_t k) { return splitmix64_mix(key + (k + 1) * 0x9E3779B97F4A7C15ULL); }

void fill_normal(float* out, size_t n, double std, uint64_t key);
void fill_uniform(float* out, size_t n, double lo, double hi, uint64_t key);

inline constexpr const char* kBaseGeneratorDomain = "tandem.base";
inline constexpr const char* kLoraInitDomain = "tandem.lora-init";
inline constexpr const char* kGeneratorName = "tandem-splitmix64-boxmuller-v1";

// Every base tensor (HF names): Linear weights and the embedding ~ normal(0, initializer_range)
// (transformers' _init_weights), RMSNorm weights = 1. lm_head.weight only when untied.
TensorMap generate_base_weights(const Qwen3Config& c, uint64_t seed);

// generate_base_weights + save_hf_checkpoint: dir/config.json + dir/model.safetensors, with
// metadata {"format": "pt", "tandem_generator": kGeneratorName, "tandem_seed": "<seed>"}.
void write_generated_base(const std::filesystem::path& dir, const Qwen3Config& c, uint64_t seed);

// The initial adapter (peft names): A ~ uniform(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform with
// a = sqrt(5), peft's default init of lora_A), B = 0.
TensorMap generate_initial_adapter(const Qwen3Config& c, const LoraConfig& l, uint64_t seed);

// generate_initial_adapter + save_peft_adapter (dir/adapter_model.safetensors + adapter_config.json).
void write_initial_adapter(const std::filesystem::path& dir, const Qwen3Config& c, const LoraConfig& l, uint64_t seed,
                           const std::string& base_model_path = "");

}  // namespace tandem::engine
