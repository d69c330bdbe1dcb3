#pragma once
// The engine leg's optimizer step replayed with the spec's AdamW on the leg's own operands: the C++ twin
// of tandem_leg.torch.replay (sdk/python/tandem_leg/torch/replay.py), so the engine's optimizer pass is
// judged by the same few-ulp bound as the Python legs' (docs/thresholds.md "The optimizer step").
//
// AdamW is elementwise: given the gradient the optimizer received, its moments and the parameters before
// the step, the parameters after it are fixed to a few float32 ulp. Per element, in double:
//   bound_i = ulp(p1_i) + K eps32 (lr/bc1 (b1 |m_i| + (1 - b1) |g_i|) / (sqrt(v1_i / bc2) + eps) + lr wd |p0_i|)
//             + ulp(p0_i) when the spec decays
// with K = kReplayK (the same K as the Python replay). The result is the `optimizer_check` event's fields.
#include "tandem/engine/model.h"
#include "tandem/engine/trainer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::experiments {

// The ulp count of the step's own arithmetic, doubled for the order of operations a stack may choose
// (tandem_leg.torch.replay.REPLAY_K).
inline constexpr double kReplayK = 16;

// The spec's AdamW (PyTorch semantics, bias-corrected, decoupled weight decay).
struct SpecAdamW {
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
};

// One element's difference from the spec's step over its bound (inf for a non-finite p1, or a nonzero
// difference against a zero bound). `step`: optimizer steps done before this one.
double replay_ratio(float p0, float g, float m, float v, float p1, int64_t step, double lr, const SpecAdamW& spec);

struct ReplayResult {
    double max_ratio = 0;      // the largest element's ratio (inf: a non-finite parameter)
    std::string tensor = "-";  // its tensor
    int64_t over = 0;          // elements over the bound
    int64_t elements = 0, tensors = 0;
};
// Every element of every slot (the adapter's tensors, by their offsets into the flat operands).
ReplayResult replay_adamw(const engine::OptimizerStepOperands& ops, const std::vector<engine::AdapterSlot>& slots,
                          const SpecAdamW& spec);

// The `optimizer_check` event of update `update` (docs/leg-protocol.md), as the Python legs emit it.
nlohmann::json optimizer_check_event(int64_t update, const ReplayResult& r);

}  // namespace tandem::experiments
