// Run file: round trip through writer and reader, replacement rules, bad input, and a writer
// SIGKILLed mid-append (the file must still open and hold every row reported as flushed).
#include "tandem/error.h"
#include "tandem/measure/host_info.h"
#include "tandem/store/run_file.h"
#include "refused_file.h"
#include "test_support.h"
#include "killed_writer.h"
#include "tandem/atomic_file.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;
namespace ex = tandem::experiments;

extern char** environ;

namespace {



ex::ProbeResult sample_probe(const std::string& device, bool with_d2d) {
    ex::ProbeResult p;
    p.device = device;
    p.device_name = "Test Device";
    p.bytes = 256000000;
    p.repeats = 20;
    p.warmup = 3;
    p.method = "test";
    p.directions.push_back({"h2d", 256000000, 0.0051, 0.0052, 256000000 / 0.0051 / 1e9});
    p.directions.push_back({"d2h", 256000000, 0.0049, 0.0050, 256000000 / 0.0049 / 1e9});
    if (with_d2d) p.directions.push_back({"d2d", 512000000, 0.00019, 0.0002, 512000000 / 0.00019 / 1e9});
    p.timestamp = "2026-11-29T09:30:00Z";
    p.pcie_link = "Gen5 x16";
    p.pcie_source = "nvml";
    return p;
}

}  // namespace

