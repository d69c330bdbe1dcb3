// `tandem faults` (docs/faults.md): the fault matrix run, its size search, the clean-seed study, and
// /faults in run.h5 and the catalog.
#include "tandem/studies/faults_run.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/number_text.h"
#include "tandem/store/catalog.h"
#include "tandem/compare/comparison_io.h"
#include "tandem/compare/report.h"
#include "tandem/store/run_file.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <functional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

std::string fault_leg_name(const std::string& fault) { return "fault-" + fault; }

namespace {

constexpr size_t kL1 = 0, kL2 = 1, kL3 = 2, kL4 = 3, kGate = 4;

}  // namespace

FaultRow fault_row_of(const LegData& leg, const LegData& reference, const ExperimentSpec& spec, const Thresholds& t,
                      const FaultRow* clean) {
    FaultRow r;
    r.leg = leg.name;
    r.status = leg.status;
    r.first_update.assign(fault_matrix_levels().size(), std::nullopt);
    // A leg that did not finish caught nothing: what it recorded before failing is not a detection.
    if (leg.status != "finished") return r;
    const Comparison c = compare_legs_against({leg, reference}, spec, reference.name, t, std::nullopt, {},
                                              static_cast<int64_t>(reference.trace.steps.size()));
    if (c.l1.empty()) return r;
    // L1, L2 and L3 are judged on what the legs report before training: update 0.
    if (!c.l1[0].pass) r.first_update[kL1] = 0;
    if (!c.l2[0].pass) r.first_update[kL2] = 0;
    if (!c.l3[0].pass) r.first_update[kL3] = 0;
    // L4: the first update at which the pair's L4 verdict is `different` — held-out CE beyond the
    // float32 error-model bound, the lr off the schedule, training loss or pre-clip grad norm beyond
    // their bounds (docs/thresholds.md); judged on the trajectories alone, whatever L1-L3 said.
    const std::optional<ErrorModel> model = error_model_or_none(spec);
    if (model) {
        const std::string no_model_error;
        const std::vector<SeedEnvelope> no_envelopes;
        const std::string key = spec.sha256_without_seeds();
        const L4Context ctx{spec, t, *model, no_model_error, no_envelopes, key, static_cast<int64_t>(reference.trace.steps.size())};
        const L4Entry alone = compare_l4(leg, reference, ctx, {});
        if (alone.gated && alone.first_different_update >= 0) r.first_update[kL4] = alone.first_different_update;
    }
    const L4Entry& l4 = c.l4[0];
    // The gate column: the live anomaly flags of the leg itself (step-time, non-finite, loss-spike;
    // docs/gate.md). The live forms of L4 (paired-bound, envelope) are listed in `flags` but are L4.
    for (const auto& f : leg.flags) {
        if (f.leg != leg.name) continue;
        if (std::find(r.flags.begin(), r.flags.end(), f.kind) == r.flags.end()) r.flags.push_back(f.kind);
        if (f.kind == "paired-bound" || f.kind == "envelope") continue;
        if (!r.first_update[kGate] || f.update < *r.first_update[kGate]) r.first_update[kGate] = std::max<int64_t>(0, f.update);
    }
    if (!l4.eval_points.empty()) {
        const PairedPoint& end = l4.eval_points.back();  // a = the leg, b = the reference
        r.end_update = end.update;
        r.ce_leg = end.a;
        r.ce_reference = end.b;
        r.ce_diff_abs = end.a - end.b;
        if (end.b != 0) r.ce_diff_rel = (end.a - end.b) / std::fabs(end.b);
        if (clean && clean->end_update == r.end_update && clean->ce_diff_abs && *clean->ce_diff_abs != 0)
            r.ce_diff_clean_units = *r.ce_diff_abs / std::fabs(*clean->ce_diff_abs);
    }
    return r;
}

