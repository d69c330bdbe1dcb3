#pragma once
// `tandem export tensorboard RUN DIR`: every leg's series of a run as TensorBoard event files, written
// by torch.utils.tensorboard.SummaryWriter in the reference environment (experiments/legs/
// tensorboard_write.py), so a lab's TensorBoard (or W&B's TensorBoard sync) shows tandem runs next to
// its own. One TensorBoard run per leg: DIR/<run id>/<leg>/. Tags and steps follow HF Trainer, so
// dashboards built for HF runs line up and `tandem import tensorboard` reads an export back exactly:
// the metric table's tags (train/loss, train/grad_norm, train/learning_rate, train/tokens_per_second,
// eval/loss) plus train/num_input_tokens_seen; a training value of update u at step u + 1 (updates
// done), an evaluation before update u at step u; wall times are the run's start plus the leg's summed
// update wall seconds. TensorBoard stores float32: the values are run.h5's, rounded to float32.
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::experiments {

struct TensorboardExport {
    std::string run_id;
    std::vector<std::filesystem::path> leg_dirs;  // DIR/<run id>/<leg>, one per leg
    std::vector<std::string> lines;               // "engine: train/loss 30 points", ... (what was written)
};

// Throws tandem::Error (one line naming the run, the folder or the writer's complaint). A leg folder
// that already holds event files is refused unless `overwrite` (then its event files are replaced).
TensorboardExport export_tensorboard(const std::filesystem::path& run, const std::filesystem::path& dir, bool overwrite = false,
                                     const std::string& python = {});

}  // namespace tandem::experiments
