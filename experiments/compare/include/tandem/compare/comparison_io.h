#pragma once
// Comparisons in run files (docs/hdf5-layout.md): the legs a comparison reads, and the groups it
// writes. The statistics are in compare.h / statistics.h; this is only their storage.
#include "tandem/compare/compare.h"
#include "tandem/store/run_file.h"

#include <vector>

namespace tandem::experiments {

// Reads legs from a run file (steps, eval, checks, timing, memory, leg attributes).
std::vector<LegData> read_legs(const RunFileReader& reader);

// Writes /comparisons/<a>~<b> (paired evals, paired losses, paired grad norms, summary attributes,
// the pair's verdict) and /distances/<a>~<b>/{numerics,envelope} (docs/hdf5-layout.md).
void write_comparisons(RunFileWriter& writer, const Comparison& c);

}  // namespace tandem::experiments
