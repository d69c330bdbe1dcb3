// A run's comparison: every pair of legs through the four levels (levels.cpp), the per-leg figures
// (timing.cpp), the completeness of every leg, and the run's one-line verdict (docs/report.md).
#include "tandem/compare/comparison.h"
#include "tandem/compare/metrics.h"
#include "tandem/spec/model.h"

#include "tandem/error.h"
#include "tandem/join.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace tandem::experiments {

bool is_imported(const LegData& leg) { return leg.implementation == "imported"; }

ResidualPoints residual_points_after(const std::vector<StepRow>& steps_a, const std::vector<EvalRow>& evals_a,
                                     const std::vector<StepRow>& steps_b, const std::vector<EvalRow>& evals_b,
                                     bool reference_is_a, int64_t eval_after, int64_t step_after) {
    auto tail = [](const auto& rows, int64_t after) {
        auto it = std::upper_bound(rows.begin(), rows.end(), after, [](int64_t u, const auto& r) { return u < r.update; });
        return std::vector<typename std::decay_t<decltype(rows)>::value_type>(it, rows.end());
    };
    const auto sa = tail(steps_a, step_after), sb = tail(steps_b, step_after);
    const auto ea = tail(evals_a, eval_after), eb = tail(evals_b, eval_after);
    ResidualPoints r;
    r.eval = residual_percent(pair_evals(ea, eb), reference_is_a).points;
    r.loss = residual_percent(pair_losses(sa, sb), reference_is_a).points;
    r.grad = residual_percent(pair_grad_norms(sa, sb), reference_is_a).points;
    return r;
}

namespace {

// The pairs compared: every pair (i < j) in run order, or (leg, anchor) for every other leg.
std::vector<std::pair<size_t, size_t>> pairs_of(const std::vector<LegData>& legs, const std::string& against) {
    std::vector<std::pair<size_t, size_t>> out;
    if (against.empty()) {
        for (size_t i = 0; i < legs.size(); ++i)
            for (size_t j = i + 1; j < legs.size(); ++j) out.emplace_back(i, j);
        return out;
    }
    size_t anchor = legs.size();
    for (size_t i = 0; i < legs.size(); ++i)
        if (legs[i].name == against) anchor = i;
    if (anchor == legs.size()) throw Error("compare: no leg '" + against + "' to compare the others with");
    for (size_t i = 0; i < legs.size(); ++i)
        if (i != anchor) out.emplace_back(i, anchor);
    return out;
}

}  // namespace
Comparison compare_legs(const std::vector<LegData>& legs, const ExperimentSpec& spec, const Thresholds& t,
                        const std::optional<ErrorModel>& model, const std::vector<SeedEnvelope>& envelopes, int64_t planned_updates) {
    return compare_legs_against(legs, spec, "", t, model, envelopes, planned_updates);
}

