// The two distances and the verdict (docs/thresholds.md) on synthetic legs whose answers are known
// by construction: the error-model bound's formula, Student's t tail against textbook quantiles,
// envelope statistics against hand-computed values, the five verdicts and their reasons (the first
// update, the ratio, the effect size, the per-update series), and the gate's envelope and
// paired-bound flags.
#include "tandem/compare/comparison.h"
#include "tandem/compare/distance.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/compare/judge/gate.h"

#include <gtest/gtest.h>

#include "compare/finished_leg.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace tandem::experiments;

// Machine epsilon for rounding bounds: statistics over n values of magnitude m are within n * eps * m
// (the last bits differ between CPUs, so no bare 1e-15).
constexpr double kEps = std::numeric_limits<double>::epsilon();

TEST(ErrorModel, BoundFollowsTheDocumentedFormula) {
    ExperimentSpec spec;
    spec.model_config = "tiny";  // 2 decoder layers
    spec.max_len = 256;
    ErrorModel m = error_model_for(spec);
    EXPECT_EQ(m.layers, 2);
    EXPECT_EQ(m.seq_len, 256);
    // k x 2^-23 x 1.03^3 x sqrt(256) x sqrt(1 + u); 1.03^3 = 1.092727 exactly.
    EXPECT_NEAR(m.bound(0), kErrorModelK * std::ldexp(1.0, -23) * 1.092727 * 16.0, 1e-22);
    EXPECT_NEAR(m.bound(3), 2.0 * m.bound(0), 1e-22);
    EXPECT_NEAR(m.bound(15), 4.0 * m.bound(0), 1e-22);
    spec.model_config = "qwen3-0.6b";  // 28 layers: 1.03^29 more
    EXPECT_NEAR(error_model_for(spec).bound(0) / m.bound(0), std::pow(1.03, 26), 1e-12);
}

TEST(ErrorModel, StudentTTailMatchesTextbookQuantiles) {
    EXPECT_DOUBLE_EQ(student_t_sf(0.0, 5), 0.5);
    EXPECT_NEAR(student_t_sf(1.0, 1), 0.25, 1e-12);        // Cauchy: 1/2 - atan(1)/pi
    EXPECT_NEAR(student_t_sf(1.894579, 7), 0.05, 1e-6);    // t_{0.95, 7}
    EXPECT_NEAR(student_t_sf(3.182446, 3), 0.025, 1e-6);   // t_{0.975, 3}
    EXPECT_NEAR(student_t_sf(-1.894579, 7), 0.95, 1e-6);
    EXPECT_NEAR(student_t_sf(2.0, 1e7), 0.0227501319, 1e-6);  // the normal tail
    EXPECT_EQ(student_t_sf(INFINITY, 3), 0.0);
}

namespace {
EnvelopeMember member(const std::string& name, std::vector<EvalRow> evals, std::vector<StepRow> steps = {}) {
    EnvelopeMember m;
    m.name = name;
    m.evals = std::move(evals);
    m.steps = std::move(steps);
    return m;
}
}  // namespace

TEST(Envelope, StatisticsMatchHandComputedValues) {
    const double nan = std::nan("");
    SeedEnvelope e = compute_envelope({member("m0", {{0, 5.0}, {2, 10.0}}, {{0, 4.0, 1.0, 0, 1, 0}}),
                                       member("m1", {{0, 5.0}, {2, 11.0}}, {{0, nan, 2.0, 0, 1, 0}}),
                                       member("m2", {{0, 5.0}, {2, 13.0}}, {{0, 6.0, 3.0, 0, 1, 0}})});
    EXPECT_EQ(e.members, 3);
    const EnvelopePoint* p = e.at("heldout_ce", 2);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->n, 3);
    EXPECT_DOUBLE_EQ(p->min, 10.0);
    EXPECT_DOUBLE_EQ(p->max, 13.0);
    EXPECT_NEAR(p->mean, 34.0 / 3.0, 3 * kEps * 13.0);  // a sum of 3 values up to 13: n * eps * max
    // sample std: deviations -4/3, -1/3, 5/3 -> (16 + 1 + 25) / 9 / 2 = 7/3
    EXPECT_NEAR(p->std, std::sqrt(7.0 / 3.0), 3 * kEps * 13.0);  // deviations carry the mean's rounding
    EXPECT_NEAR(p->q05, 10.1, 1e-12);  // numpy linear: position 0.1
    EXPECT_NEAR(p->q25, 10.5, 1e-12);
    EXPECT_NEAR(p->q50, 11.0, 1e-12);
    EXPECT_NEAR(p->q75, 12.0, 1e-12);
    EXPECT_NEAR(p->q95, 12.8, 1e-12);
    const EnvelopePoint* z = e.at("heldout_ce", 0);
    ASSERT_NE(z, nullptr);
    EXPECT_EQ(z->std, 0.0);  // identical members: zero width
    const EnvelopePoint* l = e.at("loss", 0);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->n, 2);  // the NaN is left out
    EXPECT_DOUBLE_EQ(l->mean, 5.0);
    EXPECT_EQ(e.member_mean_ce, (std::vector<double>{10.0, 11.0, 13.0}));  // evaluations after update 0
    EXPECT_EQ(e.at("heldout_ce", 1), nullptr);
    // Eight identical values whose float64 sum is inexact: still exactly zero width.
    std::vector<EnvelopeMember> same;
    for (int i = 0; i < 8; ++i) same.push_back(member("m" + std::to_string(i), {{0, 11.963249123313210}}));
    const EnvelopePoint* q = compute_envelope(same).at("heldout_ce", 0);
    EXPECT_EQ(q->std, 0.0);
    EXPECT_EQ(q->mean, 11.963249123313210);
}