namespace {

// Whether two legs recorded the same numbers, bit for bit: initial held-out CE, parameter digests,
// token records, every update's loss, grad norm, lr and tokens, every held-out CE (wall times aside).
bool same_numbers(const LegTrace& a, const LegTrace& b) {
    auto same_digests = [](const std::vector<TensorDigest>& x, const std::vector<TensorDigest>& y) {
        return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                          [](const TensorDigest& p, const TensorDigest& q) { return p.name == q.name && p.sha256 == q.sha256; });
    };
    auto same_records = [](const std::vector<L3Record>& x, const std::vector<L3Record>& y) {
        return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const L3Record& p, const L3Record& q) {
            return p.index == q.index && p.ids == q.ids && p.boundary == q.boundary && p.supervised_count == q.supervised_count &&
                   p.full_length == q.full_length && p.truncated_at == q.truncated_at;
        });
    };
    auto same_steps = [](const std::vector<StepRow>& x, const std::vector<StepRow>& y) {
        return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const StepRow& p, const StepRow& q) {
            return p.update == q.update && p.loss == q.loss && p.grad_norm == q.grad_norm && p.lr == q.lr && p.tokens == q.tokens;
        });
    };
    auto same_evals = [](const std::vector<EvalRow>& x, const std::vector<EvalRow>& y) {
        return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                          [](const EvalRow& p, const EvalRow& q) { return p.update == q.update && p.heldout_ce == q.heldout_ce; });
    };
    return a.l1_ce == b.l1_ce && a.has_l2 == b.has_l2 && same_digests(a.l2, b.l2) && a.has_l3 == b.has_l3 &&
           same_records(a.l3, b.l3) && same_steps(a.steps, b.steps) && same_evals(a.evals, b.evals) && !a.steps.empty();
}

}  // namespace

FaultMatrix fault_matrix_of(const std::vector<LegData>& legs, const ExperimentSpec& spec, const std::string& reference,
                            const std::string& clean, const std::vector<std::pair<FaultSwitch, std::string>>& faults,
                            const Thresholds& t) {
    auto find = [&](const std::string& name) -> const LegData& {
        for (const auto& l : legs)
            if (l.name == name) return l;
        throw Error("fault matrix: the run has no leg '" + name + "'");
    };
    FaultMatrix m;
    m.reference_leg = reference;
    m.clean_leg = clean;
    m.l1_threshold = t.l1_rel;
    m.l4_threshold = t.error_model_k;  // L4: k of the float32 error-model bound (docs/thresholds.md)
    m.eval_interval = spec.eval_interval;
    const LegData& ref = find(reference);
    m.updates = static_cast<int64_t>(ref.trace.steps.size());
    m.clean = fault_row_of(find(clean), ref, spec, t);
    for (const auto& [sw, leg] : faults) {
        const FaultInfo& info = fault_info(sw.name);
        FaultRow r;
        if (const std::string why = fault_not_applicable(info, spec.fault_settings()); !why.empty()) {
            r.first_update.assign(fault_matrix_levels().size(), std::nullopt);
            r.status = "not applicable";
            r.not_applicable = why;  // no leg ran it (run_faults checks before starting any)
        } else {
            r = fault_row_of(find(leg), ref, spec, t, &m.clean);
        }
        r.fault = sw.name;
        r.category = info.category;
        r.size = sw.size;
        r.expected = info.expected;
        // A fault that changed nothing on this experiment cannot be caught: say so instead of "uncaught"
        // (e.g. bf16-truncation on a base stored in BF16, whose low 16 mantissa bits are already zero).
        // Never for a runtime fault: its only effect is time, which the numbers cannot show; it is
        // judged by its expected signal (the gate) alone — caught or not caught.
        if (r.not_applicable.empty() && info.category != "runtime" && !r.caught() && r.status == "finished" &&
            same_numbers(find(leg).trace, find(clean).trace))
            r.no_effect = "every loss, grad norm, held-out CE, parameter digest and token record equals the clean engine leg's";
        m.rows.push_back(std::move(r));
    }
    return m;
}

// ---- size search -------------------------------------------------------------------------------------

namespace {

std::optional<double> midpoint(double missed, double detected, const FaultSize& size) {
    if (size.integer) {
        if (detected - missed <= 1) return std::nullopt;
        return std::floor((missed + detected) / 2);
    }
    if (size.log_scale && missed > 0) return std::sqrt(missed * detected);
    return (missed + detected) / 2;
}

}  // namespace

