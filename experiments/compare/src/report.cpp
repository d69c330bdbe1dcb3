// The comparison's tables (docs/report.md); rendered by tandem/table.h in text, Markdown, CSV and LaTeX.
#include "tandem/compare/report.h"

#include "tandem/error.h"
#include "tandem/join.h"
#include "tandem/number_text.h"
#include "tandem/compare/comparison_io.h"
#include "tandem/compare/metrics.h"
#include "tandem/strict_json.h"
#include "tandem/measure/host_info.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace tandem::experiments {
namespace fs = std::filesystem;

namespace {

std::string fmt_opt(const std::optional<double>& x, const char* f = "%.8f") { return x ? number_or_na(*x, f) : "n/a"; }
// "1.234e-03% (update 40)": the largest |residual %| of a series, or "n/a" when it has no finite point.
std::string percent_at(const PercentSeries& s) {
    return s.max_abs_update < 0 ? "n/a" : number_or_na(s.max_abs, "%.3e") + "% (update " + std::to_string(s.max_abs_update) + ")";
}
std::string sec(double s) { return s < 0 ? "n/a" : number_or_na(s, "%.3f"); }
std::string bytes(int64_t b) { return b < 0 ? "n/a" : format_bytes(b); }
std::string yesno(bool pass) { return pass ? "pass" : "FAIL"; }
// The check column of L1-L3: "n/a (imported)" when an imported leg lacks the level's data.
std::string check_text(bool pass, const std::string& na) { return na.empty() ? yesno(pass) : "n/a (" + na + ")"; }

std::string ids_text(const std::vector<int32_t>& ids) {
    std::string o;
    for (size_t i = 0; i < ids.size(); ++i) o += (i ? " " : "") + std::to_string(ids[i]);
    return o;
}

}  // namespace

namespace {

std::string size_cell(const std::optional<double>& v) { return v ? number_or_na(*v, "%.6g") : "-"; }

// The cell of one level: the first update it fired at, "-" when it did not.
std::string level_cell(const FaultRow& r, size_t level) {
    if (level >= r.first_update.size() || !r.first_update[level]) return "-";
    std::string cell = std::to_string(*r.first_update[level]);
    if (fault_matrix_levels()[level] == "gate" && !r.flags.empty()) {
        std::string kinds;
        for (const auto& k : r.flags)  // the live L4 flags (paired-bound, envelope) are L4's, not the gate column's
            if (k != "paired-bound" && k != "envelope") kinds += (kinds.empty() ? "" : ", ") + k;
        if (!kinds.empty()) cell += " (" + kinds + ")";
    }
    return cell;
}

std::string words(const std::vector<std::string>& v) {
    std::string o;
    for (const auto& x : v) o += (o.empty() ? "" : " ") + x;
    return o.empty() ? "-" : o;
}

}  // namespace

