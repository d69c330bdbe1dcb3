#pragma once
// The four levels of one pair of legs (docs/spec.md §Levels): L1 initial held-out CE, L2 loaded
// parameters, L3 rendered template and token boundaries, L4 trajectories; and each leg's settings.
#include "tandem/compare/distance.h"
#include "tandem/compare/judge/elementwise.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/compare/judge/series.h"
#include "tandem/compare/leg_data.h"
#include "tandem/compare/statistics.h"
#include "tandem/spec/experiment.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

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
    // Each leg's residual adds against its own fingerprints (judge/elementwise.h); empty when the
    // comparison was given none (the fault matrix judges without fingerprints).
    std::vector<ResidualCheck> residual_adds;
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
    // Every leg's residual-add check (judge_legs computes them from the fingerprints); null: not judged.
    const std::vector<ResidualCheck>* residual_adds = nullptr;
};
L1Entry compare_l1(const LegData& a, const LegData& b, const Thresholds& t);
L2Entry compare_l2(const LegData& a, const LegData& b);
L3Entry compare_l3(const LegData& a, const LegData& b);
L4Entry compare_l4(const LegData& a, const LegData& b, const L4Context& ctx, const std::vector<std::string>& level_failures);

}  // namespace tandem::experiments
