// Legs of different runs (`tandem compare RUN_A:LEG RUN_B:LEG`, the workbench's diff view): the
// experiment specs' differences and the pair's comparison.
#include "tandem/compare/compare_runs.h"
#include "tandem/compare/comparison_io.h"

#include "tandem/error.h"

#include <algorithm>
#include <map>
#include <set>

namespace tandem::experiments {
using nlohmann::json;

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
    std::filesystem::path folder, file;
    EnvelopeSearch envelopes;  // run_envelopes: the run file's, else the first catalog's holding one
    std::vector<FingerprintRow> fingerprints;
};

std::filesystem::path run_file_of(const std::filesystem::path& run) {
    return std::filesystem::is_directory(run) ? run / "run.h5" : run;
}

// ExperimentSpec::Seeds as text: legs of two runs are paired only with the same seeds.
std::string seeds_text(const ExperimentSpec& s) {
    json j = json::object();
    for (const auto& n : ExperimentSpec::seed_names()) j[n] = s.seed_of(n);
    return j.dump();
}

OpenedRun open_run_leg(const RunLegRef& ref, const std::vector<std::filesystem::path>& catalogs) {
    const std::filesystem::path file = run_file_of(ref.run);
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
    r.file = file;
    r.envelopes = run_envelopes(reader, r.spec, catalogs);
    r.fingerprints = reader.fingerprints(ref.leg);
    r.leg.clip = r.spec.clip;  // each leg against its own run's clip
    r.leg.seeds = seeds_text(r.spec);
    return r;
}

}  // namespace

std::vector<ConfigDifference> diff_specs(const json& a, const json& b) {
    std::vector<ConfigDifference> out;
    walk_diff(a, b, "", out);
    return out;
}

bool setting_changes_numbers(const std::string& key) {
    // The envelope key's sections (ExperimentSpec::sha256_without_seeds), less how dropout masks are
    // drawn per leg, and the seeds. Seeds and mask settings decide whether the legs are paired
    // (compare_l4); injected faults are what a comparison is there to catch.
    const std::string top = key.substr(0, key.find('.'));
    static const std::set<std::string> numbers = {"model",    "lora",   "optimizer", "schedule", "clip",     "batch",
                                                  "sequence", "corpus", "eval",      "plan",     "template", "overrides",
                                                  "seed",     "seeds"};
    if (!numbers.count(top)) return false;
    return !(top == "overrides" && key.size() > 14 && key.substr(key.size() - 14) == ".dropout_masks");
}

bool same_run_leg(const RunLegRef& a, const RunLegRef& b) {
    if (a.leg != b.leg) return false;
    std::error_code ea, eb;
    const auto fa = std::filesystem::weakly_canonical(run_file_of(a.run), ea);
    const auto fb = std::filesystem::weakly_canonical(run_file_of(b.run), eb);
    return !ea && !eb && fa == fb;
}

namespace {

// Where the two runs' envelopes were looked for, each place once (the catalogs are the same list for
// both): two legs of one run name "the run file", as `tandem report` does; of two runs, "both run files".
std::vector<std::string> places_of_both(const OpenedRun& a, const OpenedRun& b) {
    std::error_code ea, eb;
    const bool one_file = std::filesystem::weakly_canonical(a.file, ea) == std::filesystem::weakly_canonical(b.file, eb) && !ea && !eb;
    std::vector<std::string> out;
    for (const auto* s : {&a.envelopes, &b.envelopes})
        for (const auto& p : s->places) {
            const std::string place = p == "the run file" && !one_file ? "both run files" : p;
            if (std::find(out.begin(), out.end(), place) == out.end()) out.push_back(place);
        }
    return out;
}

}  // namespace

