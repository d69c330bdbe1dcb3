// `tandem run`, as named steps: validate and prepare (or reopen for --resume), register the run,
// probe the devices, supervise the legs, finish (compare, store, report). Legs are child processes
// (leg_process.h); everything they say goes to their events.jsonl first, then into the trace, run.h5
// and the catalog (run_record.h). See docs/run-folder.md "Interruptions".
#include "tandem/experiments/runner.h"

#include "leg_executor.h"
#include "leg_process.h"
#include "preflight.h"
#include "run_record.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/experiments/catalog.h"
#include "tandem/experiments/compare.h"
#include "tandem/experiments/distance.h"
#include "tandem/experiments/host_info.h"
#include "tandem/experiments/prepare.h"
#include "tandem/experiments/flops.h"
#include "tandem/experiments/probe.h"
#include "tandem/experiments/report.h"
#include "tandem/experiments/run_file.h"
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

#include "tandem/experiments/leg_paths.h"

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

const char* leg_status_name(LegStatus s) {
    switch (s) {
        case LegStatus::Pending: return "pending";
        case LegStatus::Running: return "running";
        case LegStatus::Finished: return "finished";
        case LegStatus::Failed: return "failed";
        case LegStatus::Interrupted: return "interrupted";
        case LegStatus::Paused: return "paused";
        case LegStatus::Stopped: return "stopped";
    }
    return "pending";
}

const char* leg_action_name(LegAction a) {
    switch (a) {
        case LegAction::Stop: return "stop";
        case LegAction::Pause: return "pause";
        case LegAction::Resume: return "resume";
    }
    return "stop";
}

const char* run_status_name(RunStatus s) {
    switch (s) {
        case RunStatus::Finished: return "finished";
        case RunStatus::Failed: return "failed";
        case RunStatus::Interrupted: return "interrupted";
    }
    return "failed";
}

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int) { g_interrupted = 1; }

using Clock = std::chrono::steady_clock;

// Seconds a stopping leg gets between SIGTERM and SIGKILL.
constexpr double kStopGraceSeconds = 10.0;

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(item);
    return out;
}

// ---- which program a leg is ----------------------------------------------------------------------

fs::path self_executable() {
    std::error_code ec;
    fs::path p = fs::read_symlink("/proc/self/exe", ec);
    if (ec) throw Error("cannot find the tandem executable (/proc/self/exe): " + ec.message());
    return p;
}


// The engine's C library, for the SDK legs that drive it (docs/legs.md): $TANDEM_ENGINE_LIB, else the
// build tree next to this binary, else the installed one.
std::string engine_c_library() {
    if (const char* p = std::getenv("TANDEM_ENGINE_LIB"); p && *p) return p;
    const fs::path built = self_executable().parent_path().parent_path() / "engine" / "libtandem_engine_c.so";
    if (fs::exists(built)) return built.string();
    return (fs::path(TANDEM_INSTALL_LIBDIR) / "libtandem_engine_c.so").string();
}

// The SDK folder (sdk/python, ...): $TANDEM_SDK_DIR, else the source tree, else the installed copy.
fs::path sdk_dir() {
    if (const char* d = std::getenv("TANDEM_SDK_DIR"); d && *d) return d;
    fs::path src = fs::path(TANDEM_SOURCE_DIR) / "sdk";
    if (fs::exists(src)) return src;
    return fs::path(TANDEM_INSTALL_DATADIR) / "sdk";
}

// The Go SDK leg's binary: $TANDEM_SDK_GO_LEG, else the build tree next to this binary, else installed.
std::string sdk_go_leg() {
    if (const char* p = std::getenv("TANDEM_SDK_GO_LEG"); p && *p) return p;
    const fs::path built = self_executable().parent_path().parent_path() / "sdk" / "go" / "tandem-leg-go";
    if (fs::exists(built)) return built.string();
    return (fs::path(TANDEM_INSTALL_LIBEXECDIR) / "tandem-leg-go").string();
}

