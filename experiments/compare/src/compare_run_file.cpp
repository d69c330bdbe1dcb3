// A run file judged (comparison_io.h: compare_run_file, run_envelopes): the one way `tandem report`,
// `tandem compare` and the workbench judge a run they did not run. Apart from comparison_io.cpp
// because it reads seed envelopes from catalogs (SQLite), which the parsers' fuzz build leaves out.
#include "tandem/compare/comparison_io.h"

#include "tandem/error.h"
#include "tandem/strict_json.h"

namespace tandem::experiments {
namespace fs = std::filesystem;

EnvelopeSearch run_envelopes(const RunFileReader& reader, const ExperimentSpec& spec, const std::vector<fs::path>& catalogs) {
    EnvelopeSearch search;
    search.key = spec.sha256_without_seeds();
    search.look_in_run_file(reader);  // copied in by the runner when the run started
    for (const auto& catalog : catalogs) search.look_in_catalog(catalog);
    return search;
}

Comparison compare_run_file(const fs::path& run, std::string* title, const std::vector<fs::path>& catalogs,
                            const std::optional<std::string>& against) {
    fs::path file = fs::is_directory(run) ? run / "run.h5" : run;
    if (!fs::exists(file)) throw Error(file.string() + ": no run file");
    RunFileReader reader(file);
    auto exp = reader.experiment();
    if (!exp) throw Error(file.string() + ": no /experiment (not a tandem run file?)");
    const std::string spec_source = file.string() + " /experiment spec_json";
    ExperimentSpec spec = parse_experiment(parse_json_strict(exp->spec_json, spec_source), spec_source);
    const std::vector<LegData> legs = read_legs(reader);
    // a faults run compares every leg with its reference only (docs/faults.md), as the runner did
    std::optional<FaultMatrix> matrix;
    if (auto j = reader.fault_matrix()) matrix = fault_matrix_from_json(nlohmann::json::parse(*j));
    Judging judging;
    judging.against = against ? *against : matrix ? matrix->reference_leg : std::string();
    judging.expected = ExpectedSeries{exp->total_updates, spec.eval_interval};
    judging.model = error_model_or_none(spec, file.parent_path());
    EnvelopeSearch envelopes = run_envelopes(reader, spec, catalogs);
    judging.envelopes = std::move(envelopes.envelopes);
    judging.envelope_places = std::move(envelopes.places);
    judging.fingerprints = [&reader](const std::string& leg) { return reader.fingerprints(leg); };
    Comparison c = judge_legs(legs, spec, judging);
    c.fault_matrix = matrix;
    c.probes = reader.probes();
    c.observables = compare_pair_observables(c, reader);
    if (title) *title = exp->run_id.empty() ? exp->name : exp->run_id;
    return c;
}

}  // namespace tandem::experiments