std::optional<double> next_probe_size(const SearchState& s, const FaultSize& size, int steps) {
    if (s.done) return std::nullopt;
    if (!s.weakest_probed) return size.smallest < s.detected ? std::optional(size.smallest) : std::nullopt;
    if (!s.missed || s.probes - 1 >= steps) return std::nullopt;
    return midpoint(*s.missed, s.detected, size);
}

void record_probe(SearchState& s, const FaultSize& size, double probed, bool detected, int steps) {
    ++s.probes;
    if (!s.weakest_probed) s.weakest_probed = true;
    if (detected) s.detected = std::min(s.detected, probed);
    else s.missed = std::max(s.missed.value_or(probed), probed);
    if (detected && probed <= size.smallest) s.done = true;  // caught at its weakest
    if (!next_probe_size(s, size, steps)) s.done = true;
}

// ---- /faults in run.h5 and the catalog --------------------------------------------------------------

std::optional<FaultMatrix> read_fault_matrix(const fs::path& run_file) {
    RunFileReader r(run_file);
    auto j = r.fault_matrix();
    if (!j) return std::nullopt;
    return fault_matrix_from_json(json::parse(*j));
}

namespace {

std::string joined(const std::vector<std::string>& v, const char* sep = " ") {
    std::string o;
    for (const auto& x : v) o += (o.empty() ? "" : sep) + x;
    return o;
}

double or_nan(const std::optional<double>& v) { return v ? *v : std::nan(""); }

}  // namespace

void store_fault_matrix(const fs::path& run_file, const fs::path& catalog, const std::string& run_id, const FaultMatrix& m) {
    const auto& levels = fault_matrix_levels();
    std::vector<FaultGroup> groups;
    int64_t caught = 0, no_effect = 0, not_applicable = 0;
    std::vector<std::string> names;
    for (const auto& r : m.rows) {
        FaultGroup g;
        g.fault = r.fault;
        g.attributes = {{"leg", r.leg}, {"category", r.category}, {"status", r.status},
                        {"caught_by", joined(r.caught_by())}, {"expected", joined(r.expected)},
                        {"flags", joined(r.flags, ",")}, {"ce_diff_abs", or_nan(r.ce_diff_abs)},
                        {"ce_diff_rel", or_nan(r.ce_diff_rel)}, {"ce_diff_clean_units", or_nan(r.ce_diff_clean_units)},
                        {"no_effect", r.no_effect}, {"not_applicable", r.not_applicable}, {"outcome", r.outcome()}};
        if (r.size) g.attributes["size"] = *r.size;
        for (size_t i = 0; i < levels.size(); ++i)  // -1: the level did not fire
            g.attributes["first_update_" + levels[i]] = i < r.first_update.size() && r.first_update[i] ? *r.first_update[i] : int64_t{-1};
        for (size_t k = 0; k < r.probes.size(); ++k) {
            const SizeProbe& p = r.probes[k];
            auto has = [&](const char* l) { return int64_t{std::find(p.caught_by.begin(), p.caught_by.end(), l) != p.caught_by.end()}; };
            g.probes.push_back({static_cast<int64_t>(k), p.size, has("L1"), has("L2"), has("L3"), has("L4"), has("gate")});
        }
        for (const auto& s : r.searches) {
            g.attributes["smallest_detected_" + s.level] = or_nan(s.smallest_detected);
            g.attributes["largest_missed_" + s.level] = or_nan(s.largest_missed);
        }
        groups.push_back(std::move(g));
        caught += r.caught();
        no_effect += !r.no_effect.empty();
        not_applicable += !r.not_applicable.empty();
        names.push_back(r.fault);
    }
    Attributes attrs{{"reference_leg", m.reference_leg}, {"clean_leg", m.clean_leg}, {"faults", joined(names, ",")},
                     {"caught", caught}, {"clean_caught_by", joined(m.clean.caught_by())},
                     {"l1_threshold", m.l1_threshold}, {"l4_threshold", m.l4_threshold},
                     {"size_search", int64_t{m.size_search}}};
    {
        RunFileWriter w(run_file);
        w.write_faults(attrs, fault_matrix_to_json(m).dump(), groups);
        w.commit();
    }
    Catalog cat(catalog);
    for (const auto& r : m.rows) {
        if (!r.not_applicable.empty()) continue;  // no leg ran it: nothing to record
        FaultResultRecord rec;
        rec.run_id = run_id;
        rec.fault = r.fault;
        rec.leg = r.leg;
        rec.size = r.size;
        rec.caught_by = joined(r.caught_by());
        rec.first_update = r.first_caught();
        rec.first_update_l4 = r.first_update.size() > kL4 ? r.first_update[kL4] : std::nullopt;
        auto finite = [](const std::optional<double>& v) { return v && std::isfinite(*v) ? v : std::nullopt; };
        rec.ce_diff_abs = finite(r.ce_diff_abs);
        rec.ce_diff_rel = finite(r.ce_diff_rel);
        rec.ce_diff_clean_units = finite(r.ce_diff_clean_units);
        if (!r.searches.empty()) {
            json s = json::object();
            for (const auto& x : r.searches) s[x.level] = x.smallest_detected ? json(*x.smallest_detected) : json(nullptr);
            rec.smallest_sizes = s.dump();
        }
        cat.upsert_fault_result(rec);
    }
    // The run's note says what the run is: a fault matrix, not a cross-check that failed.
    if (auto run = cat.run(run_id)) {
        run->note = "fault matrix: " + std::to_string(caught) + " of " + std::to_string(m.rows.size() - no_effect - not_applicable) +
                    " faults caught" + (no_effect ? " (" + std::to_string(no_effect) + " more had no effect)" : "") +
                    (not_applicable ? " (" + std::to_string(not_applicable) + " not applicable)" : "") + "; clean pair: " +
                    (m.clean.caught() ? "FLAGGED by " + joined(m.clean.caught_by()) : "no level fired");
        cat.upsert_run(*run);
    }
}

