// The per-update series: the lr against the spec's schedule, the pinned grad norm (judge/series.h).
// The loss and grad-norm distances themselves are distance.h's (paired_distance, envelope_series_distance).
#include "tandem/compare/judge/series.h"
#include "worst_check.h"
#include "tandem/float32.h"

#include "tandem/compare/distance.h"
#include "tandem/engine/optim.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/number_text.h"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace tandem::experiments {

double scheduled_lr(const ExperimentSpec& spec, int64_t update, int64_t total) {
    return engine::cosine_with_warmup_lr(spec.lr, update, engine::warmup_updates(spec.warmup_fraction, total), total);
}

namespace {

// Equal to float32 rounding (a leg may hold its settings in float32).
bool same_setting(double have, double want) {
    return std::isfinite(have) && std::fabs(have - want) <= kLrUlps * kFloat32Epsilon * std::fabs(want);
}

std::optional<double> number_at(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
}

}  // namespace

std::vector<std::string> settings_differences(const nlohmann::json& s, const ExperimentSpec& spec, int64_t total) {
    std::vector<std::string> out;
    if (!s.is_object()) return {"the settings report is not an object"};
    const std::string optimizer = s.value("optimizer", std::string());
    const bool decoupled = s.value("decoupled_weight_decay", optimizer == "AdamW");
    bool any_decay = false;
    const auto groups = s.value("groups", nlohmann::json::array());
    for (const auto& g : groups)
        if (g.is_object() && number_at(g, "weight_decay").value_or(0.0) != 0.0) any_decay = true;
    // Adam without weight decay computes AdamW's step; with it, an L2 penalty instead of a decoupled decay.
    if (!optimizer.empty() && optimizer != "AdamW" && !(decoupled || (optimizer == "Adam" && !any_decay)))
        out.push_back("optimizer " + optimizer + (any_decay ? " (weight decay added to the gradient)" : "") +
                      "; the spec says AdamW (decoupled weight decay)");
    if (s.value("amsgrad", false)) out.push_back("amsgrad on; the spec's AdamW has none");
    const double lr0 = total >= 1 ? scheduled_lr(spec, 0, total) : std::nan("");
    for (const auto& g : groups) {
        if (!g.is_object()) {
            out.push_back("a parameter group that is not an object");
            continue;
        }
        const auto tensors = g.value("tensors", nlohmann::json::array());
        if (!tensors.is_array() || tensors.empty()) continue;  // an empty group steps nothing
        bool adapter = true;
        for (const auto& n : tensors) adapter = adapter && n.is_string() && n.get<std::string>().find("lora_") != std::string::npos;
        const std::string on = " on " + std::to_string(tensors.size()) + (adapter ? " adapter" : "") +
                               (tensors.size() == 1 ? " tensor" : " tensors");
        auto check = [&](const char* name, std::optional<double> have, double want) {
            if (have && !same_setting(*have, want))
                out.push_back(std::string(name) + " " + number_text(*have, "%g") + on + "; the spec says " + number_text(want, "%g"));
        };
        check("lr", number_at(g, "lr"), spec.lr);
        if (auto b = g.find("betas"); b != g.end() && b->is_array() && b->size() == 2 && (*b)[0].is_number() && (*b)[1].is_number()) {
            check("beta1", (*b)[0].get<double>(), spec.beta1);
            check("beta2", (*b)[1].get<double>(), spec.beta2);
        }
        check("eps", number_at(g, "eps"), spec.eps);
        check("weight_decay", number_at(g, "weight_decay"), spec.weight_decay);
        if (auto have = number_at(g, "lr_update0"); have && std::isfinite(lr0)) {
            const double tolerance = std::max(kLrUlps * kFloat32Epsilon * std::fabs(lr0), kLrUlps * kFloat32Epsilon * 1e-6 * spec.lr);
            if (!(std::fabs(*have - lr0) <= tolerance))
                out.push_back("lr " + number_text(*have, "%g") + " at update 0" + on + "; the spec's schedule says " + number_text(lr0, "%g"));
        }
    }
    if (auto it = s.find("schedule"); it != s.end() && it->is_string() && it->get<std::string>() != "cosine")
        out.push_back("schedule " + it->get<std::string>() + "; the spec says cosine with warmup (transformers' "
                      "get_cosine_schedule_with_warmup)");
    if (total >= 1) {
        const int64_t warmup = engine::warmup_updates(spec.warmup_fraction, total);
        if (auto it = s.find("warmup_updates"); it != s.end() && it->is_number_integer() && it->get<int64_t>() != warmup)
            out.push_back("warmup " + std::to_string(it->get<int64_t>()) + " updates; the spec says " + std::to_string(warmup) +
                          " (ceil(" + number_text(spec.warmup_fraction, "%g") + " x " + std::to_string(total) + "))");
        if (auto it = s.find("total_updates"); it != s.end() && it->is_number_integer() && it->get<int64_t>() != total)
            out.push_back("schedule over " + std::to_string(it->get<int64_t>()) + " updates; the plan has " + std::to_string(total));
    }
    if (auto it = s.find("clip"); it != s.end()) {
        if (it->is_null()) {
            if (spec.clip > 0) out.push_back("no gradient clipping; the spec clips the global norm at " + number_text(spec.clip, "%g"));
        } else if (it->is_number() && !same_setting(it->get<double>(), spec.clip)) {
            out.push_back("clip " + number_text(it->get<double>(), "%g") + "; the spec says " + number_text(spec.clip, "%g"));
        }
    }
    if (auto it = s.find("not_optimized"); it != s.end() && it->is_array() && !it->empty())
        out.push_back(std::to_string(it->size()) + " trainable tensor(s) in no optimizer group (first: " +
                      ((*it)[0].is_string() ? (*it)[0].get<std::string>() : std::string("?")) + ")");
    return out;
}

OptimizerCheck optimizer_check(const std::string& leg, const nlohmann::json& checks) {
    OptimizerCheck c;
    c.leg = leg;
    if (!checks.is_array()) return c;
    for (const auto& x : checks) {
        if (!x.is_object()) continue;
        const int64_t u = x.value("update", int64_t{-1});
        // The wire form of a non-finite ratio is the leg protocol's ("Infinity", "NaN"); absent or
        // unreadable reads as NaN.
        const auto it = x.find("max_ratio");
        const double r = it == x.end() ? std::nan("") : protocol_number_value(*it).value_or(std::nan(""));
        ++c.checked;
        const bool off = !(r >= 0 && r <= 1.0);  // a ratio is >= 0: NaN, inf and a negative one are off
        auto take = [&] {
            c.ratio = r;
            c.tensor = x.value("tensor", std::string("-"));
            c.over = x.value("over", int64_t{0});
            c.elements = x.value("elements", int64_t{0});
        };
        note_ratio(c, u, r, off, take);
    }
    return c;
}

std::string OptimizerCheck::describe() const {
    const int64_t u = off() ? first_off_update : max_update;
    std::string s = "optimizer step of " + leg + " at update " + std::to_string(u) + ": " + number_or_na(ratio) +
                    "x its float32 bound (the spec's AdamW replayed on the leg's own gradient, moments and parameters; " +
                    std::to_string(over) + " of " + std::to_string(elements) + " elements over, largest at " + tensor + ")";
    if (off() && max_update != first_off_update) s += " (largest " + number_or_na(max_ratio) + "x at update " + std::to_string(max_update) + ")";
    return s;
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