namespace {
// Eight members: held-out CE 3.0 at update 0 (no spread: the adapter's B starts at zero), then
// 3 - 0.1 u + d_i with offsets d_i that differ per member.
const std::vector<double> kOffsets{-0.035, -0.025, -0.015, -0.005, 0.005, 0.015, 0.025, 0.035};
std::vector<EvalRow> curve(double offset) { return {{0, 3.0}, {2, 2.8 + offset}, {4, 2.6 + offset}}; }

SeedEnvelope envelope_for(const ExperimentSpec& spec, const std::string& stack) {
    std::vector<EnvelopeMember> ms;
    for (size_t i = 0; i < kOffsets.size(); ++i) ms.push_back(member("m" + std::to_string(i), curve(kOffsets[i])));
    SeedEnvelope e = compute_envelope(ms);
    e.key = spec.sha256_without_seeds();
    e.implementation = stack;
    e.experiment = spec.name;
    return e;
}

LegData leg_with(const std::string& name, const std::string& impl, std::vector<EvalRow> evals) {
    LegData l = tandem::test::finished_leg(name, impl, {"w", "base", {1}, 1.0, 1.0, 1.0, "aa"}, "pubmedqa:1");
    l.trace.l1_ce = evals.front().heldout_ce;
    l.trace.evals = std::move(evals);
    return l;
}

ExperimentSpec native_spec() {
    ExperimentSpec spec;
    spec.name = "synthetic";
    spec.model_config = "tiny";
    spec.dropout_masks = "native";  // not paired: only the envelope can judge
    return spec;
}
}  // namespace

TEST(Verdict, AnUnpairedLegInsideTheEnvelopeIsWithinAndAShiftedOneIsOutside) {
    const ExperimentSpec spec = native_spec();
    const std::vector<SeedEnvelope> envs{envelope_for(spec, "reference")};
    LegData ref = leg_with("reference", "reference", curve(0.0));

    Comparison in = compare_legs({leg_with("engine", "engine", curve(0.01)), ref}, spec, {}, std::nullopt, envs);
    ASSERT_EQ(in.l4.size(), 1u);
    const EnvelopeDistance& d = in.l4[0].envelope;
    ASSERT_TRUE(d.available);
    EXPECT_EQ(d.leg, "engine");
    EXPECT_EQ(d.members, 8);
    // Members' means after update 0: 2.7 + d_i, sample std of d_i: sqrt(sum d^2 / 7).
    double ss = 0;
    for (double o : kOffsets) ss += o * o;
    const double sd = std::sqrt(ss / 7.0);
    EXPECT_NEAR(d.members_std, sd, 1e-12);
    EXPECT_NEAR(d.t, 0.01 / (sd * std::sqrt(1.0 + 1.0 / 8.0)), 1e-9);
    EXPECT_EQ(d.df, 7);
    ASSERT_EQ(d.points.size(), 2u);  // update 0 has no spread: no z there
    EXPECT_NEAR(d.points[0].distance, 0.01 / sd, 1e-9);
    EXPECT_TRUE(d.outside_band.empty());
    EXPECT_EQ(in.l4[0].verdict, PairVerdict::WithinEnvelope);
    EXPECT_FALSE(in.l4[0].numerics.applies);
    judge_completeness(in, {leg_with("engine", "engine", curve(0.01)), ref}, ExpectedSeries{-1, 2});
    in.incomplete.clear();  // the synthetic legs have no steps; the verdict itself is under test
    EXPECT_TRUE(in.passed());
    EXPECT_EQ(in.verdict().rfind("within the seed envelope: engine~reference: not paired (native dropout masks or plan); "
                                 "engine within the reference seed envelope (8 runs: held-out CE |z| ",
                                 0),
              0u)
        << in.verdict();
    // two-sided: p = 2 P(T > |t|)
    EXPECT_NEAR(d.p, 2 * student_t_sf(std::fabs(d.t), 7), 1e-12);

    // Worse by 10 member standard deviations: the two-sided test rejects and the band is left.
    Comparison out = compare_legs({leg_with("engine", "engine", curve(10 * sd)), ref}, spec, {}, std::nullopt, envs);
    EXPECT_EQ(out.l4[0].verdict, PairVerdict::OutsideEnvelope);
    EXPECT_LT(out.l4[0].envelope.p, 0.05);
    EXPECT_EQ(out.l4[0].envelope.outside_band, (std::vector<int64_t>{2, 4}));
    EXPECT_NE(out.l4[0].verdict_reason.find("outside the band at update 2 (+1 more)"), std::string::npos)
        << out.l4[0].verdict_reason;
    // Better by as much: outside too — a leg that trains better than its stack's seeds allow computes
    // something else as surely as one that trains worse (the test is two-sided).
    Comparison low = compare_legs({leg_with("engine", "engine", curve(-10 * sd)), ref}, spec, {}, std::nullopt, envs);
    EXPECT_LT(low.l4[0].envelope.p, 0.05);
    EXPECT_EQ(low.l4[0].verdict, PairVerdict::OutsideEnvelope);
    low.completeness_judged = true;  // the verdict line is under test, not the synthetic legs' completeness
    EXPECT_EQ(low.verdict().rfind("outside the seed envelope: engine~reference: engine outside the reference seed envelope", 0), 0u)
        << low.verdict();
    EXPECT_NE(low.l4[0].verdict_reason.find("two-sided p "), std::string::npos) << low.l4[0].verdict_reason;
}

TEST(Verdict, WithoutAMatchingEnvelopeAnUnpairedPairIsNotJudged) {
    const ExperimentSpec spec = native_spec();
    ExperimentSpec other = spec;
    other.lora_rank = 8;  // another experiment: its envelope does not apply
    LegData e = leg_with("engine", "engine", curve(0.01)), r = leg_with("reference", "reference", curve(0.0));
    for (const auto& envs : {std::vector<SeedEnvelope>{}, std::vector<SeedEnvelope>{envelope_for(other, "reference")}}) {
        Comparison c = compare_legs({e, r}, spec, {}, std::nullopt, envs);
        EXPECT_EQ(c.l4[0].verdict, PairVerdict::NotJudged);
        EXPECT_FALSE(verdict_passes(c.l4[0].verdict));
        EXPECT_NE(c.l4[0].verdict_reason.find("no seed envelope of this experiment"), std::string::npos) << c.l4[0].verdict_reason;
        EXPECT_NE(c.l4[0].verdict_reason.find("tandem envelope EXPERIMENT --legs reference"), std::string::npos);
    }
    // An envelope whose members are identical has no spread to judge with.
    std::vector<EnvelopeMember> same;
    for (int i = 0; i < 4; ++i) same.push_back(member("m" + std::to_string(i), curve(0.0)));
    SeedEnvelope flat = compute_envelope(same);
    flat.key = spec.sha256_without_seeds();
    flat.implementation = "reference";
    Comparison c = compare_legs({e, r}, spec, {}, std::nullopt, {flat});
    EXPECT_EQ(c.l4[0].verdict, PairVerdict::NotJudged);
    EXPECT_NE(c.l4[0].verdict_reason.find("zero spread"), std::string::npos) << c.l4[0].verdict_reason;
}

