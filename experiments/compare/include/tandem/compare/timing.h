#pragma once
// A leg's timing (the report's timing table, docs/report.md) and its /legs/<leg>/timing and
// /legs/<leg>/memory records (docs/hdf5-layout.md) from its trace: what the runner writes at the end
// of a leg and what `tandem import` writes for an imported one.
#include "tandem/compare/flops.h"
#include "tandem/compare/leg_data.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/store/run_file.h"

#include <cstdint>
#include <string>

namespace tandem::experiments {

struct GradStats {
    std::string leg;
    int64_t n = 0;
    double median = 0, p99 = 0, max = 0, frac_above_clip = 0;
};

struct TimingRow {
    std::string leg, implementation, device, status;
    double setup_s = -1, model_load_s = -1, tokenize_s = -1;
    double median_update_s = -1;
    int64_t window_first = -1, window_last = -1;  // 0-based, inclusive
    double tokens_per_s = -1;
    int64_t updates = 0;
    int64_t peak_device_bytes = -1, peak_host_bytes = -1;
    FlopFigures flops;  // FLOPs per update, achieved FLOP/s, the sgemm peak and the fraction of it
    std::string device_shared_with;  // legs that ran at the same time on its GPU: its timing is not its own
};

// The timing figures of one leg's trace (leg, implementation, device and status left empty): the
// one place the median s/update over the window and tokens/s are computed.
TimingRow timing_of(const LegTrace& trace);
// The same for a leg of a run, with its name, implementation, device and status.
TimingRow timing_row(const LegData& leg);
// The distribution of a leg's finite pre-clip grad norms (median, p99, max, share above `clip`).
GradStats grad_stats(const LegData& leg, double clip);

// Setup, model-load, tokenise and total seconds as the leg reported them; the median s/update over
// the timing window and tokens/s computed once (timing_of).
LegTiming timing_record(const LegTrace& trace);
// The leg's peak device and host memory.
LegMemory memory_record(const LegTrace& trace);

}  // namespace tandem::experiments
