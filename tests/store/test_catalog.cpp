// Catalog: created from empty, migrated from version 1 (a file made with the frozen v1 DDL below),
// refuses files that are not SQLite or are newer, and keeps runs/legs consistent.
#include "tandem/error.h"
#include "tandem/store/catalog.h"
#include "refused_file.h"
#include "test_support.h"
#include "killed_writer.h"
#include "tandem/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
namespace ex = tandem::experiments;

extern char** environ;

namespace {



// Runs SQL through the raw C API (the test's own connection, independent of Catalog).
void raw_exec(const fs::path& file, const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    char* error = nullptr;
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
    sqlite3_close(db);
}

std::string pragma(sqlite3* db, const std::string& name) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, ("PRAGMA " + name).c_str(), -1, &s, nullptr), SQLITE_OK);
    std::string out;
    if (sqlite3_step(s) == SQLITE_ROW) out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    return out;
}

// The schema of version 1 exactly as released. Frozen here on purpose: the migration must keep
// working from files made by that release, whatever catalog.cpp says today.
const char* kVersion1Ddl = R"(
CREATE TABLE probes (
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
);
CREATE INDEX probes_by_device ON probes (device, measured_at);
PRAGMA user_version = 1;
)";

// The runs and legs tables of version 2 exactly as released (frozen, like kVersion1Ddl).
const char* kVersion2Ddl = R"(
CREATE TABLE runs (
  id TEXT PRIMARY KEY, experiment TEXT NOT NULL, spec_sha256 TEXT NOT NULL DEFAULT '', folder TEXT NOT NULL,
  run_file TEXT NOT NULL DEFAULT '', started_at TEXT NOT NULL, finished_at TEXT,
  status TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running','finished','failed','interrupted','cancelled')),
  tandem_version TEXT NOT NULL DEFAULT '', hostname TEXT NOT NULL DEFAULT '', runner_pid INTEGER,
  note TEXT NOT NULL DEFAULT '');
CREATE INDEX runs_by_start ON runs (started_at);
CREATE TABLE legs (
  run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE, name TEXT NOT NULL,
  implementation TEXT NOT NULL DEFAULT '', device TEXT NOT NULL DEFAULT '',
  status TEXT NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending','running','finished','failed','interrupted','cancelled')),
  exit_status INTEGER, started_at TEXT, finished_at TEXT, updates_done INTEGER, updates_total INTEGER,
  final_loss REAL, tokens_per_s REAL, median_update_s REAL, peak_device_bytes INTEGER, peak_host_bytes INTEGER,
  last_eval_update INTEGER, last_eval_ce REAL, error TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, name));
PRAGMA user_version = 2;
)";

ex::ProbeResult cpu_probe(double gbps) {
    ex::ProbeResult p;
    p.device = "cpu";
    p.device_name = "Test CPU";
    p.bytes = 268435456;
    p.repeats = 10;
    p.method = "memcpy";
    p.directions.push_back({"memcpy", 2 * 268435456LL, 2 * 268435456.0 / gbps / 1e9, 0.1, gbps});
    p.timestamp = "2026-11-29T09:00:00Z";
    return p;
}

}  // namespace

TEST(Catalog, CreatedFromNothingWithWalFullSyncAndForeignKeys) {
    const fs::path file = tandem::test::fresh_dir("catalog-new") / "tandem.db";
    ex::Catalog c(file);
    EXPECT_EQ(c.schema_version(), ex::kCatalogSchemaVersion);
    EXPECT_EQ(ex::kCatalogSchemaVersion, 7);
    EXPECT_EQ(pragma(c.handle(), "journal_mode"), "wal");
    EXPECT_EQ(pragma(c.handle(), "synchronous"), "2");  // FULL
    EXPECT_EQ(pragma(c.handle(), "foreign_keys"), "1");
    const auto id = c.add_probe(cpu_probe(12.5), "/tmp/x.h5", "host-a");
    const auto probes = c.probes();
    ASSERT_EQ(probes.size(), 1u);
    EXPECT_EQ(probes[0].id, id);
    EXPECT_EQ(probes[0].gbps_memcpy, 12.5);
    EXPECT_FALSE(probes[0].gbps_h2d);
    EXPECT_EQ(probes[0].run_file, "/tmp/x.h5");
    EXPECT_EQ(probes[0].bytes, 268435456);
}

TEST(Catalog, AnEmptyExistingFileIsVersionZeroAndMigrates) {
    const fs::path file = tandem::test::fresh_dir("catalog-empty") / "tandem.db";
    { std::ofstream touch(file); }
    ex::Catalog c(file);
    EXPECT_EQ(c.schema_version(), 7);
}