TEST(RunFile, EveryGroupRoundTripsThroughWriterAndReader) {
    const fs::path dir = tandem::test::fresh_dir("runfile-roundtrip");
    const fs::path file = dir / "run.h5";
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(-3, 3);

    std::vector<ex::StepRow> steps;
    for (std::int64_t i = 0; i < 2500; ++i)  // crosses the 1024-row chunk boundary twice
        steps.push_back({i, u(rng), std::exp(u(rng)), 1e-4 * u(rng), 1000 + i, 0.1 * std::exp(u(rng))});
    std::vector<ex::EvalRow> eval{{0, 11.93}, {250, 2.5}, {500, 2.25}};
    const std::string big_check(200000, 'x');  // larger than any attribute could hold
    ex::HostInfo host = ex::collect_host_info();
    {
        ex::RunFileWriter w(file);
        w.write_host(host);
        w.write_experiment({"clinical-tiny", R"({"seed":1234})", std::string(64, 'a'), "", "clinical-tiny-20261129-093000"});
        w.write_probe(sample_probe("cuda:0", true));
        w.write_probe(sample_probe("cpu", false));
        w.create_leg("engine-cpu", {{"implementation", std::string("engine")}, {"device", std::string("cpu")}});
        for (std::size_t i = 0; i < steps.size(); i += 300)
            w.append_steps("engine-cpu", std::vector<ex::StepRow>(steps.begin() + i, steps.begin() + std::min(steps.size(), i + 300)));
        w.append_eval("engine-cpu", {eval[0]});
        w.append_eval("engine-cpu", {eval[1], eval[2]});
        ex::LegTiming t;
        t.model_load_s = 1.5;
        t.tokens_per_s = 1234.5;
        t.window_first = 101;
        t.window_last = 500;
        t.extra["threads"] = std::int64_t{2};
        w.write_timing("engine-cpu", t);
        w.write_memory("engine-cpu", {-1, 123456789, {{"note", std::string("rss")}}});
        w.write_check("engine-cpu", ex::CheckLevel::L1, R"({"heldout_ce":11.93})");
        w.write_check("engine-cpu", ex::CheckLevel::L2, big_check);
        w.write_comparison("engine-cpu", "reference-cpu", {"heldout_ce", {{0, 1.0, 1.5, -0.5}, {250, 2.0, 1.0, 1.0}},
                                                          {{"mean_abs_diff", 0.75}, {"sign_changes", std::int64_t{1}}}});
        w.set_comparison_attributes("engine-cpu", "reference-cpu", {{"level", std::string("L4")}});
    }
    ex::RunFileReader r(file);
    ASSERT_TRUE(r.host());
    EXPECT_EQ(r.host()->cpu_model, host.cpu_model);
    EXPECT_EQ(r.host()->memory_total_bytes, host.memory_total_bytes);
    ASSERT_TRUE(r.experiment());
    EXPECT_EQ(r.experiment()->spec_json, R"({"seed":1234})");
    EXPECT_FALSE(r.experiment()->tandem_version.empty());

    const auto probes = r.probes();
    ASSERT_EQ(probes.size(), 2u);
    EXPECT_EQ(probes[0].device, "cpu");
    EXPECT_EQ(probes[1].device, "cuda:0");
    ASSERT_EQ(probes[1].directions.size(), 3u);
    EXPECT_EQ(probes[1].direction("d2d")->bytes_counted, 512000000);
    EXPECT_DOUBLE_EQ(probes[1].direction("h2d")->gbps, 256000000 / 0.0051 / 1e9);
    EXPECT_EQ(probes[1].pcie_link, "Gen5 x16");

    EXPECT_EQ(r.legs(), std::vector<std::string>{"engine-cpu"});
    EXPECT_EQ(std::get<std::string>(r.leg_attributes("engine-cpu").at("implementation")), "engine");
    const auto back = r.steps("engine-cpu");
    ASSERT_EQ(back.size(), steps.size());
    for (std::size_t i = 0; i < steps.size(); ++i) {
        ASSERT_EQ(back[i].update, steps[i].update);
        ASSERT_EQ(back[i].loss, steps[i].loss);  // bit-exact: float64 in, float64 out
        ASSERT_EQ(back[i].grad_norm, steps[i].grad_norm);
        ASSERT_EQ(back[i].lr, steps[i].lr);
        ASSERT_EQ(back[i].tokens, steps[i].tokens);
        ASSERT_EQ(back[i].wall_s, steps[i].wall_s);
    }
    const auto eval_back = r.eval("engine-cpu");
    ASSERT_EQ(eval_back.size(), 3u);
    EXPECT_EQ(eval_back[2].update, 500);
    EXPECT_EQ(eval_back[2].heldout_ce, 2.25);
    EXPECT_EQ(r.timing("engine-cpu")->tokens_per_s, 1234.5);
    EXPECT_EQ(r.timing("engine-cpu")->window_last, 500);
    EXPECT_EQ(r.timing("engine-cpu")->tokenize_s, -1);
    EXPECT_EQ(std::get<std::int64_t>(r.timing("engine-cpu")->extra.at("threads")), 2);
    EXPECT_EQ(r.memory("engine-cpu")->peak_host_bytes, 123456789);
    EXPECT_EQ(r.memory("engine-cpu")->peak_device_bytes, -1);
    EXPECT_EQ(*r.check("engine-cpu", ex::CheckLevel::L1), R"({"heldout_ce":11.93})");
    EXPECT_EQ(*r.check("engine-cpu", ex::CheckLevel::L2), big_check);
    EXPECT_FALSE(r.check("engine-cpu", ex::CheckLevel::L3));
    ASSERT_EQ(r.comparisons().size(), 1u);
    EXPECT_EQ(r.comparisons()[0], std::make_pair(std::string("engine-cpu"), std::string("reference-cpu")));
    const auto series = r.comparison_series("engine-cpu", "reference-cpu");
    ASSERT_EQ(series.size(), 1u);
    ASSERT_EQ(series[0].points.size(), 2u);
    EXPECT_EQ(series[0].points[1].diff, 1.0);
    EXPECT_EQ(std::get<double>(series[0].summary.at("mean_abs_diff")), 0.75);
    EXPECT_EQ(std::get<std::string>(r.comparison_attributes("engine-cpu", "reference-cpu").at("level")), "L4");
    EXPECT_TRUE(r.steps("absent-leg").empty());
    EXPECT_FALSE(r.timing("absent-leg"));
}

