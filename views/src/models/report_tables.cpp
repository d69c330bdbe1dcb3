#include "tandem/views/report_tables.h"

#include "tandem/compare/comparison_io.h"
#include "tandem/compare/report.h"
#include "tandem/views/run_source.h"

namespace tandem::views {

ReportTables load_report_tables(const std::filesystem::path& path) {
    const auto file = resolve_run_file(path);
    std::string title;
    const auto comparison = experiments::compare_run_file(file, &title);
    ReportTables out;
    out.tables = experiments::report_tables(comparison);
    out.fault_banner = comparison.fault_banner;
    out.note = title + " — the tables of `tandem report " + file.parent_path().string() + "`; " + comparison.verdict() + ".";
    return out;
}

}  // namespace tandem::views