std::vector<Table> fault_matrix_tables(const FaultMatrix& m) {
    std::vector<Table> out;
    const auto& levels = fault_matrix_levels();
    {
        Table tb{"faults", "Fault matrix: the first update at which each level caught each fault", {"fault", "size"}, {}, {}};
        for (const auto& l : levels) tb.columns.push_back(l);
        tb.columns.push_back("expected");
        tb.transpose_when_wide = false;
        auto row_of = [&](const FaultRow& r, const std::string& name) {
            std::vector<std::string> cells{name, size_cell(r.size)};
            for (size_t i = 0; i < levels.size(); ++i) cells.push_back(level_cell(r, i));
            cells.push_back(words(r.expected));
            return cells;
        };
        tb.rows.push_back(row_of(m.clean, "(clean " + m.clean_leg + ")"));
        int caught = 0, as_expected = 0, not_counted = 0, not_caught = 0;
        std::vector<std::string> skipped;  // "1 not applicable", "1 had no effect", "1 leg failed"
        std::map<std::string, int> outcomes;
        for (const auto& r : m.rows) {
            const std::string outcome = r.outcome();
            ++outcomes[outcome];
            // every row says what it is; a caught one is the plain name
            tb.rows.push_back(row_of(r, outcome == "caught" ? r.fault : r.fault + " (" + outcome + ")"));
            if (outcome == "not applicable") {
                tb.notes.push_back(r.fault + ": not applicable to this experiment, no leg ran it: " + r.not_applicable);
                continue;
            }
            if (outcome == "leg failed") {
                tb.notes.push_back(r.fault + ": leg " + r.leg + " " + r.status + ": nothing it recorded counts as caught");
                continue;
            }
            if (outcome == "no effect") {
                tb.notes.push_back(r.fault + ": no effect on this experiment, nothing to catch: " + r.no_effect);
                continue;
            }
            caught += r.caught();
            not_caught += !r.caught();
            bool all = true;
            for (const auto& e : r.expected) all = all && r.fired(e);
            as_expected += all;
            if (!r.caught())
                tb.notes.push_back(r.fault + ": not caught: expected " + words(r.expected) + ", nothing fired" +
                                   (r.category == "runtime" ? " (a runtime fault changes no number: only its expected signal counts)" : ""));
            else if (!all)
                tb.notes.push_back(r.fault + ": expected " + words(r.expected) + ", caught by " + words(r.caught_by()));
        }
        for (const char* o : {"not applicable", "no effect", "leg failed"})
            if (outcomes[o]) {
                not_counted += outcomes[o];
                skipped.push_back(std::to_string(outcomes[o]) + " " + (std::string(o) == "no effect" ? "had no effect" : o));
            }
        const int counted = static_cast<int>(m.rows.size()) - not_counted;
        tb.notes.insert(tb.notes.begin(),
                        std::to_string(caught) + " of " + std::to_string(counted) + " faults caught by at least one level (" +
                            std::to_string(not_caught) + " not caught); " + std::to_string(as_expected) +
                            " caught by every level docs/faults.md expects" +
                            (skipped.empty() ? "" : "; not counted: " + join(skipped, ", ")));
        tb.notes.push_back("every faulty engine leg is compared with the reference leg '" + m.reference_leg +
                           "' only; a cell is the first update at which the level fired (L1-L3: 0, judged before training; "
                           "L4: the first update at which the pair is different: held-out CE, training loss or pre-clip grad norm "
                           "beyond its float32 bound, or the lr off the spec's schedule; gate: the first update flagged by the "
                           "leg's own anomaly flags), - = did not fire");
        out.push_back(tb);
    }
    {
        Table tb{"fault-effects", "Fault matrix: held-out CE at the end, leg minus reference",
                 {"fault", "update", series_label("heldout_ce"), "difference", "relative", "x clean pair"}, {}, {}};
        auto row_of = [&](const FaultRow& r, const std::string& name) {
            return std::vector<std::string>{name,
                                            r.end_update ? std::to_string(*r.end_update) : "n/a",
                                            r.ce_leg ? number_or_na(*r.ce_leg, "%.6f") : "n/a",
                                            r.ce_diff_abs ? number_or_na(*r.ce_diff_abs, "%.3e") : "n/a",
                                            r.ce_diff_rel ? number_or_na(*r.ce_diff_rel, "%.3e") : "n/a",
                                            r.ce_diff_clean_units ? number_or_na(*r.ce_diff_clean_units, "%.3g") : "n/a"};
        };
        tb.rows.push_back(row_of(m.clean, "(clean " + m.clean_leg + ")"));
        for (const auto& r : m.rows) tb.rows.push_back(row_of(r, r.fault));
        tb.notes.push_back("difference = leg - reference at the last paired evaluation; relative = difference / |reference|; "
                           "x clean pair = difference / |the clean pair's difference| at the same update (n/a when that is 0)");
        out.push_back(tb);
    }
    if (m.size_search) {
        Table tb{"fault-sizes", "Fault matrix: the smallest size each level detects (binary search)",
                 {"fault", "unit", "level", "smallest detected", "largest missed", "probes"}, {}, {}};
        for (const auto& r : m.rows)
            for (const auto& s : r.searches) {
                const FaultInfo& info = fault_info(r.fault);
                tb.rows.push_back({r.fault, info.size ? info.size->unit : "-", s.level, size_cell(s.smallest_detected),
                                   size_cell(s.largest_missed), std::to_string(s.steps)});
            }
        tb.notes.push_back("for each level that caught a fault at its injected size: the weakest size first, then midpoints "
                           "(geometric for a ratio, whole numbers for a count) between the largest size missed and the smallest detected");
        out.push_back(tb);
    }
    return out;
}

std::optional<Table> stacks_table(const Comparison& c) {
    // The packages the upgrade question is about first, then whatever else a leg reports.
    static const std::vector<std::string> first = {"python", "torch", "transformers", "peft", "numpy", "tokenizers", "cuda", "cudnn"};
    std::vector<std::string> packages;
    for (const auto& p : first)
        for (const auto& s : c.stacks)
            if (s.count(p)) {
                packages.push_back(p);
                break;
            }
    for (const auto& s : c.stacks)
        for (const auto& [p, v] : s)
            if (std::find(packages.begin(), packages.end(), p) == packages.end()) packages.push_back(p);
    if (packages.empty()) return std::nullopt;
    Table tb{"stacks", "Stacks: each leg's package versions (its hello event)", {"package"}, {}, {}};
    for (size_t i = 0; i < c.legs.size(); ++i)
        tb.columns.push_back(c.legs[i] + (i < c.stack_implementations.size() ? " (" + c.stack_implementations[i] + ")" : ""));
    tb.columns.push_back("differs");
    for (const auto& p : packages) {
        std::vector<std::string> row{p};
        std::vector<std::string> seen;
        for (const auto& s : c.stacks) {
            const auto it = s.find(p);
            row.push_back(it == s.end() ? "-" : it->second);
            if (it != s.end() && std::find(seen.begin(), seen.end(), it->second) == seen.end()) seen.push_back(it->second);
        }
        row.push_back(seen.size() > 1 ? "differs" : "");
        tb.rows.push_back(std::move(row));
    }
    tb.notes.push_back("-: the leg does not report the package; differs: legs report other versions (the verdict names those "
                       "of legs of one implementation; docs/legs.md \"Upgrade check\")");
    return tb;
}

