#pragma once
// A leg's /legs/<leg>/timing and /legs/<leg>/memory records (docs/hdf5-layout.md) from its trace:
// what the runner writes at the end of a leg and what `tandem import` writes for an imported one.
#include "tandem/legs/leg_protocol.h"
#include "tandem/store/run_file.h"

namespace tandem::experiments {

// Setup, model-load, tokenise and total seconds as the leg reported them; the median s/update over
// the timing window and tokens/s computed once (timing_of, tandem/compare/compare.h).
LegTiming timing_record(const LegTrace& trace);
// The leg's peak device and host memory.
LegMemory memory_record(const LegTrace& trace);

}  // namespace tandem::experiments