// {run}, {leg}, {device}, {threads} replaced inside every argument; an argument that is exactly
// {resume} becomes --resume when the leg resumes and is dropped otherwise.
std::vector<std::string> expand_command(const std::vector<std::string>& templ, const fs::path& run_dir, const LegPlan& plan,
                                        int threads, bool resume) {
    const std::vector<std::pair<std::string, std::string>> values = {
        {"{run}", run_dir.string()}, {"{leg}", plan.name}, {"{device}", plan.device}, {"{threads}", std::to_string(threads)}};
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
    if (plan.implementation == "command") return expand_command(plan.command, run_dir, plan, threads, resume);
    std::vector<std::string> argv;
    if (plan.implementation == "engine") argv = {self_executable().string(), "leg", "engine"};
    else if (plan.implementation == "reference") argv = {reference_python(), (legs_dir() / "reference_leg.py").string()};
    else if (plan.implementation == "sdk-python") {
        const char* py = std::getenv("TANDEM_SDK_PYTHON");
        argv = {py && *py ? py : "python3", (sdk_dir() / "python" / "sdk_leg.py").string()};
    } else if (plan.implementation == "sdk-go") argv = {sdk_go_leg()};
    else throw Error("leg " + plan.name + ": unknown implementation '" + plan.implementation + "'");
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

// ---- one leg while the runner supervises it -----------------------------------------------------

struct LiveLeg {
    LegPlan plan;
    int threads = 1;
    bool resume = false;        // start with --resume (an earlier attempt left events)
    LegStatus status = LegStatus::Pending;
    int exit_status = 0;
    std::string started_at;
    std::unique_ptr<LegHandle> handle;    // the running attempt (local process or Slurm job)
    std::unique_ptr<LegJournal> journal;  // events.jsonl + stderr.log
    LegTrace trace;
    Clock::time_point stop_sent{};
    bool stop_requested = false;
    bool kill_sent = false;
    std::optional<LegStatus> status_after_stop;  // Paused / Stopped when the stop was asked for
    std::string stop_reason;
    int64_t steps_this_attempt = 0;
    double wall_this_attempt = 0;
    int64_t attempt_first_update = -1;  // first update this attempt reported (the gate's timing history)
    std::vector<GateFlag> flags;
};

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
    return p;
}

// ---- the run being worked on ---------------------------------------------------------------------

struct Run {
    fs::path folder;
    ExperimentSpec spec;
    PreparedRun prepared;
    FileLock lock;              // held for the runner's life: one runner per run folder
    std::vector<LiveLeg> legs;
    bool resumed = false;
};

fs::path leg_folder(const Run& run, const std::string& leg) { return run.folder / "legs" / leg; }

json legs_json(const std::vector<LegPlan>& plans, const std::vector<int>& threads) {
    json lj = json::array();
    for (size_t i = 0; i < plans.size(); ++i)
    {
        json e{{"name", plans[i].name}, {"implementation", plans[i].implementation}, {"device", plans[i].device},
               {"threads", threads[i]}};
        if (!plans[i].command.empty()) e["command"] = plans[i].command;
        if (!plans[i].faults.empty()) {
            json f = json::array();
            for (const auto& x : plans[i].faults) f.push_back(fault_text(x));
            e["faults"] = f;
        }
        if (!plans[i].devices.empty()) e["devices"] = plans[i].devices;
        if (plans[i].executor != "local") e["executor"] = plans[i].executor;
        if (!plans[i].slurm.empty()) e["slurm"] = plans[i].slurm.to_json();
        lj.push_back(std::move(e));
    }
    return lj;
}

// CPU threads per leg: the CPU legs that run at once (all of them, or at most max_concurrent) split the
// total evenly. Recorded in legs.json, because a resumed leg must use the same count to continue
// bit-identically (docs/decisions.md).
std::vector<int> threads_per_leg(const std::vector<LegPlan>& plans, int cpu_threads, int max_concurrent = 0) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const int total = cpu_threads > 0 ? cpu_threads : static_cast<int>(hw);
    int cpu_legs = 0;
    for (const auto& p : plans) cpu_legs += p.device == "cpu";
    if (max_concurrent > 0) cpu_legs = std::min(cpu_legs, max_concurrent);
    std::vector<int> out;
    // Slurm legs count as if they ran here: the same count under either executor gives bit-identical
    // CPU trajectories (docs/cluster.md); a Slurm CPU leg asks its job for that many CPUs.
    for (const auto& p : plans) out.push_back(p.device == "cpu" ? std::max(1, total / std::max(1, cpu_legs)) : 1);
    return out;
}

