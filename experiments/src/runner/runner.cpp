// `tandem run`: prepare once, probe, launch the legs as processes, record their events, compare.
// Plain POSIX fork/exec/poll: one pipe for each leg's stdout (events) and one for its stderr (log).
#include "tandem/experiments/runner.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/experiments/catalog.h"
#include "tandem/experiments/compare.h"
#include "tandem/experiments/host_info.h"
#include "tandem/experiments/prepare.h"
#include "tandem/experiments/probe.h"
#include "tandem/experiments/report.h"
#include "tandem/experiments/run_file.h"
#include "tandem/version.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int) { g_interrupted = 1; }

using Clock = std::chrono::steady_clock;

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(item);
    return out;
}

fs::path self_executable() {
    std::error_code ec;
    fs::path p = fs::read_symlink("/proc/self/exe", ec);
    if (ec) throw Error("cannot find the tandem executable (/proc/self/exe): " + ec.message());
    return p;
}

std::string reference_python() {
    if (const char* p = std::getenv("TANDEM_REFENV_PYTHON"); p && *p) return p;
    if (const char* r = std::getenv("TANDEM_REFENV"); r && *r) return std::string(r) + "/bin/python";
    return TANDEM_REFENV_PYTHON_DEFAULT;
}

fs::path legs_dir() {
    if (const char* d = std::getenv("TANDEM_LEGS_DIR"); d && *d) return d;
    fs::path src = fs::path(TANDEM_SOURCE_DIR) / "experiments" / "legs";
    if (fs::exists(src / "reference_leg.py")) return src;
    return fs::path(TANDEM_INSTALL_DATADIR) / "legs";
}

struct LiveLeg {
    LegPlan plan;
    int threads = 1;
    bool resume = false;
    pid_t pid = -1;
    int out_fd = -1, err_fd = -1;
    std::string out_buf;
    std::string last_line;  // the leg's last stdout line (recorded for a leg that dies)
    std::ofstream events, stderr_log;
    LegTrace trace;
    std::string status = "pending";  // pending | running | finished | failed | interrupted
    int exit_status = 0;
    std::string started_at;
    // What is already in run.h5 (append only beyond these).
    int64_t recorded_step = -1, recorded_eval = -1;
    bool l1_written = false, l2_written = false, l3_written = false;
    std::vector<StepRow> pending_steps;
    std::vector<EvalRow> pending_evals;
    Clock::time_point launched;
    int64_t steps_this_attempt = 0;
    double wall_this_attempt = 0;
};

std::vector<std::string> leg_command(const LiveLeg& l, const fs::path& run_dir) {
    std::vector<std::string> argv;
    if (l.plan.implementation == "engine") {
        argv = {self_executable().string(), "leg", "engine"};
    } else if (l.plan.implementation == "reference") {
        argv = {reference_python(), (legs_dir() / "reference_leg.py").string()};
    } else {
        throw Error("leg " + l.plan.name + ": unknown implementation '" + l.plan.implementation + "' (engine, reference)");
    }
    for (const std::string& a : {std::string("--run"), run_dir.string(), std::string("--leg"), l.plan.name,
                                 std::string("--device"), l.plan.device, std::string("--threads"), std::to_string(l.threads)})
        argv.push_back(a);
    if (l.resume) argv.push_back("--resume");
    return argv;
}

void launch(LiveLeg& l, const fs::path& run_dir) {
    std::vector<std::string> argv = leg_command(l, run_dir);
    int out_pipe[2], err_pipe[2];
    if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
    pid_t pid = fork();
    if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);  // its own process group: Ctrl-C reaches the runner, which stops the legs cleanly
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        close(out_pipe[0]);
        close(out_pipe[1]);
        close(err_pipe[0]);
        close(err_pipe[1]);
        std::string t = std::to_string(l.threads);
        setenv("OMP_NUM_THREADS", t.c_str(), 1);
        setenv("OPENBLAS_NUM_THREADS", t.c_str(), 1);
        setenv("MKL_NUM_THREADS", t.c_str(), 1);
        setenv("PYTHONUNBUFFERED", "1", 1);
        std::vector<char*> cargv;
        for (auto& a : argv) cargv.push_back(a.data());
        cargv.push_back(nullptr);
        execv(cargv[0], cargv.data());
        std::fprintf(stderr, "cannot execute %s: %s\n", cargv[0], std::strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(out_pipe[1]);
    close(err_pipe[1]);
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    l.pid = pid;
    l.out_fd = out_pipe[0];
    l.err_fd = err_pipe[0];
    l.status = "running";
    l.started_at = utc_timestamp_now();
    l.launched = Clock::now();
    l.steps_this_attempt = 0;
    l.wall_this_attempt = 0;
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    l.stderr_log << "[tandem run] " << l.started_at << " launching: " << cmd << "\n";
    l.stderr_log.flush();
}

