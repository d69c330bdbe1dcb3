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

// "engine: pre-clip grad norm reads the clip value 1 on 6 of 6 updates (a norm taken after clipping,
// or clipping per micro-batch?)" when at least half the updates (and more than one) read `clip` to
// 1e-4 relative; "" otherwise, and for clip <= 0 (no clipping).
std::string pinned_at_clip(const std::string& leg, const std::vector<StepRow>& steps, double clip);

}  // namespace tandem::experiments
