#pragma once
// The engine on one CUDA device: the same Qwen3 + LoRA training update and evaluation as the CPU
// Trainer (engine/include/tandem/engine/trainer.h), with the same inputs (MicroBatch), options
// (TrainOptions), metrics (UpdateMetrics, EvalResult) and resumable state (TrainerState, host
// TensorMaps with peft names), so a checkpoint written from either backend restores on the other.
//
// All device code lives in kernels/ (tandem_kernels); this class is host code that owns the device
// buffers and calls the launchers in the CPU model's order (engine/src/model/model.cpp), the
// llm.c way. Differences from the CPU model, by design (docs/engine-cuda.md):
//   - attention caches the row log-sum-exp, not the [B,H,T,T] probabilities;
//   - dropout masks are regenerated from the counter-based generator, never stored;
//   - the LM head runs over token chunks of ModelOptions::ce_token_chunk rows (whole vocabulary).
// Memory is accounted by a kernels::DeviceAllocator (weights, adapter+optimizer, activations,
// workspace); memory_report() is what the leg's memory events carry.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/engine/batch.h"
#include "tandem/engine/config.h"
#include "tandem/engine/model.h"
#include "tandem/engine/tensor.h"
#include "tandem/engine/trainer.h"
#include "tandem/kernels/device.h"

namespace tandem::engine::cuda {

// True when at least one CUDA device can be used; otherwise false and *reason says why.
bool device_available(std::string* reason = nullptr);
// "cuda:N" -> N; throws tandem::Error for anything else or an index >= the device count.
int parse_device(const std::string& name);

class CudaTrainer {
public:
    // Uploads base_weights to cuda:device (then drops the host copy) and allocates the adapter,
    // gradients and AdamW moments there. The adapter starts at A = B = 0 until load_adapter().
    static CudaTrainer create(int device, const Qwen3Config& config, TensorMap base_weights, const LoraConfig& lora,
                              TrainOptions options);
    ~CudaTrainer();
    CudaTrainer(CudaTrainer&&) noexcept;
    CudaTrainer& operator=(CudaTrainer&&) noexcept;

    void load_adapter(const TensorMap& peft_tensors);
    TensorMap adapter_tensors() const;
    TensorMap adapter_gradients() const;  // gradients of the last update, after clipping
    const std::vector<AdapterSlot>& adapter_slots() const;

    UpdateMetrics train_update(const std::vector<MicroBatch>& micro_batches);
    EvalResult evaluate(const std::vector<MicroBatch>& micro_batches);
    // The CPU model's entry points, for per-model tests: sum of token losses; forward_backward
    // ACCUMULATES grad_scale * d(loss sum)/d(adapter) into the gradient buffer (zero_grads() first).
    double forward_backward(const MicroBatch& mb, const DropoutContext& dropout, double grad_scale);
    double loss_sum(const MicroBatch& mb);
    void zero_grads();

    TrainerState state() const;
    void restore(const TrainerState& s);  // throws tandem::Error on a name/shape/seed mismatch

    int64_t step() const;
    double lr_for_update(int64_t t) const;
    const TrainOptions& options() const;
    int device() const;

    kernels::MemoryReport memory_report() const;
    void reset_peak_memory();

private:
    CudaTrainer();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::engine::cuda
