// The SQLite catalog. Schema and migrations: docs/catalog.md. Prepared statements only.
#include "tandem/store/catalog.h"

#include "tandem/error.h"
#include "tandem/utc_time.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <chrono>
#include <cstring>
#include <ctime>
#include <cctype>
#include <fstream>
#include <functional>
#include <set>
#include <thread>
#include <utility>

namespace tandem::experiments {
namespace {

// Migrations: index i takes the schema from version i to i + 1. Never edit a released step; add one.
// Each step runs inside one IMMEDIATE transaction together with the user_version bump.
const std::vector<std::vector<const char*>>& migrations() {
    static const std::vector<std::vector<const char*>> steps = {
        // 0 -> 1: probes
        {R"(CREATE TABLE probes (
              id          INTEGER PRIMARY KEY,
              device      TEXT NOT NULL,
              device_name TEXT NOT NULL DEFAULT '',
              method      TEXT NOT NULL DEFAULT '',
              bytes       INTEGER NOT NULL CHECK (bytes > 0),
              repeats     INTEGER NOT NULL CHECK (repeats > 0),
              gbps_memcpy REAL,
              gbps_h2d    REAL,
              gbps_d2h    REAL,
              gbps_d2d    REAL,
              pcie_link   TEXT NOT NULL DEFAULT '',
              run_file    TEXT NOT NULL DEFAULT '',
              measured_at TEXT NOT NULL,
              hostname    TEXT NOT NULL DEFAULT ''
            ))",
         "CREATE INDEX probes_by_device ON probes (device, measured_at)"},
        // 1 -> 2: runs and legs
        {R"(CREATE TABLE runs (
              id             TEXT PRIMARY KEY,
              experiment     TEXT NOT NULL,
              spec_sha256    TEXT NOT NULL DEFAULT '',
              folder         TEXT NOT NULL,
              run_file       TEXT NOT NULL DEFAULT '',
              started_at     TEXT NOT NULL,
              finished_at    TEXT,
              status         TEXT NOT NULL DEFAULT 'running'
                             CHECK (status IN ('running','finished','failed','interrupted','cancelled')),
              tandem_version TEXT NOT NULL DEFAULT '',
              hostname       TEXT NOT NULL DEFAULT '',
              runner_pid     INTEGER,
              note           TEXT NOT NULL DEFAULT ''
            ))",
         "CREATE INDEX runs_by_start ON runs (started_at)",
         R"(CREATE TABLE legs (
              run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
              name              TEXT NOT NULL,
              implementation    TEXT NOT NULL DEFAULT '',
              device            TEXT NOT NULL DEFAULT '',
              status            TEXT NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending','running','finished','failed','interrupted','cancelled')),
              exit_status       INTEGER,
              started_at        TEXT,
              finished_at       TEXT,
              updates_done      INTEGER,
              updates_total     INTEGER,
              final_loss        REAL,
              tokens_per_s      REAL,
              median_update_s   REAL,
              peak_device_bytes INTEGER,
              peak_host_bytes   INTEGER,
              last_eval_update  INTEGER,
              last_eval_ce      REAL,
              error             TEXT NOT NULL DEFAULT '',
              PRIMARY KEY (run_id, name)
            ))"},
        // 2 -> 3: legs may be paused or stopped by request (tandem leg pause|stop, the live gate).
        // SQLite cannot change a CHECK constraint in place: the table is rebuilt with its rows.
        {R"(CREATE TABLE legs_v3 (
              run_id            TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
              name              TEXT NOT NULL,
              implementation    TEXT NOT NULL DEFAULT '',
              device            TEXT NOT NULL DEFAULT '',
              status            TEXT NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending','running','finished','failed','interrupted','cancelled',
                                                  'paused','stopped')),
              exit_status       INTEGER,
              started_at        TEXT,
              finished_at       TEXT,
              updates_done      INTEGER,
              updates_total     INTEGER,
              final_loss        REAL,
              tokens_per_s      REAL,
              median_update_s   REAL,
              peak_device_bytes INTEGER,
              peak_host_bytes   INTEGER,
              last_eval_update  INTEGER,
              last_eval_ce      REAL,
              error             TEXT NOT NULL DEFAULT '',
              PRIMARY KEY (run_id, name)
            ))",
         "INSERT INTO legs_v3 SELECT * FROM legs",
         "DROP TABLE legs",
         "ALTER TABLE legs_v3 RENAME TO legs"},
        // 3 -> 4: what users write about runs (tags, a note), apart from the runner's runs.note
        {R"(CREATE TABLE run_tags (
              run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
              tag    TEXT NOT NULL CHECK (length(tag) BETWEEN 1 AND 64 AND instr(tag, ',') = 0),
              PRIMARY KEY (run_id, tag)
            ))",
         "CREATE INDEX run_tags_by_tag ON run_tags (tag)",
         R"(CREATE TABLE run_notes (
              run_id     TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
              note       TEXT NOT NULL DEFAULT '',
              updated_at TEXT NOT NULL
            ))"},
        // 4 -> 5: seed envelopes (tandem envelope; docs/envelope.md), keyed by the experiment's hash
        // without its seeds, one row per stack, and their statistics per series and update.
        {R"(CREATE TABLE envelopes (
              id             INTEGER PRIMARY KEY,
              spec_key       TEXT NOT NULL,
              experiment     TEXT NOT NULL,
              implementation TEXT NOT NULL,
              members        INTEGER NOT NULL CHECK (members >= 1),
              vary           TEXT NOT NULL DEFAULT '',
              member_mean_ce TEXT NOT NULL DEFAULT '[]',
              run_file       TEXT NOT NULL DEFAULT '',
              created_at     TEXT NOT NULL,
              hostname       TEXT NOT NULL DEFAULT ''
            ))",
         "CREATE INDEX envelopes_by_key ON envelopes (spec_key, implementation, created_at)",
         R"(CREATE TABLE envelope_points (
              envelope_id  INTEGER NOT NULL REFERENCES envelopes (id) ON DELETE CASCADE,
              series       TEXT NOT NULL CHECK (series IN ('heldout_ce','loss','grad_norm')),
              update_index INTEGER NOT NULL,
              n            INTEGER NOT NULL,
              min REAL, max REAL, mean REAL, std REAL, q05 REAL, q25 REAL, q50 REAL, q75 REAL, q95 REAL,
              PRIMARY KEY (envelope_id, series, update_index)
            ))"},
        // 5 -> 6: injected faults (docs/faults.md): what a run and a leg ran with, and the fault matrix
        {"ALTER TABLE runs ADD COLUMN faults TEXT NOT NULL DEFAULT ''",
         "ALTER TABLE legs ADD COLUMN faults TEXT NOT NULL DEFAULT ''",
         R"(CREATE TABLE fault_results (
              run_id              TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
              fault               TEXT NOT NULL,
              leg                 TEXT NOT NULL,
              size                REAL,
              caught_by           TEXT NOT NULL DEFAULT '',
              first_update        INTEGER,
              first_update_l4     INTEGER,
              ce_diff_abs         REAL,
              ce_diff_rel         REAL,
              ce_diff_clean_units REAL,
              smallest_sizes      TEXT NOT NULL DEFAULT '',
              position            INTEGER NOT NULL DEFAULT 0,
              PRIMARY KEY (run_id, fault)
            ))"},
        // 6 -> 7: each envelope member's mean training loss and pre-clip grad norm (the samples of the
        // per-update series' two-sided tests, docs/thresholds.md); '{}' for envelopes stored before
        {"ALTER TABLE envelopes ADD COLUMN member_means TEXT NOT NULL DEFAULT '{}'"},
    };
    return steps;
}

