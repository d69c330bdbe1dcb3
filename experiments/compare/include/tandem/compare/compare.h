#pragma once
// Comparison of the legs of one run (docs/spec.md §Levels, docs/report.md). The report, the runner and the GUI
// take every number from here; nothing else computes them.
//
// The statistics themselves (pairing, summary, residuals) are in statistics.h.
#include "tandem/compare/distance.h"
#include "tandem/compare/flops.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/spec/experiment.h"
#include "tandem/spec/fault_matrix.h"
#include "tandem/compare/judge/gate.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/compare/judge/localise.h"
#include "tandem/compare/judge/series.h"
#include "tandem/compare/observables.h"
#include "tandem/store/run_file.h"
#include "tandem/compare/statistics.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
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


// Throughput of one update: supervised tokens / wall seconds (NaN when the wall time is not
// positive). The per-update curve behind TimingRow::tokens_per_s (which sums over the run).
double update_tokens_per_second(const StepRow& row);

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

// ---- levels ----------------------------------------------------------------------------------------
struct L1Entry {
    std::string leg_a, leg_b;
    std::optional<double> ce_a, ce_b;
    double abs_diff = 0, rel_diff = 0;  // rel: |a-b| / |b|
    bool pass = false;
    std::string na;  // "imported": an imported leg lacks the data; neither pass nor a failure
};

struct L2Entry {
    std::string leg_a, leg_b;
    int64_t compared = 0, equal = 0;
    std::vector<std::string> mismatches;  // "<name>: <why>", every mismatching tensor
    bool pass = false;
    std::string na;  // as L1Entry::na
};

struct L3Entry {
    std::string leg_a, leg_b;
    int64_t compared = 0, identical = 0;
    // First record that differs (absent when all identical).
    std::optional<int64_t> first_index;
    std::string first_id, what;      // what: "ids", "boundary", "supervised_count", "truncation", "text", "missing"
    std::optional<int64_t> first_token;  // first differing token position
    int64_t window_begin = 0;
    std::vector<int32_t> window_a, window_b;  // ids around the first differing token
    std::string detail;              // one line
    bool pass = false;
    std::string na;  // as L1Entry::na
};

// A leg's optimizer settings against the spec (settings_differences, judge/series.h): judged before
// update 0, for every leg that reported them (its `settings` event).
struct SettingsEntry {
    std::string leg;
    bool reported = false;
    std::vector<std::string> differences;  // one line each ("weight_decay 0.01 on 56 adapter tensors; the spec says 0")
    bool pass() const { return differences.empty(); }
};

struct GradStats {
    std::string leg;
    int64_t n = 0;
    double median = 0, p99 = 0, max = 0, frac_above_clip = 0;
};

struct L4Entry {
    std::string leg_a, leg_b;
    std::vector<PairedPoint> eval_points, loss_points;
    DiffStats eval, loss;
    std::vector<PairedPoint> grad_points;  // grad norm per paired update (finite in both legs)
    DiffStats grad;
    // Residuals in percent, leg minus reference: residual_leg / residual_reference name the sides
    // ((leg_a, leg_b) unless leg_a is the only reference-implementation leg of the pair).
    std::string residual_leg, residual_reference;
    PercentSeries eval_percent, loss_percent, grad_percent;
    std::optional<double> final_loss_a, final_loss_b;
    bool gated = false;  // the legs are paired (same seeds, shared masks + shared plan): the numerics distance applies
    bool imported = false;  // a leg of the pair is imported (TensorBoard, CSV): no L1-L3, no paired distance
    bool pass = true;    // the pair's verdict passes (equivalent, or within the seed envelope)
    std::string note;
    // The two distances of held-out CE (docs/thresholds.md) and the pair's verdict with its one-line reason.
    PairedDistance numerics;
    EnvelopeDistance envelope;
    // The per-update series (judge/series.h): each leg's lr against the spec's schedule; with a shared
    // plan, the training loss and pre-clip grad norm against their own bounds (paired) or the
    // envelope's per-update band and two-sided test (unpaired); legs whose grad norm reads the clip.
    std::vector<ScheduleCheck> schedule;
    std::vector<OptimizerCheck> optimizer;  // each leg's replayed steps (legs that reported none: checked 0)
    PairedDistance loss_numerics, grad_numerics;
    EnvelopeDistance loss_envelope, grad_envelope;
    std::string series_note;             // why the loss and grad norm series are not judged ("" = judged)
    std::vector<std::string> pinned;
    PairVerdict verdict = PairVerdict::NotJudged;
    std::string verdict_reason;
    // The first update at which the pair's L4 verdict is `different` (the earliest failing series), -1
    // when it is not (the fault matrix's L4 column).
    int64_t first_different_update = -1;
};