TEST(RunFile, ReopenedWriterAddsToAnExistingFileAndReplacesAProbeWhole) {
    const fs::path file = tandem::test::fresh_dir("runfile-reopen") / "run.h5";
    {
        ex::RunFileWriter w(file);
        w.write_probe(sample_probe("cuda:0", true));
        w.append_steps("leg", {{0, 1, 1, 0, 10, 0.5}});
    }
    {
        ex::RunFileWriter w(file);
        w.write_probe(sample_probe("cuda:0", false));
        w.append_steps("leg", {{1, 2, 2, 0, 20, 0.5}});
    }
    ex::RunFileReader r(file);
    ASSERT_EQ(r.probes().size(), 1u);
    EXPECT_EQ(r.probes()[0].directions.size(), 2u);
    EXPECT_EQ(r.probes()[0].direction("d2d"), nullptr) << "a stale direction survived the replacement";
    ASSERT_EQ(r.steps("leg").size(), 2u);
    EXPECT_EQ(r.steps("leg")[1].tokens, 20);
}

TEST(RunFile, RefusesAFileThatIsNotHdf5AndLeavesItUntouched) {
    const fs::path file = tandem::test::fresh_dir("runfile-nothdf5") / "notes.h5";
    const std::string notes = "these are my notes, not a run file\n";
    tandem::test::expect_text_file_refused(file, notes, "not an HDF5 file", [](const fs::path& f) { ex::RunFileWriter w(f); });
    tandem::test::expect_text_file_refused(file, notes, "not an HDF5 file", [](const fs::path& f) { ex::RunFileReader r(f); });
}

TEST(RunFile, CreatingInAMissingFolderNamesThePath) {
    const fs::path file = tandem::test::fresh_dir("runfile-missing") / "no-such-folder" / "run.h5";
    try {
        ex::RunFileWriter w(file);
        FAIL();
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    }
}

TEST(RunFile, RejectsLegNamesThatAreNotPathComponents) {
    const fs::path file = tandem::test::fresh_dir("runfile-names") / "run.h5";
    ex::RunFileWriter w(file);
    for (const std::string& bad : std::vector<std::string>{"", "a/b", "..", ".", "a~b", "with space", std::string(65, 'x')})
        EXPECT_THROW(w.create_leg(bad), tandem::Error) << "'" << bad << "'";
    EXPECT_NO_THROW(w.create_leg("engine_cuda.0-v2+x"));
}

TEST(RunFile, ReadersSeeOnlyCommittedDataAndAFailedSessionIsDropped) {
    const fs::path file = tandem::test::fresh_dir("runfile-sessions") / "run.h5";
    {
        ex::RunFileWriter w(file);
        w.append_steps("leg", {{0, 1, 1, 0, 10, 0.5}});
    }
    const std::string committed = tandem::read_file(file);
    {
        ex::RunFileWriter w(file);
        w.append_steps("leg", {{1, 2, 2, 0, 20, 0.5}});
        EXPECT_EQ(ex::RunFileReader(file).steps("leg").size(), 1u) << "a reader saw uncommitted rows";
        try {
            ex::RunFileWriter second(file);
            ADD_FAILURE() << "two writers on one file";
        } catch (const tandem::Error& e) {
            EXPECT_NE(std::string(e.what()).find("another process is writing"), std::string::npos) << e.what();
        }
        // An attribute too large for an object header fails mid-session: nothing of it is published.
        EXPECT_THROW(w.set_leg_attributes("leg", {{"huge", std::string(70000, 'x')}}), tandem::Error);
        EXPECT_THROW(w.commit(), tandem::Error);
    }
    EXPECT_EQ(tandem::read_file(file), committed) << "a failed session changed the published file";
    EXPECT_FALSE(fs::exists(file.parent_path() / ".run.h5.writing")) << "working copy left behind";
    {
        ex::RunFileWriter w(file);  // the next session starts clean
        w.append_steps("leg", {{1, 2, 2, 0, 20, 0.5}});
        w.commit();
        EXPECT_EQ(ex::RunFileReader(file).steps("leg").size(), 2u);
        w.append_steps("leg", {{2, 3, 3, 0, 30, 0.5}});  // the writer stays usable after commit()
    }
    EXPECT_EQ(ex::RunFileReader(file).steps("leg").size(), 3u);
}