// How long a write waits for other catalog writers before giving up (the busy timeout covers the
// common case; step() retries what it does not).
constexpr double kBusyRetrySeconds = 30.0;

class Statement {
public:
    Statement(sqlite3* db, const std::string& file, const char* sql) : db_(db), file_(file) {
        if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK)
            throw Error(file + ": SQL error (" + sqlite3_errmsg(db) + ")");
    }
    ~Statement() { sqlite3_finalize(stmt_); }
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    Statement& bind(int i, const std::string& v) {
        return check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
    Statement& bind(int i, const char* v) { return bind(i, std::string(v)); }
    Statement& bind(int i, std::int64_t v) { return check(sqlite3_bind_int64(stmt_, i, v)); }
    Statement& bind(int i, int v) { return check(sqlite3_bind_int64(stmt_, i, v)); }
    Statement& bind(int i, double v) { return check(sqlite3_bind_double(stmt_, i, v)); }
    template <class T>
    Statement& bind(int i, const std::optional<T>& v) {
        if (!v) return check(sqlite3_bind_null(stmt_, i));
        return bind(i, *v);
    }

    // true while rows come; false when done. A busy or locked database is retried for up to
    // kBusyRetrySeconds (docs/catalog.md): SQLite's busy handler is not called in every case (taking
    // the WAL lock at open, recovering the WAL index), so a busy answer is retried here too.
    bool step() {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kBusyRetrySeconds);
        auto pause = std::chrono::milliseconds(2);
        for (;;) {
            const int rc = sqlite3_step(stmt_);
            if (rc == SQLITE_ROW) return true;
            if (rc == SQLITE_DONE) return false;
            const int primary = rc & 0xff;
            if ((primary == SQLITE_BUSY || primary == SQLITE_LOCKED) && std::chrono::steady_clock::now() < deadline) {
                sqlite3_reset(stmt_);
                std::this_thread::sleep_for(pause);
                pause = std::min(pause * 2, std::chrono::milliseconds(100));
                continue;
            }
            throw Error(file_ + ": " + sqlite3_errmsg(db_) +
                        (primary == SQLITE_BUSY || primary == SQLITE_LOCKED
                             ? " (still busy after " + std::to_string(static_cast<int>(kBusyRetrySeconds)) + " s)"
                             : std::string()));
        }
    }
    void run() {
        while (step()) {
        }
    }
    void reset() {
        sqlite3_reset(stmt_);
        sqlite3_clear_bindings(stmt_);
    }

    std::string text(int col) const {
        const auto* p = sqlite3_column_text(stmt_, col);
        return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col)) : std::string();
    }
    std::int64_t int64(int col) const { return sqlite3_column_int64(stmt_, col); }
    double real(int col) const { return sqlite3_column_double(stmt_, col); }
    bool is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
    std::optional<std::string> opt_text(int col) const { return is_null(col) ? std::nullopt : std::optional(text(col)); }
    std::optional<std::int64_t> opt_int64(int col) const { return is_null(col) ? std::nullopt : std::optional(int64(col)); }
    std::optional<double> opt_real(int col) const { return is_null(col) ? std::nullopt : std::optional(real(col)); }
    // Column `col` as a record's member of type T (the column tables below).
    void read(int col, std::string& v) const { v = text(col); }
    void read(int col, std::int64_t& v) const { v = int64(col); }
    void read(int col, std::int32_t& v) const { v = static_cast<std::int32_t>(int64(col)); }
    void read(int col, std::optional<std::string>& v) const { v = opt_text(col); }
    void read(int col, std::optional<std::int64_t>& v) const { v = opt_int64(col); }
    void read(int col, std::optional<double>& v) const { v = opt_real(col); }