TEST(Verdict, PairedLegsAreEquivalentWithinTheBoundAndDifferentBeyondItWhateverTheEnvelopeSays) {
    ExperimentSpec spec = native_spec();
    spec.dropout_masks = "shared";  // paired
    spec.max_len = 256;
    const ErrorModel m = error_model_for(spec);
    const double b2 = m.bound(2);
    auto scaled = [&](double rel) {  // the reference curve with a relative difference `rel` at update 2 and 4
        auto c = curve(0.0);
        c[1].heldout_ce *= 1 + rel;
        c[2].heldout_ce *= 1 + rel;
        return c;
    };
    LegData r = leg_with("reference", "reference", curve(0.0));
    Comparison eq = compare_legs({leg_with("engine", "engine", scaled(0.5 * b2)), r}, spec);
    EXPECT_TRUE(eq.l4[0].numerics.applies);
    EXPECT_EQ(eq.l4[0].verdict, PairVerdict::Equivalent) << eq.l4[0].verdict_reason;
    ASSERT_EQ(eq.l4[0].numerics.points.size(), 3u);
    EXPECT_NEAR(eq.l4[0].numerics.points[1].distance, 0.5, 1e-6);  // 0.5 of the bound at update 2
    EXPECT_NEAR(eq.l4[0].numerics.points[1].scale, b2, 1e-20);

    // 3x the bound: the two stacks compute different things — `different`, with or without an
    // envelope; the envelope only sizes the effect. The reason names the level, the first update
    // beyond the bound and the ratio there.
    Comparison no_env = compare_legs({leg_with("engine", "engine", scaled(3 * b2)), r}, spec);
    EXPECT_EQ(no_env.l4[0].verdict, PairVerdict::Different);
    EXPECT_EQ(no_env.l4[0].first_different_update, 2);
    no_env.completeness_judged = true;
    EXPECT_EQ(no_env.verdict().rfind("different: engine~reference: L4 held-out CE 3x the float32 error-model bound at update 2", 0), 0u)
        << no_env.verdict();
    EXPECT_NE(no_env.l4[0].verdict_reason.find("effect size: no seed envelope"), std::string::npos) << no_env.l4[0].verdict_reason;
    Comparison within = compare_legs({leg_with("engine", "engine", scaled(3 * b2)), r}, spec, {}, std::nullopt,
                                     {envelope_for(spec, "reference")});
    EXPECT_EQ(within.l4[0].verdict, PairVerdict::Different) << within.l4[0].verdict_reason;
    EXPECT_FALSE(verdict_passes(within.l4[0].verdict));
    EXPECT_NE(within.l4[0].verdict_reason.find("; effect within seed noise: |z| "), std::string::npos) << within.l4[0].verdict_reason;
    // A difference the envelope also sees: beyond seed noise.
    auto shifted = curve(0.0);
    for (size_t i = 1; i < shifted.size(); ++i) shifted[i].heldout_ce += 1.0;
    Comparison beyond = compare_legs({leg_with("engine", "engine", shifted), r}, spec, {}, std::nullopt, {envelope_for(spec, "reference")});
    EXPECT_EQ(beyond.l4[0].verdict, PairVerdict::Different);
    EXPECT_NE(beyond.l4[0].verdict_reason.find("; effect beyond seed noise: |z| "), std::string::npos) << beyond.l4[0].verdict_reason;
}

TEST(Verdict, AnImportedLegNoEnvelopeJudgesIsNamedNotJudgedAndDoesNotDecideTheRun) {
    ExperimentSpec spec = native_spec();
    spec.dropout_masks = "shared";  // engine and reference are paired
    spec.max_len = 256;
    const double b2 = error_model_for(spec).bound(2);
    auto scaled = [&](double rel) {
        auto c = curve(0.0);
        c[1].heldout_ce *= 1 + rel;
        c[2].heldout_ce *= 1 + rel;
        return c;
    };
    LegData imported;  // what `tandem import tensorboard` records: curves only, no L1-L3
    imported.name = "hf-trainer";
    imported.implementation = "imported";
    imported.status = "finished";
    imported.trace.evals = curve(0.0);
    const LegData e = leg_with("engine", "engine", scaled(0.5 * b2)), r = leg_with("reference", "reference", curve(0.0));
    const std::string not_judged = "; not judged: engine~hf-trainer (+1 more): an imported leg, no paired distance and no seed envelope";

    Comparison c = compare_legs({e, r, imported}, spec);
    c.completeness_judged = true;
    ASSERT_EQ(c.l4.size(), 3u);
    EXPECT_EQ(c.l4[0].verdict, PairVerdict::Equivalent);
    for (size_t i : {1u, 2u}) {
        EXPECT_TRUE(c.l4[i].imported);
        EXPECT_EQ(c.l4[i].verdict, PairVerdict::NotJudged);  // the pair itself is never called equivalent
        EXPECT_FALSE(Comparison::counts_for_run(c.l4[i]));
    }
    EXPECT_TRUE(c.failures.empty());
    EXPECT_TRUE(c.passed());
    const std::string v = c.verdict();
    EXPECT_EQ(v.rfind("equivalent: engine~reference: held-out CE within the float32 error-model bound at all 3 paired", 0), 0u) << v;
    EXPECT_EQ(v.substr(v.size() - not_judged.size()), not_judged) << v;

    // The run's own pair beyond the bound, no envelope: the run is different, whatever was imported.
    Comparison bad = compare_legs({leg_with("engine", "engine", scaled(3 * b2)), r, imported}, spec);
    bad.completeness_judged = true;
    EXPECT_FALSE(bad.passed());
    EXPECT_EQ(bad.verdict().rfind("different: engine~reference: L4 held-out CE ", 0), 0u) << bad.verdict();

    // Only one leg of the run's own: nothing is claimed, the imported pair is named.
    Comparison one = compare_legs({e, imported}, spec);
    one.completeness_judged = true;
    EXPECT_TRUE(one.passed());
    EXPECT_EQ(one.verdict(), "complete; no pair of the run's own legs to cross-check; not judged: engine~hf-trainer: an "
                             "imported leg, no paired distance and no seed envelope");

    // With the experiment's seed envelope the imported leg is judged and counts: 10 member standard
    // deviations above the envelope, the run is outside it.
    double ss = 0;
    for (double o : kOffsets) ss += o * o;
    LegData shifted = imported;
    shifted.trace.evals = curve(10 * std::sqrt(ss / 7.0));
    Comparison judged = compare_legs({e, r, shifted}, spec, {}, std::nullopt, {envelope_for(spec, "reference")});
    judged.completeness_judged = true;
    // Both pairs judge hf-trainer (the imported leg, not the run's own) against the reference envelope.
    for (size_t i : {1u, 2u}) {
        EXPECT_TRUE(Comparison::counts_for_run(judged.l4[i]));
        EXPECT_EQ(judged.l4[i].envelope.leg, "hf-trainer");
        EXPECT_EQ(judged.l4[i].verdict, PairVerdict::OutsideEnvelope) << judged.l4[i].verdict_reason;
    }
    EXPECT_FALSE(judged.passed());
    const std::string jv = judged.verdict();
    EXPECT_EQ(jv.rfind("outside the seed envelope: engine~hf-trainer: hf-trainer outside the reference seed envelope (8 runs", 0), 0u) << jv;
    EXPECT_EQ(jv.substr(jv.size() - 15), " (+1 more pair)") << jv;
    EXPECT_EQ(jv.find("not judged"), std::string::npos) << jv;
}

