#pragma once
// Where the views' data comes from: the run file (experiments' RunFileReader) and the catalog
// (experiments' Catalog). Copies values out; computes nothing. Widget-free, callable off the GUI
// thread (every function opens its own reader/connection).
#include "tandem/compare/distance.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/compare/metrics.h"
#include "tandem/store/run_file.h"
#include "tandem/views/run_snapshot.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::views {

// `path` is a run.h5 file or a run folder holding one. Throws tandem::Error naming the file.
std::filesystem::path resolve_run_file(const std::filesystem::path& path);
RunSnapshot load_run_snapshot(const std::filesystem::path& path, double wait_s = 5.0);

// Why `path` cannot be opened as a run, in one line naming it ("… does not exist", "… is not a
// tandem run folder (no run.h5 …)", "… is not an HDF5 file", a truncated file HDF5 cannot open);
// nullopt when it can. Cheap: existence, the HDF5 signature and opening the file (its superblock),
// so the window can answer at once. A run folder the
// launcher's runner just created (no run.h5 yet) is accepted when `allow_pending`.
std::optional<std::string> run_path_problem(const std::filesystem::path& path, bool allow_pending = false);

// Reads a run file as it grows. The first read takes every row; later reads take only the rows
// appended since (RunFileReader's row-range reads) and the residual points those rows pair
// (experiments' residual_points_after), never the whole file or every level again. A file whose
// tables shrank, or that now holds another run, is read afresh (`reset`).
class IncrementalRunReader {
public:
    struct Delta {
        bool reset = false;  // `added` replaces everything (first read, or the file was replaced)
        RunSnapshot added;   // every leg (statuses current), holding only the new points (and z values)
        bool flags_changed = false;  // added.flags holds every flag now (they replace the old ones)
        bool empty() const;
    };
    Delta read(const std::filesystem::path& file, double wait_s = 5.0);
    void clear();
    std::size_t rows_read() const { return rows_read_; }  // rows read from the file in total (tests)

private:
    struct LegState {
        std::string name, implementation;
        std::vector<experiments::StepRow> steps;
        std::vector<experiments::EvalRow> evals;
        std::optional<experiments::ClockPoint> clock = std::nullopt;  // where the leg's clock stands after `steps`
    };
    struct PairState {
        std::int64_t eval_after = -1, step_after = -1;  // last paired update seen
    };
    // The steps of read(), in order: who the run is (and whether it starts over), each leg's new
    // rows, the gate's flags, then (the file closed) the verdict and the new residual points.
    std::vector<std::string> start_reading(const experiments::RunFileReader& reader, const std::filesystem::path& file, Delta& delta);
    void read_envelope(const experiments::RunFileReader& reader, const std::string& spec_json, const std::vector<std::string>& names,
                       const std::filesystem::path& file);
    bool read_leg(const experiments::RunFileReader& reader, std::size_t i, const std::string& name, Delta& delta);  // false: rewritten
    static bool continues(const LegState& state, const std::vector<experiments::StepRow>& steps,
                          const std::vector<experiments::EvalRow>& evals);
    void read_flags(const experiments::RunFileReader& reader, Delta& delta);
    void add_verdict(const std::filesystem::path& file, RunSnapshot& out);
    void add_residuals(RunSnapshot& out);
    std::string run_id_;
    std::vector<LegState> legs_;
    std::vector<PairState> pairs_;  // i < j, in compare_legs' order
    std::size_t rows_read_ = 0;
    // The seed envelope the run file holds (read once per run) and the bound that sets where z is defined.
    std::optional<experiments::SeedEnvelope> envelope_;
    std::optional<experiments::ErrorModel> model_;
    std::size_t flags_seen_ = 0;
    std::string verdict_statuses_;  // the legs' statuses when the verdict was last computed
};

// Appends a delta's points to `target` (or replaces it on reset): legs, residual and z series matched
// by name, statuses taken from the delta; flags, bands and the verdict replaced when the delta has them.
void apply_delta(RunSnapshot& target, const IncrementalRunReader::Delta& delta);
// snapshot.flag_points from snapshot.flags (the markers of each panel, sorted by update).
void rebuild_flag_points(RunSnapshot& snapshot);

// Every run of the catalog with its legs (one row per leg; a run without legs yet gets one row).
std::vector<CatalogLegRow> load_catalog_rows(const std::filesystem::path& catalog);
// Writes a run's tags and note into the catalog (Catalog::set_run_tags / set_run_user_note).
void set_catalog_annotation(const std::filesystem::path& catalog, const std::string& run_id,
                            const std::vector<std::string>& tags, const std::string& note);
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
