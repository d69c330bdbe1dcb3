#pragma once
// Qwen3 decoder + LoRA adapters (float32) on any backend (tandem/engine/backend.h): the forward pass,
// the fused LM-head cross-entropy over the supervised rows, and the backward pass into the LoRA
// parameters only (the base model is frozen). The wiring is written ONCE (engine/src/model/model.cpp)
// and reaches every op through the Backend; the CPU and CUDA engines differ only in their backend.
//
// Layer layout (per decoder layer, N = B*T tokens, C hidden, H/KV heads, D head_dim, I intermediate):
//   x -> RMSNorm(input_layernorm) -> q/k/v (LoRA) -> q_norm/k_norm (per head) -> RoPE
//     -> causal GQA attention (padding masked) -> o_proj (LoRA) -> + x
//     -> RMSNorm(post_attention_layernorm) -> gate/up (LoRA) -> silu(gate)*up -> down (LoRA) -> + residual
// then model.norm and the tied LM head (embed_tokens^T). See docs/engine.md.
//
// LoRA parameters live in ONE contiguous float buffer on the backend (and one gradient buffer of the
// same layout), so the optimizer, clipping and checkpoints handle a single span. Layout: layer-major,
// then projections in {q,k,v,o,gate,up,down} order (only the targeted ones), then A [r,in] then B [out,r].
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/engine/backend.h"
#include "tandem/engine/batch.h"
#include "tandem/engine/config.h"
#include "tandem/engine/dropout.h"
#include "tandem/engine/observe.h"
#include "tandem/engine/faults.h"
#include "tandem/engine/tensor.h"

namespace tandem::engine {

// One LoRA tensor inside the flat parameter buffer.
struct AdapterSlot {
    std::string name;            // peft name, e.g. base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
    std::vector<int64_t> shape;  // [r,in] for A, [out,r] for B
    int64_t offset = 0;          // into params()/grads()
    int64_t layer = 0;
    int projection = 0;          // 0..6 (q,k,v,o,gate,up,down)
    bool is_a = true;
};

// The flat LoRA layout of a (config, adapter) pair — computed once, so every backend (and every
// checkpoint) agrees by construction.
struct AdapterLayout {
    static constexpr int kProjections = 7;  // q, k, v, o, gate, up, down
    std::array<bool, kProjections> adapted{};
    std::array<int64_t, kProjections> in_dim{}, out_dim{};
    std::vector<AdapterSlot> slots;                           // A then B per adapted projection, layer-major
    std::vector<std::array<int64_t, kProjections>> a_off, b_off;  // [layer][projection], -1 = not adapted
    int64_t num_params = 0;

    static AdapterLayout make(const Qwen3Config& config, const LoraConfig& lora);
};

struct ModelOptions {
    // Supervised rows per LM-head chunk: -1 = the backend's default (Backend::default_ce_token_chunk:
    // CPU 1024 rows, i.e. up to 622 MB of logits at 151,936 rows; CUDA 256), 0 = all rows at once.
    int64_t ce_token_chunk = -1;
    int64_t ce_vocab_chunk = 0;    // vocabulary rows per LM-head chunk; <= 0 = whole vocabulary
    FaultConfig faults{};          // all off (faults.h); the trainer reads its own switches from here too
};

class Qwen3LoraModel {
public:
    // base_weights: HF names (model.embed_tokens.weight, model.layers.N...., model.norm.weight;
    // lm_head.weight only when tie_word_embeddings is false). Shapes are checked; a missing or
    // misshapen tensor throws tandem::Error naming it. The tensors move to the backend (nullptr: a
    // CPU backend with the current thread count). The adapter starts at A = B = 0 until
    // load_adapter() is called.
    Qwen3LoraModel(const Qwen3Config& config, TensorMap base_weights, const LoraConfig& lora,
                   ModelOptions options = {}, std::shared_ptr<Backend> backend = nullptr);
    ~Qwen3LoraModel();
    Qwen3LoraModel(Qwen3LoraModel&&) noexcept;
    Qwen3LoraModel& operator=(Qwen3LoraModel&&) noexcept;

    const Qwen3Config& config() const;
    const LoraConfig& lora() const;

    // ---- adapter (peft names) -----------------------------------------------------------------
    const std::vector<AdapterSlot>& adapter_slots() const;
    // Every slot must be present with its shape; extra tensors are an error (wrong targets/rank).
    void load_adapter(const TensorMap& peft_tensors);
    TensorMap adapter_tensors() const;
    TensorMap adapter_gradients() const;  // same names as adapter_tensors()
    int64_t num_trainable() const;
    // Backend memory (host memory on the CPU backend).
    float* params();
    const float* params() const;
    float* grads();
    const float* grads() const;
    void zero_grads();
    Backend& backend() const;

    // ---- compute ------------------------------------------------------------------------------
    // Forward + fused CE over the supervised labels, then (if grad_scale != 0) backward, ACCUMULATING
    // grad_scale * d(sum of token losses)/d(adapter) into grads(). Returns the SUM of token losses.
    double forward_backward(const MicroBatch& mb, const DropoutContext& dropout, double grad_scale);
    // Sum of token losses over the supervised labels, dropout off, adapter on. No gradients.
    double loss_sum(const MicroBatch& mb);
    // Full logits [batch, seq, vocab] (tests / small vocabularies only; materialises B*T*V floats).
    std::vector<float> logits(const MicroBatch& mb);
    // The trainer's entry point: forward (+ backward when grad_scale != 0, ACCUMULATING into grads())
    // over every micro-batch, micro-batch i with dropout(i); their inputs go to the backend in one
    // upload and the host waits once, at the end, for the sum of token losses it returns.
    double accumulate(const std::vector<MicroBatch>& micro_batches,
                      const std::function<DropoutContext(size_t)>& dropout, double grad_scale);
    // Evaluation: the sum of token losses over every micro-batch, no gradients, adapter on (off under
    // the eval_without_adapter fault), micro-batch i with dropout(i) (Off unless the eval_dropout fault).
    double evaluate(const std::vector<MicroBatch>& micro_batches, const std::function<DropoutContext(size_t)>& dropout);

    // Logits [rows.size(), vocab] of the hidden states at flat positions rows (b * seq + t) of one
    // micro-batch (dropout off, adapter on): the next-token distributions of the probe set.
    std::vector<float> logits_at(const MicroBatch& mb, const std::vector<int32_t>& rows);

    // Fingerprints (observe.h): while set, the wiring calls `observer` after each named step of
    // forward, head and backward; nullptr (the default) = nothing is observed. Not owned.
    void set_observer(Observer* observer);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::engine