TEST(Catalog, MigratesAVersion1FileKeepingItsRows) {
    const fs::path file = tandem::test::fresh_dir("catalog-v1") / "tandem.db";
    raw_exec(file, kVersion1Ddl);
    raw_exec(file, "INSERT INTO probes (device, device_name, method, bytes, repeats, gbps_memcpy, measured_at, hostname) "
                   "VALUES ('cpu', 'Old CPU', 'memcpy', 268435456, 10, 9.75, '2026-11-28T10:00:00Z', 'old-host')");
    {
        ex::Catalog c(file);
        EXPECT_EQ(c.schema_version(), 7);
        const auto probes = c.probes();
        ASSERT_EQ(probes.size(), 1u);
        EXPECT_EQ(probes[0].device_name, "Old CPU");
        EXPECT_EQ(probes[0].gbps_memcpy, 9.75);
        EXPECT_EQ(probes[0].hostname, "old-host");
        // The version-2 tables are there and usable.
        c.upsert_run({"r1", "exp", "", "/runs/r1", "/runs/r1/run.h5", "2026-11-29T09:00:00Z", std::nullopt, "running",
                      "0.1.0", "h", std::nullopt, "", ""});
        EXPECT_EQ(c.runs().size(), 1u);
    }
    // Opening again is a no-op (already current).
    ex::Catalog again(file);
    EXPECT_EQ(again.probes().size(), 1u);
    EXPECT_EQ(again.runs().size(), 1u);
}

TEST(Catalog, MigratesAVersion2FileKeepingLegRowsAndAcceptsPausedAndStoppedLegs) {
    const fs::path file = tandem::test::fresh_dir("catalog-v2") / "tandem.db";
    raw_exec(file, kVersion1Ddl);
    raw_exec(file, kVersion2Ddl);
    raw_exec(file, "INSERT INTO runs (id, experiment, folder, started_at, status) VALUES ('r1', 'x', '/r1', "
                   "'2026-11-30T10:00:00Z', 'finished')");
    raw_exec(file, "INSERT INTO legs (run_id, name, implementation, status, updates_done, final_loss) VALUES "
                   "('r1', 'engine', 'engine', 'finished', 30, 11.5)");
    ex::Catalog c(file);
    EXPECT_EQ(c.schema_version(), 7);
    auto legs = c.legs("r1");
    ASSERT_EQ(legs.size(), 1u);
    EXPECT_EQ(legs[0].status, "finished");
    EXPECT_EQ(legs[0].updates_done, 30);
    EXPECT_EQ(legs[0].final_loss, 11.5);
    for (const char* status : {"paused", "stopped"}) {
        ex::LegRecord l = legs[0];
        l.status = status;
        c.upsert_leg(l);
        EXPECT_EQ(c.legs("r1")[0].status, status);
    }
    ex::LegRecord bad = legs[0];
    bad.status = "sleeping";
    EXPECT_THROW(c.upsert_leg(bad), tandem::Error);
    EXPECT_TRUE(c.delete_run("r1"));  // the rebuilt table still cascades from runs
    EXPECT_TRUE(c.legs("r1").empty());
}

TEST(Catalog, RefusesAFileThatIsNotSqliteAndLeavesItsBytes) {
    const fs::path file = tandem::test::fresh_dir("catalog-text") / "tandem.db";
    tandem::test::expect_text_file_refused(file, "definitely not a database, just text that is long enough to have a header\n",
                                           "not an SQLite database", [](const fs::path& f) { ex::Catalog c(f); });
    EXPECT_FALSE(fs::exists(file.string() + "-wal"));
}

TEST(Catalog, RefusesASchemaNewerThanThisBuild) {
    const fs::path file = tandem::test::fresh_dir("catalog-newer") / "tandem.db";
    raw_exec(file, "CREATE TABLE future (x); PRAGMA user_version = 99;");
    try {
        ex::Catalog c(file);
        FAIL();
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
    }
}

TEST(Catalog, RefusesAMissingFolder) {
    const fs::path file = tandem::test::fresh_dir("catalog-missing") / "nope" / "tandem.db";
    EXPECT_THROW(ex::Catalog c(file), tandem::Error);
    EXPECT_FALSE(fs::exists(file.parent_path()));
}

