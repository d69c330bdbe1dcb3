// `tandem envelope`: N member runs of one experiment that differ only in the varied seeds, then
// each stack's seed envelope over them (docs/envelope.md; the statistics are compare/judge/envelope).
#include "tandem/studies/envelope_run.h"

#include "tandem/atomic_file.h"
#include "tandem/compare/comparison.h"
#include "tandem/compare/comparison_io.h"
#include "tandem/compare/report.h"
#include "tandem/error.h"
#include "tandem/join.h"
#include "tandem/runner/leg_process.h"
#include "tandem/runner/run_record.h"
#include "tandem/runner/runner.h"
#include "tandem/spec/leg_paths.h"
#include "tandem/store/catalog.h"
#include "tandem/measure/host_info.h"
#include "tandem/utc_time.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

ExperimentSpec envelope_member_spec(const ExperimentSpec& spec, const std::vector<std::string>& vary, int64_t index) {
    ExperimentSpec m = spec;
    for (const auto& v : vary) m.seed_of(v) = spec.seed_of(v) + static_cast<uint64_t>(index);
    return m;
}

DefaultVary default_vary(const ExperimentSpec& spec) {
    std::vector<std::string> names;
    for (const auto& d : spec.legs) names.push_back(d.name);
    if (names.empty()) names = {"engine", "reference"};  // the legs a run without a legs section runs
    std::vector<std::string> own_masks, own_plan;
    for (const auto& n : names) {
        if (spec.lora_dropout > 0 && spec.leg_setting(n, "dropout_masks") != "shared") own_masks.push_back(n);
        if (spec.leg_setting(n, "plan") != "shared") own_plan.push_back(n);
    }
    DefaultVary d;
    if (!own_plan.empty()) {
        d.vary = {"dropout", "plan"};
        d.why = join(own_plan, ", ") + " run" + (own_plan.size() == 1 ? "s" : "") +
                " its own plan (and so its own masks): the members vary the plan and the dropout masks, and share the initial "
                "adapter (L2 checks the legs load the same)";
    } else if (!own_masks.empty()) {
        d.vary = {"dropout"};
        d.why = join(own_masks, ", ") + " draw" + (own_masks.size() == 1 ? "s" : "") +
                " its own dropout masks: the members vary the dropout masks only and share the plan and the initial adapter, "
                "so training loss and grad norm are judged update by update";
    } else {
        d.vary = {"dropout", "plan", "adapter"};
        d.why = "every leg is paired (shared masks and plan): the float32 bound judges them and the envelope sizes an effect "
                "only, in the seed noise of a training run (dropout, plan and adapter)";
    }
    return d;
}

namespace {

volatile std::sig_atomic_t g_envelope_interrupted = 0;
void on_envelope_signal(int) { g_envelope_interrupted = 1; }

struct MemberRun {
    std::string name;        // m000
    int64_t index = 0;
    ExperimentSpec spec;
    fs::path spec_file, log_file, run_folder;
    ChildProcess proc;
    bool started = false, ended = false;
    int exit_status = 0;
    std::unique_ptr<std::ofstream> log;
};

}  // namespace