// The writer child appends 10 rows per batch and prints the row count after each flushed batch;
// it is SIGKILLed at a random moment. The file must open, and hold at least every reported row,
// each with exactly the values the writer computed for it.
TEST(RunFile, FileLeftByAWriterKilledMidAppendStillOpensWithEveryFlushedRow) {
    const fs::path dir = tandem::test::fresh_dir("runfile-kill");
    std::mt19937 rng(12345);
    for (int trial = 0; trial < 8; ++trial) {
        const fs::path file = dir / ("kill-" + std::to_string(trial) + ".h5");
        // Let it write a random number of batches (and a random sliver of time) before the kill.
        const int batches_before_kill = 3 + static_cast<int>(rng() % 40);
        const long sleep_us = static_cast<long>(rng() % 3000);
        tandem::test::KilledWriter k;
        ASSERT_NO_FATAL_FAILURE(
            tandem::test::run_and_kill({"append-forever", file.string(), "engine", "10"}, batches_before_kill, sleep_us, k));
        const long long reported = k.reported;
        ASSERT_TRUE(WIFSIGNALED(k.status)) << "the writer ended on its own, status " << k.status;
        ASSERT_GE(k.seen, batches_before_kill) << "writer stopped early";

        // The reader is closed before the writer below opens: one process must not hold both.
        const auto rows = ex::RunFileReader(file, 0.5).steps("engine");
        EXPECT_GE(static_cast<long long>(rows.size()), reported) << "trial " << trial << ": flushed rows were lost";
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const auto k = static_cast<std::int64_t>(i);
            const double kd = static_cast<double>(k);
            ASSERT_EQ(rows[i].update, k) << "trial " << trial << " row " << i;
            ASSERT_EQ(rows[i].loss, kd / 8);
            ASSERT_EQ(rows[i].grad_norm, 2 * kd);
            ASSERT_EQ(rows[i].lr, 1e-4 * kd);
            ASSERT_EQ(rows[i].tokens, 3 * k);
            ASSERT_EQ(rows[i].wall_s, kd / 16);
        }
        // And a new writer can carry on where the killed one stopped.
        {
            ex::RunFileWriter w(file);
            w.append_steps("engine", {{static_cast<std::int64_t>(rows.size()), 0, 0, 0, 0, 0}});
        }
        EXPECT_EQ(ex::RunFileReader(file).steps("engine").size(), rows.size() + 1);
    }
}

// Double buffering (docs/hdf5-layout.md "Commit cost"): a long-lived writer starts each session from
// the version before the last commit and replays the last session's writes onto it, instead of
// copying the whole file; whenever that could be wrong it copies, and the published file is the same.
// A long-lived writer replays the previous session's writes into the next session's file (double
// buffering): every write must keep its own copy of what it wrote. A write that kept a reference to
// its caller's data replayed whatever that data had become (found by the localise engineer in the
// envelope and distance writers).
TEST(RunFile, ReplayedWritesKeepTheirOwnCopyOfTheData) {
    const fs::path dir = tandem::test::fresh_dir("runfile-replay-copy");
    const fs::path file = dir / "run.h5";
    ex::RunFileWriter w(file);
    w.append_steps("engine", {{0, 1.0, 1.0, 1e-4, 1, 0.1}});
    w.commit();
    w.append_steps("engine", {{1, 1.0, 1.0, 1e-4, 1, 0.1}});
    w.commit();  // from here on each session starts from the version before the last one and replays it
    std::vector<ex::DistancePoint> points{{0, 7.0, 7.0, 0.0, 1.0, 0.25}};
    ex::Attributes attrs{{"within", std::int64_t{1}}};
    w.write_distance("engine", "reference", "numerics", points, attrs);
    w.set_distance_attributes("engine", "reference", attrs);
    w.commit();
    points[0].distance = 99.0;  // the caller reuses its buffers
    attrs["within"] = std::int64_t{0};
    w.append_steps("engine", {{2, 1.0, 1.0, 1e-4, 1, 0.1}});
    w.commit();  // replays the distance session
    EXPECT_EQ(w.last_copied_bytes(), 0);  // the replay worked (a failed replay falls back to a full copy)
    w.append_steps("engine", {{3, 1.0, 1.0, 1e-4, 1, 0.1}});
    w.commit();
    ex::RunFileReader r(file, 0.0);
    const auto stored = r.distance("engine", "reference", "numerics");
    ASSERT_EQ(stored.size(), 1u);
    EXPECT_EQ(stored[0].distance, 0.25);
    EXPECT_EQ(r.steps("engine").size(), 4u);
}