private:
    Statement& check(int rc) {
        if (rc != SQLITE_OK) throw Error(file_ + ": cannot bind SQL parameter (" + sqlite3_errmsg(db_) + ")");
        return *this;
    }
    sqlite3* db_;
    std::string file_;
    sqlite3_stmt* stmt_ = nullptr;
};

void execute(sqlite3* db, const std::string& file, const char* sql) { Statement(db, file, sql).run(); }

// SQLite's header: the first 16 bytes of every database file.
bool looks_like_sqlite(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::array<char, 16> header{};
    in.read(header.data(), header.size());
    return in.gcount() == 16 && std::memcmp(header.data(), "SQLite format 3\0", 16) == 0;
}

// ---- one column table per record --------------------------------------------------------------
// A record's row: each column's name and the member it binds and reads, in the table's order. The
// INSERT, upsert and SELECT statements are written from it, so a column is added in one place (and
// in a migration).

template <class R>
struct Column {
    const char* name;
    std::function<void(Statement&, int, const R&)> bind;
    std::function<void(const Statement&, int, R&)> read;
};

template <class R, class T>
Column<R> column(const char* name, T R::*member) {
    return {name, [member](Statement& s, int i, const R& r) { s.bind(i, r.*member); },
            [member](const Statement& s, int i, R& r) { s.read(i, r.*member); }};
}

