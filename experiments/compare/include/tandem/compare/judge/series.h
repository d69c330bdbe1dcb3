#pragma once
// The per-update series judged beside held-out CE (docs/thresholds.md "Per-update series"): every leg
// reports, per update, the lr it ran with, its training loss and its pre-clip grad norm. Those are
// deterministic given the spec and the plan, so they are judged, not only shown:
//   lr          each leg's lr against the spec's schedule, to float32 rounding (kLrUlps ulp), paired
//               or not: a schedule is a setting, not a seed;
//   loss, grad  with a shared plan, paired legs: a paired series against its own float32 bound
//               (distance.h: paired_distance with kLossErrorModelK / kGradNormErrorModelK); unpaired
//               legs: the envelope's per-update band and a two-sided test (envelope_series_distance);
//   pinned      a pre-clip grad norm that reads the clip value on most updates is named (a norm
//               measured after clipping, or clipping per micro-batch).
#include "tandem/spec/experiment.h"
#include "tandem/store/run_file.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::experiments {

// |lr - schedule(u)| <= kLrUlps x eps32 x |schedule(u)| (floored at kLrUlps x eps32 x 1e-6 x lr, so a
// schedule value of 0 allows the rounding of a cosine's end): float32 rounding of the same formula.
inline constexpr double kLrUlps = 4;

// The spec's lr for 0-based update `update` of a run of `total` updates: transformers' cosine
// schedule with warmup, ceil(warmup_fraction x total) warmup updates (docs/spec.md §Recipe).
double scheduled_lr(const ExperimentSpec& spec, int64_t update, int64_t total);

struct ScheduleCheck {
    std::string leg;
    int64_t checked = 0;             // updates whose lr was compared
    int64_t first_off_update = -1;   // the first update whose lr is off the schedule; -1: none
    double lr = std::nan(""), expected = std::nan("");  // that update's lr and the schedule's
    int64_t off_updates = 0;         // how many updates are off
    std::string not_checked;         // why nothing was compared ("" = compared)
    bool off() const { return first_off_update >= 0; }
    // "lr of engine off the spec's schedule at update 2 (9.05e-05, the schedule 9.52e-05; 4 of 6 updates)"
    std::string describe() const;
};
// `total` < 1: the planned updates are unknown, nothing is compared (the completeness check says so).
ScheduleCheck schedule_check(const std::string& leg, const std::vector<StepRow>& steps, const ExperimentSpec& spec, int64_t total);

// A leg's optimizer steps replayed with the spec's AdamW on the leg's own operands (its `optimizer_check`
// events, tandem_leg.torch.replay): AdamW is elementwise, so given the gradient, the moments and the
// parameters before the step, the step is fixed to a few float32 ulp of its operands; each event carries
// the largest elementwise difference over that bound. Beyond 1 at any update: the leg's optimizer is not
// the spec's (a weight decay, an eps, a missing bias correction, another lr), paired or not.
struct OptimizerCheck {
    std::string leg;
    int64_t checked = 0;             // updates replayed
    int64_t first_off_update = -1;   // the first update beyond the bound; -1: none
    double ratio = 0;                // that update's ratio (else the largest)
    int64_t max_update = -1;         // the largest ratio's update
    double max_ratio = 0;
    std::string tensor;              // the tensor of the first off (else the largest) ratio
    int64_t over = 0, elements = 0;  // of that update
    bool off() const { return first_off_update >= 0; }
    // "optimizer step of hf at update 1: 23.4x its float32 bound (the spec's AdamW replayed on the leg's own
    // gradient and moments; 1200 of 5000 elements over, largest at ...)"
    std::string describe() const;
};
OptimizerCheck optimizer_check(const std::string& leg, const nlohmann::json& checks);

// The optimizer settings a leg reported (its `settings` event: docs/leg-protocol.md) against the spec's
// recipe, one line per difference, e.g. "weight_decay 0.01 on 56 adapter tensors; the spec says 0". Why
// read, not inferred: a weight decay of 0.01 or an eps of 1e-6 moves the first updates of a LoRA run by
// less than the float32 bounds of the series can see (docs/legs.md), yet the leg knows its settings
// exactly. Compared: the optimizer (AdamW, decoupled decay, no amsgrad), per parameter group the base lr,
// the lr it holds for update 0 (the schedule's value), betas, eps and weight decay (to float32
// rounding: kLrUlps ulp), the schedule's kind, warmup and length, the clip value, trainable tensors in
// no group. `total` < 1: the planned updates are unknown (warmup and length not compared). A field the
// leg left out is not compared; a malformed one is named.
std::vector<std::string> settings_differences(const nlohmann::json& settings, const ExperimentSpec& spec, int64_t total);

// "engine: pre-clip grad norm reads the clip value 1 on 6 of 6 updates (a norm taken after clipping,
// or clipping per micro-batch?)" when at least half the updates (and more than one) read `clip` to
// 1e-4 relative; "" otherwise, and for clip <= 0 (no clipping).
std::string pinned_at_clip(const std::string& leg, const std::vector<StepRow>& steps, double clip);

}  // namespace tandem::experiments
