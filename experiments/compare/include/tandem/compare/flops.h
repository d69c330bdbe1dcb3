#pragma once
// The work of a training update, in FLOPs, from ONE formula that every leg is credited with
// (docs/benchmarks.md "FLOPs and utilisation"): the runner and `tandem bench engine`
// compute it from the model and adapter config and the shapes of the update's micro-batches, never
// from a leg's own count, so achieved FLOP/s and utilisation compare stacks on the same work.
//
// What is counted (2 FLOPs per multiply-add of a matrix product; everything else — norms, RoPE,
// softmax, SiLU, dropout, the optimizer — is not, < 1 % of an update here):
//   forward:  every projection x W^T over the micro-batch's B x T padded tokens; LoRA's A and B
//             products; attention's q k^T and P v per query head over the dense T x T scores (what
//             both stacks compute: the causal and padding mask skips no work); the LM head over the
//             supervised rows only.
//   backward: the products autograd needs and no more: the base model is frozen, so no weight
//             gradient of W, the embedding or the head; an input gradient only where the input
//             depends on a trainable parameter (so never for layer 0's q/k/v inputs: the embedding
//             and norms are frozen); LoRA's dB, dt = du B, dA and (where needed) dx += dt A;
//             attention's dq, dk, dP, dv for the inputs that need them; the head's dh.
// tests/compare/test_flops.py checks it against torch.utils.flop_counter.FlopCounterMode on
// the reference leg's model and micro-batch (within 2 %; measured: identical).
#include <cstdint>
#include <filesystem>
#include <vector>

#include "tandem/engine/config.h"

namespace tandem::experiments {

// One micro-batch: `batch` sequences right-padded to `seq` tokens, `supervised` label rows (labels
// at t >= 1 that the LM head scores).
struct MicroBatchShape {
    int64_t batch = 0, seq = 0, supervised = 0;
};

struct FlopCount {
    double projections_forward = 0, projections_backward = 0;  // frozen base x W^T and its input gradients
    double lora_forward = 0, lora_backward = 0;
    double attention_forward = 0, attention_backward = 0;
    double head_forward = 0, head_backward = 0;
    double forward() const { return projections_forward + lora_forward + attention_forward + head_forward; }
    double backward() const { return projections_backward + lora_backward + attention_backward + head_backward; }
    double total() const { return forward() + backward(); }
    FlopCount& operator+=(const FlopCount& o);
};

// One micro-batch's forward + backward.
FlopCount training_flops(const engine::Qwen3Config& config, const engine::LoraConfig& lora, const MicroBatchShape& mb);
// An update: the sum over its micro-batches (the optimizer step is not a matrix product).
FlopCount update_flops(const engine::Qwen3Config& config, const engine::LoraConfig& lora,
                       const std::vector<MicroBatchShape>& micro_batches);
// Forward only (an evaluation pass over these micro-batches: no backward).
FlopCount evaluation_flops(const engine::Qwen3Config& config, const engine::LoraConfig& lora,
                           const std::vector<MicroBatchShape>& micro_batches);

// run_update_flops (the FLOPs of a run folder's shared plan) is the runner's: tandem/runner/run_flops.h.

// A leg's work rate over its timing window (statistics.h timing_window), from per-update FLOPs and the
// update wall times it reported; -1 = unknown.
struct FlopFigures {
    double flops_per_update = -1;  // median over the window
    double flops_per_s = -1;       // sum of the window's FLOPs / sum of its update wall seconds
    double peak_flops_per_s = -1;  // the sgemm probe at the leg's device and thread count
    double utilisation = -1;       // flops_per_s / peak_flops_per_s
};
struct LegTrace;
FlopFigures flop_figures(const LegTrace& trace, const std::vector<double>& update_flops, double peak_flops_per_s);

}  // namespace tandem::experiments