Comparison compare_legs_against(const std::vector<LegData>& legs, const ExperimentSpec& spec, const std::string& against,
                                const Thresholds& t, const std::optional<ErrorModel>& model,
                                const std::vector<SeedEnvelope>& envelopes, int64_t planned_updates,
                                const std::vector<std::string>& envelope_places,
                                const std::vector<ResidualCheck>& residual_adds) {
    Comparison c;
    std::vector<std::pair<std::string, std::string>> faulty;
    std::string model_error;
    if (model) c.error_model = *model;
    else {
        try {
            c.error_model = error_model_for(spec);
        } catch (const std::exception& e) {
            model_error = e.what();
        }
    }
    c.error_model.k = t.error_model_k;
    const std::string key = spec.sha256_without_seeds();
    for (const auto& e : envelopes)
        if (e.key == key) c.envelopes.push_back(e);
    for (const auto& l : legs) {
        c.legs.push_back(l.name);
        c.flags.insert(c.flags.end(), l.flags.begin(), l.flags.end());
        c.grads.push_back(grad_stats(l, l.clip.value_or(spec.clip)));  // each leg against its own run's clip
        c.timing.push_back(timing_row(l));
        faulty.emplace_back(l.name, l.faults);
        std::map<std::string, std::string> stack;
        if (const auto v = l.trace.hello.find("versions"); v != l.trace.hello.end() && v->is_object())
            for (auto it = v->begin(); it != v->end(); ++it)
                if (it->is_string()) stack[it.key()] = it->get<std::string>();
        c.stacks.push_back(std::move(stack));
        c.stack_implementations.push_back(l.implementation);
    }
    c.fault_banner = fault_banner(faulty);
    for (const auto& l : legs) {
        SettingsEntry s;
        s.leg = l.name;
        s.reported = l.trace.settings.has_value();
        if (s.reported) s.differences = settings_differences(*l.trace.settings, spec, planned_updates);
        c.settings.push_back(std::move(s));
    }
    const L4Context l4_context{spec, t, c.error_model, model_error, c.envelopes, key, planned_updates, envelope_places, &residual_adds};
    for (const auto& [i, j] : pairs_of(legs, against)) {
        const LegData& a = legs[i];
        const LegData& b = legs[j];
        // An imported leg (TensorBoard, CSV) has no L1/L2/L3 data: those levels are n/a, not failures.
        const bool imported = is_imported(a) || is_imported(b);
        const size_t failures_before = c.failures.size();
        L1Entry l1 = compare_l1(a, b, t);
        if (imported && !(a.trace.l1_ce && b.trace.l1_ce)) l1.na = "imported";
        // A level a leg never sent is missing, not different: n/a for the pair, and the leg's
        // completeness (incompleteness) names what it lacks, so the run is `incomplete`.
        else if (!a.trace.l1_ce || !b.trace.l1_ce) l1.na = "no data from " + (a.trace.l1_ce ? b.name : a.name);
        if (!l1.pass && l1.na.empty()) {
            // the level, the update (0: before training) and the ratio (docs/thresholds.md "The verdict")
            std::ostringstream w;
            w.precision(3);
            w << "L1 " << a.name << "~" << b.name << ": initial held-out CE (update 0) ";
            if (l1.ce_a && l1.ce_b && std::isfinite(*l1.ce_a) && std::isfinite(*l1.ce_b))
                w << "differs by " << l1.rel_diff << " relative, " << l1.rel_diff / t.l1_rel << "x the threshold " << t.l1_rel;
            else
                w << "missing or not finite in " << (l1.ce_a && std::isfinite(*l1.ce_a) ? b.name : a.name);
            c.failures.push_back(w.str());
        }
        c.l1.push_back(l1);
        L2Entry l2 = compare_l2(a, b);
        if (!(a.trace.has_l2 && b.trace.has_l2)) {
            l2.na = imported ? "imported" : "no data from " + (a.trace.has_l2 ? b.name : a.name);
            l2.mismatches.clear();
        }
        if (!l2.pass && l2.na.empty())
            c.failures.push_back("L2 " + a.name + "~" + b.name + ": parameters as loaded (update 0): " +
                                 std::to_string(l2.mismatches.size()) + " of " + std::to_string(l2.compared) + " tensor(s) differ" +
                                 (l2.mismatches.empty() ? "" : ", first " + l2.mismatches.front()));
        c.l2.push_back(l2);
        L3Entry l3 = compare_l3(a, b);
        if (!(a.trace.has_l3 && b.trace.has_l3)) l3.na = imported ? "imported" : "no data from " + (a.trace.has_l3 ? b.name : a.name);
        if (!l3.pass && l3.na.empty())
            c.failures.push_back("L3 " + a.name + "~" + b.name + ": token records (update 0): " +
                                 std::to_string(l3.compared - l3.identical) + " of " + std::to_string(l3.compared) + " differ, " +
                                 (l3.first_id.empty() ? l3.detail : "first record " + l3.first_id + ": " + l3.detail));
        c.l3.push_back(l3);
        // The optimizer settings each leg reported, against the spec (before update 0): a setting that
        // differs makes every pair of the leg `different`, named (docs/thresholds.md "Optimizer settings").
        for (const size_t k : {i, j}) {  // c.settings is in leg order
            const SettingsEntry& s = c.settings[k];
            if (s.pass()) continue;
            std::string line = "settings " + a.name + "~" + b.name + ": " + s.leg + "'s optimizer (before update 0): " +
                               s.differences.front();
            for (size_t d = 1; d < s.differences.size(); ++d) line += "; also " + s.differences[d];
            c.failures.push_back(std::move(line));
        }

        const std::vector<std::string> level_failures(c.failures.begin() + static_cast<std::ptrdiff_t>(failures_before),
                                                      c.failures.end());
        c.l4.push_back(compare_l4(a, b, l4_context, level_failures));
    }
    return c;
}