namespace {

using Say = std::function<void(const std::string&)>;

// The seeds the members vary: --vary, or the experiment's default (said); each must name a seed.
std::vector<std::string> seeds_to_vary(const EnvelopeOptions& opt, const ExperimentSpec& spec, const Say& say) {
    const DefaultVary by_default = default_vary(spec);
    const std::vector<std::string> vary = opt.vary ? *opt.vary : by_default.vary;
    if (!opt.vary) say("varying " + join(vary, ",") + " (the default for " + spec.name + "): " + by_default.why);
    for (const auto& v : vary) {
        try {
            spec.seed_of(v);
        } catch (const Error& e) {
            throw Error(std::string("--vary: ") + e.what());
        }
    }
    return vary;
}

// The stacks the members run (one leg each), how many members run at once and each member's CPU threads.
struct MemberSizing {
    std::set<std::string> stacks;
    int parallel = 1;
    int member_threads = 1;
};

// The stacks of --legs (refusing two legs of one implementation) and the members' share of the CPU threads.
MemberSizing size_members(const EnvelopeOptions& opt, const ExperimentSpec& spec) {
    const std::vector<LegPlan> plans = plan_legs(opt.legs, "cpu", &spec);
    MemberSizing z;
    for (const auto& p : plans)
        if (!z.stacks.insert(p.implementation).second)
            throw Error("--legs: two legs of implementation '" + p.implementation + "': an envelope is per stack");
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const int total_threads = opt.cpu_threads > 0 ? opt.cpu_threads : static_cast<int>(hw);
    const int legs_per_member = static_cast<int>(plans.size());
    z.parallel = opt.parallel > 0 ? opt.parallel : std::max(1, total_threads / legs_per_member);
    z.member_threads = std::max(legs_per_member, total_threads / z.parallel);
    return z;
}

// The N members, named m000..., each with its spec written to <folder>/members/<name>.json.
std::vector<MemberRun> prepare_members(const EnvelopeOptions& opt, const ExperimentSpec& spec,
                                       const std::vector<std::string>& vary, const fs::path& folder) {
    std::vector<MemberRun> members(static_cast<size_t>(opt.seeds));
    for (int64_t i = 0; i < opt.seeds; ++i) {
        MemberRun& m = members[static_cast<size_t>(i)];
        char name[32];
        std::snprintf(name, sizeof name, "m%03lld", static_cast<long long>(i));
        m.name = name;
        m.index = i;
        m.spec = envelope_member_spec(spec, vary, i);
        m.spec_file = folder / "members" / (m.name + ".json");
        m.log_file = folder / "members" / (m.name + ".log");
        write_file_atomic(m.spec_file, m.spec.to_json().dump(2) + "\n");
    }
    return members;
}

// The member processes in flight: what starts them, and how far they are.
struct MemberPool {
    const EnvelopeOptions& opt;
    const fs::path& folder;
    int parallel = 1;
    int member_threads = 1;
    const Say& say;
    std::chrono::steady_clock::time_point t0;
    std::string tandem = self_executable().string();
    size_t next = 0, running = 0, done = 0;
};

// Starts members (`tandem run` of its spec) until `parallel` run at once or none is left.
void start_members(std::vector<MemberRun>& members, MemberPool& pool) {
    const EnvelopeOptions& opt = pool.opt;
    while (pool.running < static_cast<size_t>(pool.parallel) && pool.next < members.size()) {
        MemberRun& m = members[pool.next++];
        m.log = std::make_unique<std::ofstream>(m.log_file);
        std::vector<std::string> argv = {pool.tandem, "run", m.spec_file.string(), "--legs", opt.legs,
                                         "--out", (pool.folder / "members").string(), "--catalog", opt.catalog.string(),
                                         "--threads", std::to_string(pool.member_threads), "--no-probe", "--quiet"};
        if (opt.assets) {
            argv.push_back("--assets");
            argv.push_back(opt.assets->string());
        }
        m.proc = spawn_process(argv, {});
        m.started = true;
        ++pool.running;
        pool.say("member " + m.name + " started (seeds " + m.spec.to_json().value("seeds", json::object()).dump() + ")");
    }
}

// Waits up to 200 ms for the running members' output, copies it to their logs and notes their run folders.
void pump_member_output(std::vector<MemberRun>& members) {
    static const std::string run_folder_marker = "tandem run: run folder: ", preparing_marker = "tandem run: preparing ";
    std::vector<pollfd> fds;
    std::vector<std::pair<MemberRun*, bool>> owners;
    for (auto& m : members) {
        if (!m.started || m.ended) continue;
        if (m.proc.out_fd >= 0) {
            fds.push_back({m.proc.out_fd, POLLIN, 0});
            owners.emplace_back(&m, true);
        }
        if (m.proc.err_fd >= 0) {
            fds.push_back({m.proc.err_fd, POLLIN, 0});
            owners.emplace_back(&m, false);
        }
    }
    if (!fds.empty()) poll(fds.data(), fds.size(), 200);
    for (size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        MemberRun& m = *owners[i].first;
        int& fd = owners[i].second ? m.proc.out_fd : m.proc.err_fd;
        std::string& buf = owners[i].second ? m.proc.out_buf : m.proc.err_buf;
        if (!read_lines(fd, buf, [&](std::string_view line) {
                *m.log << line << '\n';
                if (line.rfind(run_folder_marker, 0) == 0) m.run_folder = std::string(line.substr(run_folder_marker.size()));
                else if (line.rfind(preparing_marker, 0) == 0 && m.run_folder.empty())
                    m.run_folder = std::string(line.substr(preparing_marker.size()));
            })) {
            close(fd);
            fd = -1;
        }
    }
}

// Waits for the members whose output has closed and says each one's end.
void reap_members(std::vector<MemberRun>& members, MemberPool& pool) {
    for (auto& m : members) {
        if (!m.started || m.ended || m.proc.out_fd >= 0 || m.proc.err_fd >= 0) continue;
        m.exit_status = wait_for_exit(m.proc.pid, nullptr);
        m.ended = true;
        m.log->flush();
        --pool.running;
        ++pool.done;
        pool.say("member " + m.name + " ended (exit status " + std::to_string(m.exit_status) + ", " + std::to_string(pool.done) +
                 "/" + std::to_string(members.size()) + ", " +
                 std::to_string(static_cast<int>(std::chrono::duration<double>(std::chrono::steady_clock::now() - pool.t0).count())) +
                 " s)");
    }
}

// Runs every member, `parallel` at a time; true when interrupted (the running members are stopped then).
// On an exception the started members are killed.
bool run_members(std::vector<MemberRun>& members, MemberPool& pool) {
    bool stopping = false;
    try {
        while (pool.done < members.size()) {
            if (g_envelope_interrupted && !stopping) {
                stopping = true;
                pool.say("interrupted: stopping the member runs");
                for (auto& m : members)
                    if (m.started && !m.ended) signal_group(m.proc.pid, SIGTERM);
            }
            if (!stopping) start_members(members, pool);
            if (stopping && pool.running == 0) break;
            pump_member_output(members);
            reap_members(members, pool);
        }
    } catch (...) {
        for (auto& m : members)
            if (m.started && !m.ended) signal_group(m.proc.pid, SIGKILL);
        throw;
    }
    return stopping;
}

// The members' legs per stack, and the plan's update count.
struct CollectedMembers {
    std::map<std::string, std::vector<EnvelopeMember>> per_stack;
    int64_t total_updates = -1;
};

// Reads each member's run file into per_stack; a member without a complete run goes to out.failed_members.
CollectedMembers collect_members(std::vector<MemberRun>& members, const ExperimentSpec& spec, EnvelopeOutcome& out) {
    CollectedMembers got;
    for (auto& m : members) {
        if (m.run_folder.empty() || !fs::exists(m.run_folder / "run.h5")) {
            out.failed_members.push_back(m.name + ": no run folder (exit status " + std::to_string(m.exit_status) + "; log " +
                                         m.log_file.string() + ")");
            continue;
        }
        RunFileReader reader(m.run_folder / "run.h5");
        auto info = reader.experiment();
        const std::vector<LegData> legs = read_legs(reader);
        Comparison c;
        judge_completeness(c, legs, ExpectedSeries{info ? info->total_updates : -1, spec.eval_interval});
        if (!c.incomplete.empty() || !c.failures.empty()) {
            out.failed_members.push_back(m.name + ": " + (!c.incomplete.empty() ? c.incomplete.front() : c.failures.front()) +
                                         " (log " + m.log_file.string() + ")");
            continue;
        }
        if (info) got.total_updates = info->total_updates;
        for (const auto& l : legs) {
            EnvelopeMember em;
            em.name = m.name;
            em.run_id = m.run_folder.filename().string();
            em.seeds = json::object();
            for (const auto& n : ExperimentSpec::seed_names()) em.seeds[n] = m.spec.seed_of(n);
            em.steps = l.trace.steps;
            em.evals = l.trace.evals;
            got.per_stack[l.implementation].push_back(std::move(em));
        }
    }
    return got;
}

// Computes each stack's envelope and writes them, with the host and experiment, to <folder>/run.h5.
void write_envelope_file(const ExperimentSpec& spec, const std::vector<std::string>& vary, CollectedMembers& got,
                         const std::string& created, EnvelopeOutcome& out) {
    const fs::path file = out.folder / "run.h5";
    RunFileWriter w(file);
    w.write_host(collect_host_info());
    ExperimentInfo info;
    info.name = spec.name;
    info.spec_json = spec.to_json().dump();
    info.spec_sha256 = spec.sha256();
    info.run_id = out.folder.filename().string();
    info.total_updates = got.total_updates;
    w.write_experiment(info);
    for (auto& [stack, ms] : got.per_stack) {
        SeedEnvelope e = compute_envelope(ms);
        e.key = spec.sha256_without_seeds();
        e.experiment = spec.name;
        e.implementation = stack;
        e.vary = vary;
        e.created_at = created;
        e.source = file.string();
        write_envelope(w, e, &ms);
        out.envelopes.push_back(std::move(e));
    }
    w.commit();
}

// Writes <folder>/envelope.json: the options the envelope ran with and each member's run folder and seeds.
void write_summary(const EnvelopeOptions& opt, const ExperimentSpec& spec, const std::vector<std::string>& vary,
                   const MemberPool& pool, const std::vector<MemberRun>& members, const std::string& created,
                   const EnvelopeOutcome& out) {
    json summary{{"experiment", spec.name}, {"key", spec.sha256_without_seeds()}, {"seeds", opt.seeds}, {"vary", vary},
                 {"legs", opt.legs}, {"parallel", pool.parallel}, {"threads_per_member", pool.member_threads}, {"wall_s", out.wall_s},
                 {"created_at", created}, {"members", json::array()}};
    for (const auto& m : members)
        summary["members"].push_back({{"name", m.name}, {"run_folder", m.run_folder.string()},
                                      {"seeds", m.spec.to_json().value("seeds", json::object())}});
    write_file_atomic(out.folder / "envelope.json", summary.dump(2) + "\n");
}

// The envelope's folder with its members' specs. A failure here (a full disk, a catalog that is not a
// database) leaves nothing behind: the folder goes, and the output folder too when this made it.
std::vector<MemberRun> prepare_envelope_folder(const EnvelopeOptions& opt, const ExperimentSpec& spec,
                                               const std::vector<std::string>& vary, EnvelopeOutcome& out) {
    const bool out_dir_existed = fs::exists(opt.out_dir);
    try {
        out.folder = fs::absolute(create_run_folder(opt.out_dir, spec.name + "-envelope"));
        fs::create_directories(out.folder / "members");
        {
            Catalog check(opt.catalog);  // a catalog that is not a database is refused before any member runs
        }
        return prepare_members(opt, spec, vary, out.folder);
    } catch (...) {
        std::error_code ec;
        if (!out.folder.empty()) fs::remove_all(out.folder, ec);
        if (!out_dir_existed) fs::remove(opt.out_dir, ec);  // only when empty
        throw;
    }
}

}  // namespace

