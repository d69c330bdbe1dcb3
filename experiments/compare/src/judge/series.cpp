// The per-update series: the lr against the spec's schedule, the pinned grad norm (judge/series.h).
// The loss and grad-norm distances themselves are distance.h's (paired_distance, envelope_series_distance).
#include "tandem/compare/judge/series.h"

#include "tandem/compare/distance.h"
#include "tandem/engine/optim.h"
#include "tandem/number_or_na.h"

#include <algorithm>

namespace tandem::experiments {

double scheduled_lr(const ExperimentSpec& spec, int64_t update, int64_t total) {
    return engine::cosine_with_warmup_lr(spec.lr, update, engine::warmup_updates(spec.warmup_fraction, total), total);
}

ScheduleCheck schedule_check(const std::string& leg, const std::vector<StepRow>& steps, const ExperimentSpec& spec, int64_t total) {
    ScheduleCheck c;
    c.leg = leg;
    if (total < 1) {
        c.not_checked = "the run does not record how many updates it plans";
        return c;
    }
    const double floor = kLrUlps * kFloat32Epsilon * 1e-6 * std::fabs(spec.lr);
    for (const StepRow& s : steps) {
        if (s.update < 0 || s.update >= total) continue;  // outside the plan: the completeness check names it
        ++c.checked;
        const double expected = scheduled_lr(spec, s.update, total);
        const double tolerance = std::max(kLrUlps * kFloat32Epsilon * std::fabs(expected), floor);
        if (std::isfinite(s.lr) && std::fabs(s.lr - expected) <= tolerance) continue;
        ++c.off_updates;
        if (c.first_off_update < 0) {
            c.first_off_update = s.update;
            c.lr = s.lr;
            c.expected = expected;
        }
    }
    if (c.checked == 0) c.not_checked = "no update recorded";
    return c;
}

std::string ScheduleCheck::describe() const {
    if (!off()) return "";
    return "lr of " + leg + " off the spec's schedule at update " + std::to_string(first_off_update) + " (" + number_or_na(lr) +
           ", the schedule " + number_or_na(expected) + "; " + std::to_string(off_updates) + " of " + std::to_string(checked) + " updates)";
}

std::string pinned_at_clip(const std::string& leg, const std::vector<StepRow>& steps, double clip) {
    if (!(clip > 0)) return "";
    int64_t pinned = 0, n = 0;
    for (const StepRow& s : steps) {
        if (!std::isfinite(s.grad_norm)) continue;
        ++n;
        pinned += std::fabs(s.grad_norm - clip) <= 1e-4 * clip;
    }
    if (pinned < 2 || 2 * pinned < n) return "";
    return leg + ": pre-clip grad norm reads the clip value " + number_or_na(clip) + " on " + std::to_string(pinned) + " of " +
           std::to_string(n) + " updates (a norm taken after clipping, or clipping per micro-batch?)";
}

}  // namespace tandem::experiments