// A pair with an imported leg (TensorBoard, CSV) has no L1-L3 and no paired distance: only a seed
// envelope can judge it. Unjudged, it is reported per pair (not judged) and named on the run's
// verdict line, but it does not decide the verdict of the run's own legs (docs/thresholds.md
// "Imported legs"): importing a run must not turn an agreeing run into a failure, and nothing about
// the imported leg is ever called equivalent.
bool Comparison::counts_for_run(const L4Entry& e) { return !e.imported || e.envelope.available; }

std::vector<const L4Entry*> Comparison::unjudged_imported() const {
    std::vector<const L4Entry*> out;
    for (const auto& e : l4)
        if (!counts_for_run(e)) out.push_back(&e);
    return out;
}

bool Comparison::passed() const {
    if (!completeness_judged || !incomplete.empty() || !failures.empty()) return false;
    for (const auto& e : l4)
        if (counts_for_run(e) && !verdict_passes(e.verdict)) return false;
    return true;
}

std::vector<const L4Entry*> Comparison::different_without_localisation() const {
    std::vector<const L4Entry*> out;
    for (const auto& e : l4) {
        if (e.verdict != PairVerdict::Different || e.first_different_update < 0) continue;
        bool localised = false;
        for (const auto& l : localisations) localised = localised || (l.leg_a == e.leg_a && l.leg_b == e.leg_b);
        if (!localised) out.push_back(&e);
    }
    return out;
}

std::vector<std::string> Comparison::stack_differences() const {
    std::vector<std::string> out;
    std::map<std::string, bool> named;
    for (size_t i = 0; i < stacks.size(); ++i)
        for (size_t j = i + 1; j < stacks.size(); ++j) {
            if (i >= stack_implementations.size() || j >= stack_implementations.size() ||
                stack_implementations[i] != stack_implementations[j])
                continue;
            for (const auto& [package, version] : stacks[i]) {
                const auto other = stacks[j].find(package);
                if (other == stacks[j].end() || other->second == version || named[package]) continue;
                named[package] = true;
                out.push_back(package + " " + version + " (" + legs[i] + ") -> " + other->second + " (" + legs[j] + ")");
            }
        }
    return out;
}

std::string Comparison::verdict() const {
    if (!completeness_judged) return "incomplete: completeness not judged";
    std::string line = verdict_without_stacks();
    const auto differ = stack_differences();
    if (!differ.empty()) line += "; stacks differ: " + join(differ, ", ");
    return line;
}

