// The Slurm executor (docs/cluster.md): each attempt of a leg is a batch job submitted with sbatch.
// Its job script (legs/<leg>/slurm/attempt-N.sh) sets the leg's environment and execs the leg; the
// job's stdout (the leg's events) and stderr go to legs/<leg>/slurm/attempt-N.out / .err on the shared
// filesystem. The runner follows those files as it reads a local leg's pipes (whole lines, in order)
// and asks squeue for the job's state, scontrol (or sacct, once slurmctld has forgotten the job) for
// how it ended; scancel stops it. A killed runner leaves the job running: legs/<leg>/process.json keeps
// the job id and the size events.jsonl had at submission, so the next runner continues following the
// job from the first byte events.jsonl does not hold.
#include "executors/executor.h"

#include "tandem/runner/run_record.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/utc_time.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// How often squeue is asked about a running job. Events do not wait for it: the output files are
// read on every supervisor poll.
constexpr double kStatePollSeconds = 1.0;
// After the job has ended: output that appears this long after the last new byte is not waited for
// (the job has closed its files by then; NFS close-to-open consistency makes them whole at open).
constexpr double kSettleSeconds = 0.5;
// sacct may lag behind the end of a job (slurmdbd is asynchronous): how long to keep asking.
constexpr double kAccountingWaitSeconds = 30.0;
// Timeout of one Slurm command (a busy slurmctld answers within seconds).
constexpr double kCommandTimeoutSeconds = 60.0;

bool terminal_state(const std::string& s) {
    static const char* const kTerminal[] = {"COMPLETED", "FAILED",   "CANCELLED", "TIMEOUT",  "NODE_FAIL",   "OUT_OF_MEMORY",
                                            "PREEMPTED", "BOOT_FAIL", "DEADLINE",  "REVOKED", "SPECIAL_EXIT"};
    for (const char* t : kTerminal)
        if (s == t) return true;
    return false;
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    size_t b = 0;
    while (b < s.size() && s[b] == ' ') ++b;
    return s.substr(b);
}

std::string first_line(const std::string& s) { return trim(s.substr(0, s.find('\n'))); }

// A command's failure as one line: "sbatch: error: Batch job submission failed: ..." or the exit code.
std::string failure_of(const std::vector<std::string>& argv, const CommandResult& r) {
    if (r.timed_out) return argv[0] + " did not answer within " + std::to_string(static_cast<int>(kCommandTimeoutSeconds)) + " s";
    std::string e = first_line(r.err);
    if (e.empty()) e = first_line(r.out);
    if (e.empty()) e = "exit status " + std::to_string(r.exit_status);
    return e;
}

// Reads the lines a file gains while another process (the job, on another machine) appends to it. The
// file is opened anew for every read, so an NFS client revalidates its size (close-to-open).
class FileFollower {
public:
    FileFollower() = default;
    FileFollower(fs::path path, uint64_t offset) : path_(std::move(path)), offset_(offset) {}

    // Passes every complete new line; returns true when new bytes were read.
    bool read(const LineSink& on_line) {
        const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return false;  // not created yet (a pending job)
        bool got = false;
        char chunk[65536];
        for (;;) {
            const ssize_t n = ::pread(fd, chunk, sizeof chunk, static_cast<off_t>(offset_));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got = true;
            offset_ += static_cast<uint64_t>(n);
            append_lines(buf_, std::string_view(chunk, static_cast<size_t>(n)), on_line);
        }
        ::close(fd);
        return got;
    }
    // The unfinished last line, once the writer is gone.
    void finish(const LineSink& on_line) {
        if (!buf_.empty()) on_line(buf_);
        buf_.clear();
    }
    uint64_t consumed() const { return offset_ - buf_.size(); }  // bytes passed on as lines

private:
    fs::path path_;
    uint64_t offset_ = 0;
    std::string buf_;
};

std::string read_tail(const fs::path& p, uint64_t from) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    std::string s;
    char chunk[65536];
    for (;;) {
        const ssize_t n = ::pread(fd, chunk, sizeof chunk, static_cast<off_t>(from + s.size()));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        s.append(chunk, static_cast<size_t>(n));
    }
    ::close(fd);
    return s;
}

}  // namespace

