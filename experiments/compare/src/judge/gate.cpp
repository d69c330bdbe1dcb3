// The live trajectory gate: flags per new update / evaluation (docs/gate.md).
#include "tandem/compare/judge/gate.h"
#include "tandem/compare/metrics.h"
#include "tandem/compare/statistics.h"

#include "tandem/error.h"
#include "tandem/number_text.h"
#include "tandem/spec/leg_kinds.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace tandem::experiments {
using nlohmann::json;

namespace {


}  // namespace

std::string flag_series(const GateFlag& f) {
    if (!f.series.empty()) return f.series;
    if (f.kind == "paired-bound") return "heldout_ce";
    if (f.kind == "step-time") return "wall_s";
    // Flags written before they named their series: the wording those files hold, not today's labels.
    if (f.message.find("held-out") != std::string::npos) return "heldout_ce";
    if (f.message.find("grad norm") != std::string::npos) return "grad_norm";
    return "loss";
}

json flags_to_json(const std::vector<GateFlag>& flags) {
    json a = json::array();
    for (const auto& f : flags) {
        json x{{"leg", f.leg}, {"kind", f.kind}, {"update", f.update}, {"action", gate_action_name(f.action)},
               {"message", f.message}};
        if (!f.series.empty()) x["series"] = f.series;
        x["value"] = std::isfinite(f.value) ? json(f.value) : json(nullptr);
        x["threshold"] = std::isfinite(f.threshold) ? json(f.threshold) : json(nullptr);
        a.push_back(std::move(x));
    }
    return a;
}

std::vector<GateFlag> flags_from_json(const json& j) {
    std::vector<GateFlag> out;
    if (!j.is_array()) return out;
    for (const auto& x : j) {
        GateFlag f;
        f.leg = x.value("leg", "");
        f.kind = x.value("kind", "");
        f.update = x.value("update", int64_t{-1});
        f.value = x.contains("value") && x["value"].is_number() ? x["value"].get<double>() : std::nan("");
        f.threshold = x.contains("threshold") && x["threshold"].is_number() ? x["threshold"].get<double>() : std::nan("");
        const std::string a = x.value("action", "warn");
        f.action = a == "stop" ? GateAction::Stop : a == "pause" ? GateAction::Pause : GateAction::Warn;
        f.message = x.value("message", "");
        f.series = x.value("series", "");
        out.push_back(std::move(f));
    }
    return out;
}

namespace {
// The step-time flag's measure for a row: CPU time when the leg reports it, else wall time (docs/gate.md).
bool step_time_is_cpu(const std::vector<StepRow>& steps, size_t i) { return std::isfinite(steps[i].cpu_s); }
}  // namespace

std::optional<double> step_time_running_median(const std::vector<StepRow>& steps, size_t i, const GateConfig& config,
                                               int64_t attempt_first_update) {
    std::vector<double> recent;
    const bool cpu = step_time_is_cpu(steps, i);
    for (size_t k = i; k-- > 0 && static_cast<int64_t>(recent.size()) < config.step_time_window;) {
        if (steps[k].update < attempt_first_update) break;
        const double x = cpu ? steps[k].cpu_s : steps[k].wall_s;  // the same measure as the update's
        if (std::isfinite(x)) recent.push_back(x);
    }
    if (static_cast<int64_t>(recent.size()) < config.step_time_min_history) return std::nullopt;
    return percentile(recent, 50);
}

double largest_step_time_ratio(const std::vector<StepRow>& steps, const GateConfig& config) {
    double worst = std::nan("");
    for (size_t i = 0; i < steps.size(); ++i) {
        const auto median = step_time_running_median(steps, i, config, steps.empty() ? 0 : steps.front().update);
        const double x = step_time_is_cpu(steps, i) ? steps[i].cpu_s : steps[i].wall_s;
        if (!median || !(*median > 0) || !std::isfinite(x)) continue;
        const double r = x / *median;
        if (!(r <= worst)) worst = r;
    }
    return worst;
}

