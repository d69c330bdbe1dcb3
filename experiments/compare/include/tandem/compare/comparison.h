#pragma once
// The comparison of the legs of one run (docs/spec.md §Levels, docs/report.md): every pair's levels,
// each leg's completeness, timing and settings, and the one verdict line. The report, the runner and
// the GUI take every number from here; nothing else computes them. The statistics themselves
// (pairing, summary, residuals) are in statistics.h.
#include "tandem/compare/distance.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/compare/judge/gate.h"
#include "tandem/compare/judge/localise.h"
#include "tandem/compare/leg_data.h"
#include "tandem/compare/levels.h"
#include "tandem/compare/observables.h"
#include "tandem/compare/statistics.h"
#include "tandem/compare/timing.h"
#include "tandem/spec/experiment.h"
#include "tandem/spec/fault_matrix.h"
#include "tandem/store/run_file.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// The L4 residual points (percent, leg minus reference) of the pair (a, b) at paired updates
// greater than `eval_after` (held-out CE) / `step_after` (training loss, grad norm), exactly as
// compare_legs computes them over the whole series: a follower of a growing run adds only these
// instead of recomputing every level. Rows must be in update order.
struct ResidualPoints {
    std::vector<PercentPoint> eval, loss, grad;
};
ResidualPoints residual_points_after(const std::vector<StepRow>& steps_a, const std::vector<EvalRow>& evals_a,
                                     const std::vector<StepRow>& steps_b, const std::vector<EvalRow>& evals_b,
                                     bool reference_is_a, int64_t eval_after, int64_t step_after);

struct Comparison {
    std::vector<std::string> legs;
    std::vector<L1Entry> l1;
    std::vector<L2Entry> l2;
    std::vector<L3Entry> l3;
    std::vector<L4Entry> l4;
    std::vector<SettingsEntry> settings;  // every leg, in leg order
    std::vector<GradStats> grads;
    std::vector<TimingRow> timing;
    std::vector<ProbeResult> probes;
    std::vector<GateFlag> flags;        // every leg's gate flags, in leg order
    // Where each pair whose L4 verdict fails diverged, when both legs recorded fingerprints
    // (add_localisations, docs/observables.md); the report shows them, and the pair's reason ends
    // with the first point (add_localisations).
    std::vector<Localisation> localisations;
    // The evaluation observables of every L4 pair whose legs recorded them (observables.h).
    std::vector<ObservablesComparison> observables;
    // "FAULT INJECTED: <leg>: <faults>; ..." when any leg ran with an injected fault (docs/faults.md),
    // else "". Every rendering of the comparison leads with it.
    std::string fault_banner;
    // The fault matrix of a `tandem faults` run (run.h5 /faults), shown first by the report.
    std::optional<FaultMatrix> fault_matrix;
    std::vector<std::string> failures;  // one line per level L1-L3 that failed, and per non-finite value
    ErrorModel error_model;             // the bound the paired numerics distances used
    std::vector<SeedEnvelope> envelopes;  // the seed envelopes that judged the pairs (may be empty)
    // What the legs lack (judge_completeness): a leg that did not finish, missing or repeated updates,
    // missing evaluations. A comparison over incomplete legs never passes.
    std::vector<std::string> incomplete;
    bool completeness_judged = false;
    // Each leg's stack, in leg order: the hello event's `versions` (package -> version; empty when the
    // leg sent none). The report's "stacks" table (docs/legs.md "Upgrade check").
    std::vector<std::map<std::string, std::string>> stacks;
    std::vector<std::string> stack_implementations;  // each leg's implementation, in leg order
    // The packages that legs of one implementation report in other versions, one entry each:
    // "transformers 5.24.0 (reference) -> 5.17.0 (old)". Legs of other implementations are other
    // stacks by design and not named. The verdict line ends with them.
    std::vector<std::string> stack_differences() const;
    // Complete, no level failed, and every pair that counts (counts_for_run) equivalent or within the
    // seed envelope.
    bool passed() const;
    // Pairs that are `different` at L4 (not at L1-L3) and were not localised: the runner suggests
    // recording fingerprints (`observe`) for them.
    std::vector<const L4Entry*> different_without_localisation() const;
    // Whether a pair's verdict speaks for the run: every pair but one with an imported leg that no
    // seed envelope could judge (docs/thresholds.md "Imported legs"); those are listed by
    // unjudged_imported() and named on the verdict line, never counted as equivalent.
    static bool counts_for_run(const L4Entry& e);
    std::vector<const L4Entry*> unjudged_imported() const;
    // One line (docs/report.md "The verdict"): "incomplete: <first reason> (+N more)"; "different:
    // <first failure> (+N more)" (a level L1-L3 failed or a value is non-finite); else the worst pair's
    // verdict with its reason: "different: ...", "outside the seed envelope: ...", "not judged: ...",
    // "within the seed envelope: ...", "equivalent: ..." (+N more pairs with that verdict); for one
    // leg "complete; one leg, nothing to cross-check" (or "complete; no pair of the run's own legs to
    // cross-check" when the other legs are unjudged imports). Unjudged imported pairs are named at
    // the end: "; not judged: <a>~<b> (+N more): an imported leg, no paired distance and no seed envelope".
    // Legs of one implementation in other stacks end it with "; stacks differ: <stack_differences()>".
    std::string verdict() const;

private:
    std::string verdict_without_stacks() const;
};