std::string Comparison::verdict_without_stacks() const {
    auto first_of = [](const std::vector<std::string>& v) {
        return v.front() + (v.size() > 1 ? " (+" + std::to_string(v.size() - 1) + " more)" : "");
    };
    if (!completeness_judged) return "incomplete: completeness not judged";
    if (!incomplete.empty()) return "incomplete: " + first_of(incomplete);
    if (!failures.empty()) {
        // The first failure ("L1 a~b: what") with where its pair was localised, when it was.
        const std::string& f = failures.front();
        const std::string pair = failure_pair(f);
        std::string localised;
        for (const auto& l : localisations)
            if (pair == l.leg_a + "~" + l.leg_b || pair == l.leg_b + "~" + l.leg_a) localised = "; localised: " + l.summary();
        return std::string(pair_verdict_name(PairVerdict::Different)) + ": " + f + localised +
               (failures.size() > 1 ? " (+" + std::to_string(failures.size() - 1) + " more)" : "");
    }
    if (legs.size() < 2) return "complete; one leg, nothing to cross-check";
    if (l4.empty()) return "incomplete: no pair of legs compared";
    const auto unjudged = unjudged_imported();
    std::string not_judged;
    if (!unjudged.empty())
        not_judged = "; not judged: " + unjudged.front()->leg_a + "~" + unjudged.front()->leg_b +
                     (unjudged.size() > 1 ? " (+" + std::to_string(unjudged.size() - 1) + " more)" : "") +
                     ": an imported leg, no paired distance and no seed envelope";
    if (unjudged.size() == l4.size()) return "complete; no pair of the run's own legs to cross-check" + not_judged;
    // The worst pair speaks for the run: different, outside, not judged, within, equivalent.
    auto severity = [](PairVerdict v) {
        switch (v) {
            case PairVerdict::Different: return 4;
            case PairVerdict::OutsideEnvelope: return 3;
            case PairVerdict::NotJudged: return 2;
            case PairVerdict::WithinEnvelope: return 1;
            case PairVerdict::Equivalent: return 0;
        }
        return 4;
    };
    const L4Entry* worst = nullptr;
    for (const auto& e : l4)
        if (counts_for_run(e) && (!worst || severity(e.verdict) > severity(worst->verdict))) worst = &e;
    size_t others = 0;
    for (const auto& e : l4) others += counts_for_run(e) && &e != worst && severity(e.verdict) == severity(worst->verdict);
    return std::string(pair_verdict_name(worst->verdict)) + ": " + worst->verdict_reason +
           (others ? " (+" + std::to_string(others) + " more pair" + (others > 1 ? "s" : "") + ")" : "") + not_judged;
}

std::string failure_pair(const std::string& failure) {
    const size_t sp = failure.find(' '), colon = failure.find(": ");
    return sp < colon && colon != std::string::npos ? failure.substr(sp + 1, colon - sp - 1) : "";
}

bool verdict_line_passes(const std::string& v) {
    for (const char* word : {"equivalent:", "within the seed envelope:", "complete; one leg"})
        if (v.rfind(word, 0) == 0) return true;
    return false;
}

Comparison judge_legs(const std::vector<LegData>& legs, const ExperimentSpec& spec, const Judging& j) {
    // Each leg's residual adds against its own forward fingerprints (a self-check, judged in every pair
    // of the leg). The fault matrix (faults_run.cpp) judges without them: its L4 column is the series'.
    // Their LoRA adds likewise, at the spec's scaling as a leg multiplies by it (float32).
    std::vector<ResidualCheck> residual_adds;
    if (j.fingerprints) {
        const double scaling = static_cast<double>(static_cast<float>(lora_config_of(spec).scaling()));
        for (const auto& l : legs) {
            const std::vector<FingerprintRow> prints = j.fingerprints(l.name);
            residual_adds.push_back(residual_check(l.name, prints));
            residual_adds.push_back(lora_add_check(l.name, prints, spec.lora_targets, scaling, spec.lora_rank));
        }
    }
    Comparison c = compare_legs_against(legs, spec, j.against, j.thresholds, j.model, j.envelopes, j.expected.updates,
                                        j.envelope_places, residual_adds);
    judge_completeness(c, legs, j.expected);
    if (j.fingerprints) add_localisations(c, j.fingerprints);
    return c;
}