template <class R>
std::string column_names(const std::vector<Column<R>>& columns) {
    std::string out;
    for (const auto& c : columns) out += (out.empty() ? "" : ", ") + std::string(c.name);
    return out;
}

// INSERT INTO table (columns[, extra]) VALUES (?, ...[, extra_value]); with `keys` > 0 an upsert:
// ON CONFLICT (the first `keys` columns) DO UPDATE SET every other column.
template <class R>
std::string insert_sql(const char* table, const std::vector<Column<R>>& columns, size_t keys = 0,
                       const std::string& extra = "", const std::string& extra_value = "") {
    std::string values;
    for (size_t i = 0; i < columns.size(); ++i) values += i ? ",?" : "?";
    std::string sql = std::string("INSERT INTO ") + table + " (" + column_names(columns) + (extra.empty() ? "" : ", " + extra) +
                      ") VALUES (" + values + (extra_value.empty() ? "" : ", " + extra_value) + ")";
    if (keys == 0) return sql;
    std::string key_list, updates;
    for (size_t i = 0; i < columns.size(); ++i) {
        const std::string name = columns[i].name;
        if (i < keys) key_list += (key_list.empty() ? "" : ", ") + name;
        else updates += (updates.empty() ? "" : ", ") + name + " = excluded." + name;
    }
    return sql + " ON CONFLICT (" + key_list + ") DO UPDATE SET " + updates;
}

// Binds a record to ? 1..n, or reads one from columns `first`..`first` + n - 1 of a row.
template <class R>
void bind_record(Statement& s, const std::vector<Column<R>>& columns, const R& r) {
    for (size_t i = 0; i < columns.size(); ++i) columns[i].bind(s, static_cast<int>(i) + 1, r);
}
template <class R>
R read_record(const Statement& s, const std::vector<Column<R>>& columns, int first = 0) {
    R r;
    for (size_t i = 0; i < columns.size(); ++i) columns[i].read(s, first + static_cast<int>(i), r);
    return r;
}

// SELECT [lead, ]columns FROM table <rest>.
template <class R>
std::string select_sql(const std::vector<Column<R>>& columns, const char* table, const char* rest, const char* lead = "") {
    return std::string("SELECT ") + lead + column_names(columns) + " FROM " + table + " " + rest;
}

const std::vector<Column<ProbeRecord>>& probe_columns() {  // besides id
    using R = ProbeRecord;
    static const std::vector<Column<R>> c = {
        column("device", &R::device), column("device_name", &R::device_name), column("method", &R::method),
        column("bytes", &R::bytes), column("repeats", &R::repeats), column("gbps_memcpy", &R::gbps_memcpy),
        column("gbps_h2d", &R::gbps_h2d), column("gbps_d2h", &R::gbps_d2h), column("gbps_d2d", &R::gbps_d2d),
        column("pcie_link", &R::pcie_link), column("run_file", &R::run_file), column("measured_at", &R::measured_at),
        column("hostname", &R::hostname)};
    return c;
}

const std::vector<Column<RunRecord>>& run_columns() {  // key: id
    using R = RunRecord;
    static const std::vector<Column<R>> c = {
        column("id", &R::id), column("experiment", &R::experiment), column("spec_sha256", &R::spec_sha256),
        column("folder", &R::folder), column("run_file", &R::run_file), column("started_at", &R::started_at),
        column("finished_at", &R::finished_at), column("status", &R::status), column("tandem_version", &R::tandem_version),
        column("hostname", &R::hostname), column("runner_pid", &R::runner_pid), column("note", &R::note),
        column("faults", &R::faults)};
    return c;
}