namespace {

// L1: the initial held-out cross-entropy of each pair.
Table l1_table(const Comparison& c, const Thresholds& t) {
    Table tb{"l1", "L1: initial held-out cross-entropy", {"legs", "CE a", "CE b", "abs diff", "rel diff", "check"}, {}, {}};
    for (const auto& e : c.l1)
        tb.rows.push_back({e.leg_a + " vs " + e.leg_b, fmt_opt(e.ce_a), fmt_opt(e.ce_b),
                           e.ce_a && e.ce_b ? number_or_na(e.abs_diff, "%.3e") : "n/a",
                           e.ce_a && e.ce_b ? number_or_na(e.rel_diff, "%.3e") : "n/a", check_text(e.pass, e.na)});
    tb.notes.push_back("pass: relative difference <= " + number_or_na(t.l1_rel, "%.0e") + " (docs/spec.md §Levels)");
    return tb;
}

// L2: the parameters of each pair after load.
Table l2_table(const Comparison& c) {
    Table tb{"l2", "L2: parameters after load", {"legs", "tensors compared", "identical", "mismatching", "check"}, {}, {}};
    for (const auto& e : c.l2) {
        tb.rows.push_back({e.leg_a + " vs " + e.leg_b, std::to_string(e.compared), std::to_string(e.equal),
                           std::to_string(e.mismatches.size()), check_text(e.pass, e.na)});
        for (const auto& m : e.mismatches) tb.notes.push_back(e.leg_a + " vs " + e.leg_b + ": " + m);
    }
    tb.notes.push_back("pass: every tensor has the same shape and the same float32 bytes (sha256)");
    return tb;
}

// L3: chat template, token ids, supervision and truncation of each pair, with the first mismatch.
Table l3_table(const Comparison& c) {
    Table tb{"l3", "L3: chat template, token ids, supervision, truncation",
             {"legs", "records", "identical", "first mismatch", "what", "check"}, {}, {}};
    for (const auto& e : c.l3) {
        tb.rows.push_back({e.leg_a + " vs " + e.leg_b, std::to_string(e.compared), std::to_string(e.identical),
                           e.first_index ? e.first_id : "none", e.what.empty() ? "-" : e.what, check_text(e.pass, e.na)});
        if (e.first_index) {
            tb.notes.push_back(e.leg_a + " vs " + e.leg_b + ", record " + e.first_id + ": " + e.detail);
            if (e.first_token) {
                tb.notes.push_back("  " + e.leg_a + " tokens from " + std::to_string(e.window_begin) + ": " + ids_text(e.window_a));
                tb.notes.push_back("  " + e.leg_b + " tokens from " + std::to_string(e.window_begin) + ": " + ids_text(e.window_b));
            }
        }
    }
    return tb;
}

// Each leg's optimizer settings against the spec; none when no leg reported them.
std::optional<Table> settings_table(const Comparison& c) {
    if (!std::any_of(c.settings.begin(), c.settings.end(), [](const SettingsEntry& s) { return s.reported; })) return std::nullopt;
    Table tb{"settings", "Optimizer settings against the spec (before update 0)", {"leg", "reported", "differences", "check"}, {}, {}};
    for (const auto& s : c.settings) {
        tb.rows.push_back({s.leg, s.reported ? "yes" : "no", std::to_string(s.differences.size()),
                           !s.reported ? "n/a (not reported)" : s.pass() ? "pass" : "FAIL"});
        for (const auto& d : s.differences) tb.notes.push_back(s.leg + ": " + d);
    }
    tb.notes.push_back("compared: optimizer, per parameter group lr, lr at update 0, betas, eps, weight decay; schedule, "
                       "warmup, clip (docs/thresholds.md \"Optimizer settings\")");
    return tb;
}

// L4: the differences of held-out CE and training loss of each pair, with its verdict.
Table l4_table(const Comparison& c) {
    Table tb{"l4", "L4: held-out CE at paired evaluations and training loss",
             {"legs", "series", "paired", "mean signed", "mean abs", "dispersion", "largest (update)", "sign changes",
              "mean abs rel", "check"},
             {}, {}};
    for (const auto& e : c.l4) {
        std::string legs = e.leg_a + " vs " + e.leg_b;
        tb.rows.push_back({legs, series_label("heldout_ce"), std::to_string(e.eval.n), number_or_na(e.eval.mean_signed, "%.3e"),
                           number_or_na(e.eval.mean_abs, "%.3e"), number_or_na(e.eval.std, "%.3e"),
                           number_or_na(e.eval.max_abs, "%.3e") + " (" + std::to_string(e.eval.max_abs_update) + ")",
                           std::to_string(e.eval.sign_changes), number_or_na(e.eval.mean_abs_rel, "%.3e"),
                           pair_verdict_name(e.verdict)});
        tb.rows.push_back({legs, series_label("loss"), std::to_string(e.loss.n), number_or_na(e.loss.mean_signed, "%.3e"),
                           number_or_na(e.loss.mean_abs, "%.3e"), number_or_na(e.loss.std, "%.3e"),
                           number_or_na(e.loss.max_abs, "%.3e") + " (" + std::to_string(e.loss.max_abs_update) + ")",
                           std::to_string(e.loss.sign_changes), number_or_na(e.loss.mean_abs_rel, "%.3e"), "-"});
        tb.notes.push_back(legs + ": final loss " + fmt_opt(e.final_loss_a) + " vs " + fmt_opt(e.final_loss_b) +
                           "; largest |" + e.residual_leg + " - " + e.residual_reference + "| " +
                           percent_at(e.eval_percent) + " " + series_label("heldout_ce") + ", " + percent_at(e.loss_percent) + " " +
                           series_label("loss") + ", " + percent_at(e.grad_percent) + " " + series_label("grad_norm") + (e.note.empty() ? "" : "; " + e.note));
    }
    tb.notes.push_back("differences are a - b; dispersion = population std of the differences; check: the pair's verdict "
                       "from the two distances below (docs/thresholds.md)");
    return tb;
}

// One row of the distances table: a pair's paired numerics distance and seed envelope distance.
std::vector<std::string> distances_row(const L4Entry& e) {
    const PairedDistance& n = e.numerics;
    const EnvelopeDistance& v = e.envelope;
    std::string rel = "-", bound = "-", ratio = "-";
    if (n.applies && n.max_ratio_update >= 0)
        for (const auto& p : n.points)
            if (p.update == n.max_ratio_update) {
                rel = number_or_na(p.difference, "%.3e") + " (" + std::to_string(p.update) + ")";
                bound = number_or_na(p.scale, "%.3e");
                ratio = number_or_na(p.distance, "%.3g");
            }
    std::string env = "none", z = "-", tt = "-", pp = "-", exits = "-";
    if (v.available) {
        env = v.stack + ", " + std::to_string(v.members) + " runs";
        z = v.max_abs_z_update < 0 ? "n/a" : number_or_na(v.max_abs_z, "%.3g") + " (" + std::to_string(v.max_abs_z_update) + ")";
        tt = number_or_na(v.t, "%.3g") + " (" + std::to_string(v.df) + ")";
        pp = number_or_na(v.p, "%.3g");
        exits = std::to_string(v.outside_band.size());
    }
    return {e.leg_a + " vs " + e.leg_b, n.applies ? "yes" : "no", rel, bound, ratio, env, z, tt, pp, exits,
            pair_verdict_name(e.verdict)};
}

// The two distances of each pair (paired numerics and seed envelope) behind its verdict.
Table distances_table(const Comparison& c, const Thresholds& t) {
    Table tb{"distances", "Two distances: paired numerics (error-model bound) and seed envelope",
             {"legs", "paired", "largest rel diff (update)", "bound there", "ratio", "envelope", "largest |z| (update)",
              "two-sided t (df)", "p", "band exits", "verdict"},
             {}, {}};
    for (const auto& e : c.l4) {
        tb.rows.push_back(distances_row(e));
        tb.notes.push_back(e.leg_a + " vs " + e.leg_b + ": " + pair_verdict_name(e.verdict) + ": " + e.verdict_reason);
    }
    tb.notes.push_back("paired numerics distance: |leg - reference| / |reference| of held-out CE per evaluation against the bound " +
                       c.error_model.describe());
    tb.notes.push_back("envelope distance: z = (leg - envelope mean) / envelope std per evaluation; band mean +- c sqrt(1 + 1/N) std "
                       "widened by the bound (c: Student's t, N - 1 dof, at alpha " + number_or_na(t.envelope_alpha / 2, "%.2g") +
                       " over every update judged, Sidak); two-sided prediction t-test of the leg's mean held-out CE after update 0 "
                       "against the members' (alpha " + number_or_na(t.envelope_alpha / 2, "%.2g") + " over the series tested, Bonferroni)");
    return tb;
}

// A per-update series cell of paired legs: the largest ratio to the float32 bound and where it went beyond.
std::string paired_cell(const PairedDistance& d) {
    if (!d.applies || d.points.empty()) return std::string("-");
    std::string cell = number_or_na(d.max_ratio, "%.3g") + "x bound (" + std::to_string(d.max_ratio_update) + ")";
    if (d.first_beyond_update >= 0) cell += ", beyond from " + std::to_string(d.first_beyond_update);
    return cell;
}

// A per-update series cell of unpaired legs: the seed envelope's |z|, p and band exits.
std::string envelope_cell(const EnvelopeDistance& d) {
    if (!d.available) return std::string("-");
    return "|z| " + number_or_na(d.max_abs_z, "%.3g") + ", p " + number_or_na(d.p, "%.3g") + ", " + std::to_string(d.outside_band.size()) +
           " band exit(s)";
}

// Per-update series of each pair: lr against the schedule, training loss and pre-clip grad norm.
Table series_table(const Comparison& c, const Thresholds& t) {
    Table tb{"series", "Per-update series: lr against the schedule, training loss and pre-clip grad norm",
             {"legs", "lr off the schedule", series_label("loss"), series_label("grad_norm"), "judged by"}, {}, {}};
    for (const auto& e : c.l4) {
        std::string lr;
        for (const auto& x : e.schedule)
            if (x.off()) lr += (lr.empty() ? "" : "; ") + x.leg + " at " + std::to_string(x.first_off_update);
        if (lr.empty()) lr = e.schedule.empty() ? "-" : e.schedule.front().not_checked.empty() ? "none" : "not checked";
        const bool paired = e.loss_numerics.applies;
        const bool envelope = e.loss_envelope.available;
        tb.rows.push_back({e.leg_a + " vs " + e.leg_b, lr,
                           paired ? paired_cell(e.loss_numerics) : envelope_cell(e.loss_envelope),
                           paired ? paired_cell(e.grad_numerics) : envelope_cell(e.grad_envelope),
                           paired ? "float32 bounds" : envelope ? "seed envelope" : "-"});
        for (const auto& x : e.schedule)
            if (x.off()) tb.notes.push_back(e.leg_a + " vs " + e.leg_b + ": " + x.describe());
            else if (!x.not_checked.empty()) tb.notes.push_back(e.leg_a + " vs " + e.leg_b + ": lr of " + x.leg + " not checked: " + x.not_checked);
        for (const auto& x : e.pinned) tb.notes.push_back(x);
        if (!e.series_note.empty()) tb.notes.push_back(e.leg_a + " vs " + e.leg_b + ": " + e.series_note);
    }
    tb.notes.push_back("lr: each leg against the spec's schedule to 4 float32 ulp; training loss and pre-clip grad norm of paired legs: "
                       "|leg - reference| / |reference| per update against k eps32 C^(L+1) sqrt(S) sqrt(1+u) with k " +
                       number_or_na(t.loss_k, "%g") + " and " + number_or_na(t.grad_norm_k, "%g") +
                       "; of unpaired legs on the shared plan: the envelope's per-update band and a two-sided test of the mean "
                       "(docs/thresholds.md \"Per-update series\")");
    return tb;
}

// The live gate's flags; none when the run raised none.
std::optional<Table> gate_table(const Comparison& c) {
    if (c.flags.empty()) return std::nullopt;
    Table tb{"gate", "Live gate flags", {"leg", "update", "flag", "value", "threshold", "action"}, {}, {}};
    for (const auto& f : c.flags)
        tb.rows.push_back({f.leg, std::to_string(f.update), f.kind, number_or_na(f.value, "%.4g"), number_or_na(f.threshold, "%.4g"),
                           gate_action_name(f.action)});
    for (const auto& f : c.flags) tb.notes.push_back(f.message);
    tb.notes.push_back("flags: docs/gate.md (non-finite values, step-time anomalies, loss spikes)");
    return tb;
}

// Each leg's pre-clip gradient norm: median, p99, max and the share above the clip.
Table grad_norm_table(const Comparison& c) {
    Table tb{"grad-norm", "Pre-clip gradient norm", {"leg", "updates", "median", "p99", "max", "above clip"}, {}, {}};
    for (const auto& g : c.grads)
        tb.rows.push_back({g.leg, std::to_string(g.n), number_or_na(g.median, "%.6g"), number_or_na(g.p99, "%.6g"), number_or_na(g.max, "%.6g"),
                           number_or_na(100.0 * g.frac_above_clip, "%.1f") + "%"});
    return tb;
}

// Each leg's timing (setup, load, tokenize, per update), throughput and peak memory.
Table timing_table(const Comparison& c) {
    Table tb{"timing", "Timing and memory",
             {"leg", "device", "status", "setup s", "model load s", "tokenize s", "median s/update (window)", "tokens/s",
              "GFLOP/update", "GFLOP/s", "of sgemm peak", "peak device", "peak host"},
             {}, {}};
    auto giga = [](double v) { return v < 0 ? std::string("n/a") : number_or_na(v / 1e9, "%.1f"); };
    for (const auto& r : c.timing)
        tb.rows.push_back({r.leg + " (" + r.implementation + ")",
                           r.device + (r.device_shared_with.empty() ? "" : " (shared with " + r.device_shared_with + ")"),
                           r.status, sec(r.setup_s), sec(r.model_load_s),
                           sec(r.tokenize_s),
                           sec(r.median_update_s) + " (" + std::to_string(r.window_first) + "-" + std::to_string(r.window_last) + ")",
                           r.tokens_per_s < 0 ? "n/a" : number_or_na(r.tokens_per_s, "%.1f"), giga(r.flops.flops_per_update),
                           giga(r.flops.flops_per_s),
                           r.flops.utilisation < 0 ? "n/a" : number_or_na(100.0 * r.flops.utilisation, "%.0f") + "%",
                           bytes(r.peak_device_bytes), bytes(r.peak_host_bytes)});
    for (const auto& r : c.timing)
        if (!r.device_shared_with.empty()) {
            tb.notes.push_back("shared: legs that ran at the same time on one GPU (--share-devices) slow each other; their "
                               "timings are not each leg's own (docs/cli.md \"Legs on one GPU\")");
            break;
        }
    tb.notes.push_back("window: 0-based updates, inclusive (the paper's 101-500 when the run is long enough); tokens/s: supervised tokens over summed update wall time");
    tb.notes.push_back("GFLOP: one formula for every leg, from the shared plan (docs/benchmarks.md \"FLOPs and utilisation\"; n/a for a leg "
                       "with its own plan); GFLOP/s over the window's update wall time; of sgemm peak: the matrix library's "
                       "float32 GEMM probe at the leg's threads (a GPU leg: the device's cuBLAS float32 GEMM; n/a: not probed)");
    return tb;
}

// The device bandwidth and sgemm probes.
Table probes_table(const Comparison& c) {
    Table tb{"probes", "Device bandwidth probes", {"device", "name", "direction", "bytes", "best s", "GB/s"}, {}, {}};
    for (const auto& p : c.probes) {
        for (const auto& d : p.directions)
            tb.rows.push_back({p.device, p.device_name, d.name, std::to_string(d.bytes_counted), number_or_na(d.best_seconds, "%.5f"),
                               number_or_na(d.gbps, "%.2f")});
        for (const auto& s : p.sgemm)
            tb.rows.push_back({p.device, p.device_name, "sgemm, " + sgemm_where(s),
                               std::to_string(s.m) + "^3", number_or_na(s.best_seconds, "%.5f"), number_or_na(s.flops_per_s / 1e9, "%.1f") + " GFLOP/s"});
    }
    if (c.probes.empty()) tb.notes.push_back("no probe recorded");
    return tb;
}

// docs/observables.md: the evaluation observables of one pair
Table observables_table(const ObservablesComparison& o) {
    Table tb{"observables", "Evaluation observables: " + o.leg_a + " vs " + o.leg_b + " (docs/observables.md)",
             {"update", "|dW| " + o.leg_a, "|dW| " + o.leg_b, "max slot rel diff |dW|", "at", "max rel diff |A|,|B|",
              "probes top-1 same", "max |dp| top-32", "KL max / mean"},
             {}, {}};
    for (const auto& r : o.rows)
        tb.rows.push_back({std::to_string(r.update), number_or_na(r.update_norm_a, "%.6g"), number_or_na(r.update_norm_b, "%.6g"),
                           number_or_na(r.max_delta_rel, "%.2e"), r.max_delta_at, number_or_na(r.max_factor_rel, "%.2e"),
                           std::to_string(r.top1_agree) + "/" + std::to_string(r.probes), number_or_na(r.max_prob_diff, "%.2e"),
                           std::isnan(r.max_kl) ? std::string("n/a") : number_or_na(r.max_kl, "%.2e") + " / " + number_or_na(r.mean_kl, "%.2e")});
    tb.notes.push_back("|dW| = sqrt(sum over layers and projections of |B A|^2) * scaling: the adapter's whole update; "
                       "slot = (layer, projection); probes: the first 16 eval records' next token; KL(" + o.leg_b + " || " + o.leg_a +
                       ") of the full next-token distributions (recorded with `observe`; n/a without)");
    for (const auto& r : o.rows)
        if (!r.kl_error.empty()) tb.notes.push_back("KL at update " + std::to_string(r.update) + " not available: " + r.kl_error);
    return tb;
}

}  // namespace

