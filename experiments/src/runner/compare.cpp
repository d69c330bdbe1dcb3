// L1–L4 comparison, grad-norm distributions, timing and memory rows (docs/report.md).
#include "tandem/experiments/compare.h"

#include "tandem/data/token_diff.h"
#include "tandem/engine/tensor.h"
#include "tandem/error.h"
#include "tandem/strict_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace tandem::experiments {
using nlohmann::json;

double mean(const std::vector<double>& x) {
    if (x.empty()) return std::nan("");
    double s = 0;
    for (double v : x) s += v;
    return s / static_cast<double>(x.size());
}

double population_std(const std::vector<double>& x) {
    if (x.empty()) return std::nan("");
    double m = mean(x), s = 0;
    for (double v : x) s += (v - m) * (v - m);
    return std::sqrt(s / static_cast<double>(x.size()));
}

double percentile(std::vector<double> x, double q) {
    if (x.empty()) return std::nan("");
    std::sort(x.begin(), x.end());
    double pos = q / 100.0 * static_cast<double>(x.size() - 1);
    size_t lo = static_cast<size_t>(std::floor(pos));
    size_t hi = std::min(lo + 1, x.size() - 1);
    double frac = pos - static_cast<double>(lo);
    return x[lo] + (x[hi] - x[lo]) * frac;
}

int64_t sign_changes(const std::vector<double>& diffs) {
    int64_t n = 0;
    int last = 0;
    for (double d : diffs) {
        int s = d > 0 ? 1 : (d < 0 ? -1 : 0);
        if (s == 0) continue;
        if (last != 0 && s != last) ++n;
        last = s;
    }
    return n;
}

DiffStats diff_stats(const std::vector<PairedPoint>& points) {
    DiffStats s;
    s.n = static_cast<int64_t>(points.size());
    if (points.empty()) return s;
    std::vector<double> d, ad;
    double sum_abs_b = 0;
    for (const auto& p : points) {
        d.push_back(p.diff);
        ad.push_back(std::fabs(p.diff));
        sum_abs_b += std::fabs(p.b);
        if (std::fabs(p.diff) > s.max_abs || s.max_abs_update < 0) {
            s.max_abs = std::fabs(p.diff);
            s.max_abs_update = p.update;
        }
    }
    s.mean_signed = mean(d);
    s.mean_abs = mean(ad);
    s.std = population_std(d);
    s.sign_changes = sign_changes(d);
    double mean_abs_b = sum_abs_b / static_cast<double>(points.size());
    s.mean_abs_rel = mean_abs_b > 0 ? s.mean_abs / mean_abs_b : std::nan("");
    return s;
}

std::vector<PairedPoint> pair_evals(const std::vector<EvalRow>& a, const std::vector<EvalRow>& b) {
    std::map<int64_t, double> mb;
    for (const auto& e : b) mb[e.update] = e.heldout_ce;
    std::vector<PairedPoint> out;
    for (const auto& e : a)
        if (auto it = mb.find(e.update); it != mb.end()) out.push_back({e.update, e.heldout_ce, it->second, e.heldout_ce - it->second});
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.update < y.update; });
    return out;
}

std::vector<PairedPoint> pair_losses(const std::vector<StepRow>& a, const std::vector<StepRow>& b) {
    std::map<int64_t, double> mb;
    for (const auto& s : b) mb[s.update] = s.loss;
    std::vector<PairedPoint> out;
    for (const auto& s : a)
        if (auto it = mb.find(s.update); it != mb.end()) out.push_back({s.update, s.loss, it->second, s.loss - it->second});
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.update < y.update; });
    return out;
}

std::vector<PairedPoint> pair_grad_norms(const std::vector<StepRow>& a, const std::vector<StepRow>& b) {
    std::map<int64_t, double> mb;
    for (const auto& s : b)
        if (std::isfinite(s.grad_norm)) mb[s.update] = s.grad_norm;
    std::vector<PairedPoint> out;
    for (const auto& s : a) {
        if (!std::isfinite(s.grad_norm)) continue;
        if (auto it = mb.find(s.update); it != mb.end()) out.push_back({s.update, s.grad_norm, it->second, s.grad_norm - it->second});
    }
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.update < y.update; });
    return out;
}