EnvelopeOutcome run_envelope(const EnvelopeOptions& opt) {
    Say say = opt.say ? opt.say : [](const std::string& s) {
        std::fprintf(stderr, "tandem envelope: %s\n", s.c_str());
    };
    const auto t0 = std::chrono::steady_clock::now();
    const ExperimentSpec spec = load_experiment(opt.experiment);
    if (opt.seeds < 2) throw Error("--seeds: an envelope needs at least 2 runs (given " + std::to_string(opt.seeds) + ")");
    const std::vector<std::string> vary = seeds_to_vary(opt, spec, say);
    const MemberSizing sizing = size_members(opt, spec);

    EnvelopeOutcome out;
    std::vector<MemberRun> members = prepare_envelope_folder(opt, spec, vary, out);
    say("envelope of " + spec.name + ": " + std::to_string(opt.seeds) + " runs of " +
        join(std::vector<std::string>(sizing.stacks.begin(), sizing.stacks.end()), ",") + ", varying " +
        (vary.empty() ? std::string("no seed") : join(vary, ",")) + "; " + std::to_string(sizing.parallel) + " at a time, " +
        std::to_string(sizing.member_threads) + " CPU thread(s) each; folder " + out.folder.string());

    MemberPool pool{opt, out.folder, sizing.parallel, sizing.member_threads, say, t0};
    bool stopping = false;
    {
        // SIGINT and SIGTERM set g_envelope_interrupted while the members run
        const StopSignalHandlers signals(on_envelope_signal);
        g_envelope_interrupted = 0;
        stopping = run_members(members, pool);
    }
    if (stopping) throw Error("interrupted: the envelope was not built (member runs are in " + (out.folder / "members").string() + ")");

    // Every member must be complete: an envelope over missing data is never stored.
    CollectedMembers got = collect_members(members, spec, out);
    out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!out.failed_members.empty())
        throw Error("envelope not built: " + std::to_string(out.failed_members.size()) + " of " + std::to_string(members.size()) +
                    " member runs incomplete; first: " + out.failed_members.front());

    const std::string created = utc_timestamp_now();
    write_envelope_file(spec, vary, got, created, out);
    Catalog catalog(opt.catalog);
    for (const auto& e : out.envelopes) store_envelope(catalog, e);
    write_summary(opt, spec, vary, pool, members, created, out);
    return out;
}

}  // namespace tandem::experiments
