#pragma once
// Comparisons in run files (docs/hdf5-layout.md): the legs a comparison reads, and the groups it
// writes. The statistics are in comparison.h / statistics.h; this is their storage, and the one
// way a run file is judged (compare_run_file).
#include "tandem/compare/comparison.h"
#include "tandem/store/run_file.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// Reads legs from a run file (steps, eval, checks, timing, memory, leg attributes).
std::vector<LegData> read_legs(const RunFileReader& reader);

// Writes /comparisons/<a>~<b> (paired evals, paired losses, paired grad norms, summary attributes,
// the pair's verdict) and /distances/<a>~<b>/{numerics,envelope} (docs/hdf5-layout.md).
void write_comparisons(RunFileWriter& writer, const Comparison& c);

// Reads run.h5 of a run folder (or a run.h5 path) and judges its legs (judge_legs: the one judging
// path) with the spec stored there, against the seed envelopes the file holds (/envelope), else those
// of the first of `catalogs` that holds any for the experiment (run_envelopes). `against`: compare every
// leg with that leg only; nullopt: a faults run's reference leg (/faults), else every pair.
Comparison compare_run_file(const std::filesystem::path& run, std::string* title = nullptr,
                            const std::vector<std::filesystem::path>& catalogs = {},
                            const std::optional<std::string>& against = std::nullopt);
// The seed envelopes that judge a run of `spec`: those `reader`'s file holds for the experiment, else
// those of the first of `catalogs` (in order; missing files are skipped) holding any, with
// every place looked in. `tandem report` and `tandem compare` find them the same way; `tandem run`
// looks in its catalogs the same way when the run starts (RunRecorder).
EnvelopeSearch run_envelopes(const RunFileReader& reader, const ExperimentSpec& spec,
                             const std::vector<std::filesystem::path>& catalogs);

}  // namespace tandem::experiments