TEST(Catalog, RunsAndLegsUpsertListAndDeleteTogether) {
    const fs::path file = tandem::test::fresh_dir("catalog-runs") / "tandem.db";
    ex::Catalog c(file);
    ex::RunRecord run{"clinical-tiny-20261129-090000", "clinical-tiny", "abc", "/r", "/r/run.h5",
                      "2026-11-29T09:00:00Z", std::nullopt, "running", "0.1.0", "host", 4242, "", ""};
    c.upsert_run(run);
    c.upsert_run({"older", "clinical-tiny", "abc", "/o", "/o/run.h5", "2026-11-28T09:00:00Z", "2026-11-28T10:00:00Z",
                  "finished", "0.1.0", "host", std::nullopt, "", ""});
    ex::LegRecord leg;
    leg.run_id = run.id;
    leg.name = "engine-cpu";
    leg.implementation = "engine";
    leg.device = "cpu";
    leg.status = "running";
    c.upsert_leg(leg);
    leg.name = "reference-cpu";
    leg.implementation = "reference";
    c.upsert_leg(leg);
    // Progress update of one leg: same key, new values.
    leg.name = "engine-cpu";
    leg.implementation = "engine";
    leg.status = "finished";
    leg.exit_status = 0;
    leg.final_loss = 1.25;
    leg.peak_host_bytes = 1LL << 33;
    leg.last_eval_update = 500;
    leg.last_eval_ce = 2.5;
    c.upsert_leg(leg);

    const auto runs = c.runs();
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0].id, run.id) << "newest first";
    EXPECT_EQ(runs[0].runner_pid, 4242);
    EXPECT_FALSE(runs[0].finished_at);
    const auto legs = c.legs(run.id);
    ASSERT_EQ(legs.size(), 2u);
    EXPECT_EQ(legs[0].name, "engine-cpu");
    EXPECT_EQ(legs[0].status, "finished");
    EXPECT_EQ(legs[0].final_loss, 1.25);
    EXPECT_EQ(legs[0].peak_host_bytes, 1LL << 33);
    EXPECT_EQ(legs[0].exit_status, 0);
    EXPECT_FALSE(legs[0].tokens_per_s);
    EXPECT_EQ(legs[1].implementation, "reference");

    c.set_run_status(run.id, "finished", "2026-11-29T10:00:00Z");
    EXPECT_EQ(c.run(run.id)->status, "finished");
    EXPECT_EQ(*c.run(run.id)->finished_at, "2026-11-29T10:00:00Z");
    EXPECT_THROW(c.set_run_status("no-such-run", "finished", std::nullopt), tandem::Error);
    EXPECT_THROW(c.set_run_status(run.id, "exploded", std::nullopt), tandem::Error) << "status CHECK constraint";

    ex::LegRecord orphan;
    orphan.run_id = "no-such-run";
    orphan.name = "x";
    EXPECT_THROW(c.upsert_leg(orphan), tandem::Error) << "foreign key not enforced";

    EXPECT_TRUE(c.delete_run(run.id));
    EXPECT_FALSE(c.delete_run(run.id));
    EXPECT_TRUE(c.legs(run.id).empty()) << "legs survived their run";
    EXPECT_EQ(c.runs().size(), 1u);
}

TEST(Catalog, TwoConnectionsSeeEachOthersCommits) {
    const fs::path file = tandem::test::fresh_dir("catalog-two") / "tandem.db";
    ex::Catalog writer(file);
    ex::Catalog reader(file);
    writer.add_probe(cpu_probe(10), "", "h");
    EXPECT_EQ(reader.probes().size(), 1u);
}

// A writer child adds rows and prints the count after each commit; it is SIGKILLed at a random
// moment. The catalog must open, pass integrity_check, and hold every reported row intact.
TEST(Catalog, SurvivesAWriterKilledMidInsert) {
    const fs::path dir = tandem::test::fresh_dir("catalog-kill");
    std::mt19937 rng(99);
    for (int trial = 0; trial < 5; ++trial) {
        const std::string db = (dir / ("kill-" + std::to_string(trial) + ".db")).string();
        const int commits_before_kill = 2 + static_cast<int>(rng() % 30);
        const long sleep_us = static_cast<long>(rng() % 5000);
        tandem::test::KilledWriter k;
        ASSERT_NO_FATAL_FAILURE(tandem::test::run_and_kill({"catalog-forever", db}, commits_before_kill, sleep_us, k));
        const long long reported = k.reported;
        ASSERT_TRUE(WIFSIGNALED(k.status));
        ASSERT_GE(k.seen, commits_before_kill);

        ex::Catalog c(db);
        EXPECT_EQ(pragma(c.handle(), "integrity_check"), "ok");
        auto rows = c.probes();
        EXPECT_GE(static_cast<long long>(rows.size()), reported) << "committed rows were lost";
        std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
        for (std::size_t i = 0; i < rows.size(); ++i) {
            ASSERT_EQ(rows[i].bytes, static_cast<std::int64_t>(i + 1));
            ASSERT_EQ(rows[i].gbps_memcpy, static_cast<double>(i));
        }
    }
}