// ---- the command -------------------------------------------------------------------------------------

namespace {

std::vector<LegData> legs_of(const fs::path& run_file) {
    RunFileReader r(run_file);
    return read_legs(r);
}

// Entries appended to legs.json for the size search's probes (new legs of the same run).
void append_legs(const fs::path& run_dir, const std::vector<LegPlan>& plans, int threads) {
    const fs::path file = run_dir / "legs.json";
    json lj = json::parse(read_file(file));
    for (const auto& p : plans) {
        json e{{"name", p.name}, {"implementation", p.implementation}, {"device", p.device}, {"threads", threads}};
        json f = json::array();
        for (const auto& x : p.faults) f.push_back(fault_text(x));
        if (!f.empty()) e["faults"] = f;
        lj.push_back(std::move(e));
    }
    write_file_atomic(file, lj.dump(1) + "\n");
}

int threads_each(const RunnerOptions& ro, int jobs) {
    const int total = ro.cpu_threads > 0 ? ro.cpu_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, total / std::max(1, jobs));
}

void size_search(FaultMatrix& m, const FaultsOptions& opt, const fs::path& folder, const ExperimentSpec& spec,
                 const std::function<void(const std::string&)>& say) {
    struct Search {
        size_t row;
        FaultSize size;
        std::vector<SearchState> states;
    };
    std::vector<Search> searches;
    for (size_t i = 0; i < m.rows.size(); ++i) {
        const FaultRow& r = m.rows[i];
        const FaultInfo& info = fault_info(r.fault);
        if (!info.size || !r.size || !r.caught()) continue;
        Search s{i, *info.size, {}};
        for (const auto& level : r.caught_by()) s.states.push_back(SearchState{level, *r.size, std::nullopt, false, 0, false});
        searches.push_back(std::move(s));
    }
    std::map<std::string, int> probe_count;
    for (int round = 1;; ++round) {
        // (search, size) -> probe leg; one leg per (fault, size), shared by the levels asking for it
        std::map<std::pair<size_t, double>, std::string> legs;
        std::vector<LegPlan> plans;
        for (size_t k = 0; k < searches.size(); ++k)
            for (auto& st : searches[k].states) {
                const auto size = next_probe_size(st, searches[k].size, opt.search_steps);
                if (!size) {
                    st.done = true;
                    continue;
                }
                const auto key = std::make_pair(k, *size);
                if (legs.count(key)) continue;
                const std::string& fault = m.rows[searches[k].row].fault;
                const std::string leg = fault_leg_name(fault) + "-s" + std::to_string(++probe_count[fault]);
                legs[key] = leg;
                plans.push_back(LegPlan{leg, "engine", "cpu", {}, {FaultSwitch{fault, *size}}});
            }
        if (plans.empty()) break;
        say("size search, round " + std::to_string(round) + ": " + std::to_string(plans.size()) + " probe leg(s)");
        append_legs(folder, plans, threads_each(opt.runner, opt.jobs));
        RunnerOptions ro = opt.runner;
        ro.resume = folder;
        ro.experiment.clear();
        ro.leg_plans.clear();
        ro.max_concurrent_legs = opt.jobs;
        ro.compare_against = kFaultsReferenceLeg;
        ro.report_format = "";
        ro.probe = false;
        run_experiment(ro);
        const std::vector<LegData> all = legs_of(folder / "run.h5");
        const LegData* ref = nullptr;
        for (const auto& l : all)
            if (l.name == m.reference_leg) ref = &l;
        if (!ref) throw Error(folder.string() + ": the reference leg is gone from run.h5");
        for (const auto& [key, leg] : legs) {
            const LegData* probe = nullptr;
            for (const auto& l : all)
                if (l.name == leg) probe = &l;
            if (!probe) throw Error(folder.string() + ": probe leg " + leg + " is missing from run.h5");
            const FaultRow pr = fault_row_of(*probe, *ref, spec, Thresholds{}, &m.clean);
            FaultRow& row = m.rows[searches[key.first].row];
            row.probes.push_back({leg, key.second, pr.caught_by()});
            for (auto& st : searches[key.first].states)
                if (!st.done && next_probe_size(st, searches[key.first].size, opt.search_steps) == key.second)
                    record_probe(st, searches[key.first].size, key.second,
                                 probe->status == "finished" ? pr.fired(st.level) : false, opt.search_steps);
        }
    }
    for (const auto& s : searches) {
        FaultRow& row = m.rows[s.row];
        for (const auto& st : s.states)
            row.searches.push_back({st.level, st.detected, st.missed, st.probes});
    }
    m.size_search = true;
}

