// Leg journals, leftover leg processes, untrusted checkpoints, and the recorder that keeps run.h5
// and the catalog in step with the legs' traces.
#include "tandem/runner/run_record.h"

#include "tandem/compare/timing.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/join.h"
#include "tandem/measure/host_info.h"
#include "tandem/store/row_bits.h"
#include "tandem/compare/comparison_io.h"
#include "tandem/version.h"
#include "tandem/utc_time.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <set>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string utc_stamp() {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
    return buf;
}

// Brings `held` (what the file holds) to `want` (the trace), row by row through the row type's field
// list (`same_bits`, tandem/store/row_bits.h): appends when `want` extends `held`,
// rewrites otherwise. Returns false when nothing changed.
template <class Row, class Append, class Replace>
bool sync_series(std::vector<Row>& held, const std::vector<Row>& want, Append append, Replace replace) {
    size_t common = 0;
    while (common < held.size() && common < want.size() && same_bits(held[common], want[common])) ++common;
    if (common == held.size() && common == want.size()) return false;
    if (common == held.size()) append(std::vector<Row>(want.begin() + static_cast<std::ptrdiff_t>(common), want.end()));
    else replace(want);
    held = want;
    return true;
}

}  // namespace

// ---- run folders ------------------------------------------------------------------------------------

fs::path create_run_folder(const fs::path& out_dir, const std::string& experiment) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (!fs::is_directory(out_dir))
        throw Error(out_dir.string() + ": cannot use as the folder for run folders (" +
                    (fs::exists(out_dir) ? std::string("it is not a folder") : ec.message()) + ")");
    const fs::path base = out_dir / (experiment + "-" + utc_stamp());
    for (int i = 1; i < 10000; ++i) {
        fs::path p = i == 1 ? base : fs::path(base.string() + "-" + std::to_string(i));
        if (::mkdir(p.c_str(), 0755) == 0) return p;  // atomic: exactly one runner creates it
        if (errno != EEXIST) throw Error(p.string() + ": cannot create run folder (" + std::strerror(errno) + ")");
    }
    throw Error(base.string() + ": cannot find a free run folder name");
}

// ---- journals ---------------------------------------------------------------------------------------