std::vector<GateFlag> TrajectoryGate::check(const std::string& leg, const LegTrace& trace, int64_t attempt_first_update) {
    std::vector<GateFlag> out;
    Seen& seen = seen_[leg];
    // A resumed leg repeats updates: the trace dropped them and grows again. Only rows beyond what
    // was checked (by update) are new.
    const auto& steps = trace.steps;
    for (size_t i = 0; i < steps.size(); ++i) {
        const StepRow& s = steps[i];
        if (s.update <= seen.last_update) continue;
        seen.last_update = s.update;
        if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
            const bool loss = !std::isfinite(s.loss);
            const char* series = loss ? "loss" : "grad_norm";
            out.push_back({leg, "non-finite", s.update, loss ? s.loss : s.grad_norm, std::nan(""), config_.non_finite,
                           leg + ": non-finite " + series_label(series) + " at update " + std::to_string(s.update), series});
            continue;
        }
        // Step time against this attempt's last `window` updates before this one.
        // Step time (CPU time when the leg reports it: a loaded machine stretches wall time, not the
        // CPU an update costs) against this attempt's last `window` updates before this one.
        const bool cpu = step_time_is_cpu(steps, i);
        const double took = cpu ? s.cpu_s : s.wall_s;
        if (const auto running = step_time_running_median(steps, i, config_, attempt_first_update);
            running && std::isfinite(took)) {
            const double median = *running;
            const double limit = std::max(config_.step_time_factor * median, median + config_.step_time_min_excess_s);
            const char* unit = cpu ? " s of CPU" : " s";
            if (took > limit)
                out.push_back({leg, "step-time", s.update, took, limit, config_.step_time,
                               leg + ": update " + std::to_string(s.update) + " took " + number_text(took, "%.3g") + unit + ", " +
                                   number_text(took / median, "%.1f") + "x its running median " + number_text(median, "%.3g") + unit,
                               cpu ? "cpu_s" : "wall_s"});
        }
        check_envelope(leg, "loss", s.update, s.loss, out);
        // Loss spike against the last `window` finite losses before this update.
        std::vector<double> losses;
        for (size_t k = i; k-- > 0 && static_cast<int64_t>(losses.size()) < config_.loss_spike_window;)
            if (std::isfinite(steps[k].loss)) losses.push_back(steps[k].loss);
        if (static_cast<int64_t>(losses.size()) >= config_.loss_spike_min_history) {
            const double m = mean(losses), sd = population_std(losses);
            const double limit = m + config_.loss_spike_sigma * sd;
            if (sd > 0 && s.loss > limit)
                out.push_back({leg, "loss-spike", s.update, s.loss, limit, config_.loss_spike,
                               leg + ": " + series_label("loss") + " " + number_text(s.loss, "%.6g") + " at update " + std::to_string(s.update) + " is above mean + " +
                                   number_text(config_.loss_spike_sigma, "%g") + " std of its last " + std::to_string(losses.size()) +
                                   " updates (" + number_text(limit, "%.6g") + ")",
                               "loss"});
        }
    }
    for (const EvalRow& e : trace.evals) {
        if (e.update <= seen.last_eval) continue;
        seen.last_eval = e.update;
        if (!std::isfinite(e.heldout_ce)) {
            out.push_back({leg, "non-finite", e.update, e.heldout_ce, std::nan(""), config_.non_finite,
                           leg + ": non-finite " + series_label("heldout_ce") + " at update " + std::to_string(e.update), "heldout_ce"});
            continue;
        }
        check_envelope(leg, "heldout_ce", e.update, e.heldout_ce, out);
    }
    return out;
}

void TrajectoryGate::mark_seen(const std::string& leg, const LegTrace& trace) {
    Seen& seen = seen_[leg];
    for (const auto& s : trace.steps) seen.last_update = std::max(seen.last_update, s.update);
    for (const auto& e : trace.evals) seen.last_eval = std::max(seen.last_eval, e.update);
}

void TrajectoryGate::mark_pairs_seen(const std::map<std::string, const LegTrace*>& traces) {
    for (const auto& [a, b] : context_.paired) {
        auto ta = traces.find(a), tb = traces.find(b);
        if (ta == traces.end() || tb == traces.end() || !ta->second || !tb->second) continue;
        int64_t& last = pair_seen_.try_emplace(a + "~" + b, -1).first->second;
        for (const PairedPoint& p : pair_evals(ta->second->evals, tb->second->evals)) last = std::max(last, p.update);
    }
}

void TrajectoryGate::check_envelope(const std::string& leg, const char* series, int64_t update, double value,
                                    std::vector<GateFlag>& out) const {
    auto impl = context_.implementation.find(leg);
    const SeedEnvelope* env = pick_envelope(context_.envelopes, impl == context_.implementation.end() ? "" : impl->second);
    if (!env) return;
    const EnvelopePoint* p = env->at(series, update);
    if (!p || p->n < 2) return;
    const Band band = envelope_band(*p, config_.envelope_band_sigma, context_.model.bound(update));
    if (value >= band.low && value <= band.high) return;
    const bool above = value > band.high;
    out.push_back({leg, "envelope", update, value, above ? band.high : band.low, config_.envelope,
                   leg + ": " + series_label(series) + " " + number_text(value, "%.7g") + " at update " + std::to_string(update) + " is " +
                       (above ? "above" : "below") + " the " + env->implementation + " seed envelope band [" +
                       number_text(band.low, "%.7g") + ", " + number_text(band.high, "%.7g") + "] (" + std::to_string(env->members) + " runs)",
                   series});
}

std::vector<GateFlag> TrajectoryGate::check_pairs(const std::map<std::string, const LegTrace*>& traces) {
    std::vector<GateFlag> out;
    for (const auto& [a, b] : context_.paired) {
        auto ta = traces.find(a), tb = traces.find(b);
        if (ta == traces.end() || tb == traces.end() || !ta->second || !tb->second) continue;
        auto ia = context_.implementation.find(a), ib = context_.implementation.find(b);
        const bool ref_first = ia != context_.implementation.end() && ib != context_.implementation.end() &&
                               reference_is_first(ia->second, ib->second);
        const std::string& leg = ref_first ? b : a;
        const std::string& ref = ref_first ? a : b;
        auto [it, fresh] = pair_seen_.try_emplace(a + "~" + b, -1);
        for (const PairedPoint& p : pair_evals(ta->second->evals, tb->second->evals)) {
            if (p.update <= it->second) continue;
            it->second = p.update;
            const double value = ref_first ? p.b : p.a, reference = ref_first ? p.a : p.b;
            if (!std::isfinite(value) || !std::isfinite(reference)) continue;  // the non-finite flag covers these
            const double rel = reference != 0 ? std::fabs(value - reference) / std::fabs(reference) : std::fabs(value - reference);
            const double bound = context_.model.bound(p.update);
            if (rel > bound)
                out.push_back({leg, "paired-bound", p.update, rel, bound, config_.paired_bound,
                               leg + ": " + series_label("heldout_ce") + " at update " + std::to_string(p.update) + " differs from " + ref + "'s by " +
                                   number_text(rel, "%.3g") + " relative, " + number_text(rel / bound, "%.3g") + "x the error-model bound " +
                                   number_text(bound, "%.3g"),
                               "heldout_ce"});
        }
    }
    return out;
}

}  // namespace tandem::experiments