std::vector<Table> report_tables(const Comparison& c, const Thresholds& t) {
    std::vector<Table> out;
    if (c.fault_matrix) out = fault_matrix_tables(*c.fault_matrix);
    out.push_back(l1_table(c, t));
    out.push_back(l2_table(c));
    out.push_back(l3_table(c));
    if (auto s = settings_table(c)) out.push_back(*s);
    out.push_back(l4_table(c));
    out.push_back(distances_table(c, t));
    out.push_back(series_table(c, t));
    if (auto g = gate_table(c)) out.push_back(*g);
    out.push_back(grad_norm_table(c));
    if (auto s = stacks_table(c)) out.push_back(*s);
    out.push_back(timing_table(c));
    out.push_back(probes_table(c));
    // docs/observables.md: the evaluation observables of each pair
    for (const auto& o : c.observables) out.push_back(observables_table(o));
    // docs/observables.md: where a failing pair diverged, when both legs recorded fingerprints
    for (const auto& l : c.localisations) out.push_back(localisation_table(l));
    for (auto& tb : out) tb.banner = c.fault_banner;  // docs/faults.md: no table of a faulty run without it
    return out;
}

namespace {

// Why the run got its verdict: what is incomplete first (it makes the levels moot), then one line per
// pair that does not pass — `different: ` with its failed levels (L1-L3, "L1 a~b: ..."; several joined
// by "; "), or the pair's L4 verdict and reason (docs/thresholds.md "The verdict") — each ending with
// where the pair was localised; a localisation of no listed pair stands alone. Empty when the verdict
// line alone says it.
std::vector<std::string> verdict_reasons(const Comparison& c) {
    std::vector<std::string> reasons;
    for (const auto& x : c.incomplete) reasons.push_back("incomplete: " + x);
    std::vector<std::string> pairs;            // in order of first mention
    std::map<std::string, std::string> lines;  // pair "a~b" -> its line
    for (const auto& x : c.failures) {         // "L1 a~b: what"
        const std::string named = failure_pair(x);
        const std::string pair = named.empty() ? x : named;
        if (!lines.count(pair)) {
            pairs.push_back(pair);
            lines[pair] = "different: " + x;
        } else {
            lines[pair] += "; " + x;
        }
    }
    if (c.incomplete.empty())
        for (const auto& e : c.l4) {
            const std::string pair = e.leg_a + "~" + e.leg_b;
            if (verdict_passes(e.verdict) || lines.count(pair)) continue;
            pairs.push_back(pair);
            lines[pair] = std::string(Comparison::counts_for_run(e) ? "" : "not judged (an imported leg): ") +
                          pair_verdict_name(e.verdict) + ": " + e.verdict_reason;
        }
    for (const auto& l : c.localisations) {
        std::string* line = nullptr;
        for (const auto& pair : {l.leg_a + "~" + l.leg_b, l.leg_b + "~" + l.leg_a})
            if (lines.count(pair)) line = &lines[pair];
        if (!line) {
            pairs.push_back("localised " + l.leg_a + "~" + l.leg_b);
            lines[pairs.back()] = "localised: " + l.summary();
        } else if (line->find("; localised: ") == std::string::npos) {
            *line += "; localised: " + l.summary();
        }
    }
    for (const auto& pair : pairs) reasons.push_back(lines[pair]);
    // One line is the verdict line already, unless it joins several failures (the verdict line names the first)
    if (reasons.size() == 1 && c.failures.size() <= 1) reasons.clear();
    return reasons;
}

// The verdict line and its reasons, the last lines of a report (comments in LaTeX and CSV).
std::string verdict_block(const Comparison& c, ReportFormat f) {
    std::ostringstream o;
    const std::string verdict = c.verdict();
    const std::vector<std::string> reasons = verdict_reasons(c);
    if (f == ReportFormat::Latex || f == ReportFormat::Csv) {
        const char* lead = f == ReportFormat::Latex ? "% " : "# ";
        o << lead << "verdict: " << (f == ReportFormat::Latex ? latex_escape(verdict) : verdict) << "\n";
        for (const auto& x : reasons) o << lead << (f == ReportFormat::Latex ? latex_escape(x) : x) << "\n";
    } else {
        o << (f == ReportFormat::Markdown ? "**" + markdown_escape(verdict) + "**" : verdict) << "\n";
        for (const auto& x : reasons) o << (f == ReportFormat::Markdown ? "- " : "  - ") << x << "\n";
    }
    return o.str();
}

}  // namespace