TEST(RunFile, ALongLivedWritersSessionsCopyNothingAndPublishEveryRow) {
    const fs::path dir = tandem::test::fresh_dir("runfile-double-buffer");
    const fs::path file = dir / "run.h5";
    auto rows = [](std::int64_t first, std::int64_t n) {
        std::vector<ex::StepRow> r;
        for (std::int64_t i = first; i < first + n; ++i) r.push_back({i, 0.5 * static_cast<double>(i), 1.0, 1e-4, i, 0.1});
        return r;
    };
    ex::RunFileWriter w(file);
    w.append_steps("engine", rows(0, 5000));
    w.commit();
    EXPECT_EQ(w.last_copied_bytes(), 0);  // created
    w.append_steps("engine", rows(5000, 10));
    w.commit();
    EXPECT_GT(w.last_copied_bytes(), 100000);  // no previous version yet: a full copy
    std::int64_t next = 5010;
    for (int session = 0; session < 20; ++session, next += 10) {
        w.append_steps("engine", rows(next, 10));
        w.set_leg_attributes("engine", {{"updates_done", next + 10}});
        w.commit();
        EXPECT_EQ(w.last_copied_bytes(), 0) << "session " << session;
        ex::RunFileReader r(file, 0.0);
        const auto steps = r.steps("engine");
        ASSERT_EQ(static_cast<std::int64_t>(steps.size()), next + 10);
        for (std::int64_t i = 0; i < next + 10; ++i) ASSERT_EQ(steps[static_cast<size_t>(i)].update, i);
        ASSERT_EQ(std::get<std::int64_t>(r.leg_attributes("engine").at("updates_done")), next + 10);
    }
    // A reader holding the published version open across a commit keeps it unchanged: the next
    // session copies instead of reusing that version.
    {
        ex::RunFileReader held(file, 0.0);
        const auto before = held.steps("engine").size();
        w.append_steps("engine", rows(next, 10));
        w.commit();  // the version `held` reads is now the previous one
        next += 10;
        w.append_steps("engine", rows(next, 10));
        w.commit();
        next += 10;
        EXPECT_GT(w.last_copied_bytes(), 0);
        EXPECT_EQ(held.steps("engine").size(), before);
    }
    // Another writer committed in between: this writer's previous version is stale, so it copies.
    {
        ex::RunFileWriter other(file);
        other.set_leg_attributes("engine", {{"note", std::string("written by another writer")}});
        other.commit();
    }
    w.append_steps("engine", rows(next, 10));
    w.commit();
    next += 10;
    EXPECT_GT(w.last_copied_bytes(), 0);
    ex::RunFileReader r(file, 0.0);
    EXPECT_EQ(std::get<std::string>(r.leg_attributes("engine").at("note")), "written by another writer");
    EXPECT_EQ(static_cast<std::int64_t>(r.steps("engine").size()), next);
}

TEST(RunFile, NoPreviousVersionIsLeftBehind) {
    const fs::path dir = tandem::test::fresh_dir("runfile-no-leftovers");
    {
        ex::RunFileWriter w(dir / "run.h5");
        for (int i = 0; i < 3; ++i) {
            w.append_eval("engine", {{i, 1.0}});
            w.commit();
        }
    }
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"run.h5"});
}
