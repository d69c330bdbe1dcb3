#pragma once
// The leg watchdog (docs/gate.md "Stalled legs"): a running leg's liveness is its event stream plus
// its process state. A leg that says nothing for its stall time raises a `stall` flag (the progress
// line, the leg's log, /legs/<leg>/flags in run.h5, the catalog's legs.error), naming what its
// process is doing (stopped, sleeping, busy); the gate's `stall` action decides what follows (warn:
// stopped after stall_stop_factor × the stall time and marked failed: stalled; pause; stop).
// Private to tandem_runner; the supervisor owns one per leg.
#include "tandem/compare/judge/gate.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/runner/leg_process.h"
#include "tandem/spec/gate_config.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// A leg's stall time now and the rule it came from ("gate.stall_seconds", "10 x median update
// 0.12 s, floor 60 s", "startup, before the first update").
struct StallTime {
    double seconds = 0;
    std::string rule;
};
// `steps`: the leg's rows; only those of the current attempt (update >= attempt_first_update) set
// its pace. `longest_quiet_s`: the longest silence between two events since the attempt's first
// update (0 when none), flagged silences excluded.
StallTime stall_time(const GateConfig& config, const std::vector<StepRow>& steps, int64_t attempt_first_update,
                     double longest_quiet_s);

class LegWatchdog {
public:
    using Clock = std::chrono::steady_clock;

    // A new attempt. `clock_now`: the silence is timed from now (a local process); false: from the
    // attempt's first event (a Slurm job may wait in the queue for hours).
    void start(Clock::time_point now, bool clock_now);
    // An event line arrived. `after_first_update`: this attempt had reported an update before it.
    void on_event(Clock::time_point now, bool after_first_update);
    // The flag to raise now, if any: the leg has just been silent for its stall time (action
    // gate.stall), or — warned, with gate.stall warn — for stall_stop_factor × that (action stop).
    // `process`: its state now (nullopt: not visible from here); `who`: "pid 123".
    std::optional<GateFlag> check(const GateConfig& config, const std::string& leg, const LegTrace& trace,
                                  int64_t attempt_first_update, Clock::time_point now,
                                  const std::optional<ProcessState>& process, const std::string& who);
    // A flagged silence that has ended since the last call (its length in seconds), once.
    std::optional<double> take_ended_stall();

    bool stalled() const { return level_ > 0; }
    double silent_s(Clock::time_point now) const;
    const std::string& flag_text() const { return flag_text_; }   // the stall flag's message while stalled
    // Why a stalled leg was stopped, for its error: "stalled: no event for 181 s after update 3
    // (stall time 60 s); pid 12 was stopped (T state: ...)".
    const std::string& stop_reason() const { return stop_reason_; }
    const std::string& process_word() const { return process_word_; }  // "stopped", "sleeping", ... ("" unknown)

private:
    bool timing_ = false;
    Clock::time_point last_event_{};
    double longest_quiet_s_ = 0;
    int level_ = 0;                 // 0 quiet within its time; 1 flagged; 2 stopping
    double flagged_stall_s_ = 0;    // the stall time when it was flagged (the stop comes at a multiple of it)
    std::optional<double> cpu_at_last_event_;
    bool sample_cpu_ = true;
    std::optional<double> ended_stall_;
    std::string flag_text_, process_word_, stop_reason_;
};

}  // namespace tandem::experiments