void take_folder_lock(Run& run) {
    if (!run.lock.try_lock(run.folder / ".runner.lock"))
        throw Error(run.folder.string() + ": run folder is in use by another `tandem run` (lock " +
                    (run.folder / ".runner.lock").string() + ")");
}

void open_leg_journals(Run& run, const std::vector<LegPlan>& plans, const std::vector<int>& threads) {
    for (size_t i = 0; i < plans.size(); ++i) {
        LiveLeg l;
        l.plan = plans[i];
        l.threads = threads[i];
        l.journal = std::make_unique<LegJournal>(leg_folder(run, l.plan.name));
        run.legs.push_back(std::move(l));
    }
}

// `--executor slurm` needs Slurm's client commands where the runner runs (docs/cluster.md).
void check_slurm_client() {
    for (const char* cmd : {"sbatch", "squeue", "scontrol", "scancel"}) {
        CommandResult r = run_command({cmd, "--version"}, 30.0);
        if (r.exit_status != 0)
            throw Error(std::string("--executor slurm: `") + cmd + " --version` failed (" +
                        (r.exit_status == 127 ? std::string("not found on PATH") : r.err.substr(0, r.err.find('\n'))) +
                        "); run tandem where Slurm's client commands work (docs/cluster.md)");
    }
}

// Step 1 (new run): validate what can be validated, create the folder exclusively, prepare it. A
// failed preparation removes the folder it created.
Run prepare_new_run(const RunnerOptions& opt, const std::function<void(const std::string&)>& say) {
    Run run;
    run.spec = load_experiment(opt.experiment);
    // No --legs: the legs the experiment defines, else the engine against the reference.
    std::string legs = opt.legs;
    if (legs.empty())
        for (const auto& d : run.spec.legs) legs += (legs.empty() ? "" : ",") + d.name;
    if (legs.empty()) legs = "engine,reference";
    std::vector<LegPlan> plans = opt.leg_plans.empty() ? plan_legs(legs, opt.devices, &run.spec) : opt.leg_plans;
    const auto& executors = leg_executors();
    if (std::find(executors.begin(), executors.end(), opt.executor) == executors.end())
        throw Error("--executor: '" + opt.executor + "' is not local or slurm");
    for (auto& p : plans) {
        p.executor = opt.executor;
        if (const auto* d = run.spec.leg_definition(p.name)) p.slurm = d->slurm;
    }
    if (opt.executor == "slurm") check_slurm_client();
    {
        Catalog probe_catalog(opt.catalog);  // a catalog that is not a database is refused before any work
    }
    ResourceEstimate est = preflight(run.spec, plans, opt.out_dir, opt.assets, opt.max_concurrent_legs);
    say("estimate: " + est.summary());
    std::vector<int> threads = threads_per_leg(plans, opt.cpu_threads, opt.max_concurrent_legs);
    run.folder = fs::absolute(create_run_folder(opt.out_dir, run.spec.name));
    try {
        take_folder_lock(run);
        write_file_atomic(run.folder / "legs.json", legs_json(plans, threads).dump(1) + "\n");
        say("preparing " + run.folder.string());
        PrepareOptions po;
        po.assets = opt.assets;
        po.log = [&](const std::string& s) { say("  " + s); };
        run.prepared = prepare_run(run.spec, run.folder, po);
    } catch (...) {
        std::error_code ec;
        run.lock.release();
        fs::remove_all(run.folder, ec);
        throw;
    }
    open_leg_journals(run, plans, threads);
    return run;
}