void add_localisations(Comparison& c, const std::function<std::vector<FingerprintRow>(const std::string& leg)>& fingerprints) {
    c.localisations.clear();
    for (auto& e : c.l4) {
        if (e.pass) continue;
        const auto a = fingerprints(e.leg_a);
        const auto b = fingerprints(e.leg_b);
        if (a.empty() || b.empty()) continue;
        c.localisations.push_back(localise(a, b, e.leg_a, e.leg_b));
        const Localisation& l = c.localisations.back();
        e.verdict_reason += "; localised: " + l.summary();
        // Training agrees everywhere it is judged (every fingerprint point, the per-update series, the
        // steps) and only the held-out CE does not: say so, rather than a bare "no divergence".
        auto within = [](const PairedDistance& d) { return !d.applies || d.points.empty() || d.within(); };
        bool training_agrees = !l.diverged() && e.numerics.applies && !e.numerics.points.empty() && !e.numerics.within() &&
                               within(e.loss_numerics) && within(e.grad_numerics);
        for (const auto& s : e.schedule) training_agrees = training_agrees && !s.off();
        for (const auto& o : e.optimizer) training_agrees = training_agrees && !o.off();
        for (const auto& r : e.residual_adds) training_agrees = training_agrees && !r.off();
        if (training_agrees)
            e.verdict_reason += "; only the evaluation differs: training agrees within its bounds (every fingerprinted point, "
                                "the training loss, grad norm and lr of every update) but held-out CE does not (an "
                                "evaluation-side difference: the adapter off, dropout on, another prefix or normalisation?)";
    }
}

std::vector<int64_t> expected_eval_updates(int64_t updates, int64_t interval) {
    std::vector<int64_t> out;
    if (updates < 0) return out;
    out.push_back(0);
    if (interval > 0)
        for (int64_t u = interval; u < updates; u += interval) out.push_back(u);
    if (updates > 0) out.push_back(updates);
    return out;
}

namespace {
// "2, 3, 7-9" for a sorted list of integers (at most `max_items` ranges, then "...").
std::string ranges_text(const std::vector<int64_t>& v, size_t max_items = 6) {
    std::string o;
    size_t items = 0;
    for (size_t i = 0; i < v.size();) {
        size_t j = i;
        while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
        if (items == max_items) return o + ", ...";
        o += (o.empty() ? "" : ", ") + std::to_string(v[i]) + (j > i ? "-" + std::to_string(v[j]) : "");
        ++items;
        i = j + 1;
    }
    return o;
}
}  // namespace

// The values an import kept out (docs/decisions.md "Imported series"): data no statistic saw, so never passed over.
static void add_kept_out(const LegData& leg, std::vector<std::string>& out) {
    if (!leg.non_finite_kept_out.empty()) out.push_back(leg.name + ": " + leg.non_finite_kept_out);
}