const std::vector<Column<LegRecord>>& leg_columns() {  // key: run_id, name
    using R = LegRecord;
    static const std::vector<Column<R>> c = {
        column("run_id", &R::run_id), column("name", &R::name), column("implementation", &R::implementation),
        column("device", &R::device), column("status", &R::status), column("exit_status", &R::exit_status),
        column("started_at", &R::started_at), column("finished_at", &R::finished_at),
        column("updates_done", &R::updates_done), column("updates_total", &R::updates_total),
        column("final_loss", &R::final_loss), column("tokens_per_s", &R::tokens_per_s),
        column("median_update_s", &R::median_update_s), column("peak_device_bytes", &R::peak_device_bytes),
        column("peak_host_bytes", &R::peak_host_bytes), column("last_eval_update", &R::last_eval_update),
        column("last_eval_ce", &R::last_eval_ce), column("error", &R::error), column("faults", &R::faults)};
    return c;
}

const std::vector<Column<FaultResultRecord>>& fault_result_columns() {  // key: run_id, fault
    using R = FaultResultRecord;
    static const std::vector<Column<R>> c = {
        column("run_id", &R::run_id), column("fault", &R::fault), column("leg", &R::leg), column("size", &R::size),
        column("caught_by", &R::caught_by), column("first_update", &R::first_update),
        column("first_update_l4", &R::first_update_l4), column("ce_diff_abs", &R::ce_diff_abs),
        column("ce_diff_rel", &R::ce_diff_rel), column("ce_diff_clean_units", &R::ce_diff_clean_units),
        column("smallest_sizes", &R::smallest_sizes)};
    return c;
}

const std::vector<Column<EnvelopeRecord>>& envelope_columns() {  // besides id
    using R = EnvelopeRecord;
    static const std::vector<Column<R>> c = {
        column("spec_key", &R::spec_key), column("experiment", &R::experiment), column("implementation", &R::implementation),
        column("members", &R::members), column("vary", &R::vary), column("member_mean_ce", &R::member_mean_ce),
        column("member_means", &R::member_means), column("run_file", &R::run_file), column("created_at", &R::created_at), column("hostname", &R::hostname)};
    return c;
}

}  // namespace

Catalog::Catalog(const std::filesystem::path& path) : path_(path) {
    const std::string name = path.string();
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
        if (!std::filesystem::is_regular_file(path, ec)) throw Error(name + ": catalog is not a regular file");
        if (std::filesystem::file_size(path, ec) > 0 && !looks_like_sqlite(path))
            throw Error(name + ": not an SQLite database (left untouched)");
    } else if (const auto parent = path.parent_path(); !parent.empty() && !std::filesystem::is_directory(parent, ec)) {
        throw Error(name + ": cannot create catalog, folder " + parent.string() + " does not exist");
    }
    if (sqlite3_open_v2(name.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK) {
        const std::string message = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);
        db_ = nullptr;
        throw Error(name + ": cannot open catalog (" + message + ")");
    }
    try {
        sqlite3_busy_timeout(db_, static_cast<int>(kBusyRetrySeconds * 1000));
        sqlite3_extended_result_codes(db_, 1);
        {
            Statement wal(db_, name, "PRAGMA journal_mode = WAL");
            if (!wal.step() || wal.text(0) != "wal")
                throw Error(name + ": cannot switch the catalog to WAL mode");
        }
        execute(db_, name, "PRAGMA synchronous = FULL");
        execute(db_, name, "PRAGMA foreign_keys = ON");

        const int found = schema_version();
        if (found > kCatalogSchemaVersion)
            throw Error(name + ": catalog schema version " + std::to_string(found) + " is newer than this tandem (" +
                        std::to_string(kCatalogSchemaVersion) + "); use a newer tandem");
        const auto& steps = migrations();
        for (int version = found; version < kCatalogSchemaVersion; ++version) {
            execute(db_, name, "BEGIN IMMEDIATE");
            try {
                // Another process may have migrated while we waited for the write lock.
                if (schema_version() == version) {
                    for (const char* sql : steps[static_cast<std::size_t>(version)]) execute(db_, name, sql);
                    const std::string bump = "PRAGMA user_version = " + std::to_string(version + 1);
                    execute(db_, name, bump.c_str());
                }
                execute(db_, name, "COMMIT");
            } catch (...) {
                sqlite3_stmt* rollback = nullptr;
                if (sqlite3_prepare_v2(db_, "ROLLBACK", -1, &rollback, nullptr) == SQLITE_OK) sqlite3_step(rollback);
                sqlite3_finalize(rollback);
                throw;
            }
        }
    } catch (const Error& e) {
        sqlite3_close(db_);
        db_ = nullptr;
        const std::string message = e.what();
        // SQLite's "file is not a database" for a file whose header looked right but is damaged.
        throw Error(message.rfind(name, 0) == 0 ? message : name + ": " + message);
    }
}