// Step 1 (--resume): lock the folder, finish an interrupted preparation, stop legs an earlier
// runner left, read every leg's events, and set aside checkpoints no event announced.
Run reopen_run(const RunnerOptions& opt, const std::function<void(const std::string&)>& say) {
    Run run;
    run.resumed = true;
    run.folder = fs::absolute(*opt.resume);
    std::error_code ec;
    if (!fs::is_directory(run.folder, ec)) throw Error(run.folder.string() + ": no such run folder");
    if (!fs::exists(run.folder / "experiment.json") || !fs::exists(run.folder / "legs.json"))
        throw Error(run.folder.string() + ": not a tandem run folder (no experiment.json / legs.json)");
    take_folder_lock(run);
    run.spec = load_run_spec(run.folder);
    std::vector<LegPlan> plans;
    std::vector<int> threads;
    const fs::path legs_file = run.folder / "legs.json";
    try {
        json lj = json::parse(read_file(legs_file));
        for (const auto& e : lj) {
            LegPlan p;
            p.name = e.at("name").get<std::string>();
            p.implementation = e.at("implementation").get<std::string>();
            p.device = e.at("device").get<std::string>();
            if (e.contains("command")) p.command = e.at("command").get<std::vector<std::string>>();
            if (e.contains("faults"))
                for (const auto& f : e.at("faults")) p.faults.push_back(parse_fault_switch(f.get<std::string>(), legs_file.string()));
            if (e.contains("devices")) p.devices = e.at("devices").get<std::vector<std::string>>();
            p.executor = e.value("executor", std::string("local"));
            if (e.contains("slurm")) p.slurm = SlurmOptions::from_json(e.at("slurm"), legs_file.string(), "slurm");
            executor_for(p.executor);  // an unknown executor is refused before anything starts
            plans.push_back(std::move(p));
            threads.push_back(e.contains("threads") ? e.at("threads").get<int>() : 0);
        }
        auto fallback = threads_per_leg(plans, opt.cpu_threads, opt.max_concurrent_legs);
        for (size_t i = 0; i < threads.size(); ++i)
            if (threads[i] <= 0) threads[i] = fallback[i];
    } catch (const json::exception& e) {
        throw Error(legs_file.string() + ": not a valid legs file (" + e.what() + ")");
    }
    if (!fs::exists(run.folder / "prepare.json")) {
        say("the run's preparation was interrupted: preparing " + run.folder.string() + " again");
        PrepareOptions po;
        po.assets = opt.assets;
        po.log = [&](const std::string& s) { say("  " + s); };
        run.prepared = prepare_run(run.spec, run.folder, po);
    } else {
        run.prepared = read_prepared_run(run.folder);
    }
    open_leg_journals(run, plans, threads);
    for (auto& l : run.legs) {
        const fs::path dir = leg_folder(run, l.plan.name);
        l.journal->end_partial_line();
        // A leg an earlier runner left: a local process is killed (it should have died with its
        // runner); a Slurm job is re-attached, and what it printed meanwhile is journaled first.
        std::unique_ptr<LegHandle> left = find_left_over_leg(dir, l.journal->events_path(), say);
        if (left) {
            const auto journal_line = [&](std::string_view line) { l.journal->append_event(line); };
            const auto log_line = [&](std::string_view line) { l.journal->log(line); };
            left->read(journal_line, log_line);
            if (left->running() && stop_mark(dir)) {
                say("leg " + l.plan.name + " is marked stopped: cancelling " + left->describe());
                left->stop(false);
                const auto deadline = Clock::now() + std::chrono::duration<double>(kStopGraceSeconds);
                bool killed = false;
                while (left->running()) {
                    if (!killed && Clock::now() > deadline) {
                        left->stop(true);
                        killed = true;
                    }
                    if (Clock::now() > deadline + std::chrono::minutes(2))
                        throw Error("leg " + l.plan.name + ": " + left->describe() + " does not end although cancelled; "
                                    "end it (scancel) and run `tandem run --resume " + run.folder.string() + "` again");
                    std::this_thread::sleep_for(std::chrono::milliseconds(200));
                    left->read(journal_line, log_line);
                }
            }
            while (!left->running() && !left->ended()) {  // it ended while no runner watched: read it all
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                left->read(journal_line, log_line);
            }
        }
        l.trace = read_events_file(l.journal->events_path());
        if (fs::exists(run.folder / "run.h5")) {
            try {
                if (auto j = RunFileReader(run.folder / "run.h5").flags(l.plan.name)) l.flags = flags_from_json(json::parse(*j));
            } catch (const std::exception&) {
                // an unreadable run file is rebuilt from the events; its flags are raised again as the legs continue
            }
        }
        if (left && left->running()) {
            // Still running (or queued): supervised from here on like a leg this runner started. Its
            // checkpoints are its own business; none is set aside.
            l.journal->log("[tandem run] " + utc_timestamp_now() + " re-attached to " + left->describe());
            l.handle = std::move(left);
            l.status = LegStatus::Running;
            l.started_at = utc_timestamp_now();
            l.resume = true;
            continue;
        }
        if (left) {
            const LegExit ex = left->exit();
            l.journal->log("[tandem run] " + utc_timestamp_now() + " " + left->describe() + " ended while no runner watched" +
                           (ex.clean ? std::string() : ": " + ex.description));
            clear_leg_process(dir);
        }
        if (l.trace.done) {
            l.status = LegStatus::Finished;
            continue;
        }
        if (auto why = stop_mark(dir)) {
            l.status = LegStatus::Stopped;  // stopped on request: --resume leaves it (tandem leg resume restarts it)
            l.stop_reason = *why;
            say("leg " + l.plan.name + " stays stopped (" + *why + "); `tandem leg resume` restarts it");
            continue;
        }
        l.resume = true;
        for (const auto& moved : set_aside_untrusted_checkpoints(run.folder, l.plan.name, l.trace))
            say("leg " + l.plan.name + ": checkpoint " + moved + " has no checkpoint event; set aside, not resumed from");
    }
    say("resuming " + run.folder.string());
    return run;
}