std::string render_report(const std::string& title, const Comparison& c, ReportFormat f, const Thresholds& t) {
    std::ostringstream o;
    auto tables = report_tables(c, t);
    // The banner leads the report once (docs/faults.md); the tables below then do not repeat it.
    for (auto& tb : tables) tb.banner.clear();
    if (!c.fault_banner.empty()) {
        if (f == ReportFormat::Latex) o << "% " << latex_escape(c.fault_banner) << "\n";
        else if (f == ReportFormat::Csv) o << "# " << c.fault_banner << "\n";
        else if (f == ReportFormat::Markdown) o << "**" << markdown_escape(c.fault_banner) << "**\n\n";
        else o << c.fault_banner << "\n\n";
    }
    if (f == ReportFormat::Latex)
        o << "% tandem report: " << latex_escape(title) << "\n% needs \\usepackage{booktabs,siunitx}\n";
    else if (f == ReportFormat::Markdown)
        o << "## tandem report: " << markdown_escape(title) << "\n\n";
    else if (f == ReportFormat::Text)
        o << "tandem report: " << title << "\n\n";
    if (f == ReportFormat::Latex && !c.fault_banner.empty())  // typeset, not only a comment
        o << "\\noindent\\textbf{" << latex_escape(c.fault_banner) << "}\\par\n";
    for (size_t i = 0; i < tables.size(); ++i) {
        if (f == ReportFormat::Csv) o << "# " << tables[i].title << "\n";
        o << render_table(tables[i], f) << "\n";
    }
    o << verdict_block(c, f);
    return o.str();
}

