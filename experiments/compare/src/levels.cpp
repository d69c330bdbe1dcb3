// The four levels of one pair of legs (docs/spec.md §Levels, docs/report.md): L1 initial held-out CE, L2 loaded
// parameters, L3 template and tokens, L4 trajectories judged by the two distances into the pair's
// verdict (docs/thresholds.md). Pure: legs in, entries out.
#include "tandem/compare/levels.h"
#include "tandem/compare/metrics.h"
#include "tandem/spec/leg_kinds.h"

#include "tandem/data/token_diff.h"
#include "tandem/engine/tensor.h"
#include "tandem/number_text.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

namespace tandem::experiments {

namespace {

// A level's entry for the pair (a, b), its two legs named.
template <typename Entry>
Entry entry_for(const LegData& a, const LegData& b) {
    Entry e;
    e.leg_a = a.name;
    e.leg_b = b.name;
    return e;
}

// The leg of the pair that sent no data for a level (`has`: LegTrace::has_l2, has_l3).
const std::string& leg_without(const LegData& a, const LegData& b, bool LegTrace::*has) {
    return a.trace.*has ? b.name : a.name;
}

}  // namespace

L1Entry compare_l1(const LegData& a, const LegData& b, const Thresholds& t) {
    auto e = entry_for<L1Entry>(a, b);
    e.ce_a = a.trace.l1_ce;
    e.ce_b = b.trace.l1_ce;
    if (e.ce_a && e.ce_b && std::isfinite(*e.ce_a) && std::isfinite(*e.ce_b)) {
        e.abs_diff = std::fabs(*e.ce_a - *e.ce_b);
        e.rel_diff = *e.ce_b != 0 ? e.abs_diff / std::fabs(*e.ce_b) : e.abs_diff;
        e.pass = e.rel_diff <= t.l1_rel;
    }
    return e;
}

L2Entry compare_l2(const LegData& a, const LegData& b) {
    auto e = entry_for<L2Entry>(a, b);
    if (!a.trace.has_l2 || !b.trace.has_l2) {
        e.mismatches.push_back("no L2 digests from " + leg_without(a, b, &LegTrace::has_l2));
        return e;
    }
    std::map<std::string, const TensorDigest*> mb;
    for (const auto& d : b.trace.l2) mb[d.name] = &d;
    std::set<std::string> seen;
    for (const auto& d : a.trace.l2) {
        seen.insert(d.name);
        auto it = mb.find(d.name);
        if (it == mb.end()) {
            e.mismatches.push_back(d.name + ": only in " + a.name);
            continue;
        }
        ++e.compared;
        const TensorDigest& o = *it->second;
        if (d.shape != o.shape)
            e.mismatches.push_back(d.name + ": shape " + engine::shape_text(d.shape) + " vs " + engine::shape_text(o.shape));
        else if (d.sha256 != o.sha256) {
            std::ostringstream w;
            w.precision(9);
            w << d.name << ": bytes differ (sum " << d.sum << " vs " << o.sum << ", max|x| " << d.maxabs << " vs " << o.maxabs << ")";
            e.mismatches.push_back(w.str());
        } else
            ++e.equal;
    }
    for (const auto& d : b.trace.l2)
        if (!seen.count(d.name)) e.mismatches.push_back(d.name + ": only in " + b.name);
    e.pass = e.mismatches.empty() && e.compared > 0;
    return e;
}

L3Entry compare_l3(const LegData& a, const LegData& b) {
    auto e = entry_for<L3Entry>(a, b);
    if (!a.trace.has_l3 || !b.trace.has_l3) {
        e.what = "missing";
        e.detail = "no L3 records from " + leg_without(a, b, &LegTrace::has_l3);
        return e;
    }
    std::map<int64_t, const L3Record*> mb;
    for (const auto& r : b.trace.l3) mb[r.index] = &r;
    for (const auto& r : a.trace.l3) {
        auto it = mb.find(r.index);
        std::string what, detail;
        std::optional<size_t> tok;
        if (it == mb.end()) {
            what = "missing";
            detail = "record " + r.id + " only in " + a.name;
        } else {
            ++e.compared;
            const L3Record& o = *it->second;
            data::TokenSequence sa, sb;
            sa.label = a.name;
            sa.ids = r.ids;
            sb.label = b.name;
            sb.ids = o.ids;
            data::TokenDiff d = data::diff_tokens(sa, sb, 8);
            if (!d.identical) {
                what = "ids";
                tok = d.first_mismatch;
                detail = "token ids differ at position " + std::to_string(*d.first_mismatch) + " (lengths " +
                         std::to_string(d.length_a) + " vs " + std::to_string(d.length_b) + ")";
            } else if (r.boundary != o.boundary) {
                what = "boundary";
                tok = static_cast<size_t>(std::max<int64_t>(0, std::min(r.boundary, o.boundary)));
                detail = "supervision boundary " + std::to_string(r.boundary) + " vs " + std::to_string(o.boundary);
            } else if (r.supervised_count != o.supervised_count) {
                what = "supervised_count";
                detail = "supervised tokens " + std::to_string(r.supervised_count) + " vs " + std::to_string(o.supervised_count);
            } else if (r.full_length != o.full_length || r.truncated_at != o.truncated_at) {
                what = "truncation";
                detail = "untruncated length " + std::to_string(r.full_length) + " vs " + std::to_string(o.full_length);
            } else if (!r.text.empty() && !o.text.empty() && r.text != o.text) {
                what = "text";
                size_t i = 0;
                while (i < r.text.size() && i < o.text.size() && r.text[i] == o.text[i]) ++i;
                detail = "rendered text differs at byte " + std::to_string(i);
            } else {
                ++e.identical;
                continue;
            }
            if (!e.first_index) {
                if (tok) {
                    e.first_token = static_cast<int64_t>(*tok);
                    size_t lo = *tok >= 8 ? *tok - 8 : 0;
                    e.window_begin = static_cast<int64_t>(lo);
                    for (size_t i = lo; i < std::min(r.ids.size(), *tok + 8); ++i) e.window_a.push_back(r.ids[i]);
                    for (size_t i = lo; i < std::min(o.ids.size(), *tok + 8); ++i) e.window_b.push_back(o.ids[i]);
                }
            }
        }
        if (!e.first_index) {
            e.first_index = r.index;
            e.first_id = r.id;
            e.what = what;
            e.detail = detail;
        }
    }
    e.pass = e.compared > 0 && e.identical == e.compared && !e.first_index;
    return e;
}

namespace {

// One reason a pair is `different` or outside the seed envelope: the update it starts at and its words.
struct Finding {
    int64_t update;
    std::string text;
};

std::string joined_by_update(std::vector<Finding> f) {
    std::stable_sort(f.begin(), f.end(), [](const Finding& a, const Finding& b) { return a.update < b.update; });
    std::string o;
    for (const auto& x : f) o += (o.empty() ? "" : "; ") + x.text;
    return o;
}

// "held-out CE 45.9x the float32 error-model bound at update 10" (the first point beyond the bound),
// "(largest 46.1x at update 20)" when that is another point.
std::string beyond_text(const std::string& series, const PairedDistance& d, const char* bound_name) {
    std::string o = series + " " + number_or_na(d.first_beyond_ratio) + "x " + bound_name + " at update " + std::to_string(d.first_beyond_update);
    if (d.max_ratio_update != d.first_beyond_update)
        o += " (largest " + number_or_na(d.max_ratio) + "x at update " + std::to_string(d.max_ratio_update) + ")";
    return o;
}

// Why an envelope distance puts the leg outside: the test and the first band exit, naming the series.
std::string outside_text(const std::string& series, const EnvelopeDistance& e) {
    std::string o = series + ":";
    if (e.test_rejects())
        o += " mean " + number_or_na(e.leg_mean) + " vs the members' " + number_or_na(e.members_mean) + " (t " +
             number_or_na(e.t) + ", two-sided p " + number_or_na(e.p) + " < " + number_or_na(e.alpha) + ")";
    if (!e.outside_band.empty())
        o += std::string(e.test_rejects() ? ";" : "") + " outside the band at update " + std::to_string(e.outside_band.front()) +
             (e.outside_band.size() > 1 ? " (+" + std::to_string(e.outside_band.size() - 1) + " more)" : "") +
             // the prediction statistic against the family's factor (docs/thresholds.md section 3, "band per update")
             (e.worst_band_z > e.band_factor ? ", largest |z| " + number_or_na(e.worst_band_z) + " at update " +
                                                   std::to_string(e.worst_band_update) + " > " + number_or_na(e.band_factor) +
                                                   " (" + std::to_string(e.band_family) + " updates judged)"
                                             : "");
    return o;
}

int64_t first_outside(const EnvelopeDistance& e) {
    // the band's first exit, else (the test speaks for the whole series) the series' first update
    if (!e.outside_band.empty()) return e.outside_band.front();
    return e.points.empty() ? 0 : e.points.front().update;
}

// "no seed envelope of this experiment (key K) in the run file or the catalog tandem.db: build one with
// ..., or name the catalog that holds one with --catalog": where none was found (when the caller said
// where it looked; an envelope in a catalog nobody named is the usual cause) and how to get one.
std::string no_envelope_hint(const L4Context& ctx, const std::string& leg_a, const std::string& leg_b) {
    std::string where;
    bool catalog = false;
    for (size_t i = 0; i < ctx.envelope_places.size(); ++i) {
        const std::string& place = ctx.envelope_places[i];
        where += (i == 0 ? " in " : i + 1 == ctx.envelope_places.size() ? " or " : ", ") + place;
        catalog = catalog || place.rfind("the catalog ", 0) == 0;
    }
    return "no seed envelope of this experiment (key " + ctx.key.substr(0, 12) + ")" + where + ": build one with `tandem envelope EXPERIMENT" +
           " --legs reference` (it varies what " + leg_a + " and " + leg_b + " do not share)" +
           (catalog ? ", or name the catalog that holds one with --catalog" : "");
}

// What the pair's reason says of its legs' residual adds (judge/elementwise.h): with `largest`, each
// checked leg's largest ratio ("; engine's residual adds within float32 rounding at 8 adds of 2 updates
// (largest 0.31 of the bound)"); always, the adds a leg could not check, when either leg recorded any
// forward fingerprints (without `observe` neither does, and nothing is claimed).
std::string residual_adds_text(const L4Entry& l4, bool largest) {
    bool any = false;
    for (const auto& c : l4.residual_adds) any = any || c.recorded;
    if (!any) return "";
    std::string out;
    for (const auto& c : l4.residual_adds)
        if (largest && c.checked > 0 && !c.off())
            out += "; " + c.leg + "'s " + c.kind + "s within float32 rounding at " + std::to_string(c.checked) + " adds of " +
                   std::to_string(c.updates.size()) + " update" + (c.updates.size() > 1 ? "s" : "") + " (largest " +
                   number_or_na(c.max_ratio) + " of the bound)";
    for (const auto& c : l4.residual_adds)
        if (const std::string n = c.not_checked(); !n.empty()) out += "; " + n;
    return out;
}

// The pair's verdict from its levels, its distances and its per-update series (docs/thresholds.md
// "The verdict"). A paired pair is judged by the bounds alone: beyond any of them it is `different`,
// whatever an envelope says (the envelope only sizes the effect); an unpaired pair by its envelope.
void judge_pair(L4Entry& l4, const std::vector<std::string>& level_failures, const std::string& envelope_hint) {
    const std::string pair = l4.leg_a + "~" + l4.leg_b + ": ";
    if (!level_failures.empty()) {
        l4.verdict = PairVerdict::Different;
        l4.verdict_reason = level_failures.front();
        l4.first_different_update = 0;
        return;
    }
    const PairedDistance& n = l4.numerics;
    const EnvelopeDistance& e = l4.envelope;
    std::vector<Finding> different;  // what makes the pair `different` (paired bounds, the lr)
    for (const auto& c : l4.schedule)
        if (c.off()) different.push_back({c.first_off_update, "L4 " + c.describe()});
    for (const auto& c : l4.optimizer)
        if (c.off()) different.push_back({c.first_off_update, "L4 " + c.describe()});
    for (const auto& c : l4.residual_adds)
        if (c.off()) different.push_back({c.first_off_update, "L4 " + c.describe()});
    std::string pinned;
    for (const auto& x : l4.pinned) pinned += "; " + x;
    if (n.applies) {
        if (!n.points.empty() && !n.within())
            different.push_back({n.first_beyond_update, "L4 " + beyond_text(series_label("heldout_ce"), n, "the float32 error-model bound")});
        if (l4.loss_numerics.applies && !l4.loss_numerics.points.empty() && !l4.loss_numerics.within())
            different.push_back({l4.loss_numerics.first_beyond_update, "L4 " + beyond_text(series_label("loss"), l4.loss_numerics, "its float32 bound")});
        if (l4.grad_numerics.applies && !l4.grad_numerics.points.empty() && !l4.grad_numerics.within())
            different.push_back({l4.grad_numerics.first_beyond_update,
                                 "L4 " + beyond_text(series_label("grad_norm"), l4.grad_numerics, "its float32 bound") + pinned});
    }
    if (!different.empty()) {
        l4.verdict = PairVerdict::Different;
        l4.first_different_update = std::min_element(different.begin(), different.end(), [](const Finding& a, const Finding& b) {
                                        return a.update < b.update;
                                    })->update;
        std::string effect;
        if (e.available)  // the envelope sizes the effect; it never turns a detected difference into a pass
            effect = std::string("; effect ") + (e.within() ? "within" : "beyond") + " seed noise: " + e.effect() + " (the " +
                     e.stack + " seed envelope, " + std::to_string(e.members) + " runs" +
                     (e.outside_band.empty() ? "" : "; outside its band at update " + std::to_string(e.outside_band.front())) + ")";
        else if (n.applies)
            effect = "; effect size: no seed envelope (" + (e.why_unavailable.empty() ? envelope_hint : e.why_unavailable) + ")";
        l4.verdict_reason = pair + joined_by_update(different) + residual_adds_text(l4, false) + effect;
        return;
    }
    if (n.applies) {
        if (n.points.empty()) {
            l4.verdict = PairVerdict::NotJudged;
            l4.verdict_reason = pair + "no paired evaluation";
            return;
        }
        l4.verdict = PairVerdict::Equivalent;
        std::string series;
        if (l4.loss_numerics.applies && !l4.loss_numerics.points.empty())
            series = "; lr on the schedule, training loss and pre-clip grad norm within their bounds at all " +
                     std::to_string(l4.loss_numerics.points.size()) + " updates (largest " + number_or_na(l4.loss_numerics.max_ratio) +
                     " and " + number_or_na(l4.grad_numerics.max_ratio) + " of them)";
        for (const auto& c : l4.optimizer)
            if (c.checked > 0)
                series += "; " + c.leg + "'s optimizer steps as the spec's AdamW at " + std::to_string(c.checked) + " replayed update" +
                          (c.checked > 1 ? "s" : "") + " (largest " + number_or_na(c.max_ratio) + " of the float32 bound)";
        series += residual_adds_text(l4, true);
        l4.verdict_reason = pair + "held-out CE within the float32 error-model bound at all " + std::to_string(n.points.size()) +
                            " paired evaluations (largest " + number_or_na(n.max_ratio) + " of the bound, update " +
                            std::to_string(n.max_ratio_update) + ")" + series;
        return;
    }
    const std::string unpaired = l4.imported ? "an imported leg (no paired distance)"
                                 : l4.note.rfind("the runs' seeds differ", 0) == 0 ? "not paired (the runs' seeds differ)"
                                                                                   : "not paired (native dropout masks or plan)";
    if (!e.available) {
        l4.verdict = PairVerdict::NotJudged;
        l4.verdict_reason = pair + unpaired + ", and " + (e.why_unavailable.empty() ? envelope_hint : e.why_unavailable);
        return;
    }
    std::vector<Finding> outside;
    if (!e.within()) outside.push_back({first_outside(e), outside_text(series_label("heldout_ce"), e)});
    for (const auto* s : {&l4.loss_envelope, &l4.grad_envelope})
        if (s->available && !s->within())
            outside.push_back({first_outside(*s), outside_text(series_label(s->series), *s) +
                                                      (s->series == "grad_norm" ? pinned : "")});
    const std::string seeds = "the " + e.stack + " seed envelope (" + std::to_string(e.members) + " runs";
    if (outside.empty()) {
        l4.verdict = PairVerdict::WithinEnvelope;
        std::string series;
        for (const auto* s : {&l4.loss_envelope, &l4.grad_envelope})
            if (s->available)
                series += "; " + series_label(s->series) + " " + s->effect();
        l4.verdict_reason = pair + unpaired + "; " + e.leg + " within " + seeds + ": held-out CE " + e.effect() + series + ")" +
                            (l4.series_note.empty() ? "" : "; " + l4.series_note) + residual_adds_text(l4, true);
        return;
    }
    l4.verdict = PairVerdict::OutsideEnvelope;
    l4.verdict_reason = pair + e.leg + " outside " + seeds + "): " + joined_by_update(outside);
}

// The per-update series of the pair (judge/series.h): the lr of each leg against the schedule; with a
// shared plan the training loss and pre-clip grad norm, paired against their bounds, else against
// the envelope (when it kept the plan: members on other plans ran other batches).
void judge_series(L4Entry& l4, const LegData& a, const LegData& b, const L4Context& ctx, const SeedEnvelope* env,
                  const LegData& judged, bool ref_first) {
    if (l4.imported) {
        l4.series_note = "an imported leg: lr, training loss and grad norm are shown, not judged";
        return;
    }
    for (const LegData* l : {&a, &b}) {
        l4.schedule.push_back(schedule_check(l->name, l->trace.steps, ctx.spec, ctx.planned_updates));
        l4.optimizer.push_back(optimizer_check(l->name, l->trace.optimizer_checks));
        if (ctx.residual_adds)
            for (const auto& c : *ctx.residual_adds)
                if (c.leg == l->name) l4.residual_adds.push_back(c);
        const std::string pinned = pinned_at_clip(l->name, l->trace.steps, l->clip.value_or(ctx.spec.clip));
        if (!pinned.empty()) l4.pinned.push_back(pinned);
    }
    const bool shared_plan = ctx.spec.leg_setting(a.name, "plan") == "shared" && ctx.spec.leg_setting(b.name, "plan") == "shared";
    if (!shared_plan) {
        l4.series_note = "a native plan: training loss and grad norm ran other batches, shown, not judged per update";
        return;
    }
    if (l4.gated) {
        ErrorModel loss_model = ctx.error_model, grad_model = ctx.error_model;
        loss_model.k = ctx.thresholds.loss_k;
        grad_model.k = ctx.thresholds.grad_norm_k;
        l4.loss_numerics = paired_distance(l4.loss_points, loss_model, ref_first);
        l4.grad_numerics = paired_distance(l4.grad_points, grad_model, ref_first);
        return;
    }
    if (!env) return;
    if (env->varies("plan") || env->varies("split")) {
        l4.series_note = "the " + env->implementation + " seed envelope varies the plan: its members ran other batches, so training "
                         "loss and grad norm are not judged per update (`tandem envelope --vary dropout` keeps the plan)";
        return;
    }
    ErrorModel loss_model = ctx.error_model, grad_model = ctx.error_model;
    loss_model.k = ctx.thresholds.loss_k;
    grad_model.k = ctx.thresholds.grad_norm_k;
    l4.loss_envelope = envelope_series_distance(judged.name, judged.trace.steps, "loss", *env, loss_model);
    l4.grad_envelope = envelope_series_distance(judged.name, judged.trace.steps, "grad_norm", *env, grad_model);
    if (!l4.loss_envelope.available)
        l4.series_note = "training loss and grad norm not judged per update: " + l4.loss_envelope.why_unavailable +
                         " (an envelope built before they were kept: build it again)";
}

}  // namespace

L4Entry compare_l4(const LegData& a, const LegData& b, const L4Context& ctx, const std::vector<std::string>& level_failures) {
    // An imported leg (TensorBoard, CSV): reported, not gated; only a seed envelope can judge it.
    const bool imported = is_imported(a) || is_imported(b);
    auto l4 = entry_for<L4Entry>(a, b);
    l4.eval_points = pair_evals(a.trace.evals, b.trace.evals);
    l4.loss_points = pair_losses(a.trace.steps, b.trace.steps);
    l4.grad_points = pair_grad_norms(a.trace.steps, b.trace.steps);
    l4.eval = diff_stats(l4.eval_points);
    l4.loss = diff_stats(l4.loss_points);
    l4.grad = diff_stats(l4.grad_points);
    const bool ref_first = reference_is_first(a.implementation, b.implementation);
    l4.residual_leg = ref_first ? b.name : a.name;
    l4.residual_reference = ref_first ? a.name : b.name;
    l4.eval_percent = residual_percent(l4.eval_points, ref_first);
    l4.loss_percent = residual_percent(l4.loss_points, ref_first);
    l4.grad_percent = residual_percent(l4.grad_points, ref_first);
    if (!a.trace.steps.empty()) l4.final_loss_a = a.trace.steps.back().loss;
    if (!b.trace.steps.empty()) l4.final_loss_b = b.trace.steps.back().loss;
    l4.imported = imported;
    const bool same_seeds = a.seeds == b.seeds;  // legs of one run; of two runs (tandem compare): their seeds
    l4.gated = !imported && same_seeds && legs_are_paired(ctx.spec, a.name, b.name) && ctx.model_error.empty();
    if (l4.gated) l4.numerics = paired_distance(l4.eval_points, ctx.error_model, ref_first);
    else if (imported) l4.note = "an imported leg: the paired numerics distance does not apply (judged by a seed envelope when one exists)";
    else if (!ctx.model_error.empty()) l4.note = "no error model: " + ctx.model_error;
    else if (!same_seeds) l4.note = "the runs' seeds differ: the paired numerics distance does not apply";
    else l4.note = "native dropout masks or plan: the paired numerics distance does not apply";
    // The envelope that judges the pair: the reference stack's, else the reference side's, else the leg's.
    // The leg judged is the imported one when one is (the envelope must speak about it, not
    // about the run's own leg), else the non-reference side.
    const bool a_judged = is_imported(a) != is_imported(b) ? is_imported(a) : !ref_first;
    const LegData& judged = a_judged ? a : b;
    const LegData& reference_side = a_judged ? b : a;
    const SeedEnvelope* env = pick_envelope(ctx.envelopes, reference_side.implementation);
    if (!env) env = pick_envelope(ctx.envelopes, judged.implementation);
    judge_series(l4, a, b, ctx, env, judged, ref_first);
    if (env) {
        l4.envelope = envelope_distance(judged.name, judged.trace.evals, *env, ctx.error_model);
        // Thresholds::envelope_alpha: half to the mean tests (Bonferroni over the series tested), half to
        // the per-update bands of every series, one family (Sidak over its checks; docs/thresholds.md section 3)
        const int tests = 1 + l4.loss_envelope.available + l4.grad_envelope.available;
        for (auto* d : {&l4.envelope, &l4.loss_envelope, &l4.grad_envelope}) d->alpha = ctx.thresholds.envelope_alpha / 2.0 / tests;
        judge_bands({&l4.envelope, &l4.loss_envelope, &l4.grad_envelope}, ctx.thresholds.envelope_alpha / 2.0);
    }
    judge_pair(l4, level_failures, no_envelope_hint(ctx, l4.leg_a, l4.leg_b));
    l4.pass = verdict_passes(l4.verdict);
    return l4;
}

}  // namespace tandem::experiments
