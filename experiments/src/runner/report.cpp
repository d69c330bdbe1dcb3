// Tables of the comparison in text, Markdown, CSV and LaTeX (booktabs).
#include "tandem/experiments/report.h"

#include "tandem/error.h"
#include "tandem/experiments/host_info.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace tandem::experiments {
namespace fs = std::filesystem;

namespace {

std::string fmt(double x, const char* f = "%.6g") {
    if (!std::isfinite(x)) return "n/a";
    char b[64];
    std::snprintf(b, sizeof b, f, x);
    return b;
}
std::string fmt_opt(const std::optional<double>& x, const char* f = "%.8f") { return x ? fmt(*x, f) : "n/a"; }
// "1.234e-03% (update 40)": the largest |residual %| of a series, or "n/a" when it has no finite point.
std::string percent_at(const PercentSeries& s) {
    return s.max_abs_update < 0 ? "n/a" : fmt(s.max_abs, "%.3e") + "% (update " + std::to_string(s.max_abs_update) + ")";
}
std::string sec(double s) { return s < 0 ? "n/a" : fmt(s, "%.3f"); }
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

std::vector<Table> report_tables(const Comparison& c, const Thresholds& t) {
    std::vector<Table> out;
    {
        Table tb{"l1", "L1: initial held-out cross-entropy", {"legs", "CE a", "CE b", "abs diff", "rel diff", "check"}, {}, {}};
        for (const auto& e : c.l1)
            tb.rows.push_back({e.leg_a + " vs " + e.leg_b, fmt_opt(e.ce_a), fmt_opt(e.ce_b),
                               e.ce_a && e.ce_b ? fmt(e.abs_diff, "%.3e") : "n/a",
                               e.ce_a && e.ce_b ? fmt(e.rel_diff, "%.3e") : "n/a", check_text(e.pass, e.na)});
        tb.notes.push_back("pass: relative difference <= " + fmt(t.l1_rel, "%.0e") + " (SPEC 4)");
        out.push_back(tb);
    }
    {
        Table tb{"l2", "L2: parameters after load", {"legs", "tensors compared", "identical", "mismatching", "check"}, {}, {}};
        for (const auto& e : c.l2) {
            tb.rows.push_back({e.leg_a + " vs " + e.leg_b, std::to_string(e.compared), std::to_string(e.equal),
                               std::to_string(e.mismatches.size()), check_text(e.pass, e.na)});
            for (const auto& m : e.mismatches) tb.notes.push_back(e.leg_a + " vs " + e.leg_b + ": " + m);
        }
        tb.notes.push_back("pass: every tensor has the same shape and the same float32 bytes (sha256)");
        out.push_back(tb);
    }
    {
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
        out.push_back(tb);
    }
    {
        Table tb{"l4", "L4: held-out CE at paired evaluations and training loss",
                 {"legs", "series", "paired", "mean signed", "mean abs", "dispersion", "largest (update)", "sign changes",
                  "mean abs rel", "check"},
                 {}, {}};
        for (const auto& e : c.l4) {
            std::string legs = e.leg_a + " vs " + e.leg_b;
            tb.rows.push_back({legs, "held-out CE", std::to_string(e.eval.n), fmt(e.eval.mean_signed, "%.3e"),
                               fmt(e.eval.mean_abs, "%.3e"), fmt(e.eval.std, "%.3e"),
                               fmt(e.eval.max_abs, "%.3e") + " (" + std::to_string(e.eval.max_abs_update) + ")",
                               std::to_string(e.eval.sign_changes), fmt(e.eval.mean_abs_rel, "%.3e"),
                               e.gated ? yesno(e.pass) : "not gated"});
            tb.rows.push_back({legs, "training loss", std::to_string(e.loss.n), fmt(e.loss.mean_signed, "%.3e"),
                               fmt(e.loss.mean_abs, "%.3e"), fmt(e.loss.std, "%.3e"),
                               fmt(e.loss.max_abs, "%.3e") + " (" + std::to_string(e.loss.max_abs_update) + ")",
                               std::to_string(e.loss.sign_changes), fmt(e.loss.mean_abs_rel, "%.3e"), "-"});
            tb.notes.push_back(legs + ": final loss " + fmt_opt(e.final_loss_a) + " vs " + fmt_opt(e.final_loss_b) +
                               "; largest |" + e.residual_leg + " - " + e.residual_reference + "| " +
                               percent_at(e.eval_percent) + " held-out CE, " + percent_at(e.loss_percent) + " training loss, " +
                               percent_at(e.grad_percent) + " grad norm" + (e.note.empty() ? "" : "; " + e.note));
        }
        tb.notes.push_back("differences are a - b; dispersion = population std of the differences; pass (shared masks and plan): mean |diff| / mean |b| <= " +
                           fmt(t.l4_mean_abs_rel, "%.0e"));
        out.push_back(tb);
    }
    if (!c.flags.empty()) {
        Table tb{"gate", "Live gate flags", {"leg", "update", "flag", "value", "threshold", "action"}, {}, {}};
        for (const auto& f : c.flags)
            tb.rows.push_back({f.leg, std::to_string(f.update), f.kind, fmt(f.value, "%.4g"), fmt(f.threshold, "%.4g"),
                               gate_action_name(f.action)});
        for (const auto& f : c.flags) tb.notes.push_back(f.message);
        tb.notes.push_back("flags: docs/gate.md (non-finite values, step-time anomalies, loss spikes)");
        out.push_back(tb);
    }
    {
        Table tb{"grad-norm", "Pre-clip gradient norm", {"leg", "updates", "median", "p99", "max", "above clip"}, {}, {}};
        for (const auto& g : c.grads)
            tb.rows.push_back({g.leg, std::to_string(g.n), fmt(g.median), fmt(g.p99), fmt(g.max),
                               fmt(100.0 * g.frac_above_clip, "%.1f") + "%"});
        out.push_back(tb);
    }
    {
        Table tb{"timing", "Timing and memory",
                 {"leg", "device", "status", "setup s", "model load s", "tokenize s", "median s/update (window)", "tokens/s",
                  "peak device", "peak host"},
                 {}, {}};
        for (const auto& r : c.timing)
            tb.rows.push_back({r.leg + " (" + r.implementation + ")", r.device, r.status, sec(r.setup_s), sec(r.model_load_s),
                               sec(r.tokenize_s),
                               sec(r.median_update_s) + " (" + std::to_string(r.window_first) + "-" + std::to_string(r.window_last) + ")",
                               r.tokens_per_s < 0 ? "n/a" : fmt(r.tokens_per_s, "%.1f"), bytes(r.peak_device_bytes),
                               bytes(r.peak_host_bytes)});
        tb.notes.push_back("window: 0-based updates, inclusive (the paper's 101-500 when the run is long enough); tokens/s: supervised tokens over summed update wall time");
        out.push_back(tb);
    }
    {
        Table tb{"probes", "Device bandwidth probes", {"device", "name", "direction", "bytes", "best s", "GB/s"}, {}, {}};
        for (const auto& p : c.probes)
            for (const auto& d : p.directions)
                tb.rows.push_back({p.device, p.device_name, d.name, std::to_string(d.bytes_counted), fmt(d.best_seconds, "%.5f"),
                                   fmt(d.gbps, "%.2f")});
        if (c.probes.empty()) tb.notes.push_back("no probe recorded");
        out.push_back(tb);
    }
    return out;
}

ReportFormat parse_report_format(const std::string& name) {
    if (name == "text" || name == "txt") return ReportFormat::Text;
    if (name == "md" || name == "markdown") return ReportFormat::Markdown;
    if (name == "csv") return ReportFormat::Csv;
    if (name == "tex" || name == "latex") return ReportFormat::Latex;
    throw Error("report format '" + name + "' is not one of text, md, csv, tex");
}

std::string latex_escape(const std::string& s) {
    std::string o;
    for (char ch : s) {
        switch (ch) {
            case '&': o += "\\&"; break;
            case '%': o += "\\%"; break;
            case '$': o += "\\$"; break;
            case '#': o += "\\#"; break;
            case '_': o += "\\_"; break;
            case '{': o += "\\{"; break;
            case '}': o += "\\}"; break;
            case '~': o += "\\textasciitilde{}"; break;
            case '^': o += "\\textasciicircum{}"; break;
            case '\\': o += "\\textbackslash{}"; break;
            case '|': o += "\\textbar{}"; break;
            case '<': o += "\\textless{}"; break;
            case '>': o += "\\textgreater{}"; break;
            default: o += ch;
        }
    }
    return o;
}

std::string csv_escape(const std::string& s) {
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string o = "\"";
    for (char ch : s) {
        if (ch == '"') o += '"';
        o += ch;
    }
    return o + "\"";
}

namespace {
std::string md_escape(const std::string& s) {
    std::string o;
    for (char ch : s) {
        if (ch == '|') o += "\\";
        o += ch;
    }
    return o;
}
}  // namespace

std::string render_table(const Table& t, ReportFormat f) {
    std::ostringstream o;
    switch (f) {
        case ReportFormat::Text: {
            std::vector<size_t> w(t.columns.size(), 0);
            for (size_t i = 0; i < t.columns.size(); ++i) w[i] = t.columns[i].size();
            for (const auto& r : t.rows)
                for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
            o << t.title << "\n";
            auto line = [&](const std::vector<std::string>& cells) {
                for (size_t i = 0; i < cells.size(); ++i) {
                    o << (i ? "  " : "  ") << cells[i];
                    if (i + 1 < cells.size()) o << std::string(w[i] - cells[i].size(), ' ');
                }
                o << "\n";
            };
            line(t.columns);
            for (const auto& r : t.rows) line(r);
            for (const auto& n : t.notes) o << "  * " << n << "\n";
            break;
        }
        case ReportFormat::Markdown: {
            o << "### " << md_escape(t.title) << "\n\n|";
            for (const auto& c : t.columns) o << " " << md_escape(c) << " |";
            o << "\n|";
            for (size_t i = 0; i < t.columns.size(); ++i) o << " --- |";
            o << "\n";
            for (const auto& r : t.rows) {
                o << "|";
                for (const auto& c : r) o << " " << md_escape(c) << " |";
                o << "\n";
            }
            if (!t.notes.empty()) o << "\n";
            for (const auto& n : t.notes) o << "- " << md_escape(n) << "\n";
            break;
        }
        case ReportFormat::Csv: {
            for (size_t i = 0; i < t.columns.size(); ++i) o << (i ? "," : "") << csv_escape(t.columns[i]);
            o << "\n";
            for (const auto& r : t.rows) {
                for (size_t i = 0; i < r.size(); ++i) o << (i ? "," : "") << csv_escape(r[i]);
                o << "\n";
            }
            break;
        }
        case ReportFormat::Latex: {
            o << "\\begin{table}[htbp]\n\\centering\n\\caption{" << latex_escape(t.title) << "}\n\\label{tab:tandem-"
              << t.id << "}\n\\begin{tabular}{l" << std::string(t.columns.size() > 0 ? t.columns.size() - 1 : 0, 'r')
              << "}\n\\toprule\n";
            for (size_t i = 0; i < t.columns.size(); ++i) o << (i ? " & " : "") << latex_escape(t.columns[i]);
            o << " \\\\\n\\midrule\n";
            for (const auto& r : t.rows) {
                for (size_t i = 0; i < r.size(); ++i) o << (i ? " & " : "") << latex_escape(r[i]);
                o << " \\\\\n";
            }
            o << "\\bottomrule\n\\end{tabular}\n\\end{table}\n";
            break;
        }
    }
    return o.str();
}

std::string render_report(const std::string& title, const Comparison& c, ReportFormat f, const Thresholds& t) {
    std::ostringstream o;
    auto tables = report_tables(c, t);
    if (f == ReportFormat::Latex)
        o << "% tandem report: " << latex_escape(title) << "\n% needs \\usepackage{booktabs}\n";
    else if (f == ReportFormat::Markdown)
        o << "## tandem report: " << md_escape(title) << "\n\n";
    else if (f == ReportFormat::Text)
        o << "tandem report: " << title << "\n\n";
    for (size_t i = 0; i < tables.size(); ++i) {
        if (f == ReportFormat::Csv) o << "# " << tables[i].title << "\n";
        o << render_table(tables[i], f) << "\n";
    }
    // The verdict line, then every reason: what is incomplete first (it makes the levels moot).
    const std::string verdict = c.verdict();
    std::vector<std::string> reasons;
    for (const auto& x : c.incomplete) reasons.push_back("incomplete: " + x);
    for (const auto& x : c.failures) reasons.push_back(x);
    if (reasons.size() == 1) reasons.clear();  // the verdict line already says it
    if (f == ReportFormat::Latex) {
        o << "% verdict: " << latex_escape(verdict) << "\n";
        for (const auto& x : reasons) o << "% " << latex_escape(x) << "\n";
    } else if (f == ReportFormat::Csv) {
        o << "# verdict: " << verdict << "\n";
        for (const auto& x : reasons) o << "# " << x << "\n";
    } else {
        o << (f == ReportFormat::Markdown ? "**" + md_escape(verdict) + "**" : verdict) << "\n";
        for (const auto& x : reasons) o << (f == ReportFormat::Markdown ? "- " : "  - ") << x << "\n";
    }
    return o.str();
}

Comparison compare_run_file(const fs::path& run, std::string* title) {
    fs::path file = fs::is_directory(run) ? run / "run.h5" : run;
    if (!fs::exists(file)) throw Error(file.string() + ": no run file");
    RunFileReader reader(file);
    auto exp = reader.experiment();
    if (!exp) throw Error(file.string() + ": no /experiment (not a tandem run file?)");
    ExperimentSpec spec = parse_experiment(nlohmann::json::parse(exp->spec_json), file.string() + " /experiment spec");
    const std::vector<LegData> legs = read_legs(reader);
    Comparison c = compare_legs(legs, spec);
    judge_completeness(c, legs, ExpectedSeries{exp->total_updates, spec.eval_interval});
    c.probes = reader.probes();
    if (title) *title = exp->run_id.empty() ? exp->name : exp->run_id;
    return c;
}

}  // namespace tandem::experiments
