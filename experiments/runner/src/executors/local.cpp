// The local executor (a child process with pipes), short helper commands, process.json, and finding a
// leg again after its runner died. The Slurm executor is executors/slurm.cpp.
#include "executors/executor.h"

#include "tandem/runner/leg_process.h"
#include "tandem/runner/run_record.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

// executors/slurm.cpp
LegExecutor& slurm_executor();
std::unique_ptr<LegHandle> reattach_slurm_leg(const fs::path& leg_dir, const json& record, const fs::path& events_file,
                                              const std::function<void(const std::string&)>& say);

namespace {

// ---- local: a child process of the runner ------------------------------------------------------------

class LocalLeg : public LegHandle {
public:
    explicit LocalLeg(ChildProcess p) : proc_(std::move(p)), identity_(identify_process(proc_.pid)) {}
    ~LocalLeg() override {
        if (proc_.out_fd >= 0) close(proc_.out_fd);
        if (proc_.err_fd >= 0) close(proc_.err_fd);
    }

    std::vector<int> pollable_fds() const override {
        std::vector<int> fds;
        if (proc_.out_fd >= 0) fds.push_back(proc_.out_fd);
        if (proc_.err_fd >= 0) fds.push_back(proc_.err_fd);
        return fds;
    }

    void read(const LineSink& on_event, const LineSink& on_log) override {
        if (proc_.out_fd >= 0 && !read_lines(proc_.out_fd, proc_.out_buf, on_event)) {
            close(proc_.out_fd);
            proc_.out_fd = -1;
        }
        if (proc_.err_fd >= 0 && !read_lines(proc_.err_fd, proc_.err_buf, on_log)) {
            close(proc_.err_fd);
            proc_.err_fd = -1;
        }
    }

    // Both pipes at end of file: the process has closed them (exited, or handed them to nobody).
    bool ended() override { return proc_.out_fd < 0 && proc_.err_fd < 0; }
    bool running() const override { return proc_.out_fd >= 0 || proc_.err_fd >= 0; }

    LegExit exit() override {
        if (!exit_) {
            LegExit e;
            e.exit_status = wait_for_exit(proc_.pid, &e.signal);
            e.clean = e.signal == 0 && e.exit_status == 0;
            if (e.signal != 0)
                e.description = "killed by signal " + std::to_string(e.signal) + " (" + strsignal(e.signal) + ")";
            exit_ = e;
        }
        return *exit_;
    }

    void stop(bool force) override {
        if (exit_) return;
        signal_group(proc_.pid, force ? SIGKILL : SIGTERM);
        // A stopped (SIGSTOPped) leg keeps a SIGTERM pending until it continues: continue it, so
        // it ends now instead of after the grace period's SIGKILL.
        if (!force) signal_group(proc_.pid, SIGCONT);
    }

    std::optional<ProcessState> process() const override {
        if (exit_) return ProcessState{};
        return process_state(proc_.pid);
    }

    json record() const override {
        return json{{"executor", "local"}, {"pid", identity_.pid}, {"start_ticks", identity_.start_ticks}, {"runner_pid", ::getpid()}};
    }

    std::string describe() const override { return "pid " + std::to_string(proc_.pid); }

private:
    ChildProcess proc_;
    ProcessIdentity identity_;
    std::optional<LegExit> exit_;
};

class LocalExecutor : public LegExecutor {
public:
    std::unique_ptr<LegHandle> start(const LegLaunch& launch) override {
        return std::make_unique<LocalLeg>(spawn_process(launch.argv, launch.env));
    }
};

// A local leg recorded by a runner that died: killed when that very process (pid and start time)
// still runs. The kernel kills legs with their runner (PR_SET_PDEATHSIG); this covers the rest.
bool stop_local_left_over(const json& j) {
    ProcessIdentity p;
    try {
        p.pid = j.at("pid").get<pid_t>();
        p.start_ticks = j.at("start_ticks").get<unsigned long long>();
    } catch (const std::exception&) {
        return false;
    }
    if (!still_running(p)) return false;
    signal_group(p.pid, SIGKILL);
    ::kill(p.pid, SIGKILL);
    for (int i = 0; i < 100 && still_running(p); ++i) ::usleep(20000);
    return true;
}

}  // namespace

LegExecutor& executor_for(const std::string& name) {
    static LocalExecutor local;
    if (name == "local") return local;
    if (name == "slurm") return slurm_executor();
    throw Error("unknown leg executor '" + name + "' (local, slurm)");
}

void record_leg_process(const fs::path& leg_dir, const json& record) {
    write_file_atomic(leg_dir / "process.json", record.dump() + "\n");
}

std::unique_ptr<LegHandle> find_left_over_leg(const fs::path& leg_dir, const fs::path& events_file,
                                              const std::function<void(const std::string&)>& say) {
    const fs::path f = leg_dir / "process.json";
    std::error_code ec;
    if (!fs::exists(f, ec)) return nullptr;
    json j;
    try {
        j = json::parse(read_file(f));
    } catch (const std::exception&) {
        clear_leg_process(leg_dir);  // a torn record (the runner died writing it): nothing to find
        return nullptr;
    }
    const std::string leg = leg_dir.filename().string();
    if (j.value("executor", "local") == "slurm") return reattach_slurm_leg(leg_dir, j, events_file, say);
    if (stop_local_left_over(j)) say("stopped leg " + leg + " left running by an earlier runner");
    clear_leg_process(leg_dir);
    return nullptr;
}

// ---- short commands ----------------------------------------------------------------------------------

CommandResult run_command(const std::vector<std::string>& argv, double timeout_s) {
    CommandResult r;
    ChildProcess p;
    try {
        p = spawn_process(argv, {});
    } catch (const Error& e) {
        r.exit_status = 127;
        r.err = e.what();
        return r;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    // Raw bytes (not lines): what the command printed, exactly.
    auto take = [](int& fd, std::string& into) {
        char chunk[65536];
        for (;;) {
            const ssize_t n = ::read(fd, chunk, sizeof chunk);
            if (n > 0) {
                into.append(chunk, static_cast<size_t>(n));
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            close(fd);  // end of file (or an error: nothing more will come)
            fd = -1;
            return;
        }
    };
    while (p.out_fd >= 0 || p.err_fd >= 0) {
        pollfd fds[2];
        nfds_t n = 0;
        if (p.out_fd >= 0) fds[n++] = {p.out_fd, POLLIN, 0};
        if (p.err_fd >= 0) fds[n++] = {p.err_fd, POLLIN, 0};
        ::poll(fds, n, 100);
        if (p.out_fd >= 0) take(p.out_fd, r.out);
        if (p.err_fd >= 0) take(p.err_fd, r.err);
        if (!r.timed_out && std::chrono::steady_clock::now() > deadline) {
            r.timed_out = true;
            signal_group(p.pid, SIGKILL);
        }
    }
    r.exit_status = wait_for_exit(p.pid, nullptr);
    if (r.exit_status == 127 && r.err.find("cannot execute") != std::string::npos) r.err = r.err.substr(0, r.err.find('\n'));
    return r;
}

std::string shell_quote(const std::string& word) {
    std::string q = "'";
    for (char c : word) {
        if (c == '\'') q += "'\\''";
        else q += c;
    }
    return q + "'";
}

}  // namespace tandem::experiments
