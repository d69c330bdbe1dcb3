// Legs of different runs (`tandem compare RUN_A:LEG RUN_B:LEG`, the workbench's diff view): the
// experiment specs' differences and the pair's comparison.
#include "tandem/compare/compare.h"
#include "tandem/compare/comparison_io.h"

#include "tandem/error.h"

#include <algorithm>
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