Catalog::~Catalog() {
    if (db_) sqlite3_close_v2(db_);
}

Catalog::Catalog(Catalog&& other) noexcept : path_(std::move(other.path_)), db_(other.db_) { other.db_ = nullptr; }

Catalog& Catalog::operator=(Catalog&& other) noexcept {
    if (this != &other) {
        if (db_) sqlite3_close_v2(db_);
        path_ = std::move(other.path_);
        db_ = other.db_;
        other.db_ = nullptr;
    }
    return *this;
}

int Catalog::schema_version() const {
    Statement s(db_, path_.string(), "PRAGMA user_version");
    return s.step() ? static_cast<int>(s.int64(0)) : 0;
}

std::int64_t Catalog::add_probe(const ProbeResult& probe, const std::string& run_file, const std::string& hostname) {
    auto gbps = [&](const char* direction) -> std::optional<double> {
        if (const auto* d = probe.direction(direction)) return d->gbps;
        return std::nullopt;
    };
    ProbeRecord r;
    r.device = probe.device;
    r.device_name = probe.device_name;
    r.method = probe.method;
    r.bytes = probe.bytes;
    r.repeats = static_cast<std::int32_t>(probe.repeats);
    r.gbps_memcpy = gbps("memcpy");
    r.gbps_h2d = gbps("h2d");
    r.gbps_d2h = gbps("d2h");
    r.gbps_d2d = gbps("d2d");
    r.pcie_link = probe.pcie_link;
    r.run_file = run_file;
    r.measured_at = probe.timestamp.empty() ? utc_timestamp_now() : probe.timestamp;
    r.hostname = hostname;
    Statement s(db_, path_.string(), insert_sql("probes", probe_columns()).c_str());
    bind_record(s, probe_columns(), r);
    s.run();
    return sqlite3_last_insert_rowid(db_);
}

std::vector<ProbeRecord> Catalog::probes() const {
    Statement s(db_, path_.string(),
                select_sql(probe_columns(), "probes", "ORDER BY measured_at DESC, id DESC", "id, ").c_str());
    std::vector<ProbeRecord> out;
    while (s.step()) {
        ProbeRecord r = read_record(s, probe_columns(), 1);
        r.id = s.int64(0);
        out.push_back(std::move(r));
    }
    return out;
}

void Catalog::upsert_run(const RunRecord& run) {
    Statement s(db_, path_.string(), insert_sql("runs", run_columns(), 1).c_str());
    bind_record(s, run_columns(), run);
    s.run();
}

void Catalog::set_run_status(const std::string& run_id, const std::string& status,
                             const std::optional<std::string>& finished_at) {
    Statement s(db_, path_.string(), "UPDATE runs SET status = ?, finished_at = ? WHERE id = ?");
    s.bind(1, status).bind(2, finished_at).bind(3, run_id);
    s.run();
    if (sqlite3_changes(db_) == 0) throw Error(path_.string() + ": no run '" + run_id + "' in the catalog");
}

std::optional<RunRecord> Catalog::run(const std::string& run_id) const {
    Statement s(db_, path_.string(), select_sql(run_columns(), "runs", "WHERE id = ?").c_str());
    s.bind(1, run_id);
    if (!s.step()) return std::nullopt;
    return read_record(s, run_columns());
}

std::vector<RunRecord> Catalog::runs() const {
    Statement s(db_, path_.string(), select_sql(run_columns(), "runs", "ORDER BY started_at DESC, id DESC").c_str());
    std::vector<RunRecord> out;
    while (s.step()) out.push_back(read_record(s, run_columns()));
    return out;
}