std::vector<std::string> incompleteness(const LegData& leg, const ExpectedSeries& expected) {
    std::vector<std::string> out;
    const std::string& n = leg.name;
    add_kept_out(leg, out);
    if (leg.status != "finished") {
        std::string why = leg.status == "running" || leg.status == "pending" || leg.status.empty()
                              ? "did not finish (last recorded status: " + (leg.status.empty() ? std::string("none") : leg.status) + ")"
                              : leg.status;
        out.push_back(n + ": leg " + why + (leg.trace.error ? " (" + *leg.trace.error + ")" : ""));
    }
    if (!is_imported(leg)) {  // an imported series has no L1-L3 by nature (docs/legs.md)
        const bool nothing = !leg.trace.l1_ce && !leg.trace.has_l2 && !leg.trace.has_l3 && leg.trace.steps.empty() &&
                             leg.trace.evals.empty();
        if (nothing) {
            // A leg that never reached its first event: one line; the rows it lacks follow from it.
            out.push_back(n + ": recorded no data (it stopped before its first event)");
            return out;
        }
        std::vector<std::string> lacks;
        if (!leg.trace.l1_ce) lacks.push_back("L1 (initial held-out CE)");
        if (!leg.trace.has_l2) lacks.push_back("L2 (parameter digests)");
        if (!leg.trace.has_l3) lacks.push_back("L3 (token records)");
        for (const auto& x : lacks) out.push_back(n + ": no " + x + " recorded");
    }
    const auto& steps = leg.trace.steps;
    std::vector<int64_t> repeated, disordered;
    for (size_t i = 1; i < steps.size(); ++i) {
        if (steps[i].update == steps[i - 1].update) repeated.push_back(steps[i].update);
        else if (steps[i].update < steps[i - 1].update) disordered.push_back(steps[i].update);
    }
    if (!repeated.empty()) out.push_back(n + ": update(s) " + ranges_text(repeated) + " recorded more than once");
    if (!disordered.empty()) out.push_back(n + ": update(s) " + ranges_text(disordered) + " recorded out of order");
    if (expected.updates < 0) {
        out.push_back(n + ": the run does not record how many updates it plans, so missing rows cannot be ruled out");
        return out;
    }
    std::vector<char> seen(static_cast<size_t>(expected.updates), 0);
    std::vector<int64_t> beyond;
    for (const auto& s : steps) {
        if (s.update >= 0 && s.update < expected.updates) seen[static_cast<size_t>(s.update)] = 1;
        else beyond.push_back(s.update);
    }
    std::vector<int64_t> missing;
    for (int64_t u = 0; u < expected.updates; ++u)
        if (!seen[static_cast<size_t>(u)]) missing.push_back(u);
    if (!missing.empty())
        out.push_back(n + ": " + std::to_string(missing.size()) + " of " + std::to_string(expected.updates) +
                      " update rows missing (" + ranges_text(missing) + ")");
    if (!beyond.empty()) out.push_back(n + ": update(s) " + ranges_text(beyond) + " outside the plan");
    std::vector<int64_t> eval_missing;
    for (int64_t u : expected_eval_updates(expected.updates, expected.eval_interval)) {
        bool found = false;
        for (const auto& e : leg.trace.evals) found = found || e.update == u;
        if (!found) eval_missing.push_back(u);
    }
    if (!eval_missing.empty())
        out.push_back(n + ": held-out evaluation(s) missing at update(s) " + ranges_text(eval_missing));
    return out;
}

std::vector<std::string> non_finite_values(const LegData& leg) {
    std::vector<std::string> out;
    for (const auto& s : leg.trace.steps) {
        if (!std::isfinite(s.loss)) out.push_back(leg.name + ": non-finite " + series_label("loss") + " at update " + std::to_string(s.update));
        if (!std::isfinite(s.grad_norm))
            out.push_back(leg.name + ": non-finite " + series_label("grad_norm") + " at update " + std::to_string(s.update));
        if (out.size() >= 4) return out;
    }
    for (const auto& e : leg.trace.evals)
        if (!std::isfinite(e.heldout_ce)) {
            out.push_back(leg.name + ": non-finite " + series_label("heldout_ce") + " at update " + std::to_string(e.update));
            break;
        }
    if (leg.trace.l1_ce && !std::isfinite(*leg.trace.l1_ce)) out.push_back(leg.name + ": non-finite initial held-out CE (L1)");
    return out;
}

void judge_completeness(Comparison& c, const std::vector<LegData>& legs, const ExpectedSeries& expected) {
    c.incomplete.clear();
    if (legs.empty()) c.incomplete.push_back("the run has no leg");
    for (const auto& l : legs) {
        if (is_imported(l)) {  // a run made elsewhere holds whatever series it has (docs/legs.md)
            add_kept_out(l, c.incomplete);
            continue;
        }
        for (auto& line : incompleteness(l, expected)) c.incomplete.push_back(std::move(line));
        for (auto& line : non_finite_values(l)) c.failures.push_back(std::move(line));
    }
    c.completeness_judged = true;
}

std::vector<ObservablesComparison> compare_pair_observables(const Comparison& c, const RunFileReader& reader) {
    std::vector<ObservablesComparison> out;
    for (const auto& e : c.l4) {
        ObservablesComparison o = compare_observables(reader, e.leg_a, e.leg_b);
        if (!o.rows.empty()) out.push_back(std::move(o));
    }
    return out;
}

}  // namespace tandem::experiments