uint64_t journaled_prefix(const fs::path& events, uint64_t journal_start, const fs::path& out) {
    const std::string journal = read_tail(events, journal_start);
    const std::string output = read_tail(out, 0);
    uint64_t pos = 0;
    size_t start = 0, nl;
    while ((nl = journal.find('\n', start)) != std::string::npos) {
        const std::string_view line = std::string_view(journal).substr(start, nl - start);
        if (output.compare(pos, line.size() + 1, std::string(line) + "\n") == 0) {
            pos += line.size() + 1;
        } else {
            if (pos + line.size() == output.size() && output.compare(pos, line.size(), line) == 0) pos += line.size();
            break;
        }
        start = nl + 1;
    }
    return pos;
}

namespace {

std::string job_name_for(const fs::path& run_dir, const std::string& leg, int attempt) {
    std::string name = "tandem:" + run_dir.filename().string() + ":" + leg + ":" + std::to_string(attempt);
    for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != ':' && c != '-' && c != '_' && c != '.') c = '_';
    return name;
}

int next_attempt(const fs::path& dir) {
    int n = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string f = it->path().filename().string();
        if (f.rfind("attempt-", 0) == 0 && f.size() > 11 && f.substr(f.size() - 3) == ".sh")
            n = std::max(n, std::atoi(f.substr(8, f.size() - 11).c_str()));
    }
    return n + 1;
}

class SlurmLeg : public LegHandle {
public:
    struct Files {
        fs::path leg_dir;
        std::string script, out, err;  // file names inside leg_dir/slurm
    };

    SlurmLeg(std::string job_id, std::string job_name, Files files, uint64_t journal_start, uint64_t out_offset,
             uint64_t err_offset)
        : job_id_(std::move(job_id)),
          job_name_(std::move(job_name)),
          files_(std::move(files)),
          journal_start_(journal_start),
          out_(files_.leg_dir / "slurm" / files_.out, out_offset),
          err_(files_.leg_dir / "slurm" / files_.err, err_offset),
          err_saved_(err_offset) {}

    std::vector<int> pollable_fds() const override { return {}; }