namespace {
// Four updates on the spec's schedule: loss 2 - 0.01 u + o, grad norm 3 + 0.1 u + 10 o, lr as
// scheduled_lr says.
constexpr int64_t kUpdates = 4;
std::vector<StepRow> steps_on_schedule(const ExperimentSpec& spec, double offset = 0) {
    std::vector<StepRow> out;
    for (int64_t u = 0; u < kUpdates; ++u)
        out.push_back({u, 2.0 - 0.01 * static_cast<double>(u) + offset, 3.0 + 0.1 * static_cast<double>(u) + 10 * offset,
                       scheduled_lr(spec, u, kUpdates), 100, 0.5});
    return out;
}
ExperimentSpec paired_spec() {
    ExperimentSpec spec = native_spec();
    spec.dropout_masks = "shared";
    spec.max_len = 256;
    spec.warmup_fraction = 0.5;  // 2 warmup updates of 4: the lr rises, then falls
    return spec;
}
LegData stepped(const std::string& name, const std::string& impl, const ExperimentSpec& spec, double loss_offset = 0) {
    LegData l = leg_with(name, impl, curve(0.0));
    l.trace.steps = steps_on_schedule(spec, loss_offset);
    return l;
}
}  // namespace

TEST(Series, TheScheduleIsTheSpecsToFloat32RoundingAndAnLrOffItIsDifferent) {
    const ExperimentSpec spec = paired_spec();
    // transformers' cosine with warmup: W = ceil(0.5 x 4) = 2; lr 0, lr/2, then cos
    EXPECT_DOUBLE_EQ(scheduled_lr(spec, 0, kUpdates), 0.0);
    EXPECT_DOUBLE_EQ(scheduled_lr(spec, 1, kUpdates), 0.5 * spec.lr);
    EXPECT_NEAR(scheduled_lr(spec, 3, kUpdates), spec.lr * 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-20);
    const LegData ref = stepped("reference", "reference", spec);
    LegData eng = stepped("engine", "engine", spec);
    eng.trace.steps[2].lr = static_cast<double>(static_cast<float>(eng.trace.steps[2].lr));  // float32 rounding: on it
    Comparison ok = compare_legs({eng, ref}, spec, {}, std::nullopt, {}, kUpdates);
    EXPECT_EQ(ok.l4[0].verdict, PairVerdict::Equivalent) << ok.l4[0].verdict_reason;
    ASSERT_EQ(ok.l4[0].schedule.size(), 2u);
    EXPECT_EQ(ok.l4[0].schedule[0].checked, kUpdates);
    EXPECT_FALSE(ok.l4[0].schedule[0].off());
    EXPECT_NE(ok.l4[0].verdict_reason.find("lr on the schedule, training loss and pre-clip grad norm within their bounds at all 4 updates"),
              std::string::npos)
        << ok.l4[0].verdict_reason;

    // A linear decay after warmup: the lr of update 2 is 2/3 lr instead of lr (the held-out CE is the same here).
    LegData linear = stepped("engine", "engine", spec);
    linear.trace.steps[2].lr = spec.lr * 2.0 / 3.0;
    linear.trace.steps[3].lr = spec.lr / 3.0;
    Comparison c = compare_legs({linear, ref}, spec, {}, std::nullopt, {}, kUpdates);
    EXPECT_EQ(c.l4[0].verdict, PairVerdict::Different);
    EXPECT_EQ(c.l4[0].first_different_update, 2);
    EXPECT_EQ(c.l4[0].verdict_reason.rfind("engine~reference: L4 lr of engine off the spec's schedule at update 2 (6.67e-05, the "
                                           "schedule 0.0001; 2 of 4 updates)",
                                           0),
              0u)
        << c.l4[0].verdict_reason;
    // The same leg unpaired, within its envelope: still `different` — a schedule is a setting, not a seed.
    ExperimentSpec native = spec;
    native.dropout_masks = "native";
    Comparison u = compare_legs({linear, ref}, native, {}, std::nullopt, {envelope_for(native, "reference")}, kUpdates);
    EXPECT_TRUE(u.l4[0].envelope.within());
    EXPECT_EQ(u.l4[0].verdict, PairVerdict::Different) << u.l4[0].verdict_reason;
    // Without the planned updates the schedule cannot be known: not compared (the run is then incomplete).
    Comparison unknown = compare_legs({linear, ref}, spec);
    EXPECT_FALSE(unknown.l4[0].schedule[0].not_checked.empty());
}

