#pragma once
// What the runner keeps of a run: each leg's journal (events.jsonl, the record of truth, and
// stderr.log), run.h5 (rebuilt from the journals whenever they disagree) and the catalog row.
// docs/run-folder.md "Interruptions" describes the guarantees.
#include "tandem/runner/catalog_continuity.h"
#include "tandem/runner/leg_process.h"
#include "tandem/store/catalog.h"
#include "tandem/compare/comparison.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/spec/experiment.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/runner/prepare.h"
#include "tandem/store/run_file.h"
#include "tandem/runner/leg_plan.h"

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::experiments {

// A new run folder <out>/<experiment>-<YYYYmmdd-HHMMSS>[-N], created with mkdir semantics: two
// runners started at once never get the same folder.
std::filesystem::path create_run_folder(const std::filesystem::path& out_dir, const std::string& experiment);

// legs/<leg>/events.jsonl and legs/<leg>/stderr.log of one leg, appended across attempts.
class LegJournal {
public:
    explicit LegJournal(const std::filesystem::path& leg_dir);  // creates the folder
    ~LegJournal();
    LegJournal(const LegJournal&) = delete;
    LegJournal& operator=(const LegJournal&) = delete;

    // Appends one event line (one write(2), so a killed runner leaves whole lines or a partial last
    // one). Throws tandem::Error when the line cannot be written (e.g. the disk is full).
    void append_event(std::string_view line);
    // fsync of events.jsonl: called before run.h5 commits, so the run file is never ahead of the
    // events it is rebuilt from (a power loss may drop page-cache writes out of order).
    void sync();
    // A line for stderr.log (the leg's stderr and the runner's notes); never throws.
    void log(std::string_view line);
    // Ends a partial last line left by a killed runner, so the next attempt starts on its own line.
    void end_partial_line();
    const std::filesystem::path& events_path() const { return events_path_; }
    const std::string& last_event_line() const { return last_line_; }

private:
    std::filesystem::path events_path_;
    int events_fd_ = -1;
    std::ofstream stderr_log_;
    std::string last_line_;  // (clipped) for the run file when the leg does not finish
};

// legs/<leg>/process.json (executors/executor.h writes it and finds the process again): removed once the
// leg has ended.
void clear_leg_process(const std::filesystem::path& leg_dir);

// Moves legs/<leg>/ckpt-* folders that no checkpoint event in `trace` announced (written after the
// runner last heard from the leg) to legs/<leg>/untrusted/, so the resumed leg does not start from
// a state the recorded events do not describe. Returns the names moved.
std::vector<std::string> set_aside_untrusted_checkpoints(const std::filesystem::path& run_dir, const std::string& leg,
                                                         const LegTrace& trace);

// What the runner tells the recorder about a leg.
struct LegState {
    const LegPlan* plan = nullptr;
    int threads = 1;
    const LegTrace* trace = nullptr;
    std::string status;          // leg_status_name()
    int exit_status = 0;
    std::string started_at;
    std::string last_line;       // the leg's last event line (kept for a leg that does not finish)
    const std::vector<GateFlag>* flags = nullptr;  // the gate's flags so far
    std::string note;            // why the leg was paused or stopped, when it was
    std::string stall;           // the watchdog's stall flag while a running leg is silent (the catalog's error)
};

// legs/<leg>/request: an action asked of the running runner (tandem leg stop|pause|resume).
struct LegRequest {
    LegAction action = LegAction::Stop;
    std::string reason;
};
void write_leg_request(const std::filesystem::path& leg_dir, LegAction action, const std::string& reason);
bool leg_request_pending(const std::filesystem::path& leg_dir);
std::optional<LegRequest> take_leg_request(const std::filesystem::path& leg_dir);  // reads and removes it
// legs/<leg>/stopped: the leg was stopped on request; --resume leaves it until it is resumed.
void set_stop_mark(const std::filesystem::path& leg_dir, const std::string& reason);
void clear_stop_mark(const std::filesystem::path& leg_dir);
std::optional<std::string> stop_mark(const std::filesystem::path& leg_dir);  // the reason, when marked

class RunRecorder {
public:
    // `envelope_catalogs`: more catalogs looked in for the seed envelopes, after `catalog` (envelopes()).
    RunRecorder(std::filesystem::path run_file, const std::filesystem::path& catalog,
                std::vector<std::filesystem::path> envelope_catalogs = {});

    // The run row (status running), run.h5's /host and /experiment (new runs), every leg's group and
    // catalog row; on resume, each leg's series and checks are rebuilt from its trace.
    void register_run(const ExperimentSpec& spec, const PreparedRun& prepared, const std::vector<LegState>& legs,
                      bool resumed);
    void record_probe(const ProbeResult& p);
    // Brings run.h5 up to date with every leg's trace: new rows appended, a series rewritten when the
    // trace no longer extends what the file holds (a resumed leg repeating updates), checks written.
    void flush();
    void write_leg_summary(const LegState& leg);  // timing, memory, status attributes
    // The FLOPs of each of the leg's updates (flops.h; empty: unknown, e.g. a native plan) and the
    // sgemm peak at its device and threads (-1: not probed): its FLOP/s and utilisation in the
    // timing written by write_leg_summary.
    void set_work(const std::string& leg, std::vector<double> update_flops, double peak_flops_per_s,
                  std::vector<std::string> device_shared_with = {});
    void set_flags(const std::string& leg, const std::vector<GateFlag>& flags);  // written at the next flush
    void update_leg(const LegState& leg);         // the catalog's legs row
    // Compares the legs as run.h5 holds them, judges completeness, stores /comparisons.
    // `against`: compare every leg with that leg only (compare_legs_against); "" = every pair.
    Comparison compare_and_store(const ExperimentSpec& spec, const ExpectedSeries& expected, const std::string& against = "");
    void finish(const std::string& run_status, const std::string& verdict);
    // The experiment's seed envelopes (docs/envelope.md): the newest per stack of the first catalog
    // holding any (the run's, then the envelope catalogs), found at register_run and copied into
    // run.h5 (/envelope); on resume without one in any catalog, run.h5's.
    const std::vector<SeedEnvelope>& envelopes() const { return envelopes_.envelopes; }
    // After a fatal error: the catalog's run row failed with the reason, leg rows updated. Best effort
    // (the failure may be a full disk that the catalog shares); never throws.
    void fail(const std::string& reason, const std::vector<LegState>& legs) noexcept;
    // Where the warning goes when the catalog is found deleted or replaced mid-run (the run's rows
    // are then written into the re-created file: tandem/runner/catalog_continuity.h), and that
    // warning again for the run's last line ("" when the catalog stayed put).
    void on_catalog_warning(std::function<void(const std::string&)> warn);
    const std::string& catalog_notice() const { return catalog_.notice(); }

private:
    struct Tracked {
        std::string name;
        const LegTrace* trace = nullptr;
        std::vector<StepRow> steps;  // what run.h5 holds
        std::vector<EvalRow> evals;
        bool l1 = false, l2 = false, l3 = false, settings = false;
        size_t optimizer_checks = 0;  // optimizer_check events written
        int64_t observation_events = 0;  // the trace's counter when fingerprints/observables were last written
        std::vector<GateFlag> flags;
        bool flags_dirty = false;
    };
    LegRecord leg_record(const LegState& leg) const;
    void upsert_leg_row(const LegRecord& row);
    RunFileWriter& writer();

    std::filesystem::path run_file_;
    std::optional<RunFileWriter> writer_;
    struct Work {
        std::vector<double> update_flops;
        double peak_flops_per_s = -1;
        std::vector<std::string> device_shared_with;  // legs that ran at the same time on its GPU
    };
    std::map<std::string, Work> work_;  // set_work
    ContinuousCatalog catalog_;
    std::map<std::string, LegRecord> leg_rows_;  // the last row written per leg (re-registered with the run)
    std::vector<ProbeResult> probes_;            // this run's probes (likewise)
    std::string hostname_;
    RunRecord run_;
    int64_t total_updates_ = 0;
    std::vector<Tracked> tracked_;
    std::vector<std::filesystem::path> envelope_catalogs_;
    EnvelopeSearch envelopes_;  // with the places looked in, named by a pair judged without one
};

}  // namespace tandem::experiments