    void read(const LineSink& on_event, const LineSink& on_log) override {
        const auto now = Clock::now();
        if (!stop_error_.empty()) {
            note(on_log, "scancel: " + stop_error_);
            stop_error_.clear();
        }
        if (out_.read(on_event)) last_data_ = now;
        if (err_.read(on_log)) last_data_ = now;
        if (!final_) {
            if (now >= next_poll_) {
                poll_state(on_log);
                next_poll_ = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kStatePollSeconds));
                if (final_) {
                    ended_seen_ = now;
                    // The job has ended: its files are complete now (or within kSettleSeconds).
                    if (out_.read(on_event)) last_data_ = now;
                    if (err_.read(on_log)) last_data_ = now;
                }
            }
        }
        if (ended_ready(now) && !finished_) {
            out_.finish(on_event);
            err_.finish(on_log);
            finished_ = true;
        }
        // stderr offset kept in process.json (about once a second) so a re-attached runner does not
        // copy the job's stderr into stderr.log twice; events need no such record (see above).
        if (err_.consumed() != err_saved_ && now - err_saved_at_ > std::chrono::seconds(1) && !finished_) {
            err_saved_ = err_.consumed();
            err_saved_at_ = now;
            try {
                record_leg_process(files_.leg_dir, record());
            } catch (const std::exception&) {
                // a courtesy: at worst a re-attached runner repeats some stderr lines
            }
        }
    }

    bool ended() override { return finished_; }
    bool running() const override { return !final_; }

    LegExit exit() override {
        LegExit e;
        const std::string state = state_.value_or("UNKNOWN");
        e.signal = exit_signal_;
        e.exit_status = exit_signal_ != 0 ? 128 + exit_signal_ : exit_code_;
        e.clean = state == "COMPLETED" && exit_code_ == 0 && exit_signal_ == 0;
        if (!e.clean)
            e.description = "Slurm job " + (job_id_.empty() ? job_name_ : job_id_) + " " + state + " (exit code " +
                            std::to_string(exit_code_) + ":" + std::to_string(exit_signal_) + ")" +
                            (state_note_.empty() ? "" : ": " + state_note_);
        return e;
    }

    void stop(bool force) override {
        if (final_) return;
        std::vector<std::string> argv = {"scancel"};
        if (force) argv.insert(argv.end(), {"--signal=KILL", "--full"});
        if (job_id_.empty()) argv.push_back("--name=" + job_name_);
        else argv.push_back(job_id_);
        CommandResult r = run_command(argv, kCommandTimeoutSeconds);
        if (r.exit_status != 0) stop_error_ = failure_of(argv, r);
    }

    json record() const override {
        return json{{"executor", "slurm"},
                    {"job_id", job_id_},
                    {"job_name", job_name_},
                    {"script", files_.script},
                    {"stdout", files_.out},
                    {"stderr", files_.err},
                    {"journal_start", journal_start_},
                    {"stderr_offset", err_saved_},
                    {"runner_pid", ::getpid()}};
    }

    std::string describe() const override { return "Slurm job " + (job_id_.empty() ? job_name_ : job_id_); }

    const std::string& job_id() const { return job_id_; }
    std::optional<std::string> state() const { return state_; }

    // When the job's id is unknown (the runner was killed between sbatch and process.json): the job
    // of that unique name, if Slurm has one.
    void find_job_by_name() {
        CommandResult r = run_command({"squeue", "-h", "--name=" + job_name_, "-o", "%i"}, kCommandTimeoutSeconds);
        std::string id = r.exit_status == 0 ? first_line(r.out) : "";
        if (id.empty()) {
            r = run_command({"sacct", "-n", "-X", "-P", "-S", "now-7days", "--name=" + job_name_, "-o", "JobID"},
                            kCommandTimeoutSeconds);
            if (r.exit_status == 0) id = first_line(r.out);
        }
        if (!id.empty()) job_id_ = id;
    }