void Catalog::upsert_leg(const LegRecord& leg) {
    Statement s(db_, path_.string(), insert_sql("legs", leg_columns(), 2).c_str());
    bind_record(s, leg_columns(), leg);
    s.run();
}

std::vector<LegRecord> Catalog::legs(const std::string& run_id) const {
    Statement s(db_, path_.string(), select_sql(leg_columns(), "legs", "WHERE run_id = ? ORDER BY name").c_str());
    s.bind(1, run_id);
    std::vector<LegRecord> out;
    while (s.step()) out.push_back(read_record(s, leg_columns()));
    return out;
}

void Catalog::upsert_fault_result(const FaultResultRecord& r) {
    // position: the row's place in the matrix, kept when the fault is written again (?1 run_id, ?2 fault)
    Statement s(db_, path_.string(),
                insert_sql("fault_results", fault_result_columns(), 2, "position",
                           "COALESCE((SELECT position FROM fault_results WHERE run_id = ?1 AND fault = ?2), "
                           "(SELECT COUNT(*) FROM fault_results WHERE run_id = ?1))")
                    .c_str());
    bind_record(s, fault_result_columns(), r);
    s.run();
}

std::vector<FaultResultRecord> Catalog::fault_results(const std::string& run_id) const {
    Statement s(db_, path_.string(),
                select_sql(fault_result_columns(), "fault_results", "WHERE run_id = ? ORDER BY position, fault").c_str());
    s.bind(1, run_id);
    std::vector<FaultResultRecord> out;
    while (s.step()) out.push_back(read_record(s, fault_result_columns()));
    return out;
}

bool Catalog::delete_run(const std::string& run_id) {
    Statement s(db_, path_.string(), "DELETE FROM runs WHERE id = ?");
    s.bind(1, run_id);
    s.run();
    return sqlite3_changes(db_) > 0;
}

// ---- tags and notes (schema 4) ----------------------------------------------------------------