TEST(Series, PairedLossAndGradNormAreJudgedAgainstTheirOwnBounds) {
    const ExperimentSpec spec = paired_spec();
    const ErrorModel m = error_model_for(spec);
    ErrorModel loss_model = m, grad_model = m;
    loss_model.k = kLossErrorModelK;
    grad_model.k = kGradNormErrorModelK;
    const LegData ref = stepped("reference", "reference", spec);
    LegData eng = stepped("engine", "engine", spec);
    eng.trace.steps[0].grad_norm *= 1 + 0.5 * grad_model.bound(0);  // half its bound: fine
    eng.trace.steps[1].loss *= 1 + 2 * loss_model.bound(1);         // twice its bound at update 1
    Comparison c = compare_legs({eng, ref}, spec, {}, std::nullopt, {}, kUpdates);
    const L4Entry& e = c.l4[0];
    EXPECT_TRUE(e.grad_numerics.within());
    EXPECT_NEAR(e.grad_numerics.max_ratio, 0.5, 1e-6);
    EXPECT_FALSE(e.loss_numerics.within());
    EXPECT_EQ(e.loss_numerics.first_beyond_update, 1);
    EXPECT_NEAR(e.loss_numerics.first_beyond_ratio, 2.0, 1e-6);
    EXPECT_EQ(e.verdict, PairVerdict::Different);
    EXPECT_EQ(e.first_different_update, 1);  // earlier than any evaluation could show it (the first after 0 is 2)
    EXPECT_EQ(e.verdict_reason.rfind("engine~reference: L4 training loss 2x its float32 bound at update 1", 0), 0u) << e.verdict_reason;
    // The grad norm's bound is wider than the loss's: the backward of two float32 stacks differs more.
    EXPECT_GT(kGradNormErrorModelK, kLossErrorModelK);
}

TEST(Series, AGradNormPinnedAtTheClipValueIsNamed) {
    const ExperimentSpec spec = paired_spec();
    const LegData ref = stepped("reference", "reference", spec);
    LegData eng = stepped("engine", "engine", spec);
    for (auto& s : eng.trace.steps) s.grad_norm = spec.clip;  // the norm after clipping, every update
    Comparison c = compare_legs({eng, ref}, spec, {}, std::nullopt, {}, kUpdates);
    EXPECT_EQ(c.l4[0].verdict, PairVerdict::Different);
    EXPECT_EQ(c.l4[0].first_different_update, 0);
    EXPECT_NE(c.l4[0].verdict_reason.find("L4 pre-clip grad norm "), std::string::npos) << c.l4[0].verdict_reason;
    EXPECT_NE(c.l4[0].verdict_reason.find("engine: pre-clip grad norm reads the clip value 1 on 4 of 4 updates"), std::string::npos)
        << c.l4[0].verdict_reason;
    EXPECT_TRUE(pinned_at_clip("reference", ref.trace.steps, spec.clip).empty());
    EXPECT_TRUE(pinned_at_clip("engine", eng.trace.steps, 0.0).empty());  // no clipping, nothing to pin to
}

namespace {
// A dropout-only envelope with per-update series: members share the plan, so their loss and grad norm
// differ per update by the dropout noise alone (offsets d_i).
SeedEnvelope stepped_envelope(const ExperimentSpec& spec, std::vector<std::string> vary) {
    std::vector<EnvelopeMember> ms;
    for (size_t i = 0; i < kOffsets.size(); ++i) {
        EnvelopeMember m = member("m" + std::to_string(i), curve(kOffsets[i]), steps_on_schedule(spec, kOffsets[i]));
        ms.push_back(m);
    }
    SeedEnvelope e = compute_envelope(ms);
    e.key = spec.sha256_without_seeds();
    e.implementation = "reference";
    e.vary = std::move(vary);
    return e;
}
}  // namespace

TEST(Series, UnpairedLegsWithASharedPlanAreJudgedPerUpdateByTheEnvelope) {
    ExperimentSpec spec = paired_spec();
    spec.dropout_masks = "native";
    const LegData ref = stepped("reference", "reference", spec);
    const std::vector<SeedEnvelope> envs{stepped_envelope(spec, {"dropout"})};
    ASSERT_EQ(envs[0].member_mean_loss.size(), kOffsets.size());
    // A clean leg inside: within, every series judged.
    Comparison in = compare_legs({stepped("engine", "engine", spec, 0.01), ref}, spec, {}, std::nullopt, envs, kUpdates);
    const L4Entry& e = in.l4[0];
    ASSERT_TRUE(e.loss_envelope.available && e.grad_envelope.available);
    EXPECT_EQ(e.verdict, PairVerdict::WithinEnvelope) << e.verdict_reason;
    // two divisions: within 2 ulps of 0.05
    EXPECT_NEAR(e.envelope.alpha, 0.05 / 2 / 3, 2 * kEps * 0.05);  // half of alpha, Bonferroni over held-out CE, loss and grad norm
    EXPECT_NEAR(e.loss_envelope.band_alpha, 0.05 / 2, kEps * 0.05);  // the other half: the bands, one family
    EXPECT_EQ(e.loss_envelope.band_family, e.grad_envelope.band_family);
    EXPECT_NE(e.verdict_reason.find("; training loss |z| "), std::string::npos) << e.verdict_reason;
    // Mean of the series over every update against the members' means: two-sided prediction t-test.
    double ss = 0;
    for (double o : kOffsets) ss += o * o;
    EXPECT_NEAR(e.loss_envelope.t, 0.01 / (std::sqrt(ss / 7.0) * std::sqrt(1.0 + 1.0 / 8.0)), 1e-9);

    // The training loss of one update off by far more than the members spread (the GA bug's signature:
    // the held-out CE barely moves): outside the seed envelope, naming the series and the update.
    LegData ga = stepped("engine", "engine", spec);
    ga.trace.steps[1].loss += 0.5;
    Comparison out = compare_legs({ga, ref}, spec, {}, std::nullopt, envs, kUpdates);
    EXPECT_TRUE(out.l4[0].envelope.within());
    EXPECT_EQ(out.l4[0].verdict, PairVerdict::OutsideEnvelope) << out.l4[0].verdict_reason;
    EXPECT_NE(out.l4[0].verdict_reason.find("): training loss: mean "), std::string::npos) << out.l4[0].verdict_reason;
    EXPECT_NE(out.l4[0].verdict_reason.find("outside the band at update 1"), std::string::npos) << out.l4[0].verdict_reason;
    EXPECT_TRUE(out.l4[0].loss_envelope.test_rejects());

    // An envelope that varies the plan ran other batches: the per-update series are not judged, and said so.
    Comparison plan = compare_legs({ga, ref}, spec, {}, std::nullopt, {stepped_envelope(spec, {"dropout", "plan"})}, kUpdates);
    EXPECT_FALSE(plan.l4[0].loss_envelope.available);
    EXPECT_EQ(plan.l4[0].verdict, PairVerdict::WithinEnvelope);
    EXPECT_NE(plan.l4[0].verdict_reason.find("varies the plan"), std::string::npos) << plan.l4[0].verdict_reason;
}

