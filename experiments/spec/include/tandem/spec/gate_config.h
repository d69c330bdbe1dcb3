#pragma once
// The live trajectory gate's settings (docs/gate.md), the experiment file's `gate` object: which
// action each flag takes and its parameters. The gate itself is gate.h.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tandem::experiments {

// The envelope band's width in envelope standard deviations beyond its min and max (docs/thresholds.md).
inline constexpr double kEnvelopeBandSigma = 2.0;

enum class GateAction { Warn, Pause, Stop };
const char* gate_action_name(GateAction a);  // "warn", "pause", "stop"

struct GateConfig {
    GateAction non_finite = GateAction::Stop;
    GateAction step_time = GateAction::Warn;
    double step_time_factor = 4.0;        // × running median of the leg's update wall times
    double step_time_min_excess_s = 0.05; // and at least this much above it (timer noise on short updates)
    int64_t step_time_window = 32;        // updates in the running median
    int64_t step_time_min_history = 5;    // no flag before this many updates of the attempt
    GateAction loss_spike = GateAction::Warn;
    double loss_spike_sigma = 6.0;
    int64_t loss_spike_window = 128;
    int64_t loss_spike_min_history = 16;
    GateAction envelope = GateAction::Warn;
    double envelope_band_sigma = kEnvelopeBandSigma;  // the band: [min - sigma std, max + sigma std] (+ the bound)
    GateAction paired_bound = GateAction::Warn;
    // The leg watchdog (docs/gate.md "Stalled legs"): no event from a running leg for its stall time
    // raises a `stall` flag. warn: flagged, and stopped (failed: stalled) after stall_stop_factor ×
    // the stall time; pause / stop: act at the stall time. The stall time is stall_seconds when set,
    // else max(stall_floor_s, stall_factor × the leg's own pace: the median update wall time of this
    // attempt, or its longest silence between events since its first update when longer — an
    // evaluation, a checkpoint); before the attempt's first update it is stall_startup_s (loading a
    // model, the initial evaluation).
    GateAction stall = GateAction::Warn;
    double stall_seconds = 0;       // 0: derived as above (a value in the file must be positive)
    double stall_factor = 10.0;
    double stall_floor_s = 60.0;
    double stall_startup_s = 600.0;
    double stall_stop_factor = 3.0;

    // Parses the experiment's `gate` object (docs/gate.md); `source` names the file in errors.
    static GateConfig from_json(const nlohmann::json& j, const std::string& source);
    nlohmann::json to_json() const;
    bool is_default() const;
};

}  // namespace tandem::experiments
