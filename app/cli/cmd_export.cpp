// `tandem export tensorboard RUN DIR`: a run's legs as TensorBoard event files
// (experiments/studies/include/tandem/studies/export_tensorboard.h, docs/cli.md).
#include "commands.h"

#include "cli_inputs.h"
#include "tandem/error.h"

#include "tandem/studies/export_tensorboard.h"

#include <cstdio>
#include <memory>

namespace tandem::cli {

void add_export_commands(CLI::App& app, int& exit_code) {
    auto* exp = group(app, "export", "Write a run's series for other tools (TensorBoard)");
    struct Args {
        std::string run, dir;
        bool overwrite = false;
    };
    auto a = std::make_shared<Args>();
    auto* tb = exp->add_subcommand("tensorboard",
                                   "every leg's series as TensorBoard event files, one TensorBoard run per leg (DIR/<run id>/<leg>), "
                                   "written by torch's SummaryWriter with HF Trainer's tags and steps");
    tb->add_option("run", a->run, "run folder (or its run.h5)")->required();
    tb->add_option("dir", a->dir, "TensorBoard log folder (tensorboard --logdir DIR)")->required();
    tb->add_flag("--overwrite", a->overwrite, "replace the event files of a previous export of the same legs");
    tb->callback([a, &exit_code] {
        // A live run's series are partial, and an export of them would block the export of the finished
        // run (no --overwrite): refused, saying who runs it.
        if (const std::string live = live_run_text(a->run); !live.empty())
            throw Error(live + "; its series are still growing: export it once the run has ended");
        const auto out = experiments::export_tensorboard(a->run, a->dir, a->overwrite);
        std::printf("exported %s to %s (%zu legs)\n", out.run_id.c_str(), a->dir.c_str(), out.leg_dirs.size());
        for (const auto& line : out.lines) std::printf("  %s\n", line.c_str());
        std::printf("view: tensorboard --logdir %s\n", a->dir.c_str());
        exit_code = kOk;
    });
}

}  // namespace tandem::cli