TEST(Verdict, EveryVerdictNameIsAVerdictWord) {
    const auto& words = verdict_words();
    for (auto v : {PairVerdict::Equivalent, PairVerdict::Different, PairVerdict::WithinEnvelope, PairVerdict::OutsideEnvelope,
                   PairVerdict::NotJudged})
        EXPECT_NE(std::find(words.begin(), words.end(), pair_verdict_name(v)), words.end()) << pair_verdict_name(v);
    EXPECT_TRUE(verdict_line_passes("equivalent: a~b: ..."));
    EXPECT_TRUE(verdict_line_passes("within the seed envelope: a~b: ..."));
    EXPECT_FALSE(verdict_line_passes("outside the seed envelope: a~b: ..."));
    EXPECT_FALSE(verdict_line_passes("different: a~b: ..."));
    EXPECT_FALSE(verdict_line_passes("not judged: a~b: ..."));
    EXPECT_FALSE(verdict_line_passes("incomplete: a: ..."));
}

namespace {
// The gate's context for the pair engine~reference of native_spec() on shared dropout masks, the
// reference's seed envelope known.
TrajectoryGate::Context paired_engine_reference_context() {
    ExperimentSpec spec = native_spec();
    spec.dropout_masks = "shared";
    TrajectoryGate::Context ctx;
    ctx.implementation = {{"engine", "engine"}, {"reference", "reference"}};
    ctx.paired = {{"engine", "reference"}};
    ctx.model = error_model_for(spec);
    ctx.envelopes = {envelope_for(spec, "reference")};
    return ctx;
}
}  // namespace

TEST(Gate, ALegLeavingTheEnvelopeBandAndAPairBeyondTheBoundAreFlagged) {
    GateConfig cfg;
    cfg.envelope = GateAction::Stop;
    cfg.paired_bound = GateAction::Pause;
    TrajectoryGate g(cfg);
    const TrajectoryGate::Context ctx = paired_engine_reference_context();
    g.set_context(ctx);

    LegTrace t;
    t.evals = {{0, 3.0}, {2, 2.8}};  // inside
    EXPECT_TRUE(g.check("engine", t, 0).empty());
    t.evals.push_back({4, 2.9});  // far above the band at update 4 (max 2.635)
    auto f = g.check("engine", t, 0);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].kind, "envelope");
    EXPECT_EQ(f[0].update, 4);
    EXPECT_EQ(f[0].action, GateAction::Stop);
    EXPECT_DOUBLE_EQ(f[0].value, 2.9);
    const EnvelopePoint* p = ctx.envelopes[0].at("heldout_ce", 4);
    EXPECT_NEAR(f[0].threshold, p->max + 2 * p->std + ctx.model.bound(4) * p->mean, 1e-12);
    EXPECT_NE(f[0].message.find("above the reference seed envelope band"), std::string::npos) << f[0].message;

    // Paired evaluations: the flag goes to the non-reference leg, once per evaluation.
    LegTrace ref;
    ref.evals = {{0, 3.0}, {2, 2.8}, {4, 2.9 * (1 + 0.5 * ctx.model.bound(4))}};
    std::map<std::string, const LegTrace*> traces{{"engine", &t}, {"reference", &ref}};
    EXPECT_TRUE(g.check_pairs(traces).empty());  // 0.5 of the bound
    ref.evals.push_back({6, 2.5});
    t.evals.push_back({6, 2.5 * (1 + 3 * ctx.model.bound(6))});
    auto pf = g.check_pairs(traces);
    ASSERT_EQ(pf.size(), 1u);
    EXPECT_EQ(pf[0].leg, "engine");
    EXPECT_EQ(pf[0].kind, "paired-bound");
    EXPECT_EQ(pf[0].update, 6);
    EXPECT_EQ(pf[0].action, GateAction::Pause);
    EXPECT_NEAR(pf[0].value / pf[0].threshold, 3.0, 1e-6);
    EXPECT_TRUE(g.check_pairs(traces).empty());
}

TEST(Gate, NewFlagSettingsParseAndKeepOldHashes) {
    GateConfig d;
    EXPECT_FALSE(d.to_json().contains("envelope"));  // an old `gate` object resolves as before
    GateConfig c = GateConfig::from_json(nlohmann::json{{"envelope", "stop"}, {"paired_bound", "pause"}, {"envelope_band_sigma", 3}}, "x.json");
    EXPECT_EQ(c.envelope, GateAction::Stop);
    EXPECT_EQ(c.paired_bound, GateAction::Pause);
    EXPECT_DOUBLE_EQ(c.envelope_band_sigma, 3.0);
    EXPECT_EQ(c.to_json()["envelope"], "stop");
    EXPECT_THROW(GateConfig::from_json(nlohmann::json{{"envelope", "halt"}}, "x.json"), std::exception);
}

TEST(Gate, RowsRecordedBeforeTheGateExistedAreNotFlaggedAgain) {
    // A resumed run: the earlier runner judged (and flagged) these rows; a new gate marks them seen.
    TrajectoryGate g;
    g.set_context(paired_engine_reference_context());
    LegTrace t, ref;
    t.evals = {{0, 3.0}, {2, 2.8}, {4, 2.9}};  // 4: outside the band, and far from the reference
    t.steps = {{0, std::nan(""), 1.0, 0, 1, 0.1}};
    ref.evals = {{0, 3.0}, {2, 2.8}, {4, 2.6}};
    std::map<std::string, const LegTrace*> traces{{"engine", &t}, {"reference", &ref}};
    g.mark_seen("engine", t);
    g.mark_pairs_seen(traces);
    EXPECT_TRUE(g.check("engine", t, 0).empty());
    EXPECT_TRUE(g.check_pairs(traces).empty());
    t.steps.push_back({1, std::nan(""), 1.0, 0, 1, 0.1});  // new rows are judged
    t.evals.push_back({6, 2.9});
    ref.evals.push_back({6, 2.4});
    auto f = g.check("engine", t, 0);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].kind, "non-finite");
    EXPECT_EQ(f[0].update, 1);
    EXPECT_EQ(g.check_pairs(traces).size(), 1u);
}

