#pragma once
// `tandem report`: the comparison (compare.h) as tables — text, Markdown, CSV and LaTeX (booktabs).
// Every table exports to every format; LaTeX escapes & % $ # _ { } ~ ^ \ so the output compiles.
#include "tandem/compare/compare.h"

#include <filesystem>
#include <string>
#include <vector>

namespace tandem::experiments {

struct Table {
    std::string id;       // "faults", "fault-effects", "fault-sizes", "l1", "l2", "l3", "l4", "distances", "gate", "grad-norm", "timing", "probes"
    std::string title;
    std::vector<std::string> columns;
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> notes;  // printed under the table
    // "FAULT INJECTED: ..." when the run had an injected fault (docs/faults.md): every rendering of the
    // table leads with it, so an exported table cannot lose it.
    std::string banner{};
    // LaTeX: a table wider than 6 columns is set transposed unless this is false (long tables with
    // narrow columns, like the fault matrix, keep their orientation).
    bool transpose_when_wide = true;
};

std::vector<Table> report_tables(const Comparison& c, const Thresholds& t = {});
// The fault matrix's tables (docs/faults.md): "faults" (levels, first update caught), "fault-effects"
// (held-out CE at the end), "fault-sizes" (--size-search only).
std::vector<Table> fault_matrix_tables(const FaultMatrix& m);

// `tandem localise` and the report: the chain around the first divergence (or around the largest
// ratio): `context` points before and after it, the point itself marked "<<". Table id "localisation".
Table localisation_table(const Localisation& l, size_t context = 4);

enum class ReportFormat { Text, Markdown, Csv, Latex };
ReportFormat parse_report_format(const std::string& name);  // text|md|csv|tex; throws naming the value

std::string render_table(const Table& t, ReportFormat f);
// The whole report: a header, every table, and the verdict line (Comparison::verdict()) with its reasons.
std::string render_report(const std::string& title, const Comparison& c, ReportFormat f, const Thresholds& t = {});

// `tandem compare`: the experiment files' differences as a table ("config"), then the report's
// tables for the two legs; the workbench's diff-runs view shows exactly these.
Table config_table(const RunsComparison& r);
std::vector<Table> runs_comparison_tables(const RunsComparison& r, const Thresholds& t = {});
std::string render_runs_comparison(const RunsComparison& r, ReportFormat f, const Thresholds& t = {});

std::string latex_escape(const std::string& s);
std::string csv_escape(const std::string& s);

// Reads run.h5 of a run folder (or a run.h5 path) and compares its legs with the spec stored there,
// judged against the seed envelopes the file holds (/envelope), else those of `catalog` (when given
// and present) for the experiment.
Comparison compare_run_file(const std::filesystem::path& run, std::string* title = nullptr,
                            const std::filesystem::path& catalog = {});

}  // namespace tandem::experiments
