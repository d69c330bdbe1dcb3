// Step 1 of `tandem run` (run_steps.h): a new run folder prepared, or an interrupted one reopened.
#include "device_sharing.h"
#include "run_steps.h"
#include "tandem/strict_json.h"

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
#include "tandem/sha256.h"

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

json legs_json(const std::vector<LegPlan>& plans, const std::vector<int>& threads) {
    json lj = json::array();
    for (size_t i = 0; i < plans.size(); ++i)
    {
        json e{{"name", plans[i].name}, {"implementation", plans[i].implementation}, {"device", plans[i].device},
               {"threads", threads[i]}};
        if (!plans[i].command.empty()) e["command"] = plans[i].command;
        if (!plans[i].python.empty()) e["python"] = plans[i].python;
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

void take_folder_lock(Run& run) {
    if (!run.lock.try_lock(run.folder / ".runner.lock"))
        throw Error(run.folder.string() + ": run folder is in use by another `tandem run` (lock " +
                    (run.folder / ".runner.lock").string() + ")");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    run.lock.note("pid " + std::to_string(::getpid()) + " on " + host + "\n");
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

// The first 12 hex digits, enough to tell two digests apart in a message.
std::string short_sha(const std::string& sha) { return sha.size() > 12 ? sha.substr(0, 12) + "…" : sha; }

// A resume trusts nothing in the folder that the run did not record: experiment.json's hash against
// run.h5's /experiment and the catalog's row, prepare.json against run.h5, and the prepared files
// (plan, corpus, initial adapter, tokenizer) against their recorded digests. Called before anything
// in the folder, run.h5 or the catalog is written: a refusal leaves them as they were.
void verify_run_folder(const fs::path& folder, const ExperimentSpec& spec, const fs::path& catalog_path) {
    const std::string refuse = ": refusing to resume (nothing was changed); the run folder does not match what the run recorded";
    const fs::path exp_file = folder / "experiment.json";
    const std::string sha = spec.sha256();
    std::optional<PreparedRun> prepared;
    if (fs::exists(folder / "prepare.json")) prepared = read_prepared_run(folder);
    std::optional<ExperimentInfo> recorded;
    if (fs::exists(folder / "run.h5")) {
        try {
            recorded = RunFileReader(folder / "run.h5").experiment();
        } catch (const std::exception&) {
            // an unreadable run file is rebuilt from the events; the catalog still speaks for the run
        }
    }
    if (recorded && !recorded->spec_sha256.empty() && recorded->spec_sha256 != sha)
        throw Error(exp_file.string() + ": its experiment (sha256 " + short_sha(sha) + ", name '" + spec.name +
                    "') is not the one run.h5 recorded (/experiment spec_sha256 " + short_sha(recorded->spec_sha256) + ", name '" +
                    recorded->name + "')" + refuse);
    std::error_code ec;
    if (fs::is_regular_file(catalog_path, ec) && fs::file_size(catalog_path, ec) > 0) {
        const Catalog catalog(catalog_path);
        if (auto row = catalog.run(folder.filename().string()); row && !row->spec_sha256.empty() && row->spec_sha256 != sha)
            throw Error(exp_file.string() + ": its experiment (sha256 " + short_sha(sha) + ") is not the one the catalog " +
                        catalog_path.string() + " recorded for run " + row->id + " (spec_sha256 " + short_sha(row->spec_sha256) + ")" +
                        refuse);
    }
    if (!prepared) return;  // an interrupted preparation: prepared again from the (verified) experiment
    const fs::path prep_file = folder / "prepare.json";
    if (recorded) {
        if (recorded->total_updates >= 0 && recorded->total_updates != prepared->total_updates)
            throw Error(prep_file.string() + ": total_updates " + std::to_string(prepared->total_updates) + " is not run.h5's " +
                        std::to_string(recorded->total_updates) + refuse);
        if (!recorded->base_sha256.empty() && prepared->summary.contains("base_sha256") &&
            json::parse(recorded->base_sha256, nullptr, false) != prepared->summary["base_sha256"])
            throw Error(prep_file.string() + ": base_sha256 is not the one run.h5 recorded" + refuse);
        auto text = [&](const char* key) -> std::optional<std::string> {
            auto it = recorded->extra.find(key);
            if (it == recorded->extra.end() || !std::holds_alternative<std::string>(it->second)) return std::nullopt;
            return std::get<std::string>(it->second);
        };
        if (auto a = text("assets_json"); a && !a->empty() && json::parse(*a, nullptr, false) != prepared->assets)
            throw Error(prep_file.string() + ": the asset digests are not the ones run.h5 recorded" + refuse);
        if (auto p = text("prepared_sha256_json"); p && !p->empty() && json::parse(*p, nullptr, false) != prepared->summary.value("prepared_sha256", json()))
            throw Error(prep_file.string() + ": prepared_sha256 is not the one run.h5 recorded" + refuse);
    }
    // The files the legs read, by content.
    json expected = prepared->summary.value("prepared_sha256", json::object());
    if (prepared->assets.contains("tokenizer") && prepared->assets["tokenizer"].is_object())
        for (const auto& [f, d] : prepared->assets["tokenizer"].items()) expected["tokenizer/" + f] = d;
    for (const auto& [rel, want] : expected.items()) {
        if (!want.is_string()) throw Error(prep_file.string() + ": digest of " + rel + " is not a string" + refuse);
        const fs::path f = folder / rel;
        if (!fs::is_regular_file(f, ec)) throw Error(f.string() + ": missing (the run recorded it, sha256 " + short_sha(want.get<std::string>()) + ")" + refuse);
        const std::string got = sha256_file_hex(f);
        if (got != want.get<std::string>())
            throw Error(f.string() + ": sha256 " + short_sha(got) + " is not the " + short_sha(want.get<std::string>()) +
                        " the run recorded" + refuse);
    }
}

// Step 1 (new run): validate what can be validated, create the folder exclusively, prepare it. A
// failed preparation removes the folder it created.

}  // namespace

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
    std::vector<int> threads = threads_per_leg(plans, opt.cpu_threads, opt.max_concurrent_legs, opt.share_devices);
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
            p.python = e.value("python", std::string());
            if (e.contains("faults"))
                for (const auto& f : e.at("faults")) p.faults.push_back(parse_fault_switch(f.get<std::string>(), legs_file.string()));
            if (e.contains("devices")) p.devices = e.at("devices").get<std::vector<std::string>>();
            p.executor = e.value("executor", std::string("local"));
            if (e.contains("slurm")) p.slurm = SlurmOptions::from_json(e.at("slurm"), legs_file.string(), "slurm");
            executor_for(p.executor);  // an unknown executor is refused before anything starts
            plans.push_back(std::move(p));
            threads.push_back(e.contains("threads") ? e.at("threads").get<int>() : 0);
        }
        auto fallback = threads_per_leg(plans, opt.cpu_threads, opt.max_concurrent_legs, opt.share_devices);
        for (size_t i = 0; i < threads.size(); ++i)
            if (threads[i] <= 0) threads[i] = fallback[i];
    } catch (const json::exception& e) {
        throw Error(legs_file.string() + ": not a valid legs file (" + tandem::json_error_text(e) + ")");
    }
    verify_run_folder(run.folder, run.spec, opt.catalog);
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

}  // namespace tandem::experiments::run_steps
