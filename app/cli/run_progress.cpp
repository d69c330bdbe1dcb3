// Progress lines and the run's exit status (run_progress.h).
#include "run_progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>

namespace tandem::cli {

namespace {

std::string human_seconds(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    char b[32];
    if (s < 60) std::snprintf(b, sizeof b, "%.0fs", s);
    else if (s < 3600) std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
    else std::snprintf(b, sizeof b, "%dh%02dm", static_cast<int>(s) / 3600, (static_cast<int>(s) % 3600) / 60);
    return b;
}

std::string progress_line(const experiments::LegProgress& p) {
    char loss[32] = "-", ev[48] = "-", b[256];
    if (p.loss) std::snprintf(loss, sizeof loss, "%.4f", *p.loss);
    if (p.heldout_ce) std::snprintf(ev, sizeof ev, "%.5f@%lld", *p.heldout_ce, static_cast<long long>(p.heldout_update));
    std::snprintf(b, sizeof b, "%-12s %-9s %5lld/%-5lld loss %-8s eval %-14s %7.0f tok/s  ETA %-7s %s", p.name.c_str(),
                  p.device.c_str(), static_cast<long long>(p.updates_done), static_cast<long long>(p.updates_total), loss, ev,
                  p.tokens_per_s, p.eta_s ? human_seconds(*p.eta_s).c_str() : "?", experiments::leg_status_name(p.status));
    std::string line = b;
    if (p.stalled_s)  // the leg watchdog (docs/gate.md "Stalled legs")
        line += ", stalled " + human_seconds(*p.stalled_s) + " without an event" + (p.process.empty() ? "" : " (process " + p.process + ")");
    return line;
}

}  // namespace

ProgressPrinter::ProgressPrinter() : tty_(isatty(STDOUT_FILENO) != 0) {}

void ProgressPrinter::operator()(const std::vector<experiments::LegProgress>& legs, bool final) {
    const auto now = std::chrono::steady_clock::now();
    if (tty_) {
        if (legs.size() == 1 && !final && drawn_ != 0) return;  // a single ended leg: the next redraw shows it
        if (drawn_) std::printf("\033[%zuA", drawn_);
        for (const auto& l : legs) std::printf("\r\033[K%s\n", progress_line(l).c_str());
        drawn_ = legs.size();
    } else if (legs.size() == 1 && !final) {
        std::printf("%s\n", progress_line(legs[0]).c_str());  // a leg ended
    } else if (final || now - last_ > std::chrono::seconds(10)) {
        for (const auto& l : legs)
            if (final || l.status == experiments::LegStatus::Running) std::printf("%s\n", progress_line(l).c_str());
        last_ = now;
    }
    std::fflush(stdout);
}

int run_exit_code(const experiments::RunOutcome& r) {
    if (r.status == experiments::RunStatus::Interrupted) return kInterrupted;
    if (r.status != experiments::RunStatus::Finished) return kError;
    return r.checks_passed ? kOk : kCheckFailed;
}

}  // namespace tandem::cli