namespace {

std::string trimmed(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

}  // namespace

void Catalog::set_run_tags(const std::string& run_id, const std::vector<std::string>& tags) {
    std::set<std::string> clean;
    for (const auto& t : tags) {
        const auto tag = trimmed(t);
        if (tag.empty()) continue;
        if (tag.find(',') != std::string::npos || tag.size() > 64)
            throw Error(path_.string() + ": tag '" + tag + "' has a comma or is longer than 64 characters");
        clean.insert(tag);
    }
    if (!run(run_id)) throw Error(path_.string() + ": no run '" + run_id + "' in the catalog");
    execute(db_, path_.string(), "BEGIN IMMEDIATE");
    try {
        Statement del(db_, path_.string(), "DELETE FROM run_tags WHERE run_id = ?");
        del.bind(1, run_id).run();
        for (const auto& tag : clean) {
            Statement ins(db_, path_.string(), "INSERT INTO run_tags (run_id, tag) VALUES (?, ?)");
            ins.bind(1, run_id).bind(2, tag).run();
        }
        execute(db_, path_.string(), "COMMIT");
    } catch (...) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

void Catalog::set_run_user_note(const std::string& run_id, const std::string& note) {
    if (!run(run_id)) throw Error(path_.string() + ": no run '" + run_id + "' in the catalog");
    Statement s(db_, path_.string(),
                "INSERT INTO run_notes (run_id, note, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET note = excluded.note, updated_at = excluded.updated_at");
    s.bind(1, run_id).bind(2, note).bind(3, utc_timestamp_now()).run();
}

RunAnnotation Catalog::annotation(const std::string& run_id) const {
    RunAnnotation a;
    Statement tags(db_, path_.string(), "SELECT tag FROM run_tags WHERE run_id = ? ORDER BY tag");
    tags.bind(1, run_id);
    while (tags.step()) a.tags.push_back(tags.text(0));
    Statement note(db_, path_.string(), "SELECT note FROM run_notes WHERE run_id = ?");
    note.bind(1, run_id);
    if (note.step()) a.note = note.text(0);
    return a;
}

std::map<std::string, RunAnnotation> Catalog::annotations() const {
    std::map<std::string, RunAnnotation> out;
    Statement tags(db_, path_.string(), "SELECT run_id, tag FROM run_tags ORDER BY run_id, tag");
    while (tags.step()) out[tags.text(0)].tags.push_back(tags.text(1));
    Statement notes(db_, path_.string(), "SELECT run_id, note FROM run_notes WHERE note != ''");
    while (notes.step()) out[notes.text(0)].note = notes.text(1);
    return out;
}

std::vector<std::string> Catalog::search_runs(const std::string& text) const {
    const auto needle = lower(trimmed(text));
    const auto notes = annotations();
    std::vector<std::string> out;
    for (const auto& r : runs()) {
        std::string hay = lower(r.id + "\n" + r.experiment);
        if (auto it = notes.find(r.id); it != notes.end()) {
            for (const auto& t : it->second.tags) hay += "\n" + lower(t);
            hay += "\n" + lower(it->second.note);
        }
        if (needle.empty() || hay.find(needle) != std::string::npos) out.push_back(r.id);
    }
    return out;
}

std::int64_t Catalog::add_envelope(const EnvelopeRecord& e) {
    execute(db_, path_.string(), "BEGIN IMMEDIATE");
    try {
        Statement s(db_, path_.string(), insert_sql("envelopes", envelope_columns()).c_str());
        EnvelopeRecord stamped = e;
        if (stamped.created_at.empty()) stamped.created_at = utc_timestamp_now();
        bind_record(s, envelope_columns(), stamped);
        s.run();
        const std::int64_t id = sqlite3_last_insert_rowid(db_);
        Statement p(db_, path_.string(),
                    "INSERT INTO envelope_points (envelope_id, series, update_index, n, min, max, mean, std, q05, q25, q50, "
                    "q75, q95) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
        for (const auto& [series, x] : e.points) {
            auto real = [](double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; };
            p.bind(1, id).bind(2, series).bind(3, x.update).bind(4, x.n).bind(5, real(x.min)).bind(6, real(x.max));
            p.bind(7, real(x.mean)).bind(8, real(x.std)).bind(9, real(x.q05)).bind(10, real(x.q25)).bind(11, real(x.q50));
            p.bind(12, real(x.q75)).bind(13, real(x.q95));
            p.run();
            p.reset();
        }
        execute(db_, path_.string(), "COMMIT");
        return id;
    } catch (...) {
        sqlite3_stmt* rollback = nullptr;
        if (sqlite3_prepare_v2(db_, "ROLLBACK", -1, &rollback, nullptr) == SQLITE_OK) sqlite3_step(rollback);
        sqlite3_finalize(rollback);
        throw;
    }
}

std::vector<EnvelopeRecord> Catalog::envelopes(const std::string& spec_key) const {
    Statement s(db_, path_.string(),
                select_sql(envelope_columns(), "envelopes", "WHERE spec_key = ? ORDER BY created_at DESC, id DESC", "id, ").c_str());
    s.bind(1, spec_key);
    std::vector<EnvelopeRecord> out;
    while (s.step()) {
        EnvelopeRecord e = read_record(s, envelope_columns(), 1);
        e.id = s.int64(0);
        out.push_back(std::move(e));
    }
    for (auto& e : out) {
        Statement p(db_, path_.string(),
                    "SELECT series, update_index, n, min, max, mean, std, q05, q25, q50, q75, q95 FROM envelope_points "
                    "WHERE envelope_id = ? ORDER BY series, update_index");
        p.bind(1, e.id);
        while (p.step()) {
            EnvelopePoint x;
            x.update = p.int64(1);
            x.n = p.int64(2);
            auto real = [&](int col) { return p.is_null(col) ? std::nan("") : p.real(col); };
            x.min = real(3);
            x.max = real(4);
            x.mean = real(5);
            x.std = real(6);
            x.q05 = real(7);
            x.q25 = real(8);
            x.q50 = real(9);
            x.q75 = real(10);
            x.q95 = real(11);
            e.points.emplace_back(p.text(0), x);
        }
    }
    return out;
}

}  // namespace tandem::experiments
