#pragma once
// Imported legs (`tandem import`): a run made elsewhere — TensorBoard event files, a CSV
// export (W&B, MLflow, a spreadsheet), or a leg's own protocol events — added to a run file as a
// read-only leg with whatever series it has, so it can be overlaid and compared. A TensorBoard or
// CSV leg has implementation "imported": levels that need data it lacks say "n/a (imported)" and its
// L4 is reported, not gated (docs/legs.md). An events import keeps the leg's own implementation and
// is judged like a leg the runner ran.
#include "tandem/legs/leg_protocol.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::experiments {

inline constexpr const char* kImportedImplementation = "imported";

// Which tag (TensorBoard) or column (CSV) holds which series. An empty name means "the first of the
// usual names that is present" (train/loss, loss; eval/loss, eval_loss; train/grad_norm, grad_norm;
// train/learning_rate, learning_rate, lr); a name given that is absent is an error.
struct SeriesMapping {
    std::string step = "step";   // CSV: the column of the x axis (TensorBoard: the event's step)
    std::string loss, eval_loss, grad_norm, lr;
    // true: a step value counts updates DONE (HuggingFace Trainer's global_step: the loss logged at
    // step s is update s-1; an evaluation at step s follows s updates). false: steps are 0-based
    // update indices (an evaluation at step s is the one after s updates either way).
    bool steps_count_done = true;
};

using ScalarSeries = std::map<std::string, std::vector<std::pair<int64_t, double>>>;  // tag -> (step, value)

struct ImportedTrace {
    LegTrace trace;
    std::vector<std::string> series;   // "loss <- train/loss (30 points)", ... what was taken from where
    std::string source;                // "tensorboard:<path>", "csv:<path>", "events:<path>"
    // Non-finite values of the compared series, kept out of them ("loss at step 2"), in file order.
    std::vector<std::string> non_finite;
};

// The note `tandem import` prints and stores as the leg's non_finite_kept_out attribute ("" when none):
// "2 non-finite values kept out of statistics: loss at step 2, heldout_ce at step 4".
std::string non_finite_note(const ImportedTrace& imported);

// Steps and evaluations from named scalar series (the common step of TensorBoard and CSV imports).
ImportedTrace trace_from_scalars(const ScalarSeries& scalars, const SeriesMapping& mapping, const std::string& source);
// Event files read by TensorBoard's own reader (experiments/legs/tensorboard_scalars.py in the
// reference environment, `python` given or reference_python()).
ImportedTrace trace_from_tensorboard(const std::filesystem::path& dir_or_file, const SeriesMapping& mapping,
                                     const std::string& python = "");
ImportedTrace trace_from_csv(const std::filesystem::path& file, const SeriesMapping& mapping);
// A leg's protocol events (legs/<leg>/events.jsonl or a copy of a leg's stdout).
ImportedTrace trace_from_events(const std::filesystem::path& file);

// Adds the leg to <run>/run.h5 (and to the catalog when given and the run is in it). Refuses a
// leg name the run already has. `implementation`: "imported" or, for events, the leg's own.
void import_leg(const std::filesystem::path& run, const std::string& leg, const ImportedTrace& imported,
                const std::string& implementation, const std::optional<std::filesystem::path>& catalog);

}  // namespace tandem::experiments