private:
    bool ended_ready(Clock::time_point now) const {
        if (!final_) return false;
        const auto since = std::chrono::duration<double>(now - std::max(last_data_, ended_seen_)).count();
        return since >= kSettleSeconds;
    }

    void poll_state(const LineSink& on_log) {
        if (job_id_.empty()) {
            find_job_by_name();
            if (job_id_.empty()) {  // never submitted, or forgotten by Slurm: nothing runs
                state_ = "UNKNOWN";
                state_note_ = "no job named " + job_name_ + " is known to Slurm";
                exit_code_ = 1;
                final_ = true;
                return;
            }
        }
        const std::vector<std::string> q = {"squeue", "-h", "-j", job_id_, "-o", "%T"};
        CommandResult r = run_command(q, kCommandTimeoutSeconds);
        const std::string live = r.exit_status == 0 ? first_line(r.out) : "";
        if (r.exit_status == 0 && !live.empty() && !terminal_state(live)) {
            state_ = live;  // PENDING, CONFIGURING, RUNNING, COMPLETING, SUSPENDED, ...
            return;
        }
        if (r.exit_status != 0 && r.err.find("Invalid job id") == std::string::npos) {
            note(on_log, "squeue: " + failure_of(q, r));  // slurmctld busy or unreachable: ask again later
            return;
        }
        // Not queued any more: how did it end? slurmctld remembers for MinJobAge, then sacct.
        if (final_from_scontrol() || final_from_sacct()) return;
        if (!gone_since_) gone_since_ = Clock::now();
        if (Clock::now() - *gone_since_ > std::chrono::duration<double>(kAccountingWaitSeconds)) {
            state_ = "UNKNOWN";
            state_note_ = "neither squeue, scontrol nor sacct knows how the job ended";
            exit_code_ = 1;
            final_ = true;
        }
    }

    bool final_from_scontrol() {
        CommandResult r = run_command({"scontrol", "show", "job", "-o", job_id_}, kCommandTimeoutSeconds);
        if (r.exit_status != 0) return false;
        std::string state, code;
        std::string line = first_line(r.out);
        size_t pos = 0;
        while (pos < line.size()) {
            size_t sp = line.find(' ', pos);
            std::string field = line.substr(pos, sp == std::string::npos ? std::string::npos : sp - pos);
            if (field.rfind("JobState=", 0) == 0) state = field.substr(9);
            if (field.rfind("ExitCode=", 0) == 0) code = field.substr(9);
            if (field.rfind("Reason=", 0) == 0 && field != "Reason=None") state_note_ = field.substr(7);
            if (sp == std::string::npos) break;
            pos = sp + 1;
        }
        if (!terminal_state(state)) return false;
        set_final(state, code);
        return true;
    }

    bool final_from_sacct() {
        CommandResult r = run_command({"sacct", "-n", "-X", "-P", "-j", job_id_, "-o", "State,ExitCode"}, kCommandTimeoutSeconds);
        if (r.exit_status != 0) return false;
        const std::string line = first_line(r.out);
        const auto bar = line.find('|');
        if (bar == std::string::npos) return false;
        std::string state = line.substr(0, bar);
        state = state.substr(0, state.find(' '));  // "CANCELLED by 0"
        if (!terminal_state(state)) return false;
        set_final(state, line.substr(bar + 1));
        return true;
    }

    void set_final(const std::string& state, const std::string& code) {
        state_ = state;
        final_ = true;
        const auto colon = code.find(':');
        exit_code_ = std::atoi(code.substr(0, colon).c_str());
        exit_signal_ = colon == std::string::npos ? 0 : std::atoi(code.substr(colon + 1).c_str());
        if (state == "COMPLETED") state_note_.clear();
    }

    void note(const LineSink& on_log, const std::string& msg) {
        if (msg == last_note_) return;
        last_note_ = msg;
        on_log("[tandem run] " + utc_timestamp_now() + " " + describe() + ": " + msg);
    }

    std::string job_id_, job_name_;
    Files files_;
    uint64_t journal_start_;
    FileFollower out_, err_;
    uint64_t err_saved_ = 0;
    Clock::time_point err_saved_at_{};
    Clock::time_point next_poll_{};
    Clock::time_point last_data_{}, ended_seen_{};
    std::optional<Clock::time_point> gone_since_;
    std::optional<std::string> state_;
    std::string state_note_, last_note_, stop_error_;
    int exit_code_ = 0, exit_signal_ = 0;
    bool final_ = false;     // the job has ended (state_ says how)
    bool finished_ = false;  // ... and its output has been read to the end
};

class SlurmExecutor : public LegExecutor {
public:
    std::unique_ptr<LegHandle> start(const LegLaunch& launch) override {
        const fs::path dir = launch.leg_dir / "slurm";
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) throw Error(dir.string() + ": cannot create (" + ec.message() + ")");
        const int attempt = next_attempt(dir);
        const std::string stem = "attempt-" + std::to_string(attempt);
        SlurmLeg::Files files{launch.leg_dir, stem + ".sh", stem + ".out", stem + ".err"};
        const std::string name = job_name_for(launch.run_dir, launch.plan.name, attempt);

        // The job script: the leg's environment and program, readable in the run folder.
        std::string script = "#!/bin/bash\n# tandem: leg " + launch.plan.name + " of " + launch.run_dir.string() + ", attempt " +
                             std::to_string(attempt) + " (written by `tandem run --executor slurm`, docs/cluster.md)\nset -e\n";
        for (const auto& line : launch.plan.slurm.setup) script += line + "\n";
        for (const auto& kv : launch.env) {
            const auto eq = kv.find('=');
            script += "export " + kv.substr(0, eq) + "=" + shell_quote(kv.substr(eq + 1)) + "\n";
        }
        script += "exec";
        for (const auto& a : launch.argv) script += " " + shell_quote(a);
        script += "\n";
        write_file_atomic(dir / files.script, script);
        fs::permissions(dir / files.script, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read, ec);

