// `tandem run`, as named steps (run_steps.h): validate and prepare, or reopen for --resume
// (open_run.cpp), register the run, probe the devices, supervise the legs (supervisor.cpp), finish
// (compare, store, report). Legs are child processes
// (leg_process.h); everything they say goes to their events.jsonl first, then into the trace, run.h5
// and the catalog (run_record.h). See docs/run-folder.md "Interruptions".
#include "tandem/runner/runner.h"
#include "tandem/strict_json.h"

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
#include "tandem/compare/comparison.h"
#include "tandem/compare/distance.h"
#include "tandem/measure/host_info.h"
#include "tandem/runner/prepare.h"
#include "tandem/runner/run_flops.h"
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
#include <cctype>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <sys/file.h>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "tandem/spec/leg_paths.h"

namespace tandem::experiments {

namespace run_steps {

volatile std::sig_atomic_t g_interrupted = 0;

LegProgress progress_of(const LiveLeg& l, int64_t total) {
    LegProgress p;
    p.name = l.plan.name;
    p.device = l.plan.device;
    p.status = l.status;
    p.updates_total = total;
    const LegTrace& t = l.trace;
    p.updates_done = t.steps.empty() ? 0 : t.steps.back().update + 1;
    if (!t.steps.empty()) p.loss = t.steps.back().loss;
    if (!t.evals.empty()) {
        p.heldout_ce = t.evals.back().heldout_ce;
        p.heldout_update = t.evals.back().update;
    }
    p.tokens_per_s = std::max(0.0, timing_of(t).tokens_per_s);
    if (l.steps_this_attempt > 0 && l.status == LegStatus::Running)
        p.eta_s = l.wall_this_attempt / static_cast<double>(l.steps_this_attempt) * static_cast<double>(total - p.updates_done);
    if (l.status == LegStatus::Running && l.watchdog.stalled()) {
        p.stalled_s = l.watchdog.silent_s(Clock::now());
        p.process = l.watchdog.process_word();
    }
    return p;
}

fs::path leg_folder(const Run& run, const std::string& leg) { return run.folder / "legs" / leg; }

LegState state_of(const LiveLeg& l) {
    LegState s;
    s.plan = &l.plan;
    s.threads = l.threads;
    s.trace = &l.trace;
    s.status = leg_status_name(l.status);
    s.exit_status = l.exit_status;
    s.started_at = l.started_at;
    s.last_line = l.journal ? l.journal->last_event_line() : std::string();
    s.flags = &l.flags;
    s.note = l.stop_reason;
    if (l.status == LegStatus::Running && l.watchdog.stalled()) s.stall = l.watchdog.flag_text();
    return s;
}

}  // namespace run_steps

using namespace run_steps;
namespace fs = std::filesystem;
using nlohmann::json;

const char* run_status_name(RunStatus s) {
    switch (s) {
        case RunStatus::Finished: return "finished";
        case RunStatus::Failed: return "failed";
        case RunStatus::Interrupted: return "interrupted";
    }
    return "failed";
}

namespace {

void on_signal(int) { g_interrupted = 1; }

// Step 2: the run and its legs in run.h5 and the catalog; on resume run.h5's series are rebuilt
// from the events (the record of truth).
void register_run(const Run& run, RunRecorder& rec) {
    std::vector<LegState> legs;
    for (const auto& l : run.legs) legs.push_back(state_of(l));
    rec.register_run(run.spec, run.prepared, legs, run.resumed);
}

// Step 3: bandwidth probes, once per device that a leg will use now; on the CPU also the sgemm
// peak at each thread count a CPU leg runs with. Returns what was measured.
std::vector<ProbeResult> run_probes(const Run& run, RunRecorder& rec, const std::function<void(const std::string&)>& say) {
    std::vector<ProbeResult> measured;
    std::vector<int> cpu_threads;
    for (const auto& l : run.legs)
        if (l.status == LegStatus::Pending && l.plan.device == "cpu" &&
            std::find(cpu_threads.begin(), cpu_threads.end(), l.threads) == cpu_threads.end())
            cpu_threads.push_back(l.threads);
    std::vector<std::string> devices;
    for (const auto& l : run.legs)
        if (l.status == LegStatus::Pending && std::find(devices.begin(), devices.end(), l.plan.device) == devices.end())
            devices.push_back(l.plan.device);
    for (const auto& d : devices) {
        say("probing " + d);
        ProbeResult p;
        try {
            if (d == "cpu") {
                CpuProbeOptions co;  // the buffer size of `tandem probe` (cpu_probe_buffer), fewer repeats
                co.repeats = 5;
                p = probe_cpu(co);
                probe_cpu_sgemm(p, cpu_threads);
            } else {
                p = probe_cuda(std::stoi(d.substr(5)));
            }
        } catch (const std::exception& e) {
            say("probe " + d + " failed: " + e.what());
            continue;
        }
        rec.record_probe(p);  // an I/O failure here is the run's failure, not the probe's
        say("probe " + d + " done");
        measured.push_back(std::move(p));
    }
    return measured;
}

// Each leg's work for its FLOP/s in the timing table (flops.h): the shared plan's FLOPs per update
// for the legs that follow it, and the sgemm peak at the leg's threads when its device was probed.
// FLOPs that cannot be computed are said, not guessed; the run goes on.
void attach_work(const Run& run, RunRecorder& rec, const std::vector<ProbeResult>& probes, bool share_devices,
                 const std::function<void(const std::string&)>& say) {
    std::vector<LegPlan> plans;
    for (const auto& l : run.legs) plans.push_back(l.plan);
    std::vector<double> flops;
    try {
        flops = run_update_flops(run.folder, run.spec);
    } catch (const std::exception& e) {
        say(std::string("FLOPs per update not computed: ") + e.what());
    }
    for (const auto& l : run.legs) {
        double peak = -1;
        for (const auto& p : probes)
            if (p.device == l.plan.device)
                // a CPU leg's peak at its own thread count; a GPU leg's is its device's (threads 0)
                if (const SgemmFigure* s = p.sgemm_at(l.plan.device == "cpu" ? l.threads : 0)) peak = s->flops_per_s;
        const bool shared = run.spec.leg_setting(l.plan.name, "plan") == "shared";
        rec.set_work(l.plan.name, shared ? flops : std::vector<double>{}, peak,
                     device_shared_with(l.plan, plans, share_devices));
    }
}

// ---- step 5: finishing -------------------------------------------------------------------------------

RunOutcome finish_run(Run& run, RunRecorder& rec, bool interrupted, const RunnerOptions& opt,
                      const std::function<void(const std::string&)>& say) {
    say("legs ended; comparing");
    for (auto& l : run.legs) l.journal->sync();
    rec.flush();  // run.h5's series = the events' latest attempt, row for row
    for (const auto& l : run.legs) {
        rec.write_leg_summary(state_of(l));
        rec.update_leg(state_of(l));
    }
    RunOutcome out;
    out.folder = run.folder;
    out.run_id = run.prepared.run_id;
    bool all_finished = true;
    for (auto& l : run.legs) {
        all_finished = all_finished && l.status == LegStatus::Finished;
        out.legs.push_back({l.plan, l.status, l.exit_status, l.trace});
    }
    out.status = interrupted ? RunStatus::Interrupted : (all_finished ? RunStatus::Finished : RunStatus::Failed);
    Comparison cmp = rec.compare_and_store(run.spec, ExpectedSeries{run.prepared.total_updates, run.spec.eval_interval},
                                           opt.compare_against);
    out.checks_passed = cmp.passed();
    out.verdict = cmp.verdict();
    // A pair found different with no fingerprints to say where: how to get them (docs/observables.md).
    // Not for a pair with a leg that did not finish: the run is incomplete, and its own failure line says why.
    auto finished = [&run](const std::string& name) {
        for (const auto& l : run.legs)
            if (l.plan.name == name) return l.status == LegStatus::Finished;
        return true;  // a leg of another run (--compare-against)
    };
    for (const L4Entry* e : cmp.different_without_localisation()) {
        if (!finished(e->leg_a) || !finished(e->leg_b)) continue;
        // The experiment observes updates, yet a leg recorded no fingerprints: that leg records none
        // itself (setting `observe` again would not help).
        std::string silent;
        for (const auto& l : run.legs)
            if ((l.plan.name == e->leg_a || l.plan.name == e->leg_b) && l.trace.fingerprints.empty()) silent = l.plan.name;
        if (run.spec.observes_any() && !silent.empty())
            say(e->leg_a + "~" + e->leg_b + " are different from update " + std::to_string(e->first_different_update) +
                "; not localised: the experiment observes updates but " + silent + " records no fingerprints (a "
                "TandemCallback(pair=False), a loop without tandem_leg.torch.pair, a data-parallel leg)");
        else
            say(e->leg_a + "~" + e->leg_b + " are different from update " + std::to_string(e->first_different_update) +
                "; to localise where they diverge (layer, op, pass), record fingerprints of that update: add \"observe\": "
                "{\"updates\": [" + std::to_string(e->first_different_update) + "]} to the experiment file and run it again, then "
                "`tandem localise RUN` (docs/observables.md)");
    }
    rec.finish(run_status_name(out.status), out.verdict);
    if (!opt.report_format.empty()) {
        std::string text = render_report(run.prepared.run_id, cmp, parse_report_format(opt.report_format));
        std::printf("\n%s", text.c_str());
        std::fflush(stdout);
    }
    for (const auto& l : run.legs) {
        if (l.status == LegStatus::Finished) continue;
        if (l.status == LegStatus::Paused || l.status == LegStatus::Stopped)
            say("leg " + l.plan.name + " " + leg_status_name(l.status) + " (" + l.stop_reason + "); continue it with `tandem leg resume " +
                run.folder.string() + " " + l.plan.name + "`");
        else
            say("leg " + l.plan.name + " " + leg_status_name(l.status) + " (exit status " + std::to_string(l.exit_status) + ")" +
                (l.trace.error ? ": " + *l.trace.error : "") + "; log: " + (leg_folder(run, l.plan.name) / "stderr.log").string() +
                (l.status == LegStatus::Failed ? "; `tandem run --resume " + run.folder.string() + "` retries it from its last checkpoint"
                                               : std::string()));
    }
    say("run folder: " + run.folder.string());
    if (interrupted)  // docs/run-folder.md "Interruptions": every leg continues from its last checkpoint
        say("interrupted: continue the run with `tandem run --resume " + run.folder.string() + "`");
    if (!rec.catalog_notice().empty()) say(rec.catalog_notice());  // the run's last line (catalog_continuity.h)
    return out;
}

// Installs SIGINT/SIGTERM handlers for the runner's life (restored on scope exit).
class InterruptScope {
public:
    InterruptScope() {
        signal(SIGPIPE, SIG_IGN);  // a leg closing its end must not kill the runner
        g_interrupted = 0;
    }

private:
    StopSignalHandlers handlers_{on_signal};
};

}  // namespace


bool runner_is_running(const fs::path& run_dir) { return live_runner(run_dir).has_value(); }

std::optional<std::string> live_runner(const fs::path& run_dir) {
    const fs::path lock = run_dir / ".runner.lock";
    // Read-only: a reader of a run (a report on a read-only copy) must neither need write access nor
    // create the lock file. flock does not need a writable descriptor.
    const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    std::string owner;
    if (held) {
        char buf[256];
        const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
        if (n > 0) owner.assign(buf, static_cast<size_t>(n));
        while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
    }
    ::close(fd);
    if (!held) return std::nullopt;
    return "a `tandem run`" + (owner.empty() ? std::string() : " (" + owner + ")") + " holds its lock " + lock.string();
}

std::string request_leg_action(const fs::path& run_dir, const std::string& leg, LegAction action, double wait_s) {
    std::error_code ec;
    if (!fs::is_directory(run_dir, ec) || !fs::exists(run_dir / "legs.json"))
        throw Error(run_dir.string() + ": not a tandem run folder (no legs.json)");
    bool known = false;
    try {
        for (const auto& e : json::parse(read_file(run_dir / "legs.json"))) known = known || e.at("name") == leg;
    } catch (const json::exception& e) {
        throw Error((run_dir / "legs.json").string() + ": not a valid legs file (" + tandem::json_error_text(e) + ")");
    }
    if (!known) throw Error(run_dir.string() + ": the run has no leg '" + leg + "'");
    const fs::path dir = run_dir / "legs" / leg;
    if (!runner_is_running(run_dir)) {
        if (action == LegAction::Stop) {
            set_stop_mark(dir, "stopped by the user");
            return "no runner is running " + run_dir.string() + "; leg " + leg + " is marked stopped (`tandem run --resume` leaves it)";
        }
        if (action == LegAction::Pause) return "no runner is running " + run_dir.string() + ": leg " + leg + " is not running";
        clear_stop_mark(dir);
        return "";  // the caller continues the run (tandem run --resume)
    }
    write_leg_request(dir, action, "requested by the user");
    const auto deadline = Clock::now() + std::chrono::duration<double>(wait_s);
    while (leg_request_pending(dir) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (leg_request_pending(dir)) return "asked the runner to " + std::string(leg_action_name(action)) + " leg " + leg + " (not taken yet)";
    return "the runner took the request: " + std::string(leg_action_name(action)) + " leg " + leg;
}

namespace {
// Which legs share a GPU and whether they run at once (device_sharing.h), said before any leg starts.
void say_device_sharing(const Run& run, bool share_devices, const std::function<void(const std::string&)>& say) {
    std::vector<LegPlan> plans;
    for (const auto& l : run.legs) plans.push_back(l.plan);
    for (const auto& [device, legs] : shared_gpus(plans)) say(sharing_line(device, legs, share_devices));
}
}  // namespace

RunOutcome run_experiment(const RunnerOptions& opt) {
    std::function<void(const std::string&)> say = opt.say ? opt.say : [](const std::string& s) {
        std::fprintf(stderr, "tandem run: %s\n", s.c_str());
    };
    InterruptScope interrupts;
    Run run = opt.resume ? reopen_run(opt, say) : prepare_new_run(opt, say);
    for (const auto& [leg, fields] : run.spec.overrides) {
        bool used = false;
        for (const auto& l : run.legs) used = used || l.plan.name == leg;
        if (!used) say("note: the experiment overrides settings of leg '" + leg + "', which this run does not have");
    }
    say_device_sharing(run, opt.share_devices, say);
    RunRecorder rec(run.folder / "run.h5", opt.catalog, opt.envelope_catalogs);
    rec.on_catalog_warning(say);
    try {
        register_run(run, rec);
        attach_work(run, rec, opt.probe ? run_probes(run, rec, say) : std::vector<ProbeResult>{}, opt.share_devices, say);
        const bool interrupted = supervise(run, rec, opt, say) || g_interrupted;
        return finish_run(run, rec, interrupted, opt, say);
    } catch (const std::exception& e) {
        // An I/O failure while legs run (a full disk, a vanished folder): stop the legs, say why in
        // the catalog, and leave a folder that --resume continues once the cause is fixed.
        stop_all_legs_now(run);
        for (auto& l : run.legs) {
            if (l.status == LegStatus::Running || l.status == LegStatus::Pending) l.status = LegStatus::Interrupted;
            clear_leg_process(leg_folder(run, l.plan.name));
        }
        std::vector<LegState> states;
        for (const auto& l : run.legs) states.push_back(state_of(l));
        rec.fail(e.what(), states);
        throw Error(std::string(e.what()) + " (the legs were stopped; after fixing this, continue with `tandem run --resume " +
                    run.folder.string() + "`)");
    }
}

}  // namespace tandem::experiments

