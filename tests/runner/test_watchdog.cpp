// The leg watchdog (experiments/runner/src/watchdog.h, docs/gate.md "Stalled legs") on a synthetic
// clock: the stall time's rule (gate.stall_seconds; else factor x the attempt's median update wall
// time or its longest silence, with a floor; stall_startup_s before the first update), the flag at
// exactly that time and not before, the warn -> stop escalation at stall_stop_factor x, the stopped
// process named, and the ended silence reported once. Plus /proc/<pid>/stat read for a real child
// that this test SIGSTOPs (the oracle: the kernel's own state letter, and ps(1) agreeing).
#include "watchdog.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

using namespace tandem::experiments;
using Clock = LegWatchdog::Clock;

namespace {

std::vector<StepRow> rows(std::initializer_list<double> walls, int64_t first = 0) {
    std::vector<StepRow> out;
    int64_t u = first;
    for (double w : walls) {
        StepRow r;
        r.update = u++;
        r.wall_s = w;
        out.push_back(r);
    }
    return out;
}

Clock::time_point at(Clock::time_point t0, double s) {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

TEST(StallTime, GivenSecondsWin) {
    GateConfig c;
    c.stall_seconds = 7;
    const auto t = stall_time(c, rows({0.1, 0.2}), 0, 0);
    EXPECT_EQ(t.seconds, 7);
    EXPECT_EQ(t.rule, "gate.stall_seconds");
}

TEST(StallTime, StartupBeforeTheAttemptsFirstUpdate) {
    GateConfig c;
    EXPECT_EQ(stall_time(c, {}, -1, 0).seconds, c.stall_startup_s);
    // Rows of an earlier attempt (updates 0-2, the attempt began at 3) do not set this attempt's pace.
    EXPECT_EQ(stall_time(c, rows({50, 50, 50}), 3, 0).seconds, c.stall_startup_s);
}

TEST(StallTime, FactorTimesMedianWithAFloor) {
    GateConfig c;  // factor 10, floor 60
    EXPECT_EQ(stall_time(c, rows({0.2, 0.4, 0.3}), 0, 0).seconds, 60);   // 10 x 0.3 = 3 < 60
    EXPECT_EQ(stall_time(c, rows({8, 9, 7, 100}), 0, 0).seconds, 85);    // median 8.5 (numpy: 8.5)
    // Only this attempt's updates (from 2): median of {20, 30} = 25.
    EXPECT_EQ(stall_time(c, rows({1, 1, 20, 30}), 2, 0).seconds, 250);
    // A longer silence between events (an evaluation of 9 s) sets the pace instead.
    const auto t = stall_time(c, rows({0.2, 0.4, 0.3}), 0, 9);
    EXPECT_EQ(t.seconds, 90);
    EXPECT_NE(t.rule.find("longest silence"), std::string::npos) << t.rule;
}

TEST(LegWatchdog, FlagsAtTheStallTimeThenStopsAtTheFactor) {
    GateConfig c;
    c.stall_seconds = 10;  // warn (default), stop at 3 x 10 s
    LegWatchdog w;
    const auto t0 = Clock::now();
    w.start(t0, true);
    LegTrace trace;
    trace.steps = rows({0.1});
    w.on_event(at(t0, 1), false);
    const ProcessState stopped{'T', 1.5};
    EXPECT_FALSE(w.check(c, "a", trace, 0, at(t0, 10.9), stopped, "pid 42"));  // 9.9 s: not yet
    EXPECT_FALSE(w.stalled());
    const auto f = w.check(c, "a", trace, 0, at(t0, 11.1), stopped, "pid 42");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->kind, "stall");
    EXPECT_EQ(f->action, GateAction::Warn);
    EXPECT_EQ(f->update, 0);
    EXPECT_NEAR(f->value, 10.1, 1e-9);
    EXPECT_NE(f->message.find("a: stalled: no event for 10 s"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("pid 42 is stopped (T state"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("stopped at 30 s unless it goes on"), std::string::npos) << f->message;
    EXPECT_TRUE(w.stalled());
    EXPECT_EQ(w.process_word(), "stopped");
    // Flagged once, not at every poll.
    EXPECT_FALSE(w.check(c, "a", trace, 0, at(t0, 20), stopped, "pid 42"));
    EXPECT_FALSE(w.check(c, "a", trace, 0, at(t0, 30.9), stopped, "pid 42"));
    const auto s = w.check(c, "a", trace, 0, at(t0, 31.1), stopped, "pid 42");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->action, GateAction::Stop);
    EXPECT_NE(w.stop_reason().find("stalled: no event for 30 s after update 0 (stall time 10 s)"), std::string::npos)
        << w.stop_reason();
    EXPECT_FALSE(w.check(c, "a", trace, 0, at(t0, 60), stopped, "pid 42"));
}

TEST(LegWatchdog, EventsAgainClearTheFlagAndReportTheSilenceOnce) {
    GateConfig c;
    c.stall_seconds = 5;
    c.stall = GateAction::Pause;
    LegWatchdog w;
    const auto t0 = Clock::now();
    w.start(t0, true);
    LegTrace trace;
    const auto f = w.check(c, "b", trace, -1, at(t0, 6), std::nullopt, "job 7");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->action, GateAction::Pause);
    EXPECT_EQ(f->update, -1);
    EXPECT_EQ(f->message.find("job 7"), std::string::npos);  // no process state: nothing said of it
    EXPECT_FALSE(w.check(c, "b", trace, -1, at(t0, 100), std::nullopt, "job 7"));  // pause: no escalation
    w.on_event(at(t0, 8), false);
    EXPECT_FALSE(w.stalled());
    const auto ended = w.take_ended_stall();
    ASSERT_TRUE(ended);
    EXPECT_NEAR(*ended, 8, 1e-9);
    EXPECT_FALSE(w.take_ended_stall());
    EXPECT_FALSE(w.check(c, "b", trace, -1, at(t0, 12.9), std::nullopt, "job 7"));
    EXPECT_TRUE(w.check(c, "b", trace, -1, at(t0, 13.1), std::nullopt, "job 7"));  // a new silence, flagged anew
}

TEST(LegWatchdog, AQueuedJobIsTimedFromItsFirstEvent) {
    GateConfig c;
    c.stall_seconds = 5;
    LegWatchdog w;
    const auto t0 = Clock::now();
    w.start(t0, false);  // a Slurm job: hours in the queue are not a stall
    LegTrace trace;
    EXPECT_FALSE(w.check(c, "s", trace, -1, at(t0, 3600), std::nullopt, ""));
    w.on_event(at(t0, 3600), false);
    EXPECT_FALSE(w.check(c, "s", trace, -1, at(t0, 3604), std::nullopt, ""));
    EXPECT_TRUE(w.check(c, "s", trace, -1, at(t0, 3606), std::nullopt, ""));
}

TEST(ProcessState, ReadsTheKernelsStateOfAStoppedChild) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        for (;;) pause();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(process_state(pid).state, 'S');
    ASSERT_EQ(kill(pid, SIGSTOP), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);  // the kernel has stopped it
    ASSERT_TRUE(WIFSTOPPED(status));
    EXPECT_EQ(process_state(pid).state, 'T');
    // ps(1) reads the same letter.
    char cmd[64];
    std::snprintf(cmd, sizeof cmd, "ps -o stat= -p %d", static_cast<int>(pid));
    FILE* ps = popen(cmd, "r");
    ASSERT_TRUE(ps);
    char buf[16] = {};
    ASSERT_TRUE(std::fgets(buf, sizeof buf, ps));
    pclose(ps);
    EXPECT_EQ(buf[0], 'T');
    EXPECT_NE(process_state_text('T').find("SIGSTOP"), std::string::npos);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    EXPECT_EQ(process_state(pid).state, 0);  // reaped: gone
}