bool is_imported(const LegData& leg) { return leg.implementation == "imported"; }

bool reference_is_first(const std::string& implementation_a, const std::string& implementation_b) {
    return implementation_a == "reference" && implementation_b != "reference";
}

PercentSeries residual_percent(const std::vector<PairedPoint>& points, bool reference_is_a) {
    PercentSeries s;
    for (const auto& p : points) {
        PercentPoint q;
        q.update = p.update;
        q.leg = reference_is_a ? p.b : p.a;
        q.reference = reference_is_a ? p.a : p.b;
        const double denom = std::fabs(q.reference);
        q.percent = denom > 0 && std::isfinite(denom) ? 100.0 * (q.leg - q.reference) / denom : std::nan("");
        if (std::isfinite(q.percent) && (s.max_abs_update < 0 || std::fabs(q.percent) > s.max_abs)) {
            s.max_abs = std::fabs(q.percent);
            s.max_abs_update = q.update;
        }
        s.points.push_back(q);
    }
    return s;
}

double update_tokens_per_second(const StepRow& row) {
    return row.wall_s > 0 ? static_cast<double>(row.tokens) / row.wall_s : std::nan("");
}

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

std::pair<int64_t, int64_t> timing_window(int64_t updates) {
    if (updates <= 0) return {-1, -1};
    if (updates > 200) return {100, std::min<int64_t>(updates - 1, 499)};
    return {updates / 5, updates - 1};
}

