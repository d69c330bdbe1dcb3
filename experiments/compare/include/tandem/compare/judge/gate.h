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
//   envelope     a held-out CE or training loss outside the seed envelope's band (min - sigma std,
//                max + sigma std, widened by the error-model bound), when the
//                experiment has an envelope (docs/envelope.md)               default: warn
//   paired-bound a paired evaluation whose relative difference from the other leg exceeds the
//                float32 error-model bound (paired legs only; the flag goes to
//                the non-reference leg of the pair)                           default: warn
//
// The gate is pure: it sees traces and returns flags; the runner acts on them.
#include "tandem/compare/distance.h"
#include "tandem/spec/gate_config.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/legs/leg_protocol.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem::experiments {

struct GateFlag {
    std::string leg;
    std::string kind;      // non-finite | step-time | loss-spike | envelope | paired-bound
    int64_t update = -1;   // the update (step) or evaluation point the flag is about
    double value = 0;      // what was observed (seconds, loss; NaN for non-finite)
    double threshold = 0;  // what it was compared with
    GateAction action = GateAction::Warn;
    std::string message;   // one line, e.g. "engine: update 14 took 2.41 s, 6.0x its running median 0.40 s"
    std::string series;    // what the value is of: heldout_ce | loss | grad_norm | wall_s | cpu_s (where the workbench marks it)
};

// What a flag's value is of (GateFlag::series): a metric table series (metric_of_series) or, for a
// step-time flag, wall_s / cpu_s. A flag recorded before the gate named its series (run files before
// December 2026) gets the one its kind says, or for the kinds about several series (non-finite,
// envelope), the one its message names in the gate's own wording.
std::string flag_series(const GateFlag& flag);

nlohmann::json flags_to_json(const std::vector<GateFlag>& flags);
std::vector<GateFlag> flags_from_json(const nlohmann::json& j);

// The step-time flag's yardstick for update row i: the median CPU time (wall time where row i has none) of the attempt's last `window`
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

    // What the envelope and paired-bound flags need: the run's legs (name -> implementation), which
    // pairs are paired (legs_are_paired), the error model and the experiment's seed envelopes.
    struct Context {
        std::map<std::string, std::string> implementation;
        std::vector<std::pair<std::string, std::string>> paired;  // (a, b) in run order
        ErrorModel model;
        std::vector<SeedEnvelope> envelopes;
    };
    void set_context(Context context) { context_ = std::move(context); }
    // Rows a leg recorded before this gate existed (an earlier runner judged them, and its flags are
    // in run.h5): not checked again, so a resumed run does not raise — and act on — old flags anew.
    void mark_seen(const std::string& leg, const LegTrace& trace);
    void mark_pairs_seen(const std::map<std::string, const LegTrace*>& traces);
    const Context& context() const { return context_; }
    // Paired evaluations both legs have reported since the last call, against the error-model bound.
    // The flag names the pair's non-reference leg (the reference is the yardstick).
    std::vector<GateFlag> check_pairs(const std::map<std::string, const LegTrace*>& traces);

private:
    struct Seen {
        size_t steps = 0, evals = 0;
        int64_t last_update = -1, last_eval = -1;
    };
    void check_envelope(const std::string& leg, const char* series, int64_t update, double value, std::vector<GateFlag>& out) const;
    GateConfig config_;
    Context context_;
    std::map<std::string, Seen> seen_;
    std::map<std::string, int64_t> pair_seen_;  // "a~b" -> last paired evaluation checked
};

}  // namespace tandem::experiments