void handle_line(LiveLeg& l, const std::string& line) {
    l.events << line << "\n";
    if (!line.empty()) l.last_line = line.size() > 2000 ? line.substr(0, 2000) + "..." : line;
    std::string kind = apply_event_line(l.trace, line);
    if (kind == "step") {
        const StepRow& s = l.trace.steps.back();
        if (s.update > l.recorded_step) {
            l.pending_steps.push_back(s);
            l.recorded_step = s.update;
        }
        ++l.steps_this_attempt;
        l.wall_this_attempt += std::isfinite(s.wall_s) ? s.wall_s : 0;
    } else if (kind == "eval") {
        const EvalRow& e = l.trace.evals.back();
        if (e.update > l.recorded_eval) {
            l.pending_evals.push_back(e);
            l.recorded_eval = e.update;
        }
    } else if (kind.empty() && !l.trace.malformed.empty()) {
        l.stderr_log << "[tandem run] malformed event: " << l.trace.malformed.back() << "\n";
    }
}

// Reads what is available; returns false at end of file.
bool drain(int fd, std::string& buf, const std::function<void(const std::string&)>& on_line) {
    char chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n > 0) {
            buf.append(chunk, static_cast<size_t>(n));
            size_t pos;
            while ((pos = buf.find('\n')) != std::string::npos) {
                on_line(buf.substr(0, pos));
                buf.erase(0, pos + 1);
            }
            continue;
        }
        if (n == 0) {
            if (!buf.empty()) on_line(buf);
            buf.clear();
            return false;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        if (errno == EINTR) continue;
        return false;
    }
}

LegRecord leg_record(const std::string& run_id, const LiveLeg& l, int64_t total) {
    LegRecord r;
    r.run_id = run_id;
    r.name = l.plan.name;
    r.implementation = l.plan.implementation;
    r.device = l.plan.device;
    r.status = l.status;
    if (l.status != "running" && l.status != "pending") r.exit_status = l.exit_status;
    if (!l.started_at.empty()) r.started_at = l.started_at;
    if (l.status == "finished" || l.status == "failed" || l.status == "interrupted") r.finished_at = utc_timestamp_now();
    r.updates_done = static_cast<int64_t>(l.trace.steps.size());
    r.updates_total = total;
    if (!l.trace.steps.empty()) r.final_loss = l.trace.steps.back().loss;
    if (!l.trace.evals.empty()) {
        r.last_eval_update = l.trace.evals.back().update;
        r.last_eval_ce = l.trace.evals.back().heldout_ce;
    }
    double tok = 0, wall = 0;
    for (const auto& s : l.trace.steps) {
        tok += static_cast<double>(s.tokens);
        wall += s.wall_s;
    }
    if (wall > 0) r.tokens_per_s = tok / wall;
    if (l.trace.peak_device_bytes >= 0) r.peak_device_bytes = l.trace.peak_device_bytes;
    if (l.trace.peak_host_bytes >= 0) r.peak_host_bytes = l.trace.peak_host_bytes;
    if (l.trace.error) r.error = *l.trace.error;
    else if (l.status == "failed") r.error = "exit status " + std::to_string(l.exit_status);
    return r;
}

