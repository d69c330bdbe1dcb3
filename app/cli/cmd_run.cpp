// tandem subcommands of the run family — registered in main.cpp:
//   tandem run EXPERIMENT [--legs ...] [--devices ...] [--out DIR] [--catalog DB]   (or --resume RUN_DIR)
//   tandem report RUN [--format text|md|csv|tex] [--out FILE]
//   tandem leg engine --run DIR --leg NAME --device cpu [--resume] [--threads N]     (started by `run`)
#include "commands.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/legs/engine_leg.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/compare/report.h"
#include "tandem/runner/runner.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

namespace tandem::cli {

namespace {

std::string human_seconds(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    char b[32];
    if (s < 60) std::snprintf(b, sizeof b, "%.0fs", s);
    else if (s < 3600) std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
    else std::snprintf(b, sizeof b, "%dh%02dm", static_cast<int>(s) / 3600, (static_cast<int>(s) % 3600) / 60);
    return b;
}

std::string progress_line(const experiments::LegProgress& p) {
    char loss[32] = "-", ev[48] = "-", b[256];
    if (p.loss) std::snprintf(loss, sizeof loss, "%.4f", *p.loss);
    if (p.heldout_ce) std::snprintf(ev, sizeof ev, "%.5f@%lld", *p.heldout_ce, static_cast<long long>(p.heldout_update));
    std::snprintf(b, sizeof b, "%-12s %-9s %5lld/%-5lld loss %-8s eval %-14s %7.0f tok/s  ETA %-7s %s", p.name.c_str(),
                  p.device.c_str(), static_cast<long long>(p.updates_done), static_cast<long long>(p.updates_total), loss, ev,
                  p.tokens_per_s, p.eta_s ? human_seconds(*p.eta_s).c_str() : "?", experiments::leg_status_name(p.status));
    return b;
}

// One line per leg: redrawn in place on a terminal, else every 10 s and when a leg ends.
class ProgressPrinter {
public:
    void operator()(const std::vector<experiments::LegProgress>& legs, bool final) {
        const auto now = std::chrono::steady_clock::now();
        if (tty_) {
            if (legs.size() == 1 && !final && drawn_ != 0) return;  // a single ended leg: the next redraw shows it
            if (drawn_) std::printf("\033[%zuA", drawn_);
            for (const auto& l : legs) std::printf("\r\033[K%s\n", progress_line(l).c_str());
            drawn_ = legs.size();
        } else if (legs.size() == 1 && !final) {
            std::printf("%s\n", progress_line(legs[0]).c_str());  // a leg ended
        } else if (final || now - last_ > std::chrono::seconds(10)) {
            for (const auto& l : legs)
                if (final || l.status == experiments::LegStatus::Running) std::printf("%s\n", progress_line(l).c_str());
            last_ = now;
        }
        std::fflush(stdout);
    }

private:
    bool tty_ = isatty(STDOUT_FILENO) != 0;
    size_t drawn_ = 0;
    std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

struct RunArgs {
    std::string experiment;
    std::string resume;
    std::string legs;  // empty: the experiment's legs, else engine,reference
    std::string devices = "cpu";
    std::string executor;  // empty: local (new runs); a resumed run keeps the executor it recorded
    std::string out = "runs";
    std::string catalog = "tandem.db";
    std::string assets;
    std::string format = "text";
    int threads = 0;
    bool no_probe = false;
    bool quiet = false;
};

struct ReportArgs {
    std::string run;
    std::string format = "text";
    std::string out;
    std::string catalog = "tandem.db";
};

struct EnvelopeArgs {
    std::string experiment;
    int64_t seeds = 8;
    std::string legs = "reference";
    std::string vary = "dropout,plan,adapter";
    std::string out = "runs";
    std::string catalog = "tandem.db";
    std::string assets;
    int threads = 0;
    int parallel = 0;
};

}  // namespace

void add_run_commands(CLI::App& app, int& exit_code) {
    auto run_args = std::make_shared<RunArgs>();
    auto* run = app.add_subcommand("run", "Run an experiment: prepare the run folder, launch the legs side by side, "
                                          "record run.h5 and the catalog, print the L1-L4 report");
    run->add_option("experiment", run_args->experiment, "experiment file (experiments/*.json)");
    run->add_option("--resume", run_args->resume, "continue the interrupted legs of this run folder from their last checkpoint");
    run->add_option("--legs", run_args->legs,
                    "legs to run, comma-separated: engine, reference, sdk-python, sdk-go, or legs the experiment defines "
                    "(NAME=IMPL to name one; default: the experiment's legs, else engine,reference)");
    run->add_option("--devices", run_args->devices, "devices, assigned to the legs in order: cpu, cuda:0, ...")
        ->capture_default_str();
    run->add_option("--executor", run_args->executor,
                    "where the legs run: local (child processes) or slurm (one sbatch job per leg; docs/cluster.md)")
        ->check(CLI::IsMember({"local", "slurm"}));
    run->add_option("--out", run_args->out, "folder for run folders")->capture_default_str();
    run->add_option("--catalog", run_args->catalog, "SQLite catalog")->capture_default_str();
    run->add_option("--assets", run_args->assets, "folder holding assets/qwen3-tokenizer and data/corpora");
    run->add_option("--threads", run_args->threads, "CPU threads shared by the CPU legs (0: all cores)")
        ->check(CLI::NonNegativeNumber);
    run->add_option("--format", run_args->format, "report format printed at the end: text, md, csv, tex")->capture_default_str();
    run->add_flag("--no-probe", run_args->no_probe, "skip the bandwidth probes");
    run->add_flag("--quiet", run_args->quiet, "no progress lines");
    run->callback([run_args, &exit_code] {
        const RunArgs& a = *run_args;
        if (a.experiment.empty() == a.resume.empty())
            throw CLI::ValidationError("run", "give an experiment file or --resume RUN_DIR (not both)");
        experiments::RunnerOptions o;
        if (!a.resume.empty()) {
            if (!a.executor.empty())
                throw CLI::ValidationError("--executor", "a resumed run keeps the executor its legs.json records");
            o.resume = a.resume;
        } else {
            if (!a.executor.empty()) o.executor = a.executor;
            o.experiment = a.experiment;
            o.legs = a.legs;
            o.devices = a.devices;
        }
        o.out_dir = a.out;
        o.catalog = a.catalog;
        if (!a.assets.empty()) o.assets = a.assets;
        o.cpu_threads = a.threads;
        o.probe = !a.no_probe;
        if (!a.quiet) o.on_progress = ProgressPrinter();
        o.report_format = a.format;
        experiments::parse_report_format(a.format);
        experiments::RunOutcome r = experiments::run_experiment(o);
        if (r.status == experiments::RunStatus::Interrupted) exit_code = kInterrupted;
        else if (r.status != experiments::RunStatus::Finished) exit_code = kError;
        else if (!r.checks_passed) exit_code = kCheckFailed;
        else exit_code = kOk;
    });

    auto rep = std::make_shared<ReportArgs>();
    auto* report = app.add_subcommand("report", "Print the L1-L4 comparison of a run, its two distances and its verdict "
                                                "(exit 3 unless equivalent or within the seed envelope)");
    report->add_option("run", rep->run, "run folder or run.h5")->required();
    report->add_option("--format", rep->format, "text, md, csv or tex (LaTeX, booktabs)")->capture_default_str();
    report->add_option("--out", rep->out, "write to this file instead of stdout");
    report->add_option("--catalog", rep->catalog,
                       "SQLite catalog whose seed envelope judges the run when its run.h5 holds none (read only when it exists)")
        ->capture_default_str();
    report->callback([rep, &exit_code] {
        auto fmt = experiments::parse_report_format(rep->format);
        std::string title;
        experiments::Comparison c = experiments::compare_run_file(rep->run, &title, rep->catalog);
        std::string text = experiments::render_report(title, c, fmt);
        if (rep->out.empty()) {
            std::fwrite(text.data(), 1, text.size(), stdout);
        } else {
            write_file_atomic(rep->out, text);
        }
        exit_code = c.passed() ? kOk : kCheckFailed;
    });

    // tandem envelope EXPERIMENT --seeds N [--legs reference,engine] [--vary dropout,plan,adapter]
    auto env = std::make_shared<EnvelopeArgs>();
    auto* envelope = app.add_subcommand("envelope", "Build a same-stack seed envelope: N runs of the experiment that differ only in "
                                                    "the varied seeds; stored in run.h5 (/envelope) and the catalog for later runs");
    envelope->add_option("experiment", env->experiment, "experiment file (experiments/*.json)")->required();
    envelope->add_option("--seeds", env->seeds, "runs in the envelope (at least 2)")->capture_default_str();
    envelope->add_option("--legs", env->legs, "stacks, comma-separated (one envelope each): reference, engine, ...")
        ->capture_default_str();
    envelope->add_option("--vary", env->vary, "seeds that differ between the runs: split, base, adapter, plan, dropout, or none")
        ->capture_default_str();
    envelope->add_option("--out", env->out, "folder for the envelope's folder (<name>-envelope-<stamp>)")->capture_default_str();
    envelope->add_option("--catalog", env->catalog, "SQLite catalog")->capture_default_str();
    envelope->add_option("--assets", env->assets, "folder holding assets/qwen3-tokenizer and data/corpora");
    envelope->add_option("--threads", env->threads, "CPU threads for all runs together (0: all cores)");
    envelope->add_option("--parallel", env->parallel, "runs at once (0: threads / legs per run)");
    envelope->callback([env, &exit_code] {
        experiments::EnvelopeOptions o;
        o.experiment = env->experiment;
        o.seeds = env->seeds;
        o.legs = env->legs;
        o.vary.clear();
        if (env->vary != "none")
            for (size_t p = 0; p <= env->vary.size();) {
                size_t q = env->vary.find(',', p);
                if (q == std::string::npos) q = env->vary.size();
                if (q > p) o.vary.push_back(env->vary.substr(p, q - p));
                p = q + 1;
            }
        o.out_dir = env->out;
        o.catalog = env->catalog;
        if (!env->assets.empty()) o.assets = env->assets;
        o.cpu_threads = env->threads;
        o.parallel = env->parallel;
        experiments::EnvelopeOutcome r = experiments::run_envelope(o);
        for (const auto& e : r.envelopes) {
            std::printf("%s: %lld runs, varying %s\n", e.implementation.c_str(), static_cast<long long>(e.members),
                        env->vary.c_str());
            std::printf("  %-8s %-4s %-12s %-12s %-12s %-12s\n", "update", "n", "mean CE", "std", "min", "max");
            for (const auto& p : e.heldout_ce)
                std::printf("  %-8lld %-4lld %-12.7f %-12.3e %-12.7f %-12.7f\n", static_cast<long long>(p.update),
                            static_cast<long long>(p.n), p.mean, p.std, p.min, p.max);
        }
        std::printf("envelope: %s (%.0f s); catalog %s\n", (r.folder / "run.h5").string().c_str(), r.wall_s, env->catalog.c_str());
        exit_code = kOk;
    });

    auto leg_opts = std::make_shared<experiments::EngineLegOptions>();
    auto* leg = app.add_subcommand("leg", "One leg of a run: stop, pause or resume it (and the internal `leg engine`)");
    leg->require_subcommand(1);
    auto* engine = leg->add_subcommand("engine", "the engine leg process (started by `tandem run`; speaks the leg protocol)");
    engine->group("");  // hidden from the help: an internal entry point
    engine->add_option("--run", leg_opts->run, "run folder")->required();
    engine->add_option("--leg", leg_opts->leg, "leg name")->capture_default_str();
    engine->add_option("--device", leg_opts->device, "device")->capture_default_str();
    engine->add_option("--threads", leg_opts->threads, "CPU threads (0: default)");
    engine->add_flag("--resume", leg_opts->resume, "continue from the newest valid checkpoint");
    engine->add_option("--faults", leg_opts->faults, "faults to inject, name[=size],... (set by the runner; docs/faults.md)");
    engine->callback([leg_opts, &exit_code] { exit_code = experiments::run_engine_leg(*leg_opts); });

    // tandem leg stop|pause|resume RUN LEG: one leg of a run, while the others go on.
    struct LegControlArgs {
        std::string run, leg, catalog = "tandem.db";
    };
    for (auto action : {experiments::LegAction::Stop, experiments::LegAction::Pause, experiments::LegAction::Resume}) {
        auto a = std::make_shared<LegControlArgs>();
        const char* help = action == experiments::LegAction::Stop
                               ? "Stop one leg of a run; `tandem run --resume` then leaves it stopped"
                           : action == experiments::LegAction::Pause
                               ? "Pause one leg of a running run (it resumes from its last checkpoint)"
                               : "Resume a paused or stopped leg (starts `tandem run --resume` when no runner is running)";
        auto* sub = leg->add_subcommand(experiments::leg_action_name(action), help);
        sub->add_option("run", a->run, "run folder")->required();
        sub->add_option("leg", a->leg, "leg name")->required();
        sub->add_option("--catalog", a->catalog, "SQLite catalog (for resume without a running runner)")->capture_default_str();
        sub->callback([a, action, &exit_code] {
            std::string said = experiments::request_leg_action(a->run, a->leg, action);
            if (!said.empty()) {
                std::printf("%s\n", said.c_str());
                exit_code = kOk;
                return;
            }
            experiments::RunnerOptions o;  // resume without a runner: continue the run
            o.resume = a->run;
            o.catalog = a->catalog;
            o.on_progress = ProgressPrinter();
            experiments::RunOutcome r = experiments::run_experiment(o);
            exit_code = r.status == experiments::RunStatus::Interrupted ? kInterrupted
                        : r.status != experiments::RunStatus::Finished ? kError
                        : r.checks_passed ? kOk : kCheckFailed;
        });
    }
}

}  // namespace tandem::cli
