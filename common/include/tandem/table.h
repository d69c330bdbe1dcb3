#pragma once
// A table of text cells and its renderings — text, Markdown, CSV and LaTeX (booktabs, siunitx) —
// knowing nothing of what the cells mean. Every table exports to every format; LaTeX escapes
// & % $ # _ { } ~ ^ \ | < > so the output compiles. The report's tables (tandem/compare/report.h)
// and the workbench's exports are rendered here.
#include <string>
#include <vector>

namespace tandem {

struct Table {
    std::string id;       // a short name: the LaTeX label is tab:tandem-<id> ("l1", "timing", ...)
    std::string title;
    std::vector<std::string> columns;
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> notes;  // printed under the table
    // A line every rendering of the table leads with, so an exported table cannot lose it (the report:
    // "FAULT INJECTED: ..." for a run with an injected fault, docs/faults.md).
    std::string banner{};
    // LaTeX: a table wider than 6 columns is set transposed unless this is false (long tables with
    // narrow columns, like the fault matrix, keep their orientation).
    bool transpose_when_wide = true;
};

enum class ReportFormat { Text, Markdown, Csv, Latex };
ReportFormat parse_report_format(const std::string& name);  // text|md|csv|tex; throws naming the value

std::string render_table(const Table& t, ReportFormat f);
std::string latex_escape(const std::string& s);
std::string csv_escape(const std::string& s);
std::string markdown_escape(const std::string& s);  // '|' escaped

}  // namespace tandem