// The experiment's JSON with its seed (and name) changed: one clean run per seed.
fs::path seeded_copy(const fs::path& experiment, const fs::path& dir, uint64_t seed) {
    json j = json::parse(read_file(experiment));
    const std::string name = j.value("name", std::string("experiment")) + "-seed" + std::to_string(seed);
    j["seed"] = seed;
    j["name"] = name;
    fs::create_directories(dir);
    const fs::path out = dir / (name + ".json");
    write_file_atomic(out, j.dump(2) + "\n");
    return out;
}


FaultsOutcome clean_seeds(const FaultsOptions& opt, const ExperimentSpec& spec,
                          const std::function<void(const std::string&)>& say) {
    FaultsOutcome out;
    Table tb{"clean-seeds", "Clean pair on " + std::to_string(opt.clean_seeds) + " seeds: which levels fire",
             {"seed", "run", "L1 rel diff", "L2", "L3", "L4 largest x bound: CE / loss / grad norm", "lr off", "gate flags",
              "largest step time / median", "fired"},
             {}, {}};
    std::map<std::string, int> fired_count;
    double worst_ratio = 0;
    bool all_finished = true;
    const fs::path dir = opt.runner.out_dir / ".clean-seeds";
    for (int i = 0; i < opt.clean_seeds; ++i) {
        const uint64_t seed = spec.seed + static_cast<uint64_t>(i);
        say("clean seed " + std::to_string(i + 1) + " of " + std::to_string(opt.clean_seeds) + ": seed " + std::to_string(seed));
        RunnerOptions ro = opt.runner;
        ro.experiment = seeded_copy(opt.experiment, dir, seed);
        ro.leg_plans = {LegPlan{kFaultsReferenceLeg, "reference", "cpu", {}, {}}, LegPlan{kFaultsCleanLeg, "engine", "cpu", {}, {}}};
        ro.max_concurrent_legs = opt.jobs;
        ro.compare_against = kFaultsReferenceLeg;
        ro.report_format = "";
        RunOutcome r = run_experiment(ro);
        if (i == 0) {
            out.folder = r.folder;
            out.run_id = r.run_id;
        }
        const std::vector<LegData> legs = legs_of(r.folder / "run.h5");
        all_finished = all_finished && r.status == RunStatus::Finished;
        const ExperimentSpec s = load_run_spec(r.folder);
        const LegData* ref = nullptr;
        const LegData* eng = nullptr;
        for (const auto& l : legs) {
            if (l.name == kFaultsReferenceLeg) ref = &l;
            if (l.name == kFaultsCleanLeg) eng = &l;
        }
        if (!ref || !eng) throw Error(r.folder.string() + ": a leg of the clean pair is missing");
        const FaultRow row = fault_row_of(*eng, *ref, s, Thresholds{});
        const Comparison c = compare_legs_against({*eng, *ref}, s, ref->name, Thresholds{}, std::nullopt, {},
                                                  static_cast<int64_t>(ref->trace.steps.size()));
        std::string flags;
        for (const auto* l : {ref, eng})
            for (const auto& f : l->flags) flags += (flags.empty() ? "" : ", ") + l->name + " " + f.kind + "@" + std::to_string(f.update);
        GateConfig gc = s.gate;
        const double ratio = std::max(largest_step_time_ratio(ref->trace.steps, gc), largest_step_time_ratio(eng->trace.steps, gc));
        if (std::isfinite(ratio)) worst_ratio = std::max(worst_ratio, ratio);
        for (const auto& l : row.caught_by()) ++fired_count[l];
        const L4Entry& l4 = c.l4[0];
        std::string lr_off;
        for (const auto& x : l4.schedule)
            if (x.off()) lr_off += (lr_off.empty() ? "" : ", ") + x.leg + "@" + std::to_string(x.first_off_update);
        tb.rows.push_back({std::to_string(seed), r.run_id, number_or_na(c.l1[0].rel_diff, "%.3e"), c.l2[0].pass ? "pass" : "FAIL",
                           c.l3[0].pass ? "pass" : "FAIL",
                           number_or_na(l4.numerics.max_ratio, "%.3g") + " / " + number_or_na(l4.loss_numerics.max_ratio, "%.3g") + " / " +
                               number_or_na(l4.grad_numerics.max_ratio, "%.3g"),
                           lr_off.empty() ? "-" : lr_off, flags.empty() ? "-" : flags, number_or_na(ratio, "%.2f"),
                           row.caught_by().empty() ? "none" : joined(row.caught_by())});
    }
    for (const auto& l : fault_matrix_levels())
        tb.notes.push_back(l + " fired in " + std::to_string(fired_count[l]) + " of " + std::to_string(opt.clean_seeds) + " clean runs");
    tb.notes.push_back("largest update time / running median over every clean leg: " + number_or_na(worst_ratio, "%.2f") +
                       " (CPU time where the leg reports it, else wall time; the step-time flag fires above " +
                       number_or_na(spec.gate.step_time_factor, "%g") + "x, docs/gate.md)");
    out.all_legs_finished = all_finished;
    out.clean_pair_passed = fired_count["L1"] + fired_count["L2"] + fired_count["L3"] == 0;
    out.every_fault_caught = true;
    const ReportFormat f = parse_report_format(opt.runner.report_format.empty() ? "text" : opt.runner.report_format);
    out.text = render_table(tb, f);
    return out;
}

}  // namespace

