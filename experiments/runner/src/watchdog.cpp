// The leg watchdog (watchdog.h, docs/gate.md "Stalled legs").
#include "watchdog.h"

#include "tandem/compare/statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tandem::experiments {

namespace {

std::string seconds_text(double s) {
    char b[32];
    std::snprintf(b, sizeof b, s < 10 ? "%.2g" : "%.0f", s);
    return b;
}

// The word the progress line shows for a process state: process_state_text's, without the letter
// ("stopped", "sleeping", "running").
std::string state_word(char state) {
    const std::string text = process_state_text(state);
    return text.substr(0, text.find(" ("));
}

std::string reason(double silence, double stall_s, int64_t update, const std::optional<ProcessState>& process,
                   const std::string& who) {
    std::string r = "stalled: no event for " + seconds_text(silence) + " s";
    if (update >= 0) r += " after update " + std::to_string(update);
    r += " (stall time " + seconds_text(stall_s) + " s)";
    if (process) r += "; " + who + " was " + process_state_text(process->state);
    return r;
}

}  // namespace

StallTime stall_time(const GateConfig& c, const std::vector<StepRow>& steps, int64_t attempt_first_update,
                     double longest_quiet_s) {
    if (c.stall_seconds > 0) return {c.stall_seconds, "gate.stall_seconds"};
    std::vector<double> walls;
    for (const auto& s : steps)
        if (attempt_first_update >= 0 && s.update >= attempt_first_update && std::isfinite(s.wall_s) && s.wall_s >= 0)
            walls.push_back(s.wall_s);
    if (walls.empty()) return {c.stall_startup_s, "gate.stall_startup_s, before the attempt's first update"};
    const double median = percentile(walls, 50);
    const bool quiet_sets_pace = longest_quiet_s > median;
    const double pace = quiet_sets_pace ? longest_quiet_s : median;
    const double t = std::max(c.stall_floor_s, c.stall_factor * pace);
    const std::string rule = seconds_text(c.stall_factor) + " x " +
                             (quiet_sets_pace ? "its longest silence so far " : "its median update ") + seconds_text(pace) +
                             " s, floor " + seconds_text(c.stall_floor_s) + " s";
    return {t, rule};
}

void LegWatchdog::start(Clock::time_point now, bool clock_now) {
    *this = LegWatchdog{};
    timing_ = clock_now;
    last_event_ = now;
}

void LegWatchdog::on_event(Clock::time_point now, bool after_first_update) {
    const double gap = timing_ ? std::chrono::duration<double>(now - last_event_).count() : 0;
    if (level_ > 0) ended_stall_ = gap;  // a flagged silence is not the leg's pace
    else if (after_first_update) longest_quiet_s_ = std::max(longest_quiet_s_, gap);
    timing_ = true;
    last_event_ = now;
    level_ = 0;
    flag_text_.clear();
    sample_cpu_ = true;
}

std::optional<double> LegWatchdog::take_ended_stall() {
    auto out = ended_stall_;
    ended_stall_.reset();
    return out;
}

double LegWatchdog::silent_s(Clock::time_point now) const {
    return timing_ ? std::chrono::duration<double>(now - last_event_).count() : 0;
}

std::optional<GateFlag> LegWatchdog::check(const GateConfig& config, const std::string& leg, const LegTrace& trace,
                                           int64_t attempt_first_update, Clock::time_point now,
                                           const std::optional<ProcessState>& process, const std::string& who) {
    if (!timing_) return std::nullopt;
    if (process && sample_cpu_) cpu_at_last_event_ = process->cpu_s;  // within one poll of the event
    sample_cpu_ = false;
    if (process) process_word_ = state_word(process->state);
    if (level_ >= 2) return std::nullopt;
    const double silence = silent_s(now);
    const int64_t update = trace.steps.empty() ? -1 : trace.steps.back().update;
    if (level_ == 0) {
        const StallTime t = stall_time(config, trace.steps, attempt_first_update, longest_quiet_s_);
        if (silence < t.seconds) return std::nullopt;
        level_ = 1;
        flagged_stall_s_ = t.seconds;
        std::string what = leg + ": stalled: no event for " + seconds_text(silence) + " s (its stall time " +
                           seconds_text(t.seconds) + " s: " + t.rule + ")";
        if (update >= 0) what += " after update " + std::to_string(update);
        if (process) {
            what += "; " + who + " is " + process_state_text(process->state);
            if (cpu_at_last_event_ && process->state != 'T' && process->state != 't')
                what += ", " + seconds_text(std::max(0.0, process->cpu_s - *cpu_at_last_event_)) + " s of CPU since its last event";
        }
        if (config.stall == GateAction::Warn)
            what += "; stopped at " + seconds_text(config.stall_stop_factor * t.seconds) + " s unless it goes on";
        flag_text_ = what;
        stop_reason_ = reason(silence, t.seconds, update, process, who);
        return GateFlag{leg, "stall", update, silence, t.seconds, config.stall, what, ""};
    }
    if (config.stall != GateAction::Warn || silence < config.stall_stop_factor * flagged_stall_s_) return std::nullopt;
    level_ = 2;
    std::string what = leg + ": stalled: no event for " + seconds_text(silence) + " s, " +
                       seconds_text(config.stall_stop_factor) + " x its stall time " + seconds_text(flagged_stall_s_) +
                       " s; stopping it";
    if (process) what += " (" + who + " is " + process_state_text(process->state) + ")";
    flag_text_ = what;
    stop_reason_ = reason(silence, flagged_stall_s_, update, process, who);
    return GateFlag{leg, "stall", update, silence, config.stall_stop_factor * flagged_stall_s_, GateAction::Stop, what, ""};
}

}  // namespace tandem::experiments