TEST(Catalog, MigratesAVersion2FileToTagsAndNotesKeepingRuns) {
    const fs::path file = tandem::test::fresh_dir("catalog-v2-tags") / "tandem.db";
    raw_exec(file, kVersion1Ddl);
    raw_exec(file, kVersion2Ddl);
    raw_exec(file, "INSERT INTO runs (id, experiment, folder, started_at, status, note) VALUES "
                   "('old-run', 'clinical-tiny', '/runs/old-run', '2026-11-28T10:00:00Z', 'finished', 'all cross-checks passed')");
    ex::Catalog c(file);
    EXPECT_EQ(c.schema_version(), 7);
    ASSERT_EQ(c.runs().size(), 1u);
    EXPECT_EQ(c.runs()[0].note, "all cross-checks passed");  // the runner's note is untouched
    EXPECT_TRUE(c.annotation("old-run").tags.empty());
    c.set_run_tags("old-run", {" baseline ", "lr-1e-4", "baseline", ""});
    c.set_run_user_note("old-run", "first CPU run; reference resumed at update 17");
    const auto a = c.annotation("old-run");
    EXPECT_EQ(a.tags, (std::vector<std::string>{"baseline", "lr-1e-4"}));
    EXPECT_EQ(a.note, "first CPU run; reference resumed at update 17");
    // The runner rewriting its row keeps what the user wrote.
    auto run = *c.run("old-run");
    run.note = "cross-checks FAILED";
    c.upsert_run(run);
    EXPECT_EQ(c.annotation("old-run").note, "first CPU run; reference resumed at update 17");
    EXPECT_EQ(c.search_runs("BASELINE"), (std::vector<std::string>{"old-run"}));
    EXPECT_EQ(c.search_runs("resumed"), (std::vector<std::string>{"old-run"}));
    EXPECT_TRUE(c.search_runs("gpu").empty());
    EXPECT_THROW(c.set_run_tags("old-run", {"a,b"}), tandem::Error);
    EXPECT_THROW(c.set_run_tags("no-such-run", {"x"}), tandem::Error);
    EXPECT_EQ(c.annotation("old-run").tags.size(), 2u);  // a refused call changes nothing
    // Deleting the run deletes its tags and note.
    EXPECT_TRUE(c.delete_run("old-run"));
    EXPECT_TRUE(c.annotations().empty());
}

TEST(Catalog, EnvelopesRoundTripWithTheirPointsNewestFirst) {
    const fs::path file = tandem::test::fresh_dir("catalog-envelopes") / "tandem.db";
    ex::Catalog c(file);
    ex::EnvelopeRecord e;
    e.spec_key = std::string(64, 'a');
    e.experiment = "tiny";
    e.implementation = "reference";
    e.members = 8;
    e.vary = "dropout,plan";
    e.member_mean_ce = "[2.5,2.6]";
    e.member_means = R"({"loss":[1.5,1.6],"grad_norm":[3.5,3.25]})";
    e.run_file = "/runs/env/run.h5";
    e.created_at = "2026-12-01T10:00:00Z";
    ex::EnvelopePoint p{10, 8, 1.0, 2.0, 1.5, 0.25, 1.05, 1.25, 1.5, 1.75, 1.95};
    ex::EnvelopePoint empty{0, 0, std::nan(""), std::nan(""), std::nan(""), std::nan(""), std::nan(""), std::nan(""),
                            std::nan(""), std::nan(""), std::nan("")};
    e.points = {{"heldout_ce", p}, {"loss", empty}};
    const auto first = c.add_envelope(e);
    e.created_at = "2026-12-01T11:00:00Z";
    e.members = 4;
    const auto second = c.add_envelope(e);
    EXPECT_NE(first, second);
    const auto got = c.envelopes(e.spec_key);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].id, second);  // newest first
    EXPECT_EQ(got[0].members, 4);
    EXPECT_EQ(got[1].vary, "dropout,plan");
    EXPECT_EQ(got[1].member_means, R"({"loss":[1.5,1.6],"grad_norm":[3.5,3.25]})");
    ASSERT_EQ(got[1].points.size(), 2u);
    EXPECT_EQ(got[1].points[0].first, "heldout_ce");
    EXPECT_EQ(got[1].points[0].second.update, 10);
    EXPECT_EQ(got[1].points[0].second.q95, 1.95);
    EXPECT_TRUE(std::isnan(got[1].points[1].second.mean));  // NULL, not a made-up 0
    EXPECT_TRUE(c.envelopes(std::string(64, 'b')).empty());
    // A point of an unknown series is refused and the whole envelope with it (one transaction).
    e.points = {{"heldout_ce", p}, {"perplexity", p}};
    EXPECT_THROW(c.add_envelope(e), tandem::Error);
    EXPECT_EQ(c.envelopes(e.spec_key).size(), 2u);
}