namespace {

L1Entry compare_l1(const LegData& a, const LegData& b, const Thresholds& t) {
    L1Entry e;
    e.leg_a = a.name;
    e.leg_b = b.name;
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
    L2Entry e;
    e.leg_a = a.name;
    e.leg_b = b.name;
    if (!a.trace.has_l2 || !b.trace.has_l2) {
        e.mismatches.push_back(std::string("no L2 digests from ") + (a.trace.has_l2 ? b.name : a.name));
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
    L3Entry e;
    e.leg_a = a.name;
    e.leg_b = b.name;
    if (!a.trace.has_l3 || !b.trace.has_l3) {
        e.what = "missing";
        e.detail = std::string("no L3 records from ") + (a.trace.has_l3 ? b.name : a.name);
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

GradStats grad_stats(const LegData& l, double clip) {
    GradStats g;
    g.leg = l.name;
    std::vector<double> x;
    for (const auto& s : l.trace.steps)
        if (std::isfinite(s.grad_norm)) x.push_back(s.grad_norm);
    g.n = static_cast<int64_t>(x.size());
    if (x.empty()) return g;
    g.median = percentile(x, 50);
    g.p99 = percentile(x, 99);
    g.max = *std::max_element(x.begin(), x.end());
    g.frac_above_clip = static_cast<double>(std::count_if(x.begin(), x.end(), [&](double v) { return v > clip; })) /
                        static_cast<double>(x.size());
    return g;
}

TimingRow timing_row(const LegData& l) {
    TimingRow r = timing_of(l.trace);
    r.leg = l.name;
    r.implementation = l.implementation;
    r.device = l.device;
    r.status = l.status;
    return r;
}

std::string g3(double x) {
    if (!std::isfinite(x)) return "n/a";
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", x);
    return b;
}

// The pair's verdict from its levels and its two distances (docs/thresholds.md "The verdict").
void judge_pair(L4Entry& l4, const std::vector<std::string>& level_failures, const std::string& envelope_hint) {
    const std::string pair = l4.leg_a + "~" + l4.leg_b + ": ";
    if (!level_failures.empty()) {
        l4.verdict = PairVerdict::NotComparable;
        l4.verdict_reason = level_failures.front();
        return;
    }
    const PairedDistance& n = l4.numerics;
    if (n.applies && n.within()) {
        l4.verdict = PairVerdict::Equivalent;
        l4.verdict_reason = pair + "held-out CE within the float32 error-model bound at all " + std::to_string(n.points.size()) +
                            " paired evaluations (largest " + g3(n.max_ratio) + " of the bound, update " +
                            std::to_string(n.max_ratio_update) + ")";
        return;
    }
    std::string numerics;
    if (!n.applies) numerics = "not paired (native dropout masks or plan)";
    else if (n.points.empty()) numerics = "no paired evaluation";
    else numerics = "held-out CE " + g3(n.max_ratio) + "x the float32 error-model bound at update " + std::to_string(n.max_ratio_update);
    const EnvelopeDistance& e = l4.envelope;
    if (!e.available) {
        l4.verdict = PairVerdict::NotComparable;
        l4.verdict_reason = pair + numerics + ", and " + (e.why_unavailable.empty() ? envelope_hint : e.why_unavailable);
        return;
    }
    const std::string seeds = "the " + e.stack + " seed envelope (" + std::to_string(e.members) + " runs";
    if (e.within()) {
        l4.verdict = PairVerdict::WithinEnvelope;
        l4.verdict_reason = pair + numerics + "; " + e.leg + " within " + seeds + ": largest |z| " + g3(e.max_abs_z) +
                            ", one-sided p " + g3(e.p) + ")";
    } else {
        l4.verdict = PairVerdict::OutsideEnvelope;
        std::string why;
        if (e.test_rejects())
            why = "mean held-out CE " + g3(e.leg_mean) + " above the members' " + g3(e.members_mean) + " (t " + g3(e.t) +
                  ", one-sided p " + g3(e.p) + " < " + g3(e.alpha) + ")";
        if (!e.outside_band.empty())
            why += (why.empty() ? "" : "; ") + std::string("outside the band at update ") + std::to_string(e.outside_band.front()) +
                   (e.outside_band.size() > 1 ? " (+" + std::to_string(e.outside_band.size() - 1) + " more)" : "");
        l4.verdict_reason = pair + e.leg + " outside " + seeds + "): " + why;
    }
}

}  // namespace

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
                        const std::optional<ErrorModel>& model, const std::vector<SeedEnvelope>& envelopes) {
    return compare_legs_against(legs, spec, "", t, model, envelopes);
}

Comparison compare_legs_against(const std::vector<LegData>& legs, const ExperimentSpec& spec, const std::string& against,
                                const Thresholds& t, const std::optional<ErrorModel>& model,
                                const std::vector<SeedEnvelope>& envelopes) {
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
        c.grads.push_back(grad_stats(l, spec.clip));
        c.timing.push_back(timing_row(l));
        faulty.emplace_back(l.name, l.faults);
    }
    c.fault_banner = fault_banner(faulty);
    for (const auto& [i, j] : pairs_of(legs, against)) {
        const LegData& a = legs[i];
        const LegData& b = legs[j];
        // An imported leg (TensorBoard, CSV) has no L1/L2/L3 data: those levels are n/a, not failures.
        const bool imported = is_imported(a) || is_imported(b);
        const size_t failures_before = c.failures.size();
        L1Entry l1 = compare_l1(a, b, t);
        if (imported && !(a.trace.l1_ce && b.trace.l1_ce)) l1.na = "imported";
        if (!l1.pass && l1.na.empty()) {
            std::ostringstream w;
            w.precision(3);
            w << "L1 " << a.name << "~" << b.name << ": relative difference "
              << (l1.ce_a && l1.ce_b ? std::to_string(l1.rel_diff) : std::string("n/a (missing)")) << " > " << t.l1_rel;
            c.failures.push_back(w.str());
        }
        c.l1.push_back(l1);
        L2Entry l2 = compare_l2(a, b);
        if (imported && !(a.trace.has_l2 && b.trace.has_l2)) {
            l2.na = "imported";
            l2.mismatches.clear();
        }
        if (!l2.pass && l2.na.empty())
            c.failures.push_back("L2 " + a.name + "~" + b.name + ": " + std::to_string(l2.mismatches.size()) +
                                 " tensor(s) differ" + (l2.mismatches.empty() ? "" : ", first " + l2.mismatches.front()));
        c.l2.push_back(l2);
        L3Entry l3 = compare_l3(a, b);
        if (imported && !(a.trace.has_l3 && b.trace.has_l3)) l3.na = "imported";
        if (!l3.pass && l3.na.empty())
            c.failures.push_back("L3 " + a.name + "~" + b.name + ": " + (l3.first_id.empty() ? l3.detail : "record " + l3.first_id + ": " + l3.detail));
        c.l3.push_back(l3);

        L4Entry l4;
        l4.leg_a = a.name;
        l4.leg_b = b.name;
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
        l4.gated = !imported && legs_are_paired(spec, a.name, b.name) && model_error.empty();
        if (l4.gated) l4.numerics = paired_distance(l4.eval_points, c.error_model, ref_first);
        else if (imported) l4.note = "an imported leg: the paired numerics distance does not apply (judged by a seed envelope when one exists)";
        else if (!model_error.empty()) l4.note = "no error model: " + model_error;
        else l4.note = "native dropout masks or plan: the paired numerics distance does not apply";
        // The envelope that judges the pair: the reference stack's, else the reference side's, else the leg's.
        // The leg judged is the imported one when one is (the envelope must speak about it, not
        // about the run's own leg), else the non-reference side.
        const bool a_judged = is_imported(a) != is_imported(b) ? is_imported(a) : !ref_first;
        const LegData& judged = a_judged ? a : b;
        const LegData& reference_side = a_judged ? b : a;
        const SeedEnvelope* env = pick_envelope(c.envelopes, reference_side.implementation);
        if (!env) env = pick_envelope(c.envelopes, judged.implementation);
        if (env) {
            l4.envelope = envelope_distance(judged.name, judged.trace.evals, *env, c.error_model);
            l4.envelope.alpha = t.envelope_alpha;
        }
        const std::vector<std::string> level_failures(c.failures.begin() + static_cast<std::ptrdiff_t>(failures_before),
                                                      c.failures.end());
        judge_pair(l4, level_failures,
                   "no seed envelope of this experiment (key " + key.substr(0, 12) + ") for " + reference_side.implementation +
                       " or " + judged.implementation + ": build one with `tandem envelope EXPERIMENT --legs " +
                       reference_side.implementation + "`");
        l4.pass = verdict_passes(l4.verdict);
        c.l4.push_back(std::move(l4));
    }
    return c;
}

TimingRow timing_of(const LegTrace& t) {
    TimingRow r;
    r.setup_s = t.setup_s;
    r.model_load_s = t.model_load_s;
    r.tokenize_s = t.tokenize_s;
    r.updates = static_cast<int64_t>(t.steps.size());
    auto [first, last] = timing_window(r.updates);
    r.window_first = first;
    r.window_last = last;
    std::vector<double> w;
    double tokens = 0, wall = 0;
    for (const auto& s : t.steps) {
        if (s.update >= first && s.update <= last && std::isfinite(s.wall_s)) w.push_back(s.wall_s);
        tokens += static_cast<double>(s.tokens);
        wall += std::isfinite(s.wall_s) ? s.wall_s : 0;
    }
    if (!w.empty()) r.median_update_s = percentile(w, 50);
    if (wall > 0) r.tokens_per_s = tokens / wall;
    r.peak_device_bytes = t.peak_device_bytes;
    r.peak_host_bytes = t.peak_host_bytes;
    return r;
}

// A pair with an imported leg (TensorBoard, CSV) has no L1-L3 and no paired distance: only a seed
// envelope can judge it. Unjudged, it is reported per pair (not comparable) and named on the run's
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

std::string Comparison::verdict() const {
    auto first_of = [](const std::vector<std::string>& v) {
        return v.front() + (v.size() > 1 ? " (+" + std::to_string(v.size() - 1) + " more)" : "");
    };
    if (!completeness_judged) return "incomplete: completeness not judged";
    if (!incomplete.empty()) return "incomplete: " + first_of(incomplete);
    if (!failures.empty()) return std::string(pair_verdict_name(PairVerdict::NotComparable)) + ": " + first_of(failures);
    if (legs.size() < 2) return "complete; one leg, nothing to cross-check";
    if (l4.empty()) return "incomplete: no pair of legs compared";
    const auto unjudged = unjudged_imported();
    std::string not_judged;
    if (!unjudged.empty())
        not_judged = "; not judged: " + unjudged.front()->leg_a + "~" + unjudged.front()->leg_b +
                     (unjudged.size() > 1 ? " (+" + std::to_string(unjudged.size() - 1) + " more)" : "") +
                     ": an imported leg, no paired distance and no seed envelope";
    if (unjudged.size() == l4.size()) return "complete; no pair of the run's own legs to cross-check" + not_judged;
    // The worst pair speaks for the run: not comparable, then outside, then within, then equivalent.
    auto severity = [](PairVerdict v) {
        switch (v) {
            case PairVerdict::NotComparable: return 3;
            case PairVerdict::OutsideEnvelope: return 2;
            case PairVerdict::WithinEnvelope: return 1;
            case PairVerdict::Equivalent: return 0;
        }
        return 3;
    };
    const L4Entry* worst = nullptr;
    for (const auto& e : l4)
        if (counts_for_run(e) && (!worst || severity(e.verdict) > severity(worst->verdict))) worst = &e;
    size_t others = 0;
    for (const auto& e : l4) others += counts_for_run(e) && &e != worst && severity(e.verdict) == severity(worst->verdict);
    return std::string(pair_verdict_name(worst->verdict)) + ": " + worst->verdict_reason +
           (others ? " (+" + std::to_string(others) + " more pair" + (others > 1 ? "s" : "") + ")" : "") + not_judged;
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

std::vector<std::string> incompleteness(const LegData& leg, const ExpectedSeries& expected) {
    std::vector<std::string> out;
    const std::string& n = leg.name;
    if (leg.status != "finished") {
        std::string why = leg.status == "running" || leg.status == "pending" || leg.status.empty()
                              ? "did not finish (last recorded status: " + (leg.status.empty() ? std::string("none") : leg.status) + ")"
                              : leg.status;
        out.push_back(n + ": leg " + why + (leg.trace.error ? " (" + *leg.trace.error + ")" : ""));
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
        if (!std::isfinite(s.loss)) out.push_back(leg.name + ": non-finite loss at update " + std::to_string(s.update));
        if (!std::isfinite(s.grad_norm))
            out.push_back(leg.name + ": non-finite grad norm at update " + std::to_string(s.update));
        if (out.size() >= 4) return out;
    }
    for (const auto& e : leg.trace.evals)
        if (!std::isfinite(e.heldout_ce)) {
            out.push_back(leg.name + ": non-finite held-out CE at update " + std::to_string(e.update));
            break;
        }
    if (leg.trace.l1_ce && !std::isfinite(*leg.trace.l1_ce)) out.push_back(leg.name + ": non-finite initial held-out CE (L1)");
    return out;
}

void judge_completeness(Comparison& c, const std::vector<LegData>& legs, const ExpectedSeries& expected) {
    c.incomplete.clear();
    if (legs.empty()) c.incomplete.push_back("the run has no leg");
    for (const auto& l : legs) {
        if (is_imported(l)) continue;  // a run made elsewhere holds whatever series it has (docs/legs.md)
        for (auto& line : incompleteness(l, expected)) c.incomplete.push_back(std::move(line));
        for (auto& line : non_finite_values(l)) c.failures.push_back(std::move(line));
    }
    c.completeness_judged = true;
}

std::vector<LegData> read_legs(const RunFileReader& reader) {
    std::vector<LegData> out;
    auto str = [](const Attributes& a, const char* k) -> std::string {
        auto it = a.find(k);
        if (it == a.end()) return "";
        if (auto s = std::get_if<std::string>(&it->second)) return *s;
        return "";
    };
    auto i64 = [](const Attributes& a, const char* k, int64_t def) -> int64_t {
        auto it = a.find(k);
        if (it == a.end()) return def;
        if (auto v = std::get_if<std::int64_t>(&it->second)) return *v;
        return def;
    };
    for (const auto& name : reader.legs()) {
        LegData l;
        l.name = name;
        Attributes attrs = reader.leg_attributes(name);
        l.implementation = str(attrs, "implementation");
        l.device = str(attrs, "device");
        l.status = str(attrs, "status");
        l.exit_status = i64(attrs, "exit_status", 0);
        LegTrace& t = l.trace;
        t.steps = reader.steps(name);
        t.evals = reader.eval(name);
        // The stored check records, read strictly: a damaged record is an error naming it.
        auto record = [&](CheckLevel level) -> std::optional<json> {
            auto text = reader.check(name, level);
            if (!text) return std::nullopt;
            const std::string where = reader.path().string() + ": /legs/" + name + "/checks/" + check_level_name(level);
            json j = parse_json_strict(*text, where);
            if (!j.is_object()) throw Error(where + ": not a JSON object");
            return j;
        };
        if (auto j = record(CheckLevel::L1)) l1_from_json(t, *j);
        if (auto j = record(CheckLevel::L2)) l2_from_json(t, *j);
        if (auto j = record(CheckLevel::L3)) l3_from_json(t, *j);
        if (auto tm = reader.timing(name)) {
            t.model_load_s = tm->model_load_s;
            t.tokenize_s = tm->tokenize_s;
            t.total_s = tm->total_s;
            if (auto it = tm->extra.find("setup_s"); it != tm->extra.end())
                if (auto v = std::get_if<double>(&it->second)) t.setup_s = *v;
        }
        if (auto m = reader.memory(name)) {
            t.peak_device_bytes = m->peak_device_bytes;
            t.peak_host_bytes = m->peak_host_bytes;
        }
        if (auto j = reader.flags(name)) l.flags = flags_from_json(json::parse(*j));
        std::string err = str(attrs, "error");
        if (!err.empty()) t.error = err;
        l.faults = str(attrs, "faults");
        t.done = l.status == "finished";
        out.push_back(std::move(l));
    }
    return out;
}

void write_comparisons(RunFileWriter& writer, const Comparison& c) {
    for (const auto& e : c.l4) {
        ComparisonSeries ev;
        ev.series = "heldout_ce";
        ev.points = e.eval_points;
        ev.summary = {{"mean_signed_diff", e.eval.mean_signed}, {"mean_abs_diff", e.eval.mean_abs},
                      {"std_diff", e.eval.std}, {"max_abs_diff", e.eval.max_abs},
                      {"max_abs_diff_update", e.eval.max_abs_update}, {"sign_changes", e.eval.sign_changes},
                      {"mean_abs_rel", e.eval.mean_abs_rel}, {"paired", e.eval.n}, {"max_abs_percent", e.eval_percent.max_abs}};
        writer.write_comparison(e.leg_a, e.leg_b, ev);
        ComparisonSeries lo;
        lo.series = "loss";
        lo.points = e.loss_points;
        lo.summary = {{"mean_signed_diff", e.loss.mean_signed}, {"mean_abs_diff", e.loss.mean_abs},
                      {"std_diff", e.loss.std}, {"max_abs_diff", e.loss.max_abs},
                      {"max_abs_diff_update", e.loss.max_abs_update}, {"sign_changes", e.loss.sign_changes},
                      {"paired", e.loss.n}, {"max_abs_percent", e.loss_percent.max_abs}};
        writer.write_comparison(e.leg_a, e.leg_b, lo);
        ComparisonSeries gn;
        gn.series = "grad_norm";
        gn.points = e.grad_points;
        gn.summary = {{"mean_signed_diff", e.grad.mean_signed}, {"mean_abs_diff", e.grad.mean_abs},
                      {"std_diff", e.grad.std}, {"max_abs_diff", e.grad.max_abs},
                      {"max_abs_diff_update", e.grad.max_abs_update}, {"sign_changes", e.grad.sign_changes},
                      {"paired", e.grad.n}, {"max_abs_percent", e.grad_percent.max_abs}};
        writer.write_comparison(e.leg_a, e.leg_b, gn);
    }
    for (size_t i = 0; i < c.l1.size(); ++i) {
        const auto& l1 = c.l1[i];
        Attributes a{{"l1_rel_diff", l1.rel_diff}, {"l1_pass", int64_t{l1.pass}},
                     {"l2_pass", int64_t{c.l2[i].pass}}, {"l2_mismatches", static_cast<int64_t>(c.l2[i].mismatches.size())},
                     {"l3_pass", int64_t{c.l3[i].pass}}, {"l3_compared", c.l3[i].compared},
                     {"l3_identical", c.l3[i].identical}, {"l4_gated", int64_t{c.l4[i].gated}},
                     {"l4_pass", int64_t{c.l4[i].pass}}, {"verdict", std::string(pair_verdict_name(c.l4[i].verdict))},
                     {"verdict_reason", c.l4[i].verdict_reason}};
        writer.set_comparison_attributes(l1.leg_a, l1.leg_b, a);
    }
    // The two distances, side by side (docs/hdf5-layout.md /distances).
    for (const auto& e : c.l4) {
        const PairedDistance& n = e.numerics;
        const EnvelopeDistance& v = e.envelope;
        Attributes g{{"verdict", std::string(pair_verdict_name(e.verdict))}, {"verdict_reason", e.verdict_reason},
                     {"leg", e.residual_leg}, {"reference", e.residual_reference}, {"paired", int64_t{n.applies}},
                     {"error_model", c.error_model.describe()}, {"error_model_k", c.error_model.k},
                     {"error_model_c", c.error_model.c}, {"error_model_layers", c.error_model.layers},
                     {"error_model_seq_len", c.error_model.seq_len}, {"envelope_available", int64_t{v.available}}};
        writer.set_distance_attributes(e.leg_a, e.leg_b, g);
        if (n.applies)
            writer.write_distance(e.leg_a, e.leg_b, "numerics", n.points,
                                  {{"max_ratio", n.max_ratio}, {"max_ratio_update", n.max_ratio_update},
                                   {"within", int64_t{n.within()}}});
        if (v.available) {
            std::string outside;
            for (int64_t u : v.outside_band) outside += (outside.empty() ? "" : ",") + std::to_string(u);
            writer.write_distance(e.leg_a, e.leg_b, "envelope", v.points,
                                  {{"stack", v.stack}, {"leg", v.leg}, {"members", v.members}, {"max_abs_z", v.max_abs_z},
                                   {"max_abs_z_update", v.max_abs_z_update}, {"outside_band", outside},
                                   {"leg_mean_ce", v.leg_mean}, {"members_mean_ce", v.members_mean},
                                   {"members_std_ce", v.members_std}, {"t", v.t}, {"df", v.df}, {"p", v.p},
                                   {"alpha", v.alpha}, {"within", int64_t{v.within()}}});
        }
    }
}

RunLegRef parse_run_leg(const std::string& text) {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
        throw Error("'" + text + "' is not RUN:LEG (a run folder or run.h5, a colon, a leg name)");
    RunLegRef r{text.substr(0, colon), text.substr(colon + 1)};
    validate_leg_name(r.leg);
    return r;
}

namespace {

void walk_diff(const json& a, const json& b, const std::string& key, std::vector<ConfigDifference>& out) {
    if (a.is_object() && b.is_object()) {
        std::set<std::string> keys;
        for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
        for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
        for (const auto& k : keys) {
            const std::string path = key.empty() ? k : key + "." + k;
            const bool in_a = a.contains(k), in_b = b.contains(k);
            if (in_a && in_b) walk_diff(a.at(k), b.at(k), path, out);
            else out.push_back({path, in_a ? std::optional(a.at(k).dump()) : std::nullopt, in_b ? std::optional(b.at(k).dump()) : std::nullopt});
        }
        return;
    }
    if (a != b) out.push_back({key, a.dump(), b.dump()});
}

struct OpenedRun {
    std::string run_id;
    json spec_json;
    ExperimentSpec spec;
    ExpectedSeries expected;  // what a complete leg of this run holds
    LegData leg;
    std::filesystem::path folder;
    std::vector<SeedEnvelope> envelopes;  // what the run file holds (/envelope)
};

OpenedRun open_run_leg(const RunLegRef& ref) {
    const std::filesystem::path file = std::filesystem::is_directory(ref.run) ? ref.run / "run.h5" : ref.run;
    if (!std::filesystem::exists(file)) throw Error(file.string() + ": no run file");
    RunFileReader reader(file);
    auto exp = reader.experiment();
    if (!exp) throw Error(file.string() + ": no /experiment (not a tandem run file?)");
    OpenedRun r;
    r.run_id = exp->run_id.empty() ? file.parent_path().filename().string() : exp->run_id;
    r.spec_json = json::parse(exp->spec_json);
    r.spec = parse_experiment(r.spec_json, file.string() + " /experiment spec");
    r.expected = ExpectedSeries{exp->total_updates, r.spec.eval_interval};
    const auto legs = reader.legs();
    if (std::find(legs.begin(), legs.end(), ref.leg) == legs.end()) {
        std::string names;
        for (const auto& l : legs) names += (names.empty() ? "" : ", ") + l;
        throw Error(file.string() + ": no leg '" + ref.leg + "' (legs: " + (names.empty() ? "none" : names) + ")");
    }
    for (auto& l : read_legs(reader))
        if (l.name == ref.leg) r.leg = std::move(l);
    r.folder = file.parent_path();
    r.envelopes = read_envelopes(reader);
    return r;
}

}  // namespace

std::vector<ConfigDifference> diff_specs(const json& a, const json& b) {
    std::vector<ConfigDifference> out;
    walk_diff(a, b, "", out);
    return out;
}

RunsComparison compare_run_legs(const RunLegRef& a_ref, const RunLegRef& b_ref, const Thresholds& t) {
    OpenedRun a = open_run_leg(a_ref), b = open_run_leg(b_ref);
    RunsComparison r;
    r.run_id_a = a.run_id;
    r.run_id_b = b.run_id;
    r.label_a = a.run_id + ":" + a_ref.leg;
    r.label_b = b.run_id + ":" + b_ref.leg;
    if (r.label_a == r.label_b) r.label_b += " (2)";
    r.config = diff_specs(a.spec_json, b.spec_json);
    // Spec A with each leg's own per-leg settings under its new label, so masks/plan line up as
    // they would inside one run.
    ExperimentSpec spec = a.spec;
    spec.overrides.clear();
    if (auto it = a.spec.overrides.find(a_ref.leg); it != a.spec.overrides.end()) spec.overrides[r.label_a] = it->second;
    if (auto it = b.spec.overrides.find(b_ref.leg); it != b.spec.overrides.end()) spec.overrides[r.label_b] = it->second;
    a.leg.name = r.label_a;
    b.leg.name = r.label_b;
    // The seed envelopes either run file holds (compare_legs keeps those of this experiment).
    std::vector<SeedEnvelope> envelopes = a.envelopes;
    envelopes.insert(envelopes.end(), b.envelopes.begin(), b.envelopes.end());
    r.comparison = compare_legs({a.leg, b.leg}, spec, t, error_model_or_none(spec, a.folder), envelopes);
    // Completeness, each leg against its own run's plan (as compare_run_file judges a run): a pair
    // with an incomplete leg never passes.
    Comparison& c = r.comparison;
    c.incomplete.clear();
    for (const auto* run : {&a, &b}) {
        for (auto& line : incompleteness(run->leg, run->expected)) c.incomplete.push_back(std::move(line));
        for (auto& line : non_finite_values(run->leg)) c.failures.push_back(std::move(line));
    }
    c.completeness_judged = true;
    if (!r.config.empty()) {
        // Different experiments: the trajectories are not expected to agree. Reported; the verdict
        // says they cannot be judged against each other (unless a level already failed).
        const Comparison& cc = r.comparison;
        for (size_t i = 0; i < cc.l4.size(); ++i) {
            L4Entry& e = r.comparison.l4[i];
            const bool levels_pass = cc.l1[i].pass && cc.l2[i].pass && cc.l3[i].pass;
            e.gated = false;
            e.numerics = PairedDistance{};
            e.envelope = EnvelopeDistance{};
            e.note = "the runs' experiment specs differ (" + std::to_string(r.config.size()) + " setting(s)): reported, not judged";
            if (levels_pass) {
                e.verdict = PairVerdict::NotComparable;
                e.verdict_reason = e.leg_a + "~" + e.leg_b + ": the runs' experiment specs differ (" + std::to_string(r.config.size()) +
                                   " setting(s), first " + r.config.front().key + ")";
            }
            e.pass = false;
        }
    }
    return r;
}

}  // namespace tandem::experiments