RunsComparison compare_run_legs(const RunLegRef& a_ref, const RunLegRef& b_ref, const Thresholds& t,
                                const std::vector<std::filesystem::path>& catalogs) {
    if (same_run_leg(a_ref, b_ref))
        throw Error(a_ref.run.string() + ":" + a_ref.leg + " is compared with itself: a leg equals itself by construction; "
                    "name another leg or another run");
    OpenedRun a = open_run_leg(a_ref, catalogs), b = open_run_leg(b_ref, catalogs);
    RunsComparison r;
    r.run_id_a = a.run_id;
    r.run_id_b = b.run_id;
    r.label_a = a.run_id + ":" + a_ref.leg;
    r.label_b = b.run_id + ":" + b_ref.leg;
    if (r.label_a == r.label_b) r.label_b += " (2)";
    r.config = diff_specs(a.spec_json, b.spec_json);
    std::vector<const ConfigDifference*> numbers;  // the differences that can change numbers
    for (const auto& d : r.config)
        if (setting_changes_numbers(d.key) && d.key.rfind("seed", 0) != 0) numbers.push_back(&d);  // other seeds: judged unpaired
    // Spec A with each leg's own per-leg settings under its new label, so masks/plan line up as
    // they would inside one run; each leg keeps its own run's seeds (compare_l4 pairs only equal ones).
    ExperimentSpec spec = a.spec;
    spec.overrides.clear();
    // A leg's own setting only where it differs from the experiment's: an override equal to the default
    // would change the envelope key (sha256_without_seeds) and lose the envelope `tandem report` finds.
    auto settings_of = [&spec](const ExperimentSpec& s, const std::string& leg) {
        std::map<std::string, std::string> m;
        for (const char* f : {"dropout_masks", "plan", "template"})
            if (const std::string v = s.leg_setting(leg, f); v != spec.leg_setting("", f)) m[f] = v;
        return m;
    };
    spec.overrides[r.label_a] = settings_of(a.spec, a_ref.leg);
    spec.overrides[r.label_b] = settings_of(b.spec, b_ref.leg);
    a.leg.name = r.label_a;
    b.leg.name = r.label_b;
    // The seed envelopes either run holds, else the catalog's (compare_legs keeps those of this experiment).
    std::vector<SeedEnvelope> envelopes = a.envelopes.envelopes;
    envelopes.insert(envelopes.end(), b.envelopes.envelopes.begin(), b.envelopes.envelopes.end());
    Judging judging;
    judging.thresholds = t;
    judging.model = error_model_or_none(spec, a.folder);
    judging.envelopes = envelopes;
    judging.envelope_places = places_of_both(a, b);
    judging.expected = a.expected;
    const std::map<std::string, const std::vector<FingerprintRow>*> fingerprints = {{r.label_a, &a.fingerprints},
                                                                                      {r.label_b, &b.fingerprints}};
    if (numbers.empty())
        judging.fingerprints = [&fingerprints](const std::string& leg) {
            auto it = fingerprints.find(leg);
            return it == fingerprints.end() ? std::vector<FingerprintRow>{} : *it->second;
        };
    r.comparison = judge_legs({a.leg, b.leg}, spec, judging);
    // Completeness, each leg against its own run's plan (as compare_run_file judges a run): a pair
    // with an incomplete leg never passes.
    Comparison& c = r.comparison;
    c.incomplete.clear();
    for (const auto* run : {&a, &b})
        for (auto& line : incompleteness(run->leg, run->expected)) c.incomplete.push_back(std::move(line));
    if (!numbers.empty()) {
        // Settings that change numbers differ: the trajectories are not expected to agree. Reported; the
        // pair is not judged (unless a level already failed).
        const Comparison& cc = r.comparison;
        for (size_t i = 0; i < cc.l4.size(); ++i) {
            L4Entry& e = r.comparison.l4[i];
            const bool levels_pass = cc.l1[i].pass && cc.l2[i].pass && cc.l3[i].pass;
            e.gated = false;
            e.numerics = PairedDistance{};
            e.envelope = EnvelopeDistance{};
            e.loss_numerics = e.grad_numerics = PairedDistance{};
            e.loss_envelope = e.grad_envelope = EnvelopeDistance{};
            e.schedule.clear();
            e.first_different_update = levels_pass ? -1 : 0;
            e.note = "the runs' experiments differ in " + std::to_string(numbers.size()) +
                     " setting(s) that change numbers: reported, not judged";
            if (levels_pass) {
                e.verdict = PairVerdict::NotJudged;
                e.verdict_reason = e.leg_a + "~" + e.leg_b + ": the runs' experiments differ in " + std::to_string(numbers.size()) +
                                   " setting(s) that change numbers (first " + numbers.front()->key + ")";
            }
            e.pass = false;
        }
    }
    return r;
}

}  // namespace tandem::experiments