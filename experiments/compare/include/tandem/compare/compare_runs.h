#pragma once
// Legs of different runs (`tandem compare RUN_A:LEG RUN_B:LEG`, the workbench's diff view): the
// experiment files' differences and L1-L4 of the two legs, judged as `tandem report` judges a run.
#include "tandem/compare/comparison.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// "RUN:LEG": RUN a run folder or its run.h5, LEG a leg of it (the text after the last ':').
struct RunLegRef {
    std::filesystem::path run;
    std::string leg;
};
RunLegRef parse_run_leg(const std::string& text);  // throws tandem::Error naming the text

// One difference between two experiment specs: `key` is the dotted path ("batch.max_updates",
// "lora.targets"), a/b the JSON text of each side's value (nullopt where the key is absent).
struct ConfigDifference {
    std::string key;
    std::optional<std::string> a, b;
};
// Every key whose value differs, in key order (objects are walked; arrays and scalars compared whole).
std::vector<ConfigDifference> diff_specs(const nlohmann::json& a, const nlohmann::json& b);

struct RunsComparison {
    std::string label_a, label_b;          // "<run id>:<leg>" — the leg names in `comparison`
    std::string run_id_a, run_id_b;
    std::vector<ConfigDifference> config;  // the experiment files' differences (spec A vs spec B)
    Comparison comparison;                 // L1–L4 of the two legs, as compare_legs computes them
};
// Whether a spec setting (a dotted key of diff_specs) can change a run's numbers: the envelope key's
// rule (ExperimentSpec::sha256_without_seeds) plus the seeds — name, description, the legs section
// (and its faults), observe, gate, checkpoint cadence, l3_records and how masks are drawn cannot.
// Legs of runs that differ in seeds or masks are judged unpaired; in any other such setting, not judged.
bool setting_changes_numbers(const std::string& key);
// Whether a and b name the same leg of the same run file (a leg compared with itself: refused).
bool same_run_leg(const RunLegRef& a, const RunLegRef& b);

// L1–L4 between a leg of one run file and a leg of another run file (or another leg of the same
// one), judged as `tandem report` judges a run: when the settings that change numbers are the same
// (setting_changes_numbers), the pair is judged — paired (the error-model bound) when the seeds,
// masks and plan line up, else by the seed envelope the run files hold or, when they hold none, the
// first of `catalogs` holding one (run_envelopes), each leg against its own run's clip; when they differ,
// L4 is reported and the pair is `not judged` (the first such setting is the reason). Throws
// tandem::Error for a leg compared with itself.
RunsComparison compare_run_legs(const RunLegRef& a, const RunLegRef& b, const Thresholds& t = {},
                                const std::vector<std::filesystem::path>& catalogs = {});

}  // namespace tandem::experiments
