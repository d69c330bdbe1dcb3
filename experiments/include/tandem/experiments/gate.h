#pragma once
// The live trajectory gate (docs/gate.md): while legs run, every new update and evaluation of a leg
// is checked, and what is out of the ordinary raises a flag — recorded in run.h5
// (/legs/<leg>/flags), shown in the progress and the report, and acted on as the experiment file
// says (warn, pause the leg, stop the leg).
//
//   non-finite   a NaN/inf training loss, grad norm or held-out CE              default: stop
//   step-time    an update whose wall time exceeds factor × the leg's running median (and the
//                median by at least min_excess_s)                             default: warn
//   loss-spike   a training loss above mean + sigma × std of the leg's last `window` updates
//                (OLMo's stability monitor)                                   default: warn
//
// The gate is pure: it sees traces and returns flags; the runner acts on them.
#include "tandem/experiments/leg_protocol.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem::experiments {

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

    // Parses the experiment's `gate` object (docs/gate.md); `source` names the file in errors.
    static GateConfig from_json(const nlohmann::json& j, const std::string& source);
    nlohmann::json to_json() const;
    bool is_default() const;
};

struct GateFlag {
    std::string leg;
    std::string kind;      // non-finite | step-time | loss-spike
    int64_t update = -1;   // the update (step) or evaluation point the flag is about
    double value = 0;      // what was observed (seconds, loss; NaN for non-finite)
    double threshold = 0;  // what it was compared with
    GateAction action = GateAction::Warn;
    std::string message;   // one line, e.g. "engine: update 14 took 2.41 s, 6.0x its running median 0.40 s"
};

nlohmann::json flags_to_json(const std::vector<GateFlag>& flags);
std::vector<GateFlag> flags_from_json(const nlohmann::json& j);

// The step-time flag's yardstick for update row i: the median wall time of the attempt's last `window`
// updates before it, or nullopt before `min_history` of them.
std::optional<double> step_time_running_median(const std::vector<StepRow>& steps, size_t i, const GateConfig& config,
                                               int64_t attempt_first_update);
// The largest wall time / running median over a leg's updates (one attempt starting at its first row):
// the clean spread the step-time factor is set from (docs/gate.md). NaN when no update was judged.
double largest_step_time_ratio(const std::vector<StepRow>& steps, const GateConfig& config);

class TrajectoryGate {
public:
    explicit TrajectoryGate(GateConfig config = {}) : config_(config) {}
    // Checks what the leg's trace gained since the last call (new steps and evaluations); returns the
    // flags raised. `attempt_first_update` is the first update of the leg's current attempt: the
    // step-time median only uses this attempt's updates (a resumed leg starts a new timing history).
    std::vector<GateFlag> check(const std::string& leg, const LegTrace& trace, int64_t attempt_first_update);
    const GateConfig& config() const { return config_; }

private:
    struct Seen {
        size_t steps = 0, evals = 0;
        int64_t last_update = -1, last_eval = -1;
    };
    GateConfig config_;
    std::map<std::string, Seen> seen_;
};

}  // namespace tandem::experiments