// Writes what arrived since the last flush into run.h5 (opened for this batch only, so readers can
// open the file between batches).
void flush_to_run_file(const fs::path& h5, std::vector<LiveLeg>& legs) {
    bool any = false;
    for (auto& l : legs)
        any = any || !l.pending_steps.empty() || !l.pending_evals.empty() || (l.trace.l1_ce && !l.l1_written) ||
              (l.trace.has_l2 && !l.l2_written) || (l.trace.has_l3 && !l.l3_written);
    if (!any) return;
    RunFileWriter w(h5);
    for (auto& l : legs) {
        if (!l.pending_steps.empty()) w.append_steps(l.plan.name, l.pending_steps);
        if (!l.pending_evals.empty()) w.append_eval(l.plan.name, l.pending_evals);
        l.pending_steps.clear();
        l.pending_evals.clear();
        if (l.trace.l1_ce && !l.l1_written) {
            w.write_check(l.plan.name, CheckLevel::L1, l1_to_json(l.trace).dump());
            l.l1_written = true;
        }
        if (l.trace.has_l2 && !l.l2_written) {
            w.write_check(l.plan.name, CheckLevel::L2, l2_to_json(l.trace).dump());
            l.l2_written = true;
        }
        if (l.trace.has_l3 && !l.l3_written) {
            w.write_check(l.plan.name, CheckLevel::L3, l3_to_json(l.trace).dump());
            l.l3_written = true;
        }
    }
}

void write_leg_summary(RunFileWriter& w, const LiveLeg& l) {
    const LegTrace& t = l.trace;
    LegTiming tm;
    tm.model_load_s = t.model_load_s;
    tm.tokenize_s = t.tokenize_s;
    tm.total_s = t.total_s;
    auto [first, last] = timing_window(static_cast<int64_t>(t.steps.size()));
    tm.window_first = first;
    tm.window_last = last;
    std::vector<double> win;
    double tok = 0, wall = 0;
    for (const auto& s : t.steps) {
        if (s.update >= first && s.update <= last) win.push_back(s.wall_s);
        tok += static_cast<double>(s.tokens);
        wall += s.wall_s;
    }
    if (!win.empty()) tm.median_update_s = percentile(win, 50);
    if (wall > 0) tm.tokens_per_s = tok / wall;
    tm.extra["setup_s"] = t.setup_s;
    tm.extra["train_s"] = t.train_s;
    w.write_timing(l.plan.name, tm);
    LegMemory m;
    m.peak_device_bytes = t.peak_device_bytes;
    m.peak_host_bytes = t.peak_host_bytes;
    w.write_memory(l.plan.name, m);
    Attributes a{{"status", l.status}, {"exit_status", static_cast<int64_t>(l.exit_status)},
                 {"updates_done", static_cast<int64_t>(t.steps.size())}, {"resumes", static_cast<int64_t>(t.resumes)},
                 {"malformed_lines", static_cast<int64_t>(t.malformed.size())}, {"hello", t.hello.dump()}};
    if (t.error) a["error"] = *t.error;
    if (l.status != "finished" && !l.last_line.empty()) a["last_event"] = l.last_line;
    if (!t.malformed.empty()) a["first_malformed"] = t.malformed.front();
    w.set_leg_attributes(l.plan.name, a);
}

std::string human_seconds(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    char b[32];
    if (s < 60) std::snprintf(b, sizeof b, "%.0fs", s);
    else if (s < 3600) std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
    else std::snprintf(b, sizeof b, "%dh%02dm", static_cast<int>(s) / 3600, (static_cast<int>(s) % 3600) / 60);
    return b;
}

std::string progress_line(const LiveLeg& l, int64_t total) {
    const LegTrace& t = l.trace;
    char b[256];
    int64_t done = t.steps.empty() ? 0 : t.steps.back().update + 1;
    std::string loss = t.steps.empty() ? "-" : [&] { char x[32]; std::snprintf(x, sizeof x, "%.4f", t.steps.back().loss); return std::string(x); }();
    std::string ev = t.evals.empty() ? "-" : [&] {
        char x[48];
        std::snprintf(x, sizeof x, "%.5f@%lld", t.evals.back().heldout_ce, static_cast<long long>(t.evals.back().update));
        return std::string(x);
    }();
    double tok = 0, wall = 0;
    for (const auto& s : t.steps) {
        tok += static_cast<double>(s.tokens);
        wall += s.wall_s;
    }
    double per_update = l.steps_this_attempt > 0 ? l.wall_this_attempt / static_cast<double>(l.steps_this_attempt) : -1;
    std::snprintf(b, sizeof b, "%-12s %-9s %5lld/%-5lld loss %-8s eval %-14s %7.0f tok/s  ETA %-7s %s",
                  l.plan.name.c_str(), l.plan.device.c_str(), static_cast<long long>(done), static_cast<long long>(total),
                  loss.c_str(), ev.c_str(), wall > 0 ? tok / wall : 0.0,
                  per_update > 0 ? human_seconds(per_update * static_cast<double>(total - done)).c_str() : "?",
                  l.status.c_str());
    return b;
}

}  // namespace