Table config_table(const RunsComparison& r) {
    Table tb{"config", "Experiment settings that differ", {"setting", r.run_id_a, r.run_id_b, "changes numbers"}, {}, {}};
    size_t numbers = 0, seeds = 0;
    for (const auto& d : r.config) {
        const bool changes = setting_changes_numbers(d.key);
        const bool seed = changes && d.key.rfind("seed", 0) == 0;
        numbers += changes && !seed;
        seeds += seed;
        tb.rows.push_back({d.key, d.a ? *d.a : "(absent)", d.b ? *d.b : "(absent)", !changes ? "no" : seed ? "yes (a seed)" : "yes"});
    }
    if (r.config.empty()) tb.notes.push_back("the two runs have the same experiment spec");
    else if (numbers)
        tb.notes.push_back(std::to_string(numbers) + " setting(s) that change numbers differ: L4 is reported, not judged");
    else
        tb.notes.push_back(std::to_string(r.config.size()) + " setting(s) differ, none that changes numbers except seeds: judged " +
                           (seeds ? "unpaired (the seeds differ: by a seed envelope)" : "as one run's legs"));
    return tb;
}

std::vector<Table> runs_comparison_tables(const RunsComparison& r, const Thresholds& t) {
    std::vector<Table> out{config_table(r)};
    out[0].banner = r.comparison.fault_banner;
    for (auto& table : report_tables(r.comparison, t))
        if (table.id != "probes") out.push_back(std::move(table));  // probes belong to a run, not to a pair of legs
    return out;
}