// The calibrated per-update band (docs/thresholds.md section 3, "band per update"): Student's t
// quantile against textbook values, the factor c sqrt(1 + 1/N) of a Sidak family, and a simulation
// with a fixed seed as the oracle of the false-alarm rate: a clean leg and N envelope members drawn
// from one normal per update, M updates judged, must leave a band in about alpha of the trials (the
// old band, [min - 2 std, max + 2 std] per update, left it in 23 % of them at N 5, M 6).
TEST(Envelope, StudentTQuantileMatchesTextbookValues) {
    EXPECT_NEAR(student_t_isf(0.025, 4), 2.776445, 1e-6);    // t_{0.975, 4}
    EXPECT_NEAR(student_t_isf(0.005, 4), 4.604095, 1e-6);    // t_{0.995, 4}
    EXPECT_NEAR(student_t_isf(0.0005, 4), 8.610302, 1e-6);   // t_{0.9995, 4}
    EXPECT_NEAR(student_t_isf(0.05, 7), 1.894579, 1e-6);     // t_{0.95, 7}
    EXPECT_NEAR(student_t_isf(0.975, 4), -2.776445, 1e-6);
    EXPECT_TRUE(std::isnan(student_t_isf(0.0, 4)));
}

TEST(Envelope, TheBandFactorIsTheSidakPredictionQuantile) {
    // One check at 0.05, N 5: t_{0.975, 4} sqrt(1 + 1/5).
    EXPECT_NEAR(prediction_band_factor(5, 0.05, 1), 2.776445 * std::sqrt(1.2), 1e-5);
    // M 100 checks at 0.1: each at 1 - 0.9^(1/100) = 0.0010530; t_{1 - 0.0005265, 4} by its tail.
    const double f = prediction_band_factor(5, 0.1, 100);
    EXPECT_NEAR(2 * student_t_sf(f / std::sqrt(1.2), 4), 1 - std::pow(0.9, 0.01), 1e-9);
    EXPECT_GT(f, prediction_band_factor(5, 0.1, 10));  // more checks, a wider band
    EXPECT_LT(prediction_band_factor(20, 0.1, 100), f);  // more members, a narrower one
}

TEST(Envelope, ACleanLegLeavesTheBandsInAlphaOfSimulatedTrials) {
    constexpr int kMembers = 5, kSteps = 6, kTrials = 4000;
    std::mt19937_64 rng(20261202);
    std::normal_distribution<double> noise(0.0, 0.01);
    ErrorModel exact;
    exact.k = 0;  // no rounding floor: the seed spread alone
    auto draw = [&]() {
        std::vector<StepRow> s;
        for (int64_t u = 0; u < kSteps; ++u) s.push_back({u, 2.0 + noise(rng), 3.0 + noise(rng), 1e-4, 100, 0.5});
        return s;
    };
    int outside = 0, outside_family = 0;
    for (int t = 0; t < kTrials; ++t) {
        std::vector<EnvelopeMember> members;
        for (int i = 0; i < kMembers; ++i) members.push_back(member("m" + std::to_string(i), {{0, 2.0}, {2, 2.0}}, draw()));
        SeedEnvelope env = compute_envelope(members);
        env.implementation = "reference";
        const std::vector<StepRow> leg = draw();
        EnvelopeDistance loss = envelope_series_distance("engine", leg, "loss", env, exact);
        EnvelopeDistance grad = envelope_series_distance("engine", leg, "grad_norm", env, exact);
        ASSERT_TRUE(loss.available);
        EXPECT_EQ(loss.band_family, kSteps);  // alone: its own 6 checks at kEnvelopeAlpha
        outside += !loss.outside_band.empty();
        judge_bands({&loss, &grad}, 0.025);  // a pair's family: both series, 12 checks, half of 0.05
        EXPECT_EQ(loss.band_family, 2 * kSteps);
        outside_family += !loss.outside_band.empty() || !grad.outside_band.empty();
    }
    // binomial sd at 0.05 over 4000 trials: 0.0034; at 0.025: 0.0025 (4 sd either side)
    EXPECT_NEAR(static_cast<double>(outside) / kTrials, kEnvelopeAlpha, 0.014);
    EXPECT_NEAR(static_cast<double>(outside_family) / kTrials, 0.025, 0.010);
}

// The optimizer settings a leg reports (its `settings` event) against the spec: each difference named
// with the spec's value; the spec's own recipe (docs/spec.md §Recipe: cosine, ceil(0.03 T) warmup, lr
// 0 at update 0) has none; a leg that does not report is not judged on it.
namespace {
nlohmann::json recipe_settings(const ExperimentSpec& spec, int64_t total) {
    const int64_t warmup = static_cast<int64_t>(std::ceil(spec.warmup_fraction * static_cast<double>(total)));
    return {{"optimizer", "AdamW"},
            {"decoupled_weight_decay", true},
            {"schedule", "cosine"},
            {"warmup_updates", warmup},
            {"total_updates", total},
            {"clip", spec.clip},
            {"groups", {{{"lr", spec.lr}, {"lr_update0", 0.0}, {"betas", {spec.beta1, spec.beta2}}, {"eps", spec.eps},
                         {"weight_decay", spec.weight_decay}, {"tensors", {"l.0.q_proj.lora_A.weight", "l.0.q_proj.lora_B.weight"}}}}}};
}
}  // namespace

