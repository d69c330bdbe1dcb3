// tandem run EXPERIMENT [--legs ...] [--devices ...] [--out DIR] [--catalog DB]   (or --resume RUN_DIR):
// the runner (tandem/runner/runner.h) with live progress lines and the report at the end.
#include "commands.h"

#include "cli_inputs.h"

#include "run_progress.h"
#include "tandem/join.h"
#include "tandem/compare/report.h"
#include "tandem/runner/runner.h"
#include "tandem/spec/leg_kinds.h"

#include <memory>
#include <string>
#include <vector>

namespace tandem::cli {

namespace {

struct RunArgs {
    std::string experiment;
    std::string resume;
    std::string legs;  // empty: the experiment's legs, else engine,reference
    std::string devices = "cpu";
    std::string executor;  // empty: local (new runs); a resumed run keeps the executor it recorded
    RunnerArgs runner;
    bool quiet = false;
};

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
    auto run_args = std::make_shared<RunArgs>();
    std::vector<std::string> startable;  // a command leg needs the experiment's definition
    for (const auto& k : experiments::leg_kinds())
        if (!k.takes_command) startable.push_back(k.name);
    const std::string kinds = join(startable, ", ");
    auto* run = app.add_subcommand("run", "Run an experiment: prepare the run folder, launch the legs side by side, "
                                          "record run.h5 and the catalog, print the L1-L4 report");
    run->add_option("experiment", run_args->experiment, "experiment file (experiments/*.json)");
    run->add_option("--resume", run_args->resume, "continue the interrupted legs of this run folder from their last checkpoint");
    run->add_option("--legs", run_args->legs,
                    "legs to run, comma-separated: a leg kind (" + kinds + ") or a leg the experiment defines "
                    "(NAME=IMPL to name one; KIND@ENV runs a Python leg in another environment, ENV a folder or an "
                    "interpreter; default: the experiment's legs, else engine,reference)");
    run->add_option("--devices", run_args->devices, "devices, assigned to the legs in order: cpu, cuda:0, ...")
        ->capture_default_str();
    run->add_option("--executor", run_args->executor,
                    "where the legs run: local (child processes) or slurm (one sbatch job per leg; docs/cluster.md)")
        ->check(CLI::IsMember({"local", "slurm"}));
    add_runner_args(run, run_args->runner, "CPU threads split over the legs that run at once (0: all cores; docs/cli.md \"Legs on one GPU\")",
                    "report format printed at the end: text, md, csv, tex", /*more_catalogs=*/true)
        ->check(CLI::NonNegativeNumber);
    run->add_flag("--quiet", run_args->quiet, "no progress lines");
    run->callback([run_args, &exit_code] {
        const RunArgs& a = *run_args;
        require_out_folder("--out", a.runner.out);  // new folders go inside it
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
        apply_runner_args(a.runner, o);
        if (!a.quiet) o.on_progress = ProgressPrinter();
        experiments::parse_report_format(a.runner.format);
        exit_code = run_exit_code(experiments::run_experiment(o));
    });
}

}  // namespace tandem::cli