        std::vector<std::string> argv = {"sbatch",
                                         "--parsable",
                                         "--job-name=" + name,
                                         "--output=" + (dir / files.out).string(),
                                         "--error=" + (dir / files.err).string(),
                                         "--open-mode=append",  // a requeued job must not truncate what was read
                                         "--no-requeue",
                                         "--chdir=" + launch.run_dir.string(),
                                         "--nodes=1",
                                         "--ntasks=1"};
        bool cpu = true;
        for (const auto& d : launch.plan.devices.empty() ? std::vector<std::string>{launch.plan.device} : launch.plan.devices)
            cpu = cpu && d == "cpu";
        if (cpu) argv.push_back("--cpus-per-task=" + std::to_string(std::max<size_t>(launch.threads, std::max<size_t>(1, launch.plan.devices.size()))));
        const SlurmOptions& o = launch.plan.slurm;
        if (!o.partition.empty()) argv.push_back("--partition=" + o.partition);
        if (!o.gres.empty()) argv.push_back("--gres=" + o.gres);
        if (!o.time.empty()) argv.push_back("--time=" + o.time);
        if (!o.account.empty()) argv.push_back("--account=" + o.account);
        argv.insert(argv.end(), o.extra.begin(), o.extra.end());
        argv.push_back((dir / files.script).string());

        // Recorded before submitting: a runner killed right after sbatch finds the job by its name.
        auto leg = std::make_unique<SlurmLeg>("", name, files, launch.journal_start, 0, 0);
        record_leg_process(launch.leg_dir, leg->record());
        CommandResult r = run_command(argv, kCommandTimeoutSeconds);
        if (r.exit_status != 0) {
            clear_leg_process(launch.leg_dir);
            std::string cmd;
            for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + shell_quote(a);
            write_file_atomic(dir / (stem + ".refused"), cmd + "\n" + r.err + r.out);
            throw Error("sbatch refused the job (" +
                        (r.exit_status == 127 ? std::string("sbatch not found: is Slurm's client installed and on PATH?")
                                              : failure_of(argv, r)) +
                        "); the command is in " + (dir / (stem + ".refused")).string());
        }
        std::string id = first_line(r.out);
        id = id.substr(0, id.find(';'));  // "ID;cluster" on multi-cluster setups
        auto started = std::make_unique<SlurmLeg>(id, name, files, launch.journal_start, 0, 0);
        record_leg_process(launch.leg_dir, started->record());
        return started;
    }
};

}  // namespace

LegExecutor& slurm_executor() {
    static SlurmExecutor e;
    return e;
}

std::unique_ptr<LegHandle> reattach_slurm_leg(const fs::path& leg_dir, const json& j, const fs::path& events_file,
                                              const std::function<void(const std::string&)>& say) {
    const std::string leg = leg_dir.filename().string();
    SlurmLeg::Files files;
    uint64_t journal_start = 0, err_offset = 0;
    std::string id, name;
    try {
        id = j.at("job_id").get<std::string>();
        name = j.at("job_name").get<std::string>();
        files = {leg_dir, j.at("script").get<std::string>(), j.at("stdout").get<std::string>(), j.at("stderr").get<std::string>()};
        journal_start = j.at("journal_start").get<uint64_t>();
        err_offset = j.value("stderr_offset", uint64_t{0});
    } catch (const std::exception& e) {
        throw Error((leg_dir / "process.json").string() + ": not a valid record of a Slurm leg (" + e.what() +
                    "); if its job still runs, cancel it with scancel and remove the file");
    }
    const uint64_t out_offset = journaled_prefix(events_file, journal_start, leg_dir / "slurm" / files.out);
    auto h = std::make_unique<SlurmLeg>(id, name, files, journal_start, out_offset, err_offset);
    if (id.empty()) h->find_job_by_name();
    say("leg " + leg + ": re-attached to " + h->describe() + " (its output from byte " + std::to_string(out_offset) +
        " on is not in events.jsonl yet)");
    return h;
}

}  // namespace tandem::experiments
