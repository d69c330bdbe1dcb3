#pragma once
// The steps of `tandem run` (tandem/runner/runner.h), private to tandem_runner: (1) opening the run —
// a new run folder prepared or an interrupted one reopened (open_run.cpp); (2) registering it in
// run.h5 and the catalog and (3) probing the devices (runner.cpp); (4) supervising the legs
// (supervisor.cpp); (5) finishing: the comparison, the report, the catalog row (runner.cpp). What the
// steps share: the run being worked on and each leg's live state.
#include "executors/executor.h"
#include "tandem/runner/leg_process.h"
#include "tandem/runner/run_record.h"
#include "tandem/runner/runner_options.h"
#include "watchdog.h"

#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments::run_steps {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Say = std::function<void(const std::string&)>;

// Set by SIGINT / SIGTERM while the runner runs (runner.cpp installs the handlers).
extern volatile std::sig_atomic_t g_interrupted;

// Seconds a stopping leg gets between SIGTERM and SIGKILL.
inline constexpr double kStopGraceSeconds = 10.0;

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
    LegWatchdog watchdog;               // no event for its stall time: a `stall` flag (watchdog.h)
};

// What the progress display and the catalog see of it.
LegProgress progress_of(const LiveLeg& l, int64_t total);
LegState state_of(const LiveLeg& l);

// ---- the run being worked on ---------------------------------------------------------------------

struct Run {
    fs::path folder;
    ExperimentSpec spec;
    PreparedRun prepared;
    FileLock lock;              // held for the runner's life: one runner per run folder
    std::vector<LiveLeg> legs;
    bool resumed = false;
};

fs::path leg_folder(const Run& run, const std::string& leg);

// Step 1 (open_run.cpp): a new run folder prepared from the experiment, or an existing one reopened
// for --resume (leftover leg processes killed, untrusted checkpoints set aside).
Run prepare_new_run(const RunnerOptions& opt, const Say& say);
Run reopen_run(const RunnerOptions& opt, const Say& say);

// Step 4 (supervisor.cpp): starts the legs and supervises them until none runs or waits — their
// events journalled and recorded, the live gate, stop/pause/resume requests; true when interrupted
// (SIGINT / SIGTERM).
bool supervise(Run& run, RunRecorder& rec, const RunnerOptions& opt, Say say);
// Every running leg stopped now (SIGTERM, SIGKILL after the grace time).
void stop_all_legs_now(Run& run);

}  // namespace tandem::experiments::run_steps
