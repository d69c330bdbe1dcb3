#pragma once
// The vocabulary every comparison speaks (docs/report.md): what one leg of a run holds (LegData) and
// the thresholds the levels are judged by. Below the levels, the comparison and the report.
#include "tandem/compare/distance.h"
#include "tandem/compare/flops.h"
#include "tandem/compare/judge/gate.h"
#include "tandem/legs/leg_protocol.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

struct LegData {
    std::string name, implementation, device, status;
    int64_t exit_status = 0;
    LegTrace trace;
    std::vector<GateFlag> flags;  // the live gate's flags (docs/gate.md)
    std::string faults;           // injected faults (docs/faults.md), "" = a clean leg
    FlopFigures flops;            // the runner's FLOP formula over the leg's timing window (flops.h)
    std::string device_shared_with;  // legs that ran at the same time on its GPU ("a,b"; --share-devices)
    // An imported series' non-finite values, kept out of its series (docs/decisions.md "Imported series"):
    // "" none, else what `tandem import` stored ("2 non-finite values kept out of statistics: loss at step 2, ...").
    std::string non_finite_kept_out;
    // Legs of two runs (`tandem compare`): the clip and the seeds of the leg's own run. Unset: the
    // comparison's spec's (every leg of one run).
    std::optional<double> clip;
    std::optional<std::string> seeds;  // ExperimentSpec::Seeds as text: legs with other seeds are not paired
};

struct Thresholds {
    double l1_rel = 1e-5;           // docs/spec.md §Levels L1
    // L4 is judged by two distances (docs/thresholds.md): the paired numerics distance against the
    // error model (k: kErrorModelK, calibrated) and the envelope distance (band, two-sided test).
    double error_model_k = kErrorModelK;
    // The per-update series' own bounds (judge/series.h), calibrated like k.
    double loss_k = kLossErrorModelK;
    double grad_norm_k = kGradNormErrorModelK;
    // The envelope's family-wise level for one pair (docs/thresholds.md section 3): half to the
    // two-sided mean tests of the (up to three) series, split evenly (Bonferroni), half to the
    // per-update bands of every series as one family (Sidak), so a clean leg is flagged by some test
    // or band in at most 5 % of runs.
    double envelope_alpha = kEnvelopeAlpha;
};

// A leg added by `tandem import tensorboard|csv` (implementation "imported", experiments/import.h):
// levels needing data it lacks are "n/a (imported)", and its L4 is reported, not gated.
bool is_imported(const LegData& leg);

}  // namespace tandem::experiments
