#pragma once
// Where a leg's process runs, behind one interface so the runner's supervisor is written once
// (docs/cluster.md): the local executor starts a child process with its stdout and stderr on pipes
// (leg_process.h: own process group, PR_SET_PDEATHSIG); the Slurm executor submits a batch job with
// sbatch whose stdout and stderr go to files in the run folder (a shared filesystem), follows those
// files, asks squeue / scontrol / sacct for the job's state and cancels with scancel. A Slurm leg
// outlives a killed runner; the next `tandem run --resume` finds it again from legs/<leg>/process.json
// and the size events.jsonl had when the job was submitted.
#include "tandem/runner/leg_process.h"
#include "tandem/runner/leg_plan.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::experiments {

using LineSink = std::function<void(std::string_view)>;

// Everything an executor needs to start one attempt of a leg.
struct LegLaunch {
    LegPlan plan;
    std::vector<std::string> argv;     // the leg's program and arguments
    std::vector<std::string> env;      // NAME=VALUE added to its environment
    std::filesystem::path run_dir;     // absolute
    std::filesystem::path leg_dir;     // run_dir/legs/<leg>
    int threads = 1;                   // CPU threads (Slurm: --cpus-per-task for CPU legs)
    uint64_t journal_start = 0;        // events.jsonl's size before this attempt's first line
};

// How a leg's process ended.
struct LegExit {
    int exit_status = 0;      // exit code, or 128 + signal
    int signal = 0;           // the terminating signal, 0 when it exited
    bool clean = false;       // exited with status 0 (Slurm: and the job COMPLETED)
    std::string description;  // why it was not clean, for the leg's error: "killed by signal 9 (Killed)",
                              // "Slurm job 12 CANCELLED (exit code 0:15)"; empty when clean
};

// One running attempt of a leg.
class LegHandle {
public:
    virtual ~LegHandle() = default;
    // File descriptors the supervisor may poll(2) for the leg's output (a local leg's pipes); a Slurm
    // leg has none (its files are read on every call to read()).
    virtual std::vector<int> pollable_fds() const = 0;
    // Passes what the leg wrote since the last call, without blocking: each complete stdout line to
    // on_event (in order, byte for byte), each stderr line to on_log. Once the process has ended and
    // all its output was read, an unfinished last stdout line is passed too.
    virtual void read(const LineSink& on_event, const LineSink& on_log) = 0;
    // True once the process (job) has ended and read() has passed all of its output.
    virtual bool ended() = 0;
    // False once the process (job) is known to have ended (its output may still be unread).
    virtual bool running() const = 0;
    // How it ended (call after ended()).
    virtual LegExit exit() = 0;
    // Asks the leg to stop (SIGTERM; Slurm: scancel), or kills it (SIGKILL; scancel --signal=KILL).
    virtual void stop(bool force) = 0;
    // legs/<leg>/process.json: what a later runner needs to find this process again.
    virtual nlohmann::json record() const = 0;
    // "pid 123", "Slurm job 45": for the leg's log.
    virtual std::string describe() const = 0;
    // The process's state and CPU time now (the leg watchdog); nullopt where the runner cannot see
    // the process (a Slurm job on another node).
    virtual std::optional<ProcessState> process() const { return std::nullopt; }
};

class LegExecutor {
public:
    virtual ~LegExecutor() = default;
    // Starts the attempt (the caller has written nothing to process.json yet); throws tandem::Error
    // when the leg cannot be started (sbatch refused it, fork failed).
    virtual std::unique_ptr<LegHandle> start(const LegLaunch& launch) = 0;
};

// The executor named in a leg's plan ("local" or "slurm"); throws for another name.
LegExecutor& executor_for(const std::string& name);

// After a runner ended without ending its legs (killed): what legs/<leg>/process.json recorded.
// A local leg still alive is killed (legs die with their runner) and nullptr returned; a Slurm job is
// re-attached: the handle follows the job's output from the first byte events.jsonl (of size
// `journal_size` now) does not hold yet, whether the job still runs or has ended meanwhile. nullptr
// when no process is recorded. `say` gets one line for the user about what was found.
std::unique_ptr<LegHandle> find_left_over_leg(const std::filesystem::path& leg_dir,
                                              const std::filesystem::path& events_file,
                                              const std::function<void(const std::string&)>& say);

// legs/<leg>/process.json, written atomically (removed with clear_leg_process, run_record.h, when the
// leg has ended).
void record_leg_process(const std::filesystem::path& leg_dir, const nlohmann::json& record);

// ---- used by the executors (and their tests) -----------------------------------------------------

// A short command (sbatch, squeue, ...) run to its end: its exit code (or 128 + signal, or 127 when
// it could not be started) and what it printed. Killed after `timeout_s`.
struct CommandResult {
    int exit_status = -1;
    std::string out, err;
    bool timed_out = false;
};
CommandResult run_command(const std::vector<std::string>& argv, double timeout_s = 60.0);

// Quotes a word for a POSIX shell script (single quotes).
std::string shell_quote(const std::string& word);

// How many bytes of a Slurm job's stdout file `out` events.jsonl already holds, counting its lines
// from byte `journal_start` on (where this attempt began): whole lines equal byte for byte, and an
// unfinished last line of `out` when the journal holds it. A line the journal holds only in part (a
// runner killed while writing it) ends the count: the re-attached runner appends it again, whole.
uint64_t journaled_prefix(const std::filesystem::path& events, uint64_t journal_start, const std::filesystem::path& out);

}  // namespace tandem::experiments