// Step 2: the run and its legs in run.h5 and the catalog; on resume run.h5's series are rebuilt
// from the events (the record of truth).
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
    return s;
}

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
                CpuProbeOptions co;
                co.bytes = 64LL << 20;
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
void attach_work(const Run& run, RunRecorder& rec, const std::vector<ProbeResult>& probes,
                 const std::function<void(const std::string&)>& say) {
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
                if (const SgemmFigure* s = p.sgemm_at(l.threads)) peak = s->flops_per_s;
        const bool shared = run.spec.leg_setting(l.plan.name, "plan") == "shared";
        rec.set_work(l.plan.name, shared ? flops : std::vector<double>{}, peak);
    }
}

// ---- step 4: supervising the legs -----------------------------------------------------------------

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
    l.resume = true;  // a later launch of this leg (after a pause or a crash) continues
}

// One line of the leg's stdout: journaled first (the record of truth), then applied.
void on_event_line(LiveLeg& l, std::string_view line) {
    l.journal->append_event(line);
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

    // One leg at a time per GPU here; CPU legs share the cores (threads split between them), and
    // the cluster's scheduler places Slurm legs.
    static std::vector<std::string> devices_of(const LegPlan& p) { return p.devices.empty() ? std::vector<std::string>{p.device} : p.devices; }
    bool devices_busy(const LiveLeg& leg) const {
        if (leg.plan.executor == "slurm") return false;
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

    // Records a flag and acts on it (pause / stop act on a running leg only).
    void raise(LiveLeg& l, const GateFlag& f) {
        l.journal->log("[tandem run] gate: " + f.message + " -> " + gate_action_name(f.action));
        if (opt_.on_flag) opt_.on_flag(f);
        else say_("gate: " + f.message + " (" + gate_action_name(f.action) + ")");
        l.flags.push_back(f);
        rec_.set_flags(l.plan.name, l.flags);
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
                (l.trace.error ? ": " + *l.trace.error : "") + "; log: " + (leg_folder(run, l.plan.name) / "stderr.log").string());
    }
    say("run folder: " + run.folder.string());
    return out;
}