// What a complete run holds for every leg (docs/report.md "Complete runs").
struct ExpectedSeries {
    int64_t updates = -1;        // optimizer updates in the plan; -1 when unknown
    int64_t eval_interval = 0;   // the spec's eval.interval
};
// Evaluation updates of the schedule: 0, every interval, and the last (`updates`).
std::vector<int64_t> expected_eval_updates(int64_t updates, int64_t interval);
// What one leg lacks, one line each (empty when complete): not finished, steps missing / repeated /
// out of order, evaluations missing, non-finite values an import kept out.
std::vector<std::string> incompleteness(const LegData& leg, const ExpectedSeries& expected);
// Non-finite training loss, grad norm or held-out CE, one line each ("engine: non-finite loss at update 3").
std::vector<std::string> non_finite_values(const LegData& leg);
// Judges every leg: fills c.incomplete (and c.failures with non-finite values) and marks it judged. An
// imported TensorBoard/CSV leg holds whatever series it has; only the values its import kept out count.
void judge_completeness(Comparison& c, const std::vector<LegData>& legs, const ExpectedSeries& expected);


// `model`: the error model of the run (error_model_for); `envelopes`: the seed envelopes of the
// experiment (same sha256_without_seeds), any stacks. `planned_updates`: the run's plan, for the lr
// schedule (-1: unknown; the lr is then not checked, and judge_completeness calls the run incomplete).
Comparison compare_legs(const std::vector<LegData>& legs, const ExperimentSpec& spec, const Thresholds& t = {},
                        const std::optional<ErrorModel>& model = std::nullopt, const std::vector<SeedEnvelope>& envelopes = {},
                        int64_t planned_updates = -1);
// The same, pairing every leg with `against` only, as (leg, against) — `tandem faults` compares each
// faulty leg with the reference, not every pair. "" = every pair (compare_legs). Throws when no leg
// has that name.
// `envelope_places`: where the envelopes were looked for (EnvelopeSearch::places), named by a pair
// judged without one. `residual_adds`: each leg's residual-add check (judge/elementwise.h), judged in
// every pair of the leg; none given (the fault matrix): not judged.
Comparison compare_legs_against(const std::vector<LegData>& legs, const ExperimentSpec& spec, const std::string& against,
                                const Thresholds& t = {}, const std::optional<ErrorModel>& model = std::nullopt,
                                const std::vector<SeedEnvelope>& envelopes = {}, int64_t planned_updates = -1,
                                const std::vector<std::string>& envelope_places = {},
                                const std::vector<ResidualCheck>& residual_adds = {});

// The one judging path (docs/thresholds.md "One judging path"): the levels, the completeness of every
// leg and, when fingerprints are given, each leg's residual adds against its own fingerprints and the
// localisation of every failing pair with its first point in the pair's reason. `tandem run`, `tandem report`, `tandem compare`, `tandem faults` and the
// workbench all judge through it.
struct Judging {
    std::string against;                  // "" = every pair
    ExpectedSeries expected;              // the plan: updates and evaluations every leg must hold
    std::optional<ErrorModel> model;      // nullopt: error_model_for(spec)
    std::vector<SeedEnvelope> envelopes;  // the experiment's (others are ignored)
    std::vector<std::string> envelope_places;  // where they were looked for (EnvelopeSearch::places)
    Thresholds thresholds;
    // A leg's fingerprints (empty when it recorded none); unset: nothing is localised and no leg's
    // residual adds are checked (judge/elementwise.h).
    std::function<std::vector<FingerprintRow>(const std::string& leg)> fingerprints;
};
Comparison judge_legs(const std::vector<LegData>& legs, const ExperimentSpec& spec, const Judging& judging);
// Localises every pair that does not pass and whose legs both recorded fingerprints, and ends each
// such pair's reason with "; localised: <the first point>" (docs/observables.md).
void add_localisations(Comparison& c, const std::function<std::vector<FingerprintRow>(const std::string& leg)>& fingerprints);
// Whether a verdict line (Comparison::verdict()) passes: equivalent, within the seed envelope, or one
// complete leg — what the workbench colours green and exit code 0 means.
bool verdict_line_passes(const std::string& verdict);
// The pair "a~b" a failed-level line ("L1 a~b: what") names; "" when it names none.
std::string failure_pair(const std::string& failure);

// The evaluation observables of every L4 pair of `c` whose legs both recorded some (observables.h).
std::vector<ObservablesComparison> compare_pair_observables(const Comparison& c, const RunFileReader& reader);

}  // namespace tandem::experiments
