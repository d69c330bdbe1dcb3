#pragma once
// What a list of runs shows of each run beyond its catalog row (the workbench's runs page and the
// names of its compare legend): chosen settings of the run's experiment as columns, the verdict's
// word and whether it passes, whether the run is a member of a seed envelope, and labels that name
// runs shown together by what differs between them. Reads the run folder's experiment.json (small)
// only; computes no statistics (the verdict is the runner's line, docs/report.md "The verdict").
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// A setting of the experiment shown as a column: its column name and dotted key in the spec.
struct SettingColumn {
    std::string name;  // "lr"
    std::string key;   // "optimizer.lr"
};
// lr, rank, alpha, seed, max_updates, base (model.base, or model.config for a generated base).
const std::vector<SettingColumn>& default_setting_columns();

// The resolved spec of a run folder (experiment.json's "spec"); nullopt when the file is missing or
// not the runner's JSON (a run folder from elsewhere, a member still being prepared).
std::optional<nlohmann::json> read_run_spec(const std::filesystem::path& run_folder);

// The value at `key` ("optimizer.lr") as a short text: numbers as %g with a compact exponent
// ("1e-4", "2.5e-4", "16"), strings as they are, anything else as compact JSON; "" when absent.
// "model.base" falls back to model.config ("config tiny") for a base generated from the seed.
std::string setting_text(const nlohmann::json& spec, const std::string& key);

// The verdict line's leading word and its class: passes (equivalent, within the seed envelope),
// fails (different, outside the seed envelope, incomplete), neither (not judged, one leg), or
// none (no verdict yet: a run still going, or one recorded before verdicts).
enum class VerdictClass { None, Pass, Fail, Neutral };
struct VerdictWord {
    std::string word;  // one of verdict_words() (distance.h), "one leg", or ""
    VerdictClass kind = VerdictClass::None;
};
VerdictWord verdict_word(const std::string& verdict_line);

// The seed envelope folder a run belongs to (`tandem envelope` puts each member run in
// <envelope folder>/members/<run>/, next to envelope.json); nullopt for any other run.
std::optional<std::filesystem::path> envelope_folder_of(const std::filesystem::path& run_folder);

// The dotted keys whose values are not the same in every spec (name and description left out
// unless nothing else differs): the default setting columns' keys first, in their order (lr, rank,
// alpha, seed, max_updates, base), then the others by key.
std::vector<std::string> differing_settings(const std::vector<nlohmann::json>& specs);

// Names for runs shown together, one per run, pairwise distinct: the run's tags that not every run
// carries when it has such tags, else the settings that differ ("lr 2e-4 · rank 8", at most
// `max_settings` of them, more when needed to tell two runs apart), else — identical specs — the
// run id's distinguishing tail. `specs[i]` may be null (unknown spec).
std::vector<std::string> run_labels(const std::vector<std::string>& run_ids, const std::vector<nlohmann::json>& specs,
                                    const std::vector<std::vector<std::string>>& tags = {}, std::size_t max_settings = 3);

}  // namespace tandem::experiments
