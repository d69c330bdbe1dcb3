#pragma once
// The SQLite catalog (`tandem.db`): one row per probe, per run and per leg, with the headline figures
// and paths, so the GUI and the report can list everything without opening run files.
// Schema, migrations and pragmas: docs/catalog.md.
//
// - WAL journal, synchronous=FULL, foreign_keys=ON, busy timeout 30 s plus retries of busy statements
//   (docs/catalog.md); one Catalog object = one connection; many processes may write at once
//   (concurrent runs), each write waiting its turn.
// - Schema version in PRAGMA user_version; opening migrates forward from any older version (an
//   empty or missing file is version 0), each step inside one transaction. A file with a NEWER
//   version than this build knows is refused (never downgraded).
// - A file that is not an SQLite database is refused with a one-line tandem::Error naming the
//   path, and its bytes are left untouched.
// - Only prepared statements with bound parameters.
#include "tandem/store/run_file.h"  // ProbeResult

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace tandem::experiments {

inline constexpr int kCatalogSchemaVersion = 7;  // 1: probes; 2: runs + legs; 3: legs paused/stopped; 4: run tags + notes;
                                                 // 5: seed envelopes
                                                 // 6: injected faults (runs.faults, legs.faults, fault_results)
                                                 // 7: envelopes.member_means (the per-update series' tests)

// One row of `probes`.
struct ProbeRecord {
    std::int64_t id = 0;          // assigned by the catalog
    std::string device;           // "cpu", "cuda:0"
    std::string device_name;
    std::string method;
    std::int64_t bytes = 0;
    std::int32_t repeats = 0;
    std::optional<double> gbps_memcpy, gbps_h2d, gbps_d2h, gbps_d2d;
    std::string pcie_link;
    std::string run_file;         // the HDF5 file the probe was also written to (absolute path)
    std::string measured_at;      // ISO-8601 UTC
    std::string hostname;
};

// Status words of runs and legs (CHECK constraints in the schema).
//   run: running | finished | failed | interrupted | cancelled
//   leg: pending | running | finished | failed | interrupted | cancelled | paused | stopped
struct RunRecord {
    std::string id;               // the run folder's name: "<experiment>-<YYYYmmdd-HHMMSS>"
    std::string experiment;       // experiment name
    std::string spec_sha256;
    std::string folder;           // absolute path of the run folder
    std::string run_file;         // absolute path of run.h5
    std::string started_at;       // ISO-8601 UTC
    std::optional<std::string> finished_at;
    std::string status = "running";
    std::string tandem_version;
    std::string hostname;
    std::optional<std::int64_t> runner_pid;  // to tell a live run from an interrupted one
    std::string note;
    std::string faults;           // schema 6: "FAULT INJECTED: <leg>: <faults>; ..." when a leg has a fault, else ""
};

// What a user wrote about a run (schema 4): tags and a free-text note, kept apart from the runner's
// own runs.note (the verdict line), which the runner rewrites.
struct RunAnnotation {
    std::vector<std::string> tags;  // trimmed, non-empty, no commas, each once, sorted
    std::string note;
};

struct LegRecord {
    std::string run_id;
    std::string name;             // leg name (same as /legs/<leg> in the run file)
    std::string implementation;   // "engine", "reference", ...
    std::string device;           // "cpu", "cuda:0"
    std::string status = "pending";
    std::optional<std::int64_t> exit_status;
    std::optional<std::string> started_at, finished_at;
    std::optional<std::int64_t> updates_done;
    std::optional<std::int64_t> updates_total;
    std::optional<double> final_loss;          // loss of the last recorded update
    std::optional<double> tokens_per_s;
    std::optional<double> median_update_s;
    std::optional<std::int64_t> peak_device_bytes, peak_host_bytes;
    std::optional<std::int64_t> last_eval_update;
    std::optional<double> last_eval_ce;
    std::string error;            // one-line error when failed
    std::string faults;           // schema 6: the leg's injected faults ("rope-theta=100, ..."), "" = clean
};

// One row of `fault_results` (schema 6): one fault of a `tandem faults` run (docs/faults.md).
struct FaultResultRecord {
    std::string run_id;
    std::string fault;            // catalogue name
    std::string leg;              // the faulty leg
    std::optional<double> size;   // the size injected (faults with a size)
    std::string caught_by;        // levels that fired, "L1 L3 L4 gate:step-time"; "" = not caught
    std::optional<std::int64_t> first_update;  // the first update at which any level caught it
    std::optional<std::int64_t> first_update_l4;
    std::optional<double> ce_diff_abs, ce_diff_rel, ce_diff_clean_units;  // held-out CE at the end vs the reference
    std::string smallest_sizes;   // JSON {level: smallest size detected} from --size-search, "" when not searched
};

// One row of `envelopes` with its `envelope_points` (docs/envelope.md): a stack's seed envelope.
struct EnvelopeRecord {
    std::int64_t id = 0;             // assigned by the catalog
    std::string spec_key;            // ExperimentSpec::sha256_without_seeds()
    std::string experiment;
    std::string implementation;      // the stack
    std::int64_t members = 0;
    std::string vary;                // the seeds varied, comma-separated
    std::string member_mean_ce;      // JSON array: each member's mean held-out CE after update 0
    std::string member_means = "{}"; // JSON {"loss": [...], "grad_norm": [...]}: each member's mean over every update
    std::string run_file;            // the envelope's run.h5
    std::string created_at;          // ISO-8601 UTC (now when empty)
    std::string hostname;
    std::vector<std::pair<std::string, EnvelopePoint>> points;  // (series, statistics at one update)
};

class Catalog {
public:
    // Opens (creating when absent) and migrates to kCatalogSchemaVersion.
    explicit Catalog(const std::filesystem::path& path);
    ~Catalog();
    Catalog(const Catalog&) = delete;
    Catalog& operator=(const Catalog&) = delete;
    Catalog(Catalog&&) noexcept;
    Catalog& operator=(Catalog&&) noexcept;

    const std::filesystem::path& path() const { return path_; }
    int schema_version() const;   // PRAGMA user_version

    // Probes
    std::int64_t add_probe(const ProbeResult& probe, const std::string& run_file, const std::string& hostname);
    std::vector<ProbeRecord> probes() const;  // newest first

    // Runs and legs. upsert_* inserts or replaces every column of the row identified by its key.
    void upsert_run(const RunRecord& run);
    void set_run_status(const std::string& run_id, const std::string& status,
                        const std::optional<std::string>& finished_at);
    std::optional<RunRecord> run(const std::string& run_id) const;
    std::vector<RunRecord> runs() const;      // newest first (started_at DESC)
    void upsert_leg(const LegRecord& leg);    // the run must exist (foreign key)
    std::vector<LegRecord> legs(const std::string& run_id) const;  // by name
    // Deletes the run's row and its legs' rows (not its folder); returns false when there was none.
    bool delete_run(const std::string& run_id);

    // Tags and notes (schema 4). The run must exist. Tags are normalised (see RunAnnotation);
    // a tag with a comma or longer than 64 characters is refused with an error naming it.
    void set_run_tags(const std::string& run_id, const std::vector<std::string>& tags);
    void set_run_user_note(const std::string& run_id, const std::string& note);
    RunAnnotation annotation(const std::string& run_id) const;
    std::map<std::string, RunAnnotation> annotations() const;  // every annotated run, by id
    // Ids of the runs (newest first) whose tags, note, id or experiment contain `text` (case-insensitive).
    std::vector<std::string> search_runs(const std::string& text) const;

    // Envelopes (schema 5): added with their points in one transaction; listed newest first for a key.
    std::int64_t add_envelope(const EnvelopeRecord& envelope);
    std::vector<EnvelopeRecord> envelopes(const std::string& spec_key) const;
    // Fault-matrix rows (schema 6), replaced per (run, fault); listed in catalogue order of insertion.
    void upsert_fault_result(const FaultResultRecord& row);
    std::vector<FaultResultRecord> fault_results(const std::string& run_id) const;

    sqlite3* handle() const { return db_; }  // for tests and advanced queries

private:
    std::filesystem::path path_;
    sqlite3* db_ = nullptr;
};


}  // namespace tandem::experiments
