// tandem leg stop|pause|resume RUN LEG: one leg of a run while the others go on; and the internal
//   tandem leg engine --run DIR --leg NAME --device cpu [--resume] [--threads N]     (started by `run`)
#include "commands.h"

#include "run_progress.h"
#include "tandem/legs/engine_leg.h"
#include "tandem/runner/runner.h"

#include <cstdio>
#include <memory>
#include <string>

namespace tandem::cli {

void add_leg_commands(CLI::App& app, int& exit_code) {
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
            exit_code = run_exit_code(experiments::run_experiment(o));
        });
    }
}

}  // namespace tandem::cli