std::vector<LegPlan> plan_legs(const std::string& legs, const std::string& devices) {
    std::vector<std::string> names = split_list(legs), devs = split_list(devices);
    if (names.empty()) throw Error("--legs: no leg given (e.g. engine,reference)");
    if (devs.empty()) devs = {"cpu"};
    std::vector<LegPlan> out;
    for (size_t i = 0; i < names.size(); ++i) {
        LegPlan p;
        auto eq = names[i].find('=');
        p.name = eq == std::string::npos ? names[i] : names[i].substr(0, eq);
        p.implementation = eq == std::string::npos ? names[i] : names[i].substr(eq + 1);
        if (p.implementation != "engine" && p.implementation != "reference")
            throw Error("--legs: '" + names[i] + "': implementation must be engine or reference (NAME=IMPL to name a leg)");
        validate_leg_name(p.name);
        for (const auto& o : out)
            if (o.name == p.name) throw Error("--legs: leg name '" + p.name + "' given twice");
        p.device = devs[i % devs.size()];
        if (p.device != "cpu" && p.device.rfind("cuda:", 0) != 0)
            throw Error("--devices: '" + p.device + "' is not cpu or cuda:N");
        out.push_back(p);
    }
    return out;
}

RunOutcome run_experiment(const RunnerOptions& opt) {
    auto say = [&](const std::string& s) {
        std::fprintf(stderr, "tandem run: %s\n", s.c_str());
    };
    ExperimentSpec spec;
    PreparedRun prepared;
    std::vector<LegPlan> plans;
    fs::path folder;
    if (opt.resume) {
        folder = fs::absolute(*opt.resume);
        spec = load_run_spec(folder);
        prepared = read_prepared_run(folder);
        json lj = json::parse(read_file(folder / "legs.json"));
        for (const auto& e : lj) plans.push_back({e.at("name"), e.at("implementation"), e.at("device")});
        say("resuming " + folder.string());
    } else {
        spec = load_experiment(opt.experiment);
        plans = opt.legs;
        folder = new_run_folder(opt.out_dir, spec.name);
        say("preparing " + folder.string());
        PrepareOptions po;
        po.assets = opt.assets;
        po.log = [&](const std::string& s) { say("  " + s); };
        prepared = prepare_run(spec, folder, po);
        json lj = json::array();
        for (const auto& p : plans) lj.push_back({{"name", p.name}, {"implementation", p.implementation}, {"device", p.device}});
        write_file_atomic(folder / "legs.json", lj.dump(1) + "\n");
    }
    for (const auto& [leg, fields] : spec.overrides) {
        bool used = false;
        for (const auto& p : plans) used = used || p.name == leg;
        if (!used) say("note: the experiment overrides settings of leg '" + leg + "', which this run does not have");
    }
    const fs::path h5 = folder / "run.h5";
    const int64_t total = prepared.total_updates;
    Catalog catalog(opt.catalog);
    HostInfo host = collect_host_info();

    RunRecord rr;
    if (auto existing = catalog.run(prepared.run_id)) rr = *existing;
    rr.id = prepared.run_id;
    rr.experiment = spec.name;
    rr.spec_sha256 = spec.sha256();
    rr.folder = folder.string();
    rr.run_file = h5.string();
    if (rr.started_at.empty()) rr.started_at = utc_timestamp_now();
    rr.status = "running";
    rr.finished_at.reset();
    rr.tandem_version = TANDEM_VERSION;
    rr.hostname = host.hostname;
    rr.runner_pid = static_cast<int64_t>(getpid());
    catalog.upsert_run(rr);

    std::vector<LiveLeg> legs(plans.size());
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    int cpu_total = opt.cpu_threads > 0 ? opt.cpu_threads : static_cast<int>(hw);
    int cpu_legs = 0;
    for (const auto& p : plans) cpu_legs += p.device == "cpu";
    for (size_t i = 0; i < plans.size(); ++i) {
        LiveLeg& l = legs[i];
        l.plan = plans[i];
        l.threads = l.plan.device == "cpu" ? std::max(1, cpu_total / std::max(1, cpu_legs)) : 1;
        fs::path ld = folder / "legs" / l.plan.name;
        fs::create_directories(ld);
        if (opt.resume) {
            l.trace = read_events_file(ld / "events.jsonl");
            l.resume = !l.trace.done;
            l.status = l.trace.done ? "finished" : "pending";
        }
        l.events.open(ld / "events.jsonl", std::ios::app);
        l.stderr_log.open(ld / "stderr.log", std::ios::app);
    }

    {
        RunFileWriter w(h5);
        if (!opt.resume) {
            w.write_host(host);
            ExperimentInfo info;
            info.name = spec.name;
            info.spec_json = spec.to_json().dump();
            info.spec_sha256 = spec.sha256();
            info.run_id = prepared.run_id;
            w.write_experiment(info);
        }
        for (auto& l : legs) {
            w.create_leg(l.plan.name, {{"implementation", l.plan.implementation}, {"device", l.plan.device},
                                       {"threads", static_cast<int64_t>(l.threads)}, {"status", l.status}});
            catalog.upsert_leg(leg_record(prepared.run_id, l, total));
        }
    }
    if (opt.resume) {
        RunFileReader r(h5);
        for (auto& l : legs) {
            auto st = r.steps(l.plan.name);
            auto ev = r.eval(l.plan.name);
            if (!st.empty()) l.recorded_step = st.back().update;
            if (!ev.empty()) l.recorded_eval = ev.back().update;
            l.l1_written = r.check(l.plan.name, CheckLevel::L1).has_value();
            l.l2_written = r.check(l.plan.name, CheckLevel::L2).has_value();
            l.l3_written = r.check(l.plan.name, CheckLevel::L3).has_value();
        }
    }

    // Probes: once per device used by a leg that will run now.
    if (opt.probe) {
        std::vector<std::string> devices;
        for (const auto& l : legs)
            if (l.status == "pending" && std::find(devices.begin(), devices.end(), l.plan.device) == devices.end())
                devices.push_back(l.plan.device);
        for (const auto& d : devices) {
            try {
                ProbeResult p;
                if (d == "cpu") {
                    CpuProbeOptions co;
                    co.bytes = 64LL << 20;
                    co.repeats = 5;
                    p = probe_cpu(co);
                } else {
                    p = probe_cuda(std::stoi(d.substr(5)));
                }
                RunFileWriter(h5).write_probe(p);
                catalog.add_probe(p, h5.string(), host.hostname);
                say("probe " + d + " done");
            } catch (const std::exception& e) {
                say("probe " + d + " failed: " + e.what());
            }
        }
    }

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    struct sigaction old_int {}, old_term {};
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    g_interrupted = 0;

    const bool tty = isatty(STDOUT_FILENO) && !opt.quiet;
    size_t lines_drawn = 0;
    auto last_flush = Clock::now();
    auto last_print = Clock::now() - std::chrono::hours(1);
    bool stopping = false;
    auto busy = [&](const std::string& device) {
        if (device == "cpu") return false;  // CPU legs share the cores (threads split above)
        for (const auto& l : legs)
            if (l.status == "running" && l.plan.device == device) return true;
        return false;
    };

    for (;;) {
        if (g_interrupted && !stopping) {
            stopping = true;
            say("interrupted: stopping the legs");
            for (auto& l : legs)
                if (l.status == "running") kill(-l.pid, SIGTERM);
        }
        if (!stopping)
            for (auto& l : legs)
                if (l.status == "pending" && !busy(l.plan.device)) launch(l, folder);

        std::vector<pollfd> fds;
        std::vector<std::pair<LiveLeg*, bool>> owners;  // (leg, is_stdout)
        for (auto& l : legs) {
            if (l.out_fd >= 0) {
                fds.push_back({l.out_fd, POLLIN, 0});
                owners.emplace_back(&l, true);
            }
            if (l.err_fd >= 0) {
                fds.push_back({l.err_fd, POLLIN, 0});
                owners.emplace_back(&l, false);
            }
        }
        if (!fds.empty()) poll(fds.data(), fds.size(), 200);
        for (size_t i = 0; i < fds.size(); ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            LiveLeg& l = *owners[i].first;
            if (owners[i].second) {
                if (!drain(l.out_fd, l.out_buf, [&](const std::string& line) { handle_line(l, line); })) {
                    close(l.out_fd);
                    l.out_fd = -1;
                }
                l.events.flush();
            } else {
                std::string buf;
                if (!drain(l.err_fd, buf, [&](const std::string& line) { l.stderr_log << line << "\n"; })) {
                    close(l.err_fd);
                    l.err_fd = -1;
                }
                l.stderr_log.flush();
            }
        }
        // Reap legs whose pipes are closed.
        for (auto& l : legs) {
            if (l.status != "running" || l.out_fd >= 0 || l.err_fd >= 0) continue;
            int st = 0;
            if (waitpid(l.pid, &st, 0) < 0) continue;
            l.exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && l.trace.done) l.status = "finished";
            else if (stopping) l.status = "interrupted";
            else l.status = "failed";
            if (!WIFEXITED(st) && !l.trace.error) l.trace.error = std::string("killed by signal ") + std::to_string(WTERMSIG(st)) +
                                                                 " (" + strsignal(WTERMSIG(st)) + ")";
            l.stderr_log << "[tandem run] " << utc_timestamp_now() << " leg ended: " << l.status << ", exit status "
                         << l.exit_status << "\n";
            l.stderr_log.flush();
            flush_to_run_file(h5, legs);
            {
                RunFileWriter w(h5);
                write_leg_summary(w, l);
            }
            catalog.upsert_leg(leg_record(prepared.run_id, l, total));
            if (!opt.quiet && !tty) std::printf("%s\n", progress_line(l, total).c_str());
        }
        auto now = Clock::now();
        if (now - last_flush > std::chrono::seconds(1)) {
            flush_to_run_file(h5, legs);
            for (const auto& l : legs)
                if (l.status == "running") catalog.upsert_leg(leg_record(prepared.run_id, l, total));
            last_flush = now;
        }
        if (!opt.quiet) {
            if (tty && now - last_print > std::chrono::milliseconds(500)) {
                if (lines_drawn) std::printf("\033[%zuA", lines_drawn);
                for (const auto& l : legs) std::printf("\r\033[K%s\n", progress_line(l, total).c_str());
                lines_drawn = legs.size();
                std::fflush(stdout);
                last_print = now;
            } else if (!tty && now - last_print > std::chrono::seconds(10)) {
                for (const auto& l : legs)
                    if (l.status == "running") std::printf("%s\n", progress_line(l, total).c_str());
                std::fflush(stdout);
                last_print = now;
            }
        }
        bool active = false;
        for (const auto& l : legs) active = active || l.status == "running" || (l.status == "pending" && !stopping);
        if (!active) break;
    }
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    if (tty) {
        if (lines_drawn) std::printf("\033[%zuA", lines_drawn);
        for (const auto& l : legs) std::printf("\r\033[K%s\n", progress_line(l, total).c_str());
        std::fflush(stdout);
    }
    flush_to_run_file(h5, legs);

    RunOutcome out;
    out.folder = folder;
    out.run_id = prepared.run_id;
    bool all_finished = true;
    for (auto& l : legs) {
        all_finished = all_finished && l.status == "finished";
        out.legs.push_back({l.plan, l.status, l.exit_status, l.trace});
    }
    out.status = stopping ? "interrupted" : (all_finished ? "finished" : "failed");

    // Comparison of whatever the legs recorded, stored in the run file and printed.
    Comparison cmp;
    {
        RunFileReader r(h5);
        cmp = compare_legs(read_legs(r), spec);
        cmp.probes = r.probes();
    }
    {
        RunFileWriter w(h5);
        if (legs.size() >= 2) write_comparisons(w, cmp);
    }
    out.checks_passed = cmp.passed();
    rr.status = out.status;
    rr.finished_at = utc_timestamp_now();
    rr.note = cmp.passed() ? "all cross-checks passed" : (cmp.failures.empty() ? "" : cmp.failures.front());
    catalog.upsert_run(rr);
    if (!opt.report_format.empty()) {
        std::string text = render_report(prepared.run_id, cmp, parse_report_format(opt.report_format));
        std::printf("\n%s", text.c_str());
        std::fflush(stdout);
    }
    for (const auto& l : legs)
        if (l.status != "finished")
            say("leg " + l.plan.name + " " + l.status + " (exit status " + std::to_string(l.exit_status) + ")" +
                (l.trace.error ? ": " + *l.trace.error : "") + "; log: " + (folder / "legs" / l.plan.name / "stderr.log").string());
    say("run folder: " + folder.string());
    return out;
}

}  // namespace tandem::experiments
