#pragma once
// Where the views' data comes from: the run file (experiments' RunFileReader) and the catalog
// (experiments' Catalog). Copies values out; computes nothing. Widget-free, callable off the GUI
// thread (every function opens its own reader/connection).
#include "tandem/views/run_snapshot.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::views {

// `path` is a run.h5 file or a run folder holding one. Throws tandem::Error naming the file.
std::filesystem::path resolve_run_file(const std::filesystem::path& path);
RunSnapshot load_run_snapshot(const std::filesystem::path& path, double wait_s = 5.0);

// Every run of the catalog with its legs (one row per leg; a run without legs yet gets one row).
std::vector<CatalogLegRow> load_catalog_rows(const std::filesystem::path& catalog);
// Deletes a run from the catalog (not its folder). Returns false when it was not there.
bool delete_catalog_run(const std::filesystem::path& catalog, const std::string& run_id);

// One record's tokenisation by one leg, from the leg's L3 check (the "l3" leg event as stored in
// /legs/<leg>/checks/l3): ids after truncation, supervision boundary (in the untruncated sequence)
// and the truncation point.
struct LegTokenRecord {
    std::string leg;
    std::string label;          // "<leg> (<template>)"
    std::int64_t index = -1;    // into corpus/records.jsonl
    std::string id;             // "pubmedqa:21645374"
    std::vector<std::int32_t> ids;
    std::int64_t boundary = -1;            // first supervised token, -1 when none
    std::int64_t supervised_count = 0;     // after truncation
    std::int64_t full_length = 0;          // before truncation
    std::optional<std::int64_t> truncated_at;  // the kept length when truncated
    std::string text;                      // the rendered full_text
    std::string template_name;
};

// Every leg's L3 records: result[leg] in file order. Legs without an L3 check are absent.
std::vector<std::vector<LegTokenRecord>> load_token_records(const std::filesystem::path& path);

}  // namespace tandem::views