// Installs SIGINT/SIGTERM handlers for the runner's life (restored on scope exit).
class InterruptScope {
public:
    InterruptScope() {
        struct sigaction sa {};
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old_int_);
        sigaction(SIGTERM, &sa, &old_term_);
        signal(SIGPIPE, SIG_IGN);  // a leg closing its end must not kill the runner
        g_interrupted = 0;
    }
    ~InterruptScope() {
        sigaction(SIGINT, &old_int_, nullptr);
        sigaction(SIGTERM, &old_term_, nullptr);
    }

private:
    struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace

bool runner_is_running(const fs::path& run_dir) {
    FileLock probe;
    if (!fs::exists(run_dir / ".runner.lock")) return false;
    return !probe.try_lock(run_dir / ".runner.lock");
}

std::string request_leg_action(const fs::path& run_dir, const std::string& leg, LegAction action, double wait_s) {
    std::error_code ec;
    if (!fs::is_directory(run_dir, ec) || !fs::exists(run_dir / "legs.json"))
        throw Error(run_dir.string() + ": not a tandem run folder (no legs.json)");
    bool known = false;
    try {
        for (const auto& e : json::parse(read_file(run_dir / "legs.json"))) known = known || e.at("name") == leg;
    } catch (const json::exception& e) {
        throw Error((run_dir / "legs.json").string() + ": not a valid legs file (" + e.what() + ")");
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

std::vector<LegPlan> plan_legs(const std::string& legs, const std::string& devices, const ExperimentSpec* spec) {
    std::vector<std::string> names = split_list(legs), devs = split_list(devices);
    if (names.empty()) throw Error("--legs: no leg given (e.g. engine,reference)");
    if (devs.empty()) devs = {"cpu"};
    const auto& known = leg_implementations();
    std::string known_list;
    for (const auto& k : known) known_list += (known_list.empty() ? "" : ", ") + k;
    std::vector<LegPlan> out;
    for (size_t i = 0; i < names.size(); ++i) {
        LegPlan p;
        auto eq = names[i].find('=');
        p.name = eq == std::string::npos ? names[i] : names[i].substr(0, eq);
        const ExperimentSpec::LegDefinition* def = spec ? spec->leg_definition(p.name) : nullptr;
        if (eq != std::string::npos) p.implementation = names[i].substr(eq + 1);
        else if (def) p.implementation = def->implementation;
        else p.implementation = p.name;
        if (std::find(known.begin(), known.end(), p.implementation) == known.end())
            throw Error("--legs: '" + names[i] + "': not a leg the experiment defines, and '" + p.implementation +
                        "' is not an implementation (" + known_list + "; NAME=IMPL to name a leg)");
        if (p.implementation == "command") {
            if (!def || def->command.empty())
                throw Error("--legs: '" + names[i] + "': a command leg needs its command in the experiment's legs." +
                            p.name + ".command");
            p.command = def->command;
        }
        validate_leg_name(p.name);
        for (const auto& o : out)
            if (o.name == p.name) throw Error("--legs: leg name '" + p.name + "' given twice");
        if (p.implementation == "engine" && spec) p.faults = spec->leg_fault_switches(p.name);  // docs/faults.md
        p.device = def && !def->device.empty() ? def->device : devs[i % devs.size()];
        if (def && !def->devices.empty()) {
            p.devices = def->devices;
            p.device = def->devices.front();
        }
        if (p.device != "cpu" && p.device.rfind("cuda:", 0) != 0)
            throw Error("--devices: '" + p.device + "' is not cpu or cuda:N");
        out.push_back(p);
    }
    return out;
}

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
    RunRecorder rec(run.folder / "run.h5", opt.catalog);
    try {
        register_run(run, rec);
        attach_work(run, rec, opt.probe ? run_probes(run, rec, say) : std::vector<ProbeResult>{}, say);
        Supervisor supervisor(run, rec, opt, say);
        const bool interrupted = supervisor.run() || g_interrupted;
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