LegJournal::LegJournal(const fs::path& leg_dir) : events_path_(leg_dir / "events.jsonl") {
    std::error_code ec;
    fs::create_directories(leg_dir, ec);
    if (ec) throw Error(leg_dir.string() + ": cannot create leg folder (" + ec.message() + ")");
    events_fd_ = ::open(events_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (events_fd_ < 0) throw Error(events_path_.string() + ": cannot open (" + std::strerror(errno) + ")");
    stderr_log_.open(leg_dir / "stderr.log", std::ios::app);
}

LegJournal::~LegJournal() {
    if (events_fd_ >= 0) ::close(events_fd_);
}

void LegJournal::append_event(std::string_view line) {
    std::string text(line);
    text += '\n';
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(events_fd_, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(events_path_.string() + ": cannot record the leg's events (" + std::strerror(errno) + ")");
        done += static_cast<size_t>(n);
    }
    if (!line.empty()) last_line_ = line.size() > 2000 ? std::string(line.substr(0, 2000)) + "..." : std::string(line);
}

void LegJournal::sync() {
    if (::fsync(events_fd_) != 0 && errno != EINVAL)
        throw Error(events_path_.string() + ": cannot record the leg's events (" + std::strerror(errno) + ")");
}

void LegJournal::log(std::string_view line) {
    stderr_log_ << line << '\n';
    stderr_log_.flush();
    if (!stderr_log_) stderr_log_.clear();  // stderr.log is a courtesy: a full disk is reported via events
}

void LegJournal::end_partial_line() {
    const int fd = ::open(events_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    char last = '\n';
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
        if (::pread(fd, &last, 1, st.st_size - 1) != 1) last = '\n';
    }
    ::close(fd);
    if (last != '\n') {
        if (::write(events_fd_, "\n", 1) != 1)
            throw Error(events_path_.string() + ": cannot record the leg's events (" + std::strerror(errno) + ")");
    }
}

// ---- process.json --------------------------------------------------------------------------

void clear_leg_process(const fs::path& leg_dir) {
    std::error_code ec;
    fs::remove(leg_dir / "process.json", ec);
}

// ---- requests and stop marks ----------------------------------------------------------------------------

void write_leg_request(const fs::path& leg_dir, LegAction action, const std::string& reason) {
    write_file_atomic(leg_dir / "request", json{{"action", leg_action_name(action)}, {"reason", reason}}.dump() + "\n");
}

bool leg_request_pending(const fs::path& leg_dir) { return fs::exists(leg_dir / "request"); }

std::optional<LegRequest> take_leg_request(const fs::path& leg_dir) {
    const fs::path f = leg_dir / "request";
    std::error_code ec;
    if (!fs::exists(f, ec)) return std::nullopt;
    LegRequest r;
    bool valid = false;
    try {
        json j = json::parse(read_file(f));
        const std::string a = j.value("action", "");
        for (LegAction x : {LegAction::Stop, LegAction::Pause, LegAction::Resume})
            if (a == leg_action_name(x)) {
                r.action = x;
                valid = true;
            }
        r.reason = j.value("reason", "");
    } catch (const std::exception&) {
    }
    fs::remove(f, ec);
    if (!valid) return std::nullopt;
    return r;
}

void set_stop_mark(const fs::path& leg_dir, const std::string& reason) {
    std::error_code ec;
    fs::create_directories(leg_dir, ec);
    write_file_atomic(leg_dir / "stopped", reason + "\n");
}

void clear_stop_mark(const fs::path& leg_dir) {
    std::error_code ec;
    fs::remove(leg_dir / "stopped", ec);
}

std::optional<std::string> stop_mark(const fs::path& leg_dir) {
    const fs::path f = leg_dir / "stopped";
    if (!fs::exists(f)) return std::nullopt;
    std::string why = read_file(f);
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    return why.empty() ? std::string("stopped") : why;
}

// ---- checkpoints -------------------------------------------------------------------------------------

std::vector<std::string> set_aside_untrusted_checkpoints(const fs::path& run_dir, const std::string& leg,
                                                         const LegTrace& trace) {
    const fs::path leg_dir = run_dir / "legs" / leg;
    std::set<std::string> announced;
    for (const auto& [update, path] : trace.checkpoints) announced.insert(fs::path(path).filename().string());
    std::vector<std::string> moved;
    std::error_code ec;
    if (!fs::is_directory(leg_dir, ec)) return moved;
    for (const auto& e : fs::directory_iterator(leg_dir, ec)) {
        const std::string name = e.path().filename().string();
        if (!e.is_directory() || name.rfind("ckpt-", 0) != 0) continue;
        if (announced.count(name)) continue;
        const fs::path aside = leg_dir / "untrusted";
        fs::create_directories(aside, ec);
        fs::path target = aside / (name + "-" + utc_stamp());
        for (int i = 2; fs::exists(target); ++i) target = aside / (name + "-" + utc_stamp() + "-" + std::to_string(i));
        fs::rename(e.path(), target, ec);
        if (ec) throw Error(e.path().string() + ": cannot set aside an unannounced checkpoint (" + ec.message() + ")");
        moved.push_back(name);
    }
    std::sort(moved.begin(), moved.end());
    return moved;
}

// ---- the recorder -------------------------------------------------------------------------------------

RunRecorder::RunRecorder(fs::path run_file, const fs::path& catalog, std::vector<fs::path> envelope_catalogs)
    : run_file_(std::move(run_file)), catalog_(catalog), envelope_catalogs_(std::move(envelope_catalogs)) {}

// One writer for the recorder's life: its sessions start from the previous version instead of a copy
// of the whole file (docs/hdf5-layout.md "Commit cost").
RunFileWriter& RunRecorder::writer() {
    if (!writer_) writer_.emplace(run_file_);
    return *writer_;
}

void RunRecorder::register_run(const ExperimentSpec& spec, const PreparedRun& prepared,
                               const std::vector<LegState>& legs, bool resumed) {
    HostInfo host = collect_host_info();
    hostname_ = host.hostname;
    total_updates_ = prepared.total_updates;
    if (auto existing = catalog_.get().run(prepared.run_id)) run_ = *existing;
    run_.id = prepared.run_id;
    run_.experiment = spec.name;
    run_.spec_sha256 = spec.sha256();
    run_.folder = prepared.folder.string();
    run_.run_file = run_file_.string();
    if (run_.started_at.empty()) run_.started_at = utc_timestamp_now();
    run_.status = "running";
    run_.finished_at.reset();
    run_.tandem_version = TANDEM_VERSION;
    run_.hostname = host.hostname;
    run_.runner_pid = static_cast<int64_t>(::getpid());
    run_.note = resumed ? "resumed" : "";
    {
        std::vector<std::pair<std::string, std::string>> faulty;  // docs/faults.md: never mistaken for a clean run
        for (const auto& l : legs) faulty.emplace_back(l.plan->name, faults_text(l.plan->faults));
        run_.faults = fault_banner(faulty);
    }
    catalog_.get().upsert_run(run_);

    tracked_.clear();
    envelopes_ = EnvelopeSearch{};
    envelopes_.key = spec.sha256_without_seeds();
    envelopes_.look_in_catalog(catalog_.get());
    for (const auto& c : envelope_catalogs_) envelopes_.look_in_catalog(c);
    if (resumed && fs::exists(run_file_)) envelopes_.look_in_run_file(RunFileReader(run_file_));
    {
        RunFileWriter& w = writer();
        for (const auto& e : envelopes_.envelopes) write_envelope(w, e, nullptr);
        // /host and /experiment are (re)written when absent: a runner killed during preparation or
        // before its first commit left no run file.
        std::optional<ExperimentInfo> existing;
        if (fs::exists(run_file_)) existing = RunFileReader(run_file_).experiment();
        if (!resumed || !existing) w.write_host(host);
        ExperimentInfo info;
        info.name = spec.name;
        info.spec_json = spec.to_json().dump();
        info.spec_sha256 = spec.sha256();
        info.run_id = prepared.run_id;
        info.total_updates = prepared.total_updates;
        for (const auto& [k, v] : prepared.run_attributes()) info.extra[k] = v;  // asset digests, input warnings
        info.base = prepared.summary.value("base", std::string());
        if (prepared.summary.contains("base_sha256")) info.base_sha256 = prepared.summary["base_sha256"].dump();
        w.write_experiment(info);
        for (const auto& l : legs) {
            Attributes attrs{{"implementation", l.plan->implementation}, {"device", l.plan->device},
                             {"threads", static_cast<int64_t>(l.threads)}, {"status", l.status}};
            if (!l.plan->faults.empty()) attrs["faults"] = faults_text(l.plan->faults);  // docs/faults.md
            w.create_leg(l.plan->name, attrs);
            Tracked t;
            t.name = l.plan->name;
            t.trace = l.trace;
            if (l.flags) t.flags = *l.flags;
            if (resumed) {
                // The series are rebuilt from the trace, whatever the file held (the file may miss rows
                // a killed runner never committed).
                w.replace_steps(t.name, l.trace->steps);
                w.replace_eval(t.name, l.trace->evals);
                t.steps = l.trace->steps;
                t.evals = l.trace->evals;
            }
            tracked_.push_back(std::move(t));
        }
        w.commit();
    }
    for (const auto& l : legs) upsert_leg_row(leg_record(l));
    flush();  // checks already in the traces (resume)
}

void RunRecorder::record_probe(const ProbeResult& p) {
    writer().write_probe(p);
    writer().commit();
    probes_.push_back(p);
    catalog_.get().add_probe(p, run_file_.string(), hostname_);
}

void RunRecorder::flush() {
    for (auto& t : tracked_) {
        const LegTrace& tr = *t.trace;
        sync_series(
            t.steps, tr.steps, [&](const std::vector<StepRow>& rows) { writer().append_steps(t.name, rows); },
            [&](const std::vector<StepRow>& rows) { writer().replace_steps(t.name, rows); });
        sync_series(
            t.evals, tr.evals, [&](const std::vector<EvalRow>& rows) { writer().append_eval(t.name, rows); },
            [&](const std::vector<EvalRow>& rows) { writer().replace_eval(t.name, rows); });
        if (tr.l1_ce && !t.l1) {
            writer().write_check(t.name, CheckLevel::L1, l1_to_json(tr).dump());
            t.l1 = true;
        }
        if (tr.has_l2 && !t.l2) {
            writer().write_check(t.name, CheckLevel::L2, l2_to_json(tr).dump());
            t.l2 = true;
        }
        if (tr.has_l3 && !t.l3) {
            writer().write_check(t.name, CheckLevel::L3, l3_to_json(tr).dump());
            t.l3 = true;
        }
        if (tr.settings && !t.settings) {
            writer().write_check(t.name, CheckLevel::Settings, tr.settings->dump());
            t.settings = true;
        }
        if (tr.optimizer_checks.size() != t.optimizer_checks) {  // the whole list, replaced
            writer().write_check(t.name, CheckLevel::Optimizer, tr.optimizer_checks.dump());
            t.optimizer_checks = tr.optimizer_checks.size();
        }
        if (t.flags_dirty) {
            writer().write_flags(t.name, flags_to_json(t.flags).dump());
            t.flags_dirty = false;
        }
        if (tr.observation_events != t.observation_events) {  // docs/observables.md: whole tables, replaced
            writer().replace_fingerprints(t.name, tr.fingerprints);
            writer().replace_adapter_norms(t.name, tr.adapter_norms);
            writer().replace_next_token(t.name, tr.probes);
            t.observation_events = tr.observation_events;
        }
    }
    if (writer_) writer_->commit();  // errors surface here, not in a destructor that must not throw
}

void RunRecorder::set_flags(const std::string& leg, const std::vector<GateFlag>& flags) {
    for (auto& t : tracked_)
        if (t.name == leg) {
            t.flags = flags;
            t.flags_dirty = true;
        }
}

void RunRecorder::set_work(const std::string& leg, std::vector<double> update_flops, double peak_flops_per_s,
                           std::vector<std::string> device_shared_with) {
    work_[leg] = Work{std::move(update_flops), peak_flops_per_s, std::move(device_shared_with)};
}

void RunRecorder::write_leg_summary(const LegState& l) {
    const LegTrace& t = *l.trace;
    LegTiming tm = timing_record(t);
    if (auto w = work_.find(l.plan->name); w != work_.end()) {  // docs/hdf5-layout.md /legs/<leg>/timing
        const FlopFigures f = flop_figures(t, w->second.update_flops, w->second.peak_flops_per_s);
        tm.extra["flops_per_update"] = f.flops_per_update;
        tm.extra["flops_per_s"] = f.flops_per_s;
        tm.extra["peak_flops_per_s"] = f.peak_flops_per_s;
        tm.extra["utilisation"] = f.utilisation;
        if (!w->second.device_shared_with.empty()) tm.extra["device_shared_with"] = join(w->second.device_shared_with, ",");
    }
    const LegMemory m = memory_record(t);
    Attributes a{{"status", l.status}, {"exit_status", static_cast<int64_t>(l.exit_status)},
                 {"updates_done", static_cast<int64_t>(t.steps.size())}, {"resumes", static_cast<int64_t>(t.resumes)},
                 {"malformed_lines", static_cast<int64_t>(t.malformed.size())}, {"hello", t.hello.dump()}};
    if (t.error) a["error"] = *t.error;
    if (l.status != "finished" && !l.last_line.empty()) a["last_event"] = l.last_line;
    if (!t.malformed.empty()) a["first_malformed"] = t.malformed.front();
    RunFileWriter& w = writer();
    w.write_timing(l.plan->name, tm);
    w.write_memory(l.plan->name, m);
    w.set_leg_attributes(l.plan->name, a);
    w.commit();
}

LegRecord RunRecorder::leg_record(const LegState& l) const {
    LegRecord r;
    r.run_id = run_.id;
    r.name = l.plan->name;
    r.implementation = l.plan->implementation;
    r.device = l.plan->device;
    r.status = l.status;
    r.faults = faults_text(l.plan->faults);
    const LegTrace& t = *l.trace;
    if (l.status != "running" && l.status != "pending") r.exit_status = l.exit_status;
    if (!l.started_at.empty()) r.started_at = l.started_at;
    if (l.status != "running" && l.status != "pending") r.finished_at = utc_timestamp_now();
    r.updates_done = static_cast<int64_t>(t.steps.size());
    r.updates_total = total_updates_;
    if (!t.steps.empty() && std::isfinite(t.steps.back().loss)) r.final_loss = t.steps.back().loss;
    if (!t.evals.empty()) {
        r.last_eval_update = t.evals.back().update;
        if (std::isfinite(t.evals.back().heldout_ce)) r.last_eval_ce = t.evals.back().heldout_ce;
    }
    if (const double tps = timing_of(t).tokens_per_s; tps > 0) r.tokens_per_s = tps;
    if (t.peak_device_bytes >= 0) r.peak_device_bytes = t.peak_device_bytes;
    if (t.peak_host_bytes >= 0) r.peak_host_bytes = t.peak_host_bytes;
    if (!l.note.empty() && (l.status == "paused" || l.status == "stopped")) r.error = l.note;
    else if (!l.stall.empty() && l.status == "running") r.error = l.stall;
    else if (t.error) r.error = *t.error;
    else if (l.status == "failed") r.error = "exit status " + std::to_string(l.exit_status);
    return r;
}

void RunRecorder::update_leg(const LegState& l) { upsert_leg_row(leg_record(l)); }

void RunRecorder::upsert_leg_row(const LegRecord& row) {
    Catalog& c = catalog_.get();  // first: a re-created catalog gets the run's row before this leg's
    leg_rows_[row.name] = row;
    c.upsert_leg(row);
}

void RunRecorder::on_catalog_warning(std::function<void(const std::string&)> warn) {
    catalog_.on_recreated(
        [this](Catalog& c) {
            if (run_.id.empty()) return;  // not registered yet: register_run writes everything
            c.upsert_run(run_);
            for (const auto& [name, row] : leg_rows_) c.upsert_leg(row);
            for (const auto& p : probes_) c.add_probe(p, run_file_.string(), hostname_);
        },
        std::move(warn));
}

Comparison RunRecorder::compare_and_store(const ExperimentSpec& spec, const ExpectedSeries& expected,
                                          const std::string& against) {
    Comparison cmp;
    size_t legs = 0;
    {
        RunFileReader r(run_file_);
        legs = r.legs().size();
        // The one judging path (judge_legs), as `tandem report` judges this run file later: the same
        // envelopes (copied into run.h5 when the run started), the same pairs, the same localisation.
        Judging judging;
        judging.against = against;
        judging.expected = expected;
        judging.model = error_model_or_none(spec, run_file_.parent_path());
        judging.envelopes = envelopes_.envelopes;
        judging.envelope_places = envelopes_.places;
        judging.fingerprints = [&r](const std::string& leg) { return r.fingerprints(leg); };
        cmp = judge_legs(read_legs(r), spec, judging);
        cmp.probes = r.probes();
        cmp.observables = compare_pair_observables(cmp, r);
    }
    if (legs >= 2) {
        RunFileWriter& w = writer();
        write_comparisons(w, cmp);
        store_localisations(w, cmp.localisations);
        store_observables(w, cmp.observables);
        w.commit();
    }
    return cmp;
}

void RunRecorder::finish(const std::string& run_status, const std::string& verdict) {
    run_.status = run_status;
    run_.finished_at = utc_timestamp_now();
    run_.note = verdict;
    catalog_.get().upsert_run(run_);
}

void RunRecorder::fail(const std::string& reason, const std::vector<LegState>& legs) noexcept {
    try {
        for (const auto& l : legs) upsert_leg_row(leg_record(l));
    } catch (...) {
    }
    try {
        if (run_.id.empty()) return;  // never registered
        run_.status = "failed";
        run_.finished_at = utc_timestamp_now();
        run_.note = "failed: " + reason;
        catalog_.get().upsert_run(run_);
    } catch (...) {
    }
}

}  // namespace tandem::experiments
