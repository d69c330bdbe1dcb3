// Step 4 of `tandem run` (run_steps.h): the legs started, their events journalled and recorded, the
// live gate, stop / pause / resume requests, until no leg runs or waits.
#include "device_sharing.h"
#include "run_steps.h"

#include "executors/executor.h"
#include "tandem/runner/leg_process.h"
#include "preflight.h"
#include "tandem/runner/run_record.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/join.h"
#include "tandem/spec/leg_kinds.h"
#include "tandem/store/catalog.h"
#include "tandem/compare/distance.h"
#include "tandem/measure/host_info.h"
#include "tandem/runner/prepare.h"
#include "tandem/measure/probe.h"
#include "tandem/compare/report.h"
#include "tandem/store/run_file.h"
#include "tandem/version.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "tandem/spec/leg_paths.h"
#include "tandem/utc_time.h"

namespace tandem::experiments::run_steps {

using nlohmann::json;

namespace {

// ---- which program a leg is ----------------------------------------------------------------------

// {run}, {leg}, {device}, {threads}, {python} replaced inside every argument; an argument that is exactly
// {resume} becomes --resume when the leg resumes and is dropped otherwise. {python}: the leg's named
// interpreter, else the reference environment's.
std::vector<std::string> expand_command(const std::vector<std::string>& templ, const fs::path& run_dir, const LegPlan& plan,
                                        int threads, bool resume) {
    const std::vector<std::pair<std::string, std::string>> values = {
        {"{run}", run_dir.string()}, {"{leg}", plan.name}, {"{device}", plan.device}, {"{threads}", std::to_string(threads)},
        {"{python}", plan.python.empty() ? reference_python() : plan.python}};
    std::vector<std::string> out;
    for (std::string a : templ) {
        if (a == "{resume}") {
            if (resume) out.push_back("--resume");
            continue;
        }
        for (const auto& [key, value] : values)
            for (size_t pos = a.find(key); pos != std::string::npos; pos = a.find(key, pos + value.size()))
                a.replace(pos, key.size(), value);
        out.push_back(a);
    }
    return out;
}

// The program and arguments that run a leg (docs/leg-protocol.md "Command line every leg accepts").
std::vector<std::string> leg_argv(const LegPlan& plan, const fs::path& run_dir, int threads, bool resume) {
    const LegKind* kind = find_leg_kind(plan.implementation);
    if (!kind) throw Error("leg " + plan.name + ": unknown implementation '" + plan.implementation + "'");
    if (kind->takes_command) return expand_command(plan.command, run_dir, plan, threads, resume);
    std::vector<std::string> argv = kind->program();
    if (kind->takes_python && !plan.python.empty()) argv.front() = plan.python;  // the program is argv[1]: a script
    for (const std::string& a : {std::string("--run"), run_dir.string(), std::string("--leg"), plan.name,
                                 std::string("--device"), plan.device, std::string("--threads"), std::to_string(threads)})
        argv.push_back(a);
    if (!plan.devices.empty()) {  // data-parallel ranks (the reference leg, docs/leg-protocol.md)
        std::string list;
        for (const auto& d : plan.devices) list += (list.empty() ? "" : ",") + d;
        argv.push_back("--devices");
        argv.push_back(list);
    }
    if (resume) argv.push_back("--resume");
    if (!plan.faults.empty()) {  // engine legs only (plan_legs): docs/faults.md
        std::string list;
        for (const auto& f : plan.faults) list += (list.empty() ? "" : ",") + fault_text(f);
        argv.push_back("--faults");
        argv.push_back(list);
    }
    return argv;
}

void launch(LiveLeg& l, const Run& run) {
    std::vector<std::string> argv = leg_argv(l.plan, run.folder, l.threads, l.resume);
    const std::string t = std::to_string(l.threads);
    std::vector<std::string> env = {"OMP_NUM_THREADS=" + t, "OPENBLAS_NUM_THREADS=" + t, "MKL_NUM_THREADS=" + t,
                                    "PYTHONUNBUFFERED=1", "TANDEM_ENGINE_LIB=" + engine_c_library(),
                                    "TANDEM_RUN_DIR=" + run.folder.string(), "TANDEM_LEG=" + l.plan.name};
    l.started_at = utc_timestamp_now();
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    l.journal->log("[tandem run] " + l.started_at + " launching: " + cmd);
    LegLaunch how;
    how.plan = l.plan;
    how.argv = argv;
    how.env = env;
    how.run_dir = run.folder;
    how.leg_dir = leg_folder(run, l.plan.name);
    how.threads = l.threads;
    std::error_code ec;
    how.journal_start = fs::file_size(l.journal->events_path(), ec);
    if (ec) how.journal_start = 0;
    l.handle = executor_for(l.plan.executor).start(how);
    record_leg_process(how.leg_dir, l.handle->record());
    if (l.plan.executor != "local") l.journal->log("[tandem run] " + utc_timestamp_now() + " started as " + l.handle->describe());
    l.status = LegStatus::Running;
    l.kill_sent = false;
    l.steps_this_attempt = 0;
    l.wall_this_attempt = 0;
    l.attempt_first_update = -1;
    l.stop_requested = false;
    l.status_after_stop.reset();
    l.stop_reason.clear();
    l.watchdog.start(Clock::now(), l.plan.executor == "local");
    l.resume = true;  // a later launch of this leg (after a pause or a crash) continues
}

// One line of the leg's stdout: journaled first (the record of truth), then applied.
void on_event_line(LiveLeg& l, std::string_view line) {
    l.journal->append_event(line);
    l.watchdog.on_event(Clock::now(), l.attempt_first_update >= 0);
    EventKind kind = apply_event_line(l.trace, line);
    if (kind == EventKind::Step) {
        if (l.attempt_first_update < 0) l.attempt_first_update = l.trace.steps.back().update;
        ++l.steps_this_attempt;
        const double w = l.trace.steps.back().wall_s;
        l.wall_this_attempt += std::isfinite(w) ? w : 0;
    } else if (kind == EventKind::Malformed && !l.trace.malformed.empty() && !line.empty()) {
        l.journal->log("[tandem run] malformed event: " + l.trace.malformed.back());
    }
}

// Asks a running leg to stop (SIGTERM / scancel); `force` kills it (SIGKILL / scancel --signal=KILL).
void stop_leg(LiveLeg& l, bool force) {
    if (l.status != LegStatus::Running || !l.handle) return;
    if (force) {
        if (l.kill_sent) return;
        l.kill_sent = true;
    } else if (l.stop_requested) {
        return;
    }
    l.handle->stop(force);
    if (!l.stop_requested) l.stop_sent = Clock::now();
    l.stop_requested = true;
}

// Stops every running leg and waits for them (SIGTERM, then SIGKILL after the grace period).

}  // namespace

void stop_all_legs_now(Run& run) {
    for (auto& l : run.legs) stop_leg(l, false);
    const auto deadline = Clock::now() + std::chrono::duration<double>(kStopGraceSeconds);
    for (auto& l : run.legs) {
        if (l.status != LegStatus::Running || !l.handle) continue;
        while (!l.handle->ended()) {
            l.handle->read([&](std::string_view line) {
                try { on_event_line(l, line); } catch (...) {}
            }, [&](std::string_view line) { l.journal->log(line); });
            if (l.handle->ended()) break;
            if (Clock::now() > deadline) stop_leg(l, true);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        l.exit_status = l.handle->exit().exit_status;
        l.status = LegStatus::Interrupted;
    }
}

namespace {

class Supervisor {
public:
    Supervisor(Run& run, RunRecorder& rec, const RunnerOptions& opt, std::function<void(const std::string&)> say)
        : run_(run), rec_(rec), opt_(opt), say_(std::move(say)), gate_(run.spec.gate) {
        // The envelope and paired-bound flags (docs/gate.md): legs, pairs, error model, envelopes.
        TrajectoryGate::Context ctx;
        for (const auto& l : run_.legs) ctx.implementation[l.plan.name] = l.plan.implementation;
        bool model_known = true;
        try {
            ctx.model = error_model_for(run_.spec, run_.folder);
        } catch (const std::exception& e) {
            model_known = false;
            say_("note: no paired-bound flags: " + std::string(e.what()));
        }
        for (size_t i = 0; model_known && i < run_.legs.size(); ++i)
            for (size_t j = i + 1; j < run_.legs.size(); ++j)
                if (legs_are_paired(run_.spec, run_.legs[i].plan.name, run_.legs[j].plan.name) &&
                    (opt_.compare_against.empty() || run_.legs[i].plan.name == opt_.compare_against ||
                     run_.legs[j].plan.name == opt_.compare_against))  // `tandem faults`: (leg, reference) only
                    ctx.paired.emplace_back(run_.legs[i].plan.name, run_.legs[j].plan.name);
        ctx.envelopes = rec_.envelopes();
        for (const auto& e : ctx.envelopes)
            say_("seed envelope: " + e.implementation + ", " + std::to_string(e.members) + " runs varying " +
                 (e.vary.empty() ? std::string("nothing") : [&] {
                     std::string v;
                     for (const auto& x : e.vary) v += (v.empty() ? "" : ",") + x;
                     return v;
                 }()) + " (" + e.source + ")");
        gate_.set_context(std::move(ctx));
        // What a resumed run's legs recorded before was judged by the runner that saw it.
        std::map<std::string, const LegTrace*> traces;
        for (const auto& l : run_.legs) {
            gate_.mark_seen(l.plan.name, l.trace);
            traces[l.plan.name] = &l.trace;
        }
        gate_.mark_pairs_seen(traces);
    }

    // Runs until no leg runs or waits; returns true when interrupted (SIGINT / SIGTERM).
    bool run() {
        const int64_t total = run_.prepared.total_updates;
        auto last_flush = Clock::now();
        auto last_progress = Clock::now() - std::chrono::hours(1);
        for (;;) {
            if (g_interrupted && !stopping_) {
                stopping_ = true;
                say_("interrupted: stopping the legs");
                for (auto& l : run_.legs) stop_leg(l, false);
            }
            for (auto& l : run_.legs)  // a leg asked to stop (interrupt, request, gate) gets the grace period
                if (l.status == LegStatus::Running && l.stop_requested &&
                    Clock::now() - l.stop_sent > std::chrono::duration<double>(kStopGraceSeconds))
                    stop_leg(l, true);
            if (!stopping_)
                for (auto& l : run_.legs)
                    if (l.status == LegStatus::Pending && !devices_busy(l) && !at_leg_limit()) {
                        try {
                            launch(l, run_);
                        } catch (const Error& e) {
                            // The cluster refused this leg (a partition, account or time it does not
                            // accept): the leg fails with Slurm's reason and the others go on. A local
                            // leg that cannot start (fork, pipes) is the machine's failure: the run's.
                            if (l.plan.executor == "local") throw;
                            l.status = LegStatus::Failed;
                            l.exit_status = 1;
                            l.trace.error = e.what();
                            l.journal->log("[tandem run] " + utc_timestamp_now() + " " + e.what());
                            say_("leg " + l.plan.name + ": " + e.what());
                            rec_.write_leg_summary(state_of(l));
                        }
                        rec_.update_leg(state_of(l));
                    }
            take_requests();
            poll_legs();
            check_gate();
            check_stalls();
            reap_ended_legs(total);
            const auto now = Clock::now();
            if (now - last_flush > std::chrono::seconds(1)) {
                for (auto& l : run_.legs) l.journal->sync();
                rec_.flush();
                for (const auto& l : run_.legs)
                    if (l.status == LegStatus::Running) rec_.update_leg(state_of(l));
                last_flush = now;
            }
            if (opt_.on_progress && now - last_progress > std::chrono::milliseconds(500)) {
                opt_.on_progress(progress(total), false);
                last_progress = now;
            }
            bool active = false;
            for (const auto& l : run_.legs)
                active = active || l.status == LegStatus::Running || (l.status == LegStatus::Pending && !stopping_);
            if (!active) break;
        }
        if (opt_.on_progress) opt_.on_progress(progress(total), true);
        return stopping_;
    }

private:
    // RunnerOptions::max_concurrent_legs legs are running already.
    bool at_leg_limit() const {
        if (opt_.max_concurrent_legs <= 0) return false;
        int running = 0;
        for (const auto& l : run_.legs) running += l.status == LegStatus::Running;
        return running >= opt_.max_concurrent_legs;
    }

    // One leg at a time per GPU here unless --share-devices (device_sharing.h); CPU legs share the
    // cores (threads split between them), and the cluster's scheduler places Slurm legs.
    bool devices_busy(const LiveLeg& leg) const {
        if (leg.plan.executor == "slurm" || opt_.share_devices) return false;
        for (const auto& d : devices_of(leg.plan)) {
            if (d == "cpu") continue;
            for (const auto& l : run_.legs) {
                if (l.status != LegStatus::Running || l.plan.executor == "slurm") continue;
                const auto used = devices_of(l.plan);
                if (std::find(used.begin(), used.end(), d) != used.end()) return true;
            }
        }
        return false;
    }

    // Waits up to 200 ms for output of the local legs (poll on their pipes; with only Slurm legs,
    // a plain wait), then reads what every running leg wrote: events journaled and applied, stderr
    // lines to stderr.log.
    void poll_legs() {
        std::vector<pollfd> fds;
        bool any = false;
        for (auto& l : run_.legs) {
            if (l.status != LegStatus::Running || !l.handle) continue;
            any = true;
            for (int fd : l.handle->pollable_fds()) fds.push_back({fd, POLLIN, 0});
        }
        if (fds.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(any ? 200 : 50));
        else poll(fds.data(), fds.size(), 200);
        for (auto& l : run_.legs) {
            if (l.status != LegStatus::Running || !l.handle) continue;
            l.handle->read([&](std::string_view line) { on_event_line(l, line); },
                           [&](std::string_view line) { l.journal->log(line); });
        }
    }

    // Requests from `tandem leg stop|pause|resume` (legs/<leg>/request), taken between polls.
    void take_requests() {
        for (auto& l : run_.legs) {
            auto req = take_leg_request(leg_folder(run_, l.plan.name));
            if (!req) continue;
            l.journal->log("[tandem run] " + utc_timestamp_now() + " request: " + leg_action_name(req->action) +
                           (req->reason.empty() ? "" : " (" + req->reason + ")"));
            act_on(l, req->action, req->reason.empty() ? std::string("requested by the user") : req->reason);
        }
    }

    void act_on(LiveLeg& l, LegAction action, const std::string& reason) {
        const fs::path dir = leg_folder(run_, l.plan.name);
        if (action == LegAction::Resume) {
            if (l.status == LegStatus::Paused || l.status == LegStatus::Stopped || l.status == LegStatus::Failed ||
                l.status == LegStatus::Interrupted) {
                clear_stop_mark(dir);
                l.status = LegStatus::Pending;
                l.resume = true;
                say_("leg " + l.plan.name + ": resuming from its last checkpoint");
            }
            return;
        }
        const LegStatus after = action == LegAction::Pause ? LegStatus::Paused : LegStatus::Stopped;
        if (action == LegAction::Stop) set_stop_mark(dir, reason);
        if (l.status == LegStatus::Running) {
            l.status_after_stop = after;
            l.stop_reason = reason;
            stop_leg(l, false);
            say_("leg " + l.plan.name + ": " + (action == LegAction::Pause ? "pausing" : "stopping") + " (" + reason + ")");
        } else if (l.status == LegStatus::Pending) {
            l.status = after;
            l.stop_reason = reason;
            rec_.update_leg(state_of(l));
        }
    }

    // The live gate over what each leg reported since the last poll, then over paired evaluations.
    void check_gate() {
        for (auto& l : run_.legs) {
            if (l.status != LegStatus::Running) continue;
            for (GateFlag& f : gate_.check(l.plan.name, l.trace, l.attempt_first_update < 0 ? 0 : l.attempt_first_update))
                raise(l, f);
        }
        std::map<std::string, const LegTrace*> traces;
        for (const auto& l : run_.legs) traces[l.plan.name] = &l.trace;
        for (GateFlag& f : gate_.check_pairs(traces))
            for (auto& l : run_.legs)
                if (l.plan.name == f.leg) raise(l, f);
    }

    // The leg watchdog (watchdog.h): a running leg silent for its stall time is flagged; a stop
    // ends it as failed (stalled), so that `tandem run --resume` continues it from its last checkpoint.
    void check_stalls() {
        const auto now = Clock::now();
        for (auto& l : run_.legs) {
            if (l.status != LegStatus::Running || !l.handle) continue;
            if (auto ended = l.watchdog.take_ended_stall()) {
                const std::string line = "leg " + l.plan.name + ": events again after " +
                                         std::to_string(static_cast<long long>(std::lround(*ended))) + " s of silence";
                l.journal->log("[tandem run] " + utc_timestamp_now() + " " + line);
                say_(line);
                rec_.update_leg(state_of(l));
            }
            if (l.stop_requested) continue;
            auto f = l.watchdog.check(run_.spec.gate, l.plan.name, l.trace, l.attempt_first_update, now,
                                      l.handle->process(), l.handle->describe());
            if (!f) continue;
            record_flag(l, *f);
            if (f->action == GateAction::Pause) act_on(l, LegAction::Pause, "gate: " + f->message);
            if (f->action == GateAction::Stop) {
                l.status_after_stop = LegStatus::Failed;
                l.stop_reason = l.watchdog.stop_reason();
                stop_leg(l, false);
                say_("leg " + l.plan.name + ": stopping it (stalled); `tandem run --resume " + run_.folder.string() +
                     "` continues it from its last checkpoint");
            }
            rec_.update_leg(state_of(l));
        }
    }

    // A flag in the leg's log, on screen, in its list and (at the next flush) in run.h5.
    void record_flag(LiveLeg& l, const GateFlag& f) {
        l.journal->log("[tandem run] gate: " + f.message + " -> " + gate_action_name(f.action));
        if (opt_.on_flag) opt_.on_flag(f);
        else say_("gate: " + f.message + " (" + gate_action_name(f.action) + ")");
        l.flags.push_back(f);
        rec_.set_flags(l.plan.name, l.flags);
    }

    // Records a flag and acts on it (pause / stop act on a running leg only).
    void raise(LiveLeg& l, const GateFlag& f) {
        record_flag(l, f);
        if (l.status != LegStatus::Running) return;
        if (f.action == GateAction::Pause && !l.stop_requested) act_on(l, LegAction::Pause, "gate: " + f.message);
        if (f.action == GateAction::Stop && !l.stop_requested) act_on(l, LegAction::Stop, "gate: " + f.message);
    }

    void reap_ended_legs(int64_t total) {
        for (auto& l : run_.legs) {
            if (l.status != LegStatus::Running || !l.handle || !l.handle->ended()) continue;
            const LegExit ex = l.handle->exit();
            const int sig = ex.signal;
            l.exit_status = ex.exit_status;
            if (ex.clean && l.trace.done) l.status = LegStatus::Finished;
            else if (l.status_after_stop) l.status = *l.status_after_stop;
            else if (stopping_) l.status = LegStatus::Interrupted;
            else l.status = LegStatus::Failed;
            if (l.status_after_stop && !l.trace.done) l.trace.error = l.stop_reason;
            else if (!ex.clean && !ex.description.empty())  // a signal; under Slurm the job's state
                l.trace.error = l.trace.error ? *l.trace.error + " (" + ex.description + ")" : ex.description;
            if (sig == 0 && l.exit_status == 0 && !l.trace.done && !l.trace.error)
                l.trace.error = "exited with status 0 without a done event";
            l.journal->log("[tandem run] " + utc_timestamp_now() + " leg ended: " + leg_status_name(l.status) +
                           ", exit status " + std::to_string(l.exit_status) +
                           (ex.description.empty() ? std::string() : " (" + ex.description + ")"));
            l.handle.reset();
            clear_leg_process(leg_folder(run_, l.plan.name));
            l.journal->sync();
            rec_.flush();
            rec_.write_leg_summary(state_of(l));
            rec_.update_leg(state_of(l));
            if (opt_.on_progress) opt_.on_progress({progress_of(l, total)}, false);
        }
    }

    std::vector<LegProgress> progress(int64_t total) const {
        std::vector<LegProgress> out;
        for (const auto& l : run_.legs) out.push_back(progress_of(l, total));
        return out;
    }

    Run& run_;
    RunRecorder& rec_;
    const RunnerOptions& opt_;
    std::function<void(const std::string&)> say_;
    TrajectoryGate gate_;
    bool stopping_ = false;
};

}  // namespace

bool supervise(Run& run, RunRecorder& rec, const RunnerOptions& opt, Say say) {
    Supervisor supervisor(run, rec, opt, std::move(say));
    return supervisor.run();
}

}  // namespace tandem::experiments::run_steps
