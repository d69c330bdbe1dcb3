#pragma once
// `tandem report`: the comparison (compare.h) as tables (docs/report.md). The tables are plain
// tandem::Table values; tandem/table.h renders them as text, Markdown, CSV and LaTeX.
#include "tandem/compare/compare.h"
#include "tandem/table.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

using tandem::csv_escape;
using tandem::latex_escape;
using tandem::markdown_escape;
using tandem::parse_report_format;
using tandem::render_table;
using tandem::ReportFormat;
using tandem::Table;

std::vector<Table> report_tables(const Comparison& c, const Thresholds& t = {});
// Each leg's package versions (Comparison::stacks), one row per package, "differs" where legs report
// other versions; nullopt when no leg reported versions. Table id "stacks".
std::optional<Table> stacks_table(const Comparison& c);
// The fault matrix's tables (docs/faults.md): "faults" (levels, first update caught), "fault-effects"
// (held-out CE at the end), "fault-sizes" (--size-search only).
std::vector<Table> fault_matrix_tables(const FaultMatrix& m);

// `tandem localise` and the report: the chain around the first divergence (or around the largest
// ratio): `context` points before and after it, the point itself marked "<<". Table id "localisation".
Table localisation_table(const Localisation& l, size_t context = 4);

// The whole report: a header, every table, and the verdict line (Comparison::verdict()) with its reasons.
std::string render_report(const std::string& title, const Comparison& c, ReportFormat f, const Thresholds& t = {});

// `tandem compare`: the experiment files' differences as a table ("config"), then the report's
// tables for the two legs; the workbench's diff-runs view shows exactly these.
Table config_table(const RunsComparison& r);
std::vector<Table> runs_comparison_tables(const RunsComparison& r, const Thresholds& t = {});
std::string render_runs_comparison(const RunsComparison& r, ReportFormat f, const Thresholds& t = {});

// Reads run.h5 of a run folder (or a run.h5 path) and judges its legs (judge_legs: the one judging
// path) with the spec stored there, against the seed envelopes the file holds (/envelope), else those
// of the first of `catalogs` that holds any for the experiment (run_envelopes). `against`: compare every
// leg with that leg only; nullopt: a faults run's reference leg (/faults), else every pair.
Comparison compare_run_file(const std::filesystem::path& run, std::string* title = nullptr,
                            const std::vector<std::filesystem::path>& catalogs = {},
                            const std::optional<std::string>& against = std::nullopt);
// The seed envelopes that judge a run of `spec`: those `reader`'s file holds for the experiment, else
// those of the first of `catalogs` (in order; missing files are skipped) holding any, with
// every place looked in. `tandem report` and `tandem compare` find them the same way; `tandem run`
// looks in its catalogs the same way when the run starts (RunRecorder).
EnvelopeSearch run_envelopes(const RunFileReader& reader, const ExperimentSpec& spec,
                             const std::vector<std::filesystem::path>& catalogs);

}  // namespace tandem::experiments
