// The executor pieces that need no cluster: the local executor (a real child process), short
// commands, shell quoting (checked by a real shell), finding a left-over local leg, and how much of
// a Slurm job's output a journal already holds (the re-attach offset).
#include "executors/executor.h"
#include "tandem/runner/leg_process.h"
#include "tandem/error.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

using namespace tandem::experiments;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << bytes;
}

struct Collected {
    std::vector<std::string> events, logs;
};

// Reads a leg until it has ended (10 s at most).
Collected drain(LegHandle& h) {
    Collected c;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!h.ended() && std::chrono::steady_clock::now() < deadline) {
        h.read([&](std::string_view l) { c.events.emplace_back(l); }, [&](std::string_view l) { c.logs.emplace_back(l); });
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return c;
}

LegLaunch launch_of(std::vector<std::string> argv, const fs::path& dir) {
    LegLaunch l;
    l.plan.name = "leg";
    l.argv = std::move(argv);
    l.env = {"TANDEM_TEST_VALUE=with space"};
    l.run_dir = dir;
    l.leg_dir = dir / "legs" / "leg";
    return l;
}

}  // namespace

TEST(LocalExecutor, PassesStdoutLinesStderrLinesAndTheExitStatus) {
    const fs::path dir = tandem::test::fresh_dir("local-exec");
    auto h = executor_for("local").start(
        launch_of({"/bin/sh", "-c", "echo one; echo \"$TANDEM_TEST_VALUE\" >&2; echo two; printf unfinished; exit 3"}, dir));
    EXPECT_EQ(h->pollable_fds().size(), 2u);
    Collected c = drain(*h);
    ASSERT_TRUE(h->ended());
    EXPECT_FALSE(h->running());
    EXPECT_EQ(c.events, (std::vector<std::string>{"one", "two", "unfinished"}));
    EXPECT_EQ(c.logs, (std::vector<std::string>{"with space"}));
    const LegExit e = h->exit();
    EXPECT_EQ(e.exit_status, 3);
    EXPECT_EQ(e.signal, 0);
    EXPECT_FALSE(e.clean);
    EXPECT_EQ(h->record().at("executor"), "local");
}

TEST(LocalExecutor, AKilledLegSaysWhichSignal) {
    const fs::path dir = tandem::test::fresh_dir("local-kill");
    auto h = executor_for("local").start(launch_of({"/bin/sh", "-c", "echo started; exec sleep 30"}, dir));
    h->stop(true);
    drain(*h);
    ASSERT_TRUE(h->ended());
    const LegExit e = h->exit();
    EXPECT_EQ(e.signal, 9);
    EXPECT_EQ(e.exit_status, 128 + 9);
    EXPECT_EQ(e.description, "killed by signal 9 (Killed)");
}

TEST(LegExecutors, OnlyLocalAndSlurm) {
    EXPECT_NO_THROW(executor_for("local"));
    EXPECT_NO_THROW(executor_for("slurm"));
    EXPECT_THROW(executor_for("pbs"), tandem::Error);
}

TEST(RunCommand, CapturesOutputStatusAndTimesOut) {
    CommandResult r = run_command({"/bin/sh", "-c", "echo out; echo err >&2; exit 2"});
    EXPECT_EQ(r.exit_status, 2);
    EXPECT_EQ(r.out, "out\n");
    EXPECT_EQ(r.err, "err\n");
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(run_command({"/nonexistent/program"}).exit_status, 127);
    const auto t0 = std::chrono::steady_clock::now();
    r = run_command({"/bin/sh", "-c", "sleep 20"}, 0.3);
    EXPECT_TRUE(r.timed_out);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(ShellQuote, ARealShellReadsBackEveryByte) {
    for (const std::string w : {"plain", "with space", "it's", "'", "$HOME `id` \"q\" \\ ;|&", "", "a\tb"}) {
        CommandResult r = run_command({"/bin/sh", "-c", "printf %s " + shell_quote(w)});
        EXPECT_EQ(r.exit_status, 0) << w;
        EXPECT_EQ(r.out, w) << w;
    }
}

TEST(LeftOverLeg, ALocalLegOfADeadRunnerIsKilled) {
    const fs::path dir = tandem::test::fresh_dir("leftover");
    EXPECT_EQ(find_left_over_leg(dir, dir / "events.jsonl", [](const std::string&) {}), nullptr);  // nothing recorded
    auto h = executor_for("local").start(launch_of({"/bin/sh", "-c", "exec sleep 30"}, dir));
    record_leg_process(dir, h->record());
    std::vector<std::string> said;
    EXPECT_EQ(find_left_over_leg(dir, dir / "events.jsonl", [&](const std::string& s) { said.push_back(s); }), nullptr);
    ASSERT_EQ(said.size(), 1u);
    EXPECT_NE(said[0].find("left running by an earlier runner"), std::string::npos);
    EXPECT_FALSE(fs::exists(dir / "process.json"));
    drain(*h);
    EXPECT_EQ(h->exit().signal, 9);
}

TEST(JournaledPrefix, CountsWholeLinesTheJournalHolds) {
    const fs::path dir = tandem::test::fresh_dir("prefix");
    const fs::path ev = dir / "events.jsonl", out = dir / "attempt.out";
    const std::string before = "{\"earlier\":1}\n{\"earlier\":2}\n";  // an earlier attempt's lines
    write(out, "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
    write(ev, before + "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");  // all journaled
    EXPECT_EQ(journaled_prefix(ev, before.size(), out), 24u);
    write(ev, before + "{\"a\":1}\n");  // the runner died two lines behind
    EXPECT_EQ(journaled_prefix(ev, before.size(), out), 8u);
    write(ev, before);  // nothing of this attempt yet
    EXPECT_EQ(journaled_prefix(ev, before.size(), out), 0u);
    write(ev, before + "{\"a\":1}\n{\"b\"\n");  // a torn line, closed by end_partial_line: appended again whole
    EXPECT_EQ(journaled_prefix(ev, before.size(), out), 8u);
    write(out, "{\"a\":1}\n{\"b\":2");  // the job ended mid-line; the runner journaled the rest as a line
    write(ev, before + "{\"a\":1}\n{\"b\":2\n");
    EXPECT_EQ(journaled_prefix(ev, before.size(), out), 14u);
    write(ev, before + "{\"a\":1}\n{\"X\":9}\n");  // a journal line the output does not have stops the count
    EXPECT_EQ(journaled_prefix(ev, before.size(), out), 8u);
    EXPECT_EQ(journaled_prefix(ev, before.size(), dir / "missing.out"), 0u);  // a job that never wrote
}
