#pragma once
// The Tables page's content: the report's tables for one run file.
#include "tandem/views/string_table.h"

#include <filesystem>
#include <vector>

namespace tandem::views {

struct ReportTables {
    std::vector<StringTable> tables;
    std::string note;  // where the numbers come from
    std::string fault_banner;  // "FAULT INJECTED: ..." when a leg ran with an injected fault (docs/faults.md), else ""
};

ReportTables load_report_tables(const std::filesystem::path& run_file);

}  // namespace tandem::views