FaultsOutcome run_faults(const FaultsOptions& opt) {
    std::function<void(const std::string&)> say = opt.runner.say ? opt.runner.say : [](const std::string& s) {
        std::fprintf(stderr, "tandem faults: %s\n", s.c_str());
    };
    if (opt.jobs < 1) throw Error("--jobs must be at least 1");
    if (opt.search_steps < 6) throw Error("the size search takes at least 6 steps");
    const ExperimentSpec spec = load_experiment(opt.experiment);
    const std::string src = opt.experiment.string();
    if (!spec.faults.empty()) throw Error(src + ": field faults: tandem faults injects its own faults into a clean experiment");
    for (const auto& d : spec.legs)
        if (d.faults && !d.faults->empty())
            throw Error(src + ": field legs." + d.name + ".faults: tandem faults injects its own faults into a clean experiment");
    if (!spec.overrides.empty())
        throw Error(src + ": field overrides: would apply to some legs of the matrix and not others (its legs are " +
                    std::string(kFaultsReferenceLeg) + ", " + kFaultsCleanLeg + " and fault-*); remove it");
    if (opt.clean_seeds > 0) return clean_seeds(opt, spec, say);

    std::vector<FaultSwitch> faults;
    if (!opt.faults) {
        for (const auto& info : fault_catalogue())
            faults.push_back(FaultSwitch{info.name, info.size ? std::optional(info.size->default_value) : std::nullopt});
    } else if (*opt.faults != "none") {
        faults = parse_fault_list(*opt.faults, "--faults");
    }
    std::vector<LegPlan> plans = {LegPlan{kFaultsReferenceLeg, "reference", "cpu", {}, {}},
                                  LegPlan{kFaultsCleanLeg, "engine", "cpu", {}, {}}};
    std::vector<std::pair<FaultSwitch, std::string>> fault_legs;
    for (const auto& f : faults) {
        // A fault that cannot apply to this experiment gets no leg: a `not applicable` row (fault_matrix_of).
        if (const std::string why = fault_not_applicable(fault_info(f.name), spec.fault_settings()); !why.empty()) {
            say("fault " + f.name + ": not applicable to " + opt.experiment.string() + ": " + why);
            fault_legs.emplace_back(f, "");
            continue;
        }
        plans.push_back(LegPlan{fault_leg_name(f.name), "engine", "cpu", {}, {f}});
        fault_legs.emplace_back(f, plans.back().name);
    }
    const auto t0 = std::chrono::steady_clock::now();
    RunnerOptions ro = opt.runner;
    ro.experiment = opt.experiment;
    ro.leg_plans = plans;
    ro.max_concurrent_legs = opt.jobs;
    ro.compare_against = kFaultsReferenceLeg;
    const std::string format = ro.report_format.empty() ? "text" : ro.report_format;
    ro.report_format = "";
    RunOutcome run = run_experiment(ro);

    FaultsOutcome out;
    out.folder = run.folder;
    out.run_id = run.run_id;
    const ExperimentSpec run_spec = load_run_spec(run.folder);
    out.matrix = fault_matrix_of(legs_of(run.folder / "run.h5"), run_spec, kFaultsReferenceLeg, kFaultsCleanLeg, fault_legs);
    if (opt.size_search) size_search(out.matrix, opt, run.folder, run_spec, say);
    store_fault_matrix(run.folder / "run.h5", opt.runner.catalog, run.run_id, out.matrix);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    out.all_legs_finished = true;
    for (const auto& l : legs_of(run.folder / "run.h5")) out.all_legs_finished = out.all_legs_finished && l.status == "finished";
    out.clean_pair_passed = !out.matrix.clean.caught();
    out.every_fault_caught = true;
    for (const auto& r : out.matrix.rows) {
        const std::string o = r.outcome();
        out.every_fault_caught = out.every_fault_caught && (o == "caught" || o == "no effect" || o == "not applicable");
    }

    const ReportFormat f = parse_report_format(format);
    std::ostringstream o;
    std::vector<std::pair<std::string, std::string>> faulty;
    for (const auto& [sw, leg] : fault_legs)
        if (!leg.empty()) faulty.emplace_back(leg, fault_text(sw));
    const std::string banner = fault_banner(faulty);
    for (auto table : fault_matrix_tables(out.matrix)) {
        table.banner = banner;
        o << render_table(table, f) << "\n";
    }
    const std::string summary = "run folder " + run.folder.string() + "; " + std::to_string(out.matrix.rows.size()) + " faults, " +
                                std::to_string(plans.size()) + " legs, " + number_or_na(wall, "%.0f") + " s wall (--jobs " +
                                std::to_string(opt.jobs) + ")";
    o << (f == ReportFormat::Latex ? "% " : f == ReportFormat::Csv ? "# " : "") << summary << "\n";
    out.text = o.str();
    return out;
}

}  // namespace tandem::experiments