std::string render_runs_comparison(const RunsComparison& r, ReportFormat f, const Thresholds& t) {
    std::ostringstream o;
    const std::string title = r.label_a + " vs " + r.label_b;
    if (const std::string& banner = r.comparison.fault_banner; !banner.empty()) {  // once, at the top
        if (f == ReportFormat::Latex) o << "% " << latex_escape(banner) << "\n\\noindent\\textbf{" << latex_escape(banner) << "}\\par\n";
        else if (f == ReportFormat::Csv) o << "# " << banner << "\n";
        else if (f == ReportFormat::Markdown) o << "**" << markdown_escape(banner) << "**\n\n";
        else o << banner << "\n\n";
    }
    if (f == ReportFormat::Latex) o << "% tandem compare: " << latex_escape(title) << "\n% needs \\usepackage{booktabs,siunitx}\n";
    else if (f == ReportFormat::Markdown) o << "## tandem compare: " << markdown_escape(title) << "\n\n";
    else if (f == ReportFormat::Text) o << "tandem compare: " << title << "\n\n";
    for (auto table : runs_comparison_tables(r, t)) {
        table.banner.clear();  // printed once above
        if (f == ReportFormat::Csv) o << "# " << table.title << "\n";
        o << render_table(table, f) << "\n";
    }
    o << verdict_block(r.comparison, f);  // as `tandem report` words it
    return o.str();
}

