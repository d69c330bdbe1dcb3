#pragma once
// Fault switches of the engine (docs/faults.md): named, documented bugs the engine can be
// told to commit, so that tandem's checks can be shown to catch them and how early. Every switch is
// OFF in a default-constructed FaultConfig, and an engine with the default config computes exactly
// what it computed before the switches existed (tests/engine/test_engine_digest pins the bits).
//
// Where each switch is consulted — one check at the named step, nowhere else:
//   - op variants (the Backend ops take them; the correct variant is what every caller passes by
//     default): RopePairing (rope_forward/backward), KvHeadMapping (attention_forward/backward),
//     LoraBGrad (lora_linear_backward), AdamW's bias correction / eps placement (AdamWOptions);
//   - the wiring (model.cpp): effective_config() once when the model binds (RMSNorm eps, RoPE theta),
//     the q/k-norm step, the k_proj adapter, the LoRA scaling, the label shift where the supervised
//     rows are computed, the adapter in evaluation;
//   - the trainer (trainer.cpp): gradient accumulation, clipping, AdamW options, the schedule, the
//     dropout contexts of training and evaluation, the runtime slowdown;
//   - the loader of the engine leg: truncate_mantissa() on one base tensor before L2's digests.
// The data/template faults live in the engine leg's data path (experiments/faults.h), and the
// catalogue — names, one-line descriptions, sizes, the level expected to catch each — is
// experiments/spec/include/tandem/spec/faults.h. Faults are set only through an experiment's
// `faults` list or `tandem faults`; a run with any fault says "FAULT INJECTED" wherever it is shown.
#include <cstdint>

#include "tandem/engine/config.h"

namespace tandem::engine {

// RoPE pairing: transformers' rotate_half pairs dimension i with i + D/2; the GPT-J / "interleaved"
// convention pairs (2i, 2i+1). Both use frequency i of the same tables.
enum class RopePairing : int { RotateHalf = 0, Interleaved = 1 };
// GQA: query head h reads key/value head h / (H/KV) (transformers' repeat_kv), or the wrong h % KV.
// The two agree when KV == 1 or KV == H.
enum class KvHeadMapping : int { Grouped = 0, Modulo = 1 };
// LoRA B's gradient dB = (dy·scaling)ᵀ t, t = A·dropout(x) [N, r]; the fault reads t's storage as if it
// held tᵀ [r, N] (a transposed view read as contiguous: the paper's fault 3). Forward unchanged.
enum class LoraBGrad : int { Correct = 0, TransposedOperand = 1 };
// The LoRA scaling used: the config's (alpha/sqrt(r) with rsLoRA), alpha/r (rsLoRA ignored), or alpha.
enum class LoraScaling : int { FromConfig = 0, AlphaOverRank = 1, RawAlpha = 2 };
// Which hidden state predicts the label at position t: t-1 (correct), t (not shifted), t-2 (twice).
enum class LabelShift : int { One = 0, None = 1, Two = 2 };
// Global-norm clipping of the update's gradient (correct), none, or each micro-batch's share clipped
// to max_norm on its own before they are summed (no clip of the sum).
enum class Clipping : int { Global = 0, Skipped = 1, PerMicroBatch = 2 };

struct FaultConfig {
    // ---- loading / config (the model reads them once, when it binds its base)
    double rms_norm_eps_factor = 1;  // every RMSNorm uses eps x this (10: 1e-5 for Qwen3's 1e-6)
    double rope_theta_divisor = 1;   // the RoPE tables use theta / this (100: 1e4 for Qwen3's 1e6)
    RopePairing rope_pairing = RopePairing::RotateHalf;
    bool skip_qk_norm = false;  // q_norm / k_norm not applied: q_proj / k_proj outputs go to RoPE as they are
    KvHeadMapping kv_heads = KvHeadMapping::Grouped;
    int truncated_mantissa_bits = 0;  // > 0: the engine leg's loader zeroes this many low mantissa bits of
                                      // kTruncatedTensor (truncate_mantissa) before L2's digests
    // ---- adapter
    bool k_proj_uses_v_adapter = false;  // k_proj runs with v_proj's A and B (same shape [KV*D, C]); k's own
                                         // adapter gets no gradient, v's gets both
    LoraScaling lora_scaling = LoraScaling::FromConfig;
    LoraBGrad lora_b_grad = LoraBGrad::Correct;
    // ---- loss / optimizer
    LabelShift label_shift = LabelShift::One;
    bool mean_of_micro_batch_means = false;  // each micro-batch backpropagates its own mean / M (and the
                                             // update's loss is the mean of the means), not sum / S
    Clipping clipping = Clipping::Global;
    bool adamw_no_bias_correction = false;
    bool adamw_eps_inside_sqrt = false;
    int64_t warmup_offset = 0;  // update t runs with the schedule's lr of update t + offset
    // ---- training loop
    double eval_dropout = 0;             // > 0: evaluation draws LoRA dropout masks with this p
    bool eval_without_adapter = false;   // evaluation runs the base model alone
    bool same_mask_every_micro_batch = false;  // every micro-batch of an update draws micro-batch 0's masks
    // ---- runtime
    double slow_after_eval = 0;  // > 1: the first update after each evaluation takes this many times
                                 // as long (the trainer sleeps); no number changes

    bool operator==(const FaultConfig&) const = default;
    bool any() const { return *this != FaultConfig{}; }  // some switch differs from its default
};

// The base tensor the mantissa-truncation fault hits.
inline constexpr const char* kTruncatedTensor = "model.layers.0.self_attn.q_proj.weight";

// Zeroes the low `bits` (1..23) mantissa bits of every float32 in [data, data + n): truncation toward
// zero to 23 - bits mantissa bits (16 = a float32 -> bfloat16 conversion by truncation).
void truncate_mantissa(float* data, int64_t n, int bits);

// The config the model computes with: `config` with the loading/config faults applied.
Qwen3Config effective_config(const Qwen3Config& config, const FaultConfig& faults);
// The LoRA scaling the model applies.
double effective_lora_scaling(const LoraConfig& lora, const FaultConfig& faults);

}  // namespace tandem::engine
