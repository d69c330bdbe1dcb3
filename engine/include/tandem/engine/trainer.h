#pragma once
// One training run of the engine on one backend (CPU or CUDA): a Qwen3LoraModel, AdamW moments, the
// schedule, clipping, gradient accumulation with docs/spec.md §Recipe's per-update token normalisation, evaluation
// and resumable state, written once over the backend seam (tandem/engine/backend.h). The engine leg,
// the C ABI and the tests drive training through this class only, whatever the backend; a
// TrainerState (host tensors with peft names) restores on any backend.
#include <cstdint>
#include <memory>
#include <vector>

#include "tandem/engine/batch.h"
#include "tandem/engine/config.h"
#include "tandem/engine/dropout.h"
#include "tandem/engine/model.h"
#include "tandem/engine/optim.h"
#include "tandem/engine/tensor.h"

namespace tandem::engine {

struct TrainOptions {
    double lr = 1e-4;               // peak learning rate
    AdamWOptions adamw{};
    int64_t total_updates = 1;      // T of the schedule
    int64_t warmup_updates = -1;    // W; < 0 means ceil(warmup_ratio * T)
    double warmup_ratio = 0.03;
    double max_grad_norm = 1.0;
    DropoutMode dropout_mode = DropoutMode::Native;  // Off forces no dropout even if lora.dropout > 0
    uint64_t seed = 0;              // experiment seed (dropout masks)
    int threads = 0;                // <= 0: hardware concurrency (the CPU backend made by create())
    ModelOptions model{};
};

struct UpdateMetrics {
    int64_t update = 0;             // 0-based index of this update
    double loss = 0.0;              // sum of token losses / supervised tokens of the whole update
    double grad_norm = 0.0;         // pre-clip global L2 norm
    double lr = 0.0;                // lr this update ran with
    int64_t supervised_tokens = 0;
    double wall_seconds = 0.0;
    double cpu_seconds = 0.0;       // the process's CPU time during the update (every thread)
};

// One AdamW step's operands and result, host copies in the adapter's flat layout (AdapterSlot offsets):
// what a replay of the step with the spec's AdamW needs (the engine leg's `optimizer_check`,
// tandem/legs/optimizer_replay.h; docs/thresholds.md "The optimizer step").
struct OptimizerStepOperands {
    std::vector<float> p0, g, m, v;  // before the step: parameters, the (clipped) gradient, the moments
    std::vector<float> p1;           // the parameters after it
    int64_t step = 0;                // optimizer steps done before this one (0 at the first)
    double lr = 0;                   // the lr the step ran with
};

// The process's CPU time so far, every thread (CLOCK_PROCESS_CPUTIME_ID), in seconds: what an update
// costs whatever else runs on the machine (the gate's step-time flag, docs/gate.md).
double process_cpu_seconds();

struct EvalResult {
    double loss = 0.0;              // token-weighted mean CE
    double loss_sum = 0.0;
    int64_t supervised_tokens = 0;
};

// Everything a fresh Trainer needs to continue a run bit-identically.
struct TrainerState {
    TensorMap adapter;              // peft names
    TensorMap adam_m;               // same names as adapter
    TensorMap adam_v;
    int64_t step = 0;               // optimizer updates done
    uint64_t native_rng_counter = 0;
    uint64_t seed = 0;
};

class Trainer {
public:
    // backend: where the model computes; nullptr = make_cpu_backend(options.threads).
    static Trainer create(const Qwen3Config& config, TensorMap base_weights, const LoraConfig& lora,
                          TrainOptions options, std::shared_ptr<Backend> backend = nullptr);
    ~Trainer();
    Trainer(Trainer&&) noexcept;
    Trainer& operator=(Trainer&&) noexcept;

    void load_adapter(const TensorMap& peft_tensors);
    TensorMap adapter_tensors() const;

    // One optimizer update over the given micro-batches (gradient accumulation over all of them).
    // Throws tandem::Error when the update has no supervised token. With an observer (observe.h),
    // every named step of this update's forward and backward passes is observed, and after the
    // AdamW step every LoRA parameter (pass Optimizer); nullptr: nothing is observed. With `operands`,
    // the AdamW step's operands and result are copied to the host into it (nothing changes).
    UpdateMetrics train_update(const std::vector<MicroBatch>& micro_batches, Observer* observer = nullptr,
                               OptimizerStepOperands* operands = nullptr);
    // Token-weighted held-out CE (dropout off, adapter on).
    EvalResult evaluate(const std::vector<MicroBatch>& micro_batches);

    TrainerState state() const;
    void restore(const TrainerState& s);  // throws tandem::Error on a name/shape mismatch

    int64_t step() const;
    double lr_for_update(int64_t t) const;
    Qwen3LoraModel& model();
    const TrainOptions& options() const;
    Backend& backend() const;

private:
    Trainer();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::engine