// The fingerprint chain around a pair's first point over its bound (or its largest ratio), for the report.
Table localisation_table(const Localisation& l, size_t context) {
    Table t;
    t.id = "localisation";
    t.title = "Localisation: " + l.leg_a + " vs " + l.leg_b + " (fingerprints, docs/observables.md)";
    t.columns = {"", "update", "micro-batch", "layer", "op", "pass", "depth", "rel diff", "norm rel diff", "bound", "ratio"};
    if (l.points.empty()) {
        t.notes.push_back(l.summary());
        return t;
    }
    const size_t centre = l.first ? *l.first : l.max_ratio_index;
    const size_t from = centre > context ? centre - context : 0;
    const size_t to = std::min(l.points.size(), centre + context + 1);
    for (size_t i = from; i < to; ++i) {
        const LocalisedPoint& p = l.points[i];
        t.rows.push_back({i == centre ? (l.first ? "<< first over bound" : "<< largest ratio") : "", std::to_string(p.update),
                          p.micro_batch < 0 ? "-" : std::to_string(p.micro_batch), p.layer < 0 ? "-" : std::to_string(p.layer),
                          p.op, p.pass, std::to_string(p.depth), number_or_na(p.rel_diff, "%.3e"), number_or_na(p.norm_rel_diff, "%.3e"),
                          number_or_na(p.bound, "%.3e"), number_or_na(p.ratio, "%.3g")});
    }
    t.notes.push_back(l.summary());
    t.notes.push_back("chain: points " + std::to_string(from + 1) + ".." + std::to_string(to) + " of " +
                      std::to_string(l.points.size()) + " (update, micro-batch, forward -> backward -> optimizer); bound = " +
                      "k(pass)·eps32·C^depth·sqrt(1+update), k = " + number_or_na(kLocaliseKForward, "%g") + " forward, " +
                      number_or_na(kLocaliseKBackward, "%g") + " backward, " + number_or_na(kLocaliseKOptimizer, "%g") + " optimizer");
    return t;
}

}  // namespace tandem::experiments