// The four levels of one pair (levels.cpp). L1-L3 set `pass`; the caller marks a level "n/a
// (imported)" where an imported leg lacks its data. L4 judges the trajectories with the two
// distances and the per-update series and sets the pair's verdict; `level_failures` are the pair's
// L1-L3 failures (a pair whose levels failed is `different`).
struct L4Context {
    const ExperimentSpec& spec;
    const Thresholds& thresholds;
    const ErrorModel& error_model;
    const std::string& model_error;             // why there is no error model ("" = there is one)
    const std::vector<SeedEnvelope>& envelopes;  // the experiment's seed envelopes, any stacks
    const std::string& key;                      // the experiment's sha256 without seeds
    int64_t planned_updates = -1;                // the run's plan (the lr schedule's T); -1: unknown
    // Where the envelopes were looked for (EnvelopeSearch::places), named when none was found; empty: not said.
    std::vector<std::string> envelope_places = {};
};
L1Entry compare_l1(const LegData& a, const LegData& b, const Thresholds& t);
L2Entry compare_l2(const LegData& a, const LegData& b);
L3Entry compare_l3(const LegData& a, const LegData& b);
L4Entry compare_l4(const LegData& a, const LegData& b, const L4Context& ctx, const std::vector<std::string>& level_failures);

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
// judged without one.
Comparison compare_legs_against(const std::vector<LegData>& legs, const ExperimentSpec& spec, const std::string& against,
                                const Thresholds& t = {}, const std::optional<ErrorModel>& model = std::nullopt,
                                const std::vector<SeedEnvelope>& envelopes = {}, int64_t planned_updates = -1,
                                const std::vector<std::string>& envelope_places = {});

// The one judging path (docs/thresholds.md "One judging path"): the levels, the completeness of every
// leg and, when fingerprints are given, the localisation of every failing pair with its first point
// in the pair's reason. `tandem run`, `tandem report`, `tandem compare`, `tandem faults` and the
// workbench all judge through it.
struct Judging {
    std::string against;                  // "" = every pair
    ExpectedSeries expected;              // the plan: updates and evaluations every leg must hold
    std::optional<ErrorModel> model;      // nullopt: error_model_for(spec)
    std::vector<SeedEnvelope> envelopes;  // the experiment's (others are ignored)
    std::vector<std::string> envelope_places;  // where they were looked for (EnvelopeSearch::places)
    Thresholds thresholds;
    // A leg's fingerprints (empty when it recorded none); unset: nothing is localised.
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


// ---- legs of different runs (`tandem compare RUN_A:LEG RUN_B:LEG`, the workbench's diff view) -----
// "RUN:LEG": RUN a run folder or its run.h5, LEG a leg of it (the text after the last ':').
struct RunLegRef {
    std::filesystem::path run;
    std::string leg;
};
RunLegRef parse_run_leg(const std::string& text);  // throws tandem::Error naming the text

// One difference between two experiment specs: `key` is the dotted path ("batch.max_updates",
// "lora.targets"), a/b the JSON text of each side's value (nullopt where the key is absent).
struct ConfigDifference {
    std::string key;
    std::optional<std::string> a, b;
};
// Every key whose value differs, in key order (objects are walked; arrays and scalars compared whole).
std::vector<ConfigDifference> diff_specs(const nlohmann::json& a, const nlohmann::json& b);

struct RunsComparison {
    std::string label_a, label_b;          // "<run id>:<leg>" — the leg names in `comparison`
    std::string run_id_a, run_id_b;
    std::vector<ConfigDifference> config;  // the experiment files' differences (spec A vs spec B)
    Comparison comparison;                 // L1–L4 of the two legs, as compare_legs computes them
};
// Whether a spec setting (a dotted key of diff_specs) can change a run's numbers: the envelope key's
// rule (ExperimentSpec::sha256_without_seeds) plus the seeds — name, description, the legs section
// (and its faults), observe, gate, checkpoint cadence, l3_records and how masks are drawn cannot.
// Legs of runs that differ in seeds or masks are judged unpaired; in any other such setting, not judged.
bool setting_changes_numbers(const std::string& key);
// Whether a and b name the same leg of the same run file (a leg compared with itself: refused).
bool same_run_leg(const RunLegRef& a, const RunLegRef& b);

// L1–L4 between a leg of one run file and a leg of another run file (or another leg of the same
// one), judged as `tandem report` judges a run: when the settings that change numbers are the same
// (setting_changes_numbers), the pair is judged — paired (the error-model bound) when the seeds,
// masks and plan line up, else by the seed envelope the run files hold or, when they hold none, the
// first of `catalogs` holding one (run_envelopes), each leg against its own run's clip; when they differ,
// L4 is reported and the pair is `not judged` (the first such setting is the reason). Throws
// tandem::Error for a leg compared with itself.
RunsComparison compare_run_legs(const RunLegRef& a, const RunLegRef& b, const Thresholds& t = {},
                                const std::vector<std::filesystem::path>& catalogs = {});


// The evaluation observables of every L4 pair of `c` whose legs both recorded some (observables.h).
std::vector<ObservablesComparison> compare_pair_observables(const Comparison& c, const RunFileReader& reader);

}  // namespace tandem::experiments