TEST(Settings, EachDifferenceFromTheSpecIsNamed) {
    ExperimentSpec spec;
    const int64_t total = 6;
    EXPECT_TRUE(settings_differences(recipe_settings(spec, total), spec, total).empty());

    auto with = [&](auto change) {
        nlohmann::json s = recipe_settings(spec, total);
        change(s);
        return settings_differences(s, spec, total);
    };
    auto wd = with([](nlohmann::json& s) { s["groups"][0]["weight_decay"] = 0.01; });
    ASSERT_EQ(wd.size(), 1u);
    EXPECT_EQ(wd[0], "weight_decay 0.01 on 2 adapter tensors; the spec says 0");
    auto eps = with([](nlohmann::json& s) { s["groups"][0]["eps"] = 1e-6; });
    ASSERT_EQ(eps.size(), 1u);
    EXPECT_EQ(eps[0], "eps 1e-06 on 2 adapter tensors; the spec says 1e-08");
    // float32 rounding of a setting is not a difference (a leg may hold them in float32)
    EXPECT_TRUE(with([](nlohmann::json& s) { s["groups"][0]["eps"] = static_cast<double>(1e-8f); }).empty());
    auto lin = with([](nlohmann::json& s) { s["schedule"] = "linear"; });
    ASSERT_EQ(lin.size(), 1u);
    EXPECT_EQ(lin[0].rfind("schedule linear; the spec says cosine", 0), 0u);
    auto warm = with([](nlohmann::json& s) { s["warmup_updates"] = 2; });
    ASSERT_EQ(warm.size(), 1u);
    EXPECT_EQ(warm[0], "warmup 2 updates; the spec says 1 (ceil(0.03 x 6))");
    auto lr0 = with([](nlohmann::json& s) { s["groups"][0]["lr_update0"] = 1e-4; });
    ASSERT_EQ(lr0.size(), 1u);
    EXPECT_EQ(lr0[0], "lr 0.0001 at update 0 on 2 adapter tensors; the spec's schedule says 0");
    auto noclip = with([](nlohmann::json& s) { s["clip"] = nullptr; });
    ASSERT_EQ(noclip.size(), 1u);
    EXPECT_EQ(noclip[0], "no gradient clipping; the spec clips the global norm at 1");
    // torch's Adam with weight decay adds it to the gradient (an L2 penalty): not AdamW
    auto adam = with([](nlohmann::json& s) {
        s["optimizer"] = "Adam";
        s["decoupled_weight_decay"] = false;
        s["groups"][0]["weight_decay"] = 0.01;
    });
    ASSERT_EQ(adam.size(), 2u);
    EXPECT_EQ(adam[0], "optimizer Adam (weight decay added to the gradient); the spec says AdamW (decoupled weight decay)");
    // two groups: each named with its own tensors; an empty group steps nothing
    auto groups = with([](nlohmann::json& s) {
        auto g = s["groups"][0];
        g["weight_decay"] = 0.01;
        g["tensors"] = {"l.1.q_proj.lora_A.weight"};
        s["groups"].push_back(g);
        s["groups"].push_back({{"lr", 1.0}, {"lr_update0", 1.0}, {"betas", {0.5, 0.5}}, {"eps", 1.0}, {"weight_decay", 1.0},
                               {"tensors", nlohmann::json::array()}});
    });
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0], "weight_decay 0.01 on 1 adapter tensor; the spec says 0");
}

TEST(Settings, ADifferenceMakesThePairDifferentBeforeUpdate0AndANonReportingLegIsNotJudgedOnIt) {
    ExperimentSpec spec;
    spec.model_config = "tiny";
    spec.dropout_masks = "shared";  // paired: within every bound, so only the settings can fail it
    LegData r = leg_with("reference", "reference", curve(0.0));
    LegData e = leg_with("hf", "hf-trainer", curve(0.0));
    r.trace.settings = recipe_settings(spec, 4);
    Comparison none = compare_legs({e, r}, spec, {}, std::nullopt, {}, 4);
    ASSERT_EQ(none.settings.size(), 2u);
    EXPECT_FALSE(none.settings[0].reported);
    EXPECT_TRUE(none.settings[1].reported && none.settings[1].pass());
    EXPECT_TRUE(none.failures.empty());
    EXPECT_EQ(none.l4[0].verdict, PairVerdict::Equivalent) << none.l4[0].verdict_reason;

    e.trace.settings = recipe_settings(spec, 4);
    (*e.trace.settings)["groups"][0]["weight_decay"] = 0.01;
    (*e.trace.settings)["groups"][0]["eps"] = 1e-6;
    Comparison c = compare_legs({e, r}, spec, {}, std::nullopt, {}, 4);
    EXPECT_EQ(c.l4[0].verdict, PairVerdict::Different);
    EXPECT_EQ(c.l4[0].first_different_update, 0);
    ASSERT_EQ(c.failures.size(), 1u);
    EXPECT_EQ(c.failures[0], "settings hf~reference: hf's optimizer (before update 0): eps 1e-06 on 2 adapter tensors; the "
                             "spec says 1e-08; also weight_decay 0.01 on 2 adapter tensors; the spec says 0");
    c.completeness_judged = true;
    EXPECT_EQ(c.verdict().rfind("different: settings hf~reference: hf's optimizer (before update 0): eps 1e-06", 0), 0u) << c.verdict();
}

// A leg's replayed optimizer steps (optimizer_check): beyond 1 at an update makes the pair `different` there,
// named with the ratio and the tensor, paired or not; within, the equivalent reason gives the largest.
TEST(Settings, AReplayedStepBeyondItsBoundIsDifferentAtItsUpdate) {
    ExperimentSpec spec;
    spec.model_config = "tiny";
    spec.dropout_masks = "shared";
    LegData r = leg_with("reference", "reference", curve(0.0));
    LegData e = leg_with("hf", "hf-trainer", curve(0.0));
    auto check = [](int64_t u, nlohmann::json ratio) {
        return nlohmann::json{{"update", u}, {"max_ratio", ratio}, {"tensor", "l.0.q_proj.lora_A.weight"}, {"over", 7},
                              {"elements", 100}, {"tensors", 2}};
    };
    e.trace.optimizer_checks = nlohmann::json::array({check(0, 0.25), check(1, 0.5)});
    Comparison ok = compare_legs({e, r}, spec);
    EXPECT_EQ(ok.l4[0].verdict, PairVerdict::Equivalent) << ok.l4[0].verdict_reason;
    EXPECT_NE(ok.l4[0].verdict_reason.find("hf's optimizer steps as the spec's AdamW at 2 replayed updates (largest 0.5 of the float32 bound)"),
              std::string::npos) << ok.l4[0].verdict_reason;
    e.trace.optimizer_checks = nlohmann::json::array({check(0, 0.25), check(1, 17.0)});
    Comparison bad = compare_legs({e, r}, spec);
    EXPECT_EQ(bad.l4[0].verdict, PairVerdict::Different);
    EXPECT_EQ(bad.l4[0].first_different_update, 1);
    EXPECT_EQ(bad.l4[0].verdict_reason.rfind("hf~reference: L4 optimizer step of hf at update 1: 17x its float32 bound (the spec's AdamW "
                                             "replayed on the leg's own gradient, moments and parameters; 7 of 100 elements over, "
                                             "largest at l.0.q_proj.lora_A.weight)", 0), 0u)
        << bad.l4[0].verdict_reason;
    // Non-finite ratios in the leg protocol's wire form are off, whichever sign.
    for (const char* wire : {"Infinity", "-Infinity", "NaN"}) {
        e.trace.optimizer_checks = nlohmann::json::array({check(0, wire)});
        EXPECT_EQ(compare_legs({e, r}, spec).l4[0].first_different_update, 0) << wire;
    }
}
