// Comparison statistics against hand-computed float64 values (numpy conventions: population std,
// linear-interpolation percentiles).
#include "tandem/compare/comparison.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace tandem::experiments;

// Rounding bound for a statistic over n doubles of magnitude up to `scale`: each sum or product
// rounds by at most one ulp per term, so the result is within n * eps * scale of the exact value.
// The last bits differ between CPUs (FMA contraction, vector widths: AVX2 vs AVX-512), so the oracles
// below state this bound instead of a bare 1e-15.
[[maybe_unused]] static double rounding_tol(int n, double scale) {
    return n * std::numeric_limits<double>::epsilon() * scale;
}

TEST(CompareStats, MeanStdPercentileMatchHandComputedValues) {
    std::vector<double> x{1.0, 2.0, 4.0, 7.0};
    EXPECT_DOUBLE_EQ(mean(x), 3.5);
    // deviations -2.5 -1.5 0.5 3.5 -> squares 6.25 2.25 0.25 12.25 = 21 / 4 = 5.25
    EXPECT_DOUBLE_EQ(population_std(x), std::sqrt(5.25));
    // numpy.percentile([1,2,4,7], 50) = 3.0; 99 -> pos 2.97 -> 4 + 0.97*3 = 6.91; 25 -> pos 0.75 -> 1.75
    EXPECT_DOUBLE_EQ(percentile(x, 50), 3.0);
    EXPECT_NEAR(percentile(x, 99), 6.91, 1e-12);
    EXPECT_DOUBLE_EQ(percentile(x, 25), 1.75);
    EXPECT_DOUBLE_EQ(percentile({5.0}, 99), 5.0);
    EXPECT_TRUE(std::isnan(percentile({}, 50)));
}

TEST(CompareStats, SignChangesSkipZeros) {
    EXPECT_EQ(sign_changes({1, -1, 1, -1}), 3);
    EXPECT_EQ(sign_changes({1, 0, 2, 0, -3}), 1);
    EXPECT_EQ(sign_changes({0, 0}), 0);
    EXPECT_EQ(sign_changes({-1, -2, -3}), 0);
}

TEST(CompareStats, DiffStatsOfPairedPoints) {
    // a - b: +0.1, -0.3, +0.2 ; b: 10, 10, 10
    std::vector<PairedPoint> p{{0, 10.1, 10.0, 0.1}, {5, 9.7, 10.0, -0.3}, {10, 10.2, 10.0, 0.2}};
    DiffStats s = diff_stats(p);
    EXPECT_EQ(s.n, 3);
    EXPECT_NEAR(s.mean_signed, 0.0, rounding_tol(3, 10.2));  // diffs of values up to 10.2
    EXPECT_NEAR(s.mean_abs, 0.2, rounding_tol(3, 10.2));
    EXPECT_NEAR(s.std, std::sqrt((0.01 + 0.09 + 0.04) / 3.0), rounding_tol(3, 10.2));
    EXPECT_NEAR(s.max_abs, 0.3, rounding_tol(1, 10.0));  // one subtraction of 9.7 from 10
    EXPECT_EQ(s.max_abs_update, 5);
    EXPECT_EQ(s.sign_changes, 2);
    EXPECT_NEAR(s.mean_abs_rel, 0.02, rounding_tol(3, 0.03));
}

TEST(CompareStats, PairingUsesCommonUpdatesOnly) {
    std::vector<EvalRow> a{{0, 2.0}, {10, 1.5}, {20, 1.2}};
    std::vector<EvalRow> b{{0, 2.5}, {20, 1.0}};
    auto p = pair_evals(a, b);
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].update, 0);
    EXPECT_DOUBLE_EQ(p[0].diff, -0.5);
    EXPECT_EQ(p[1].update, 20);
    EXPECT_NEAR(p[1].diff, 0.2, rounding_tol(1, 1.2));  // 1.2 - 1.0
}

TEST(CompareStats, ResidualPercentIsLegMinusReferenceOverAbsReference) {
    // b is the reference: 100 * (a - b) / |b|, by hand:
    //   (2.5 - 2.0) / |2.0| = 25 %; (-1.25 - -1.0) / |-1.0| = -25 % (the sign stays that of a - b);
    //   (10.001 - 10.0) / 10.0 = 0.01 %; b = 0 -> undefined (NaN), not counted in the largest.
    std::vector<PairedPoint> p{{0, 2.5, 2.0, 0.5}, {5, -1.25, -1.0, -0.25}, {10, 10.001, 10.0, 0.001}, {15, 0.5, 0.0, 0.5}};
    PercentSeries s = residual_percent(p, /*reference_is_a=*/false);
    ASSERT_EQ(s.points.size(), 4u);
    EXPECT_EQ(s.points[0].update, 0);
    EXPECT_DOUBLE_EQ(s.points[0].leg, 2.5);
    EXPECT_DOUBLE_EQ(s.points[0].reference, 2.0);
    EXPECT_DOUBLE_EQ(s.points[0].percent, 25.0);
    EXPECT_DOUBLE_EQ(s.points[1].percent, -25.0);
    EXPECT_NEAR(s.points[2].percent, 0.01, 1e-12);
    EXPECT_TRUE(std::isnan(s.points[3].percent));
    EXPECT_DOUBLE_EQ(s.max_abs, 25.0);
    EXPECT_EQ(s.max_abs_update, 0);  // the first of the two equal largest

    // a is the reference: 100 * (b - a) / |a|: (2.0 - 2.5) / 2.5 = -20 %; (-1.0 - -1.25) / 1.25 = 20 %;
    // (10.0 - 10.001) / 10.001 = -0.00999900009999...%; (0 - 0.5) / 0.5 = -100 %.
    PercentSeries r = residual_percent(p, /*reference_is_a=*/true);
    ASSERT_EQ(r.points.size(), 4u);
    EXPECT_DOUBLE_EQ(r.points[0].leg, 2.0);
    EXPECT_DOUBLE_EQ(r.points[0].reference, 2.5);
    EXPECT_DOUBLE_EQ(r.points[0].percent, -20.0);
    EXPECT_DOUBLE_EQ(r.points[1].percent, 20.0);
    EXPECT_NEAR(r.points[2].percent, -0.0099990000999900, 1e-12);
    EXPECT_DOUBLE_EQ(r.points[3].percent, -100.0);
    EXPECT_DOUBLE_EQ(r.max_abs, 100.0);
    EXPECT_EQ(r.max_abs_update, 15);

    PercentSeries none = residual_percent({}, false);
    EXPECT_TRUE(none.points.empty());
    EXPECT_TRUE(std::isnan(none.max_abs));
    EXPECT_EQ(none.max_abs_update, -1);
}

TEST(CompareStats, GradNormPairingUsesCommonFiniteUpdates) {
    const double nan = std::nan("");
    std::vector<StepRow> a{{0, 2.0, 1.0, 0, 0, 0}, {1, 1.9, nan, 0, 0, 0}, {2, 1.8, 0.8, 0, 0, 0}, {3, 1.7, 0.6, 0, 0, 0}};
    std::vector<StepRow> b{{0, 2.0, 0.5, 0, 0, 0}, {1, 1.9, 0.7, 0, 0, 0}, {2, 1.8, 1.0, 0, 0, 0}};
    auto p = pair_grad_norms(a, b);
    ASSERT_EQ(p.size(), 2u);  // update 1 has no finite norm in a, update 3 is not in b
    EXPECT_EQ(p[0].update, 0);
    EXPECT_DOUBLE_EQ(p[0].diff, 0.5);
    EXPECT_EQ(p[1].update, 2);
    EXPECT_NEAR(p[1].diff, -0.2, rounding_tol(1, 1.0));  // 0.8 - 1.0
    // 100 * 0.5 / 0.5 = 100 %, 100 * (0.8 - 1.0) / 1.0 = -20 %
    PercentSeries s = residual_percent(p, false);
    EXPECT_DOUBLE_EQ(s.points[0].percent, 100.0);
    EXPECT_NEAR(s.points[1].percent, -20.0, 1e-12);
}

TEST(CompareStats, TimingWindowFollowsThePaperWhenLongEnough) {
    EXPECT_EQ(timing_window(10536), (std::pair<int64_t, int64_t>{100, 499}));
    EXPECT_EQ(timing_window(300), (std::pair<int64_t, int64_t>{100, 299}));
    EXPECT_EQ(timing_window(30), (std::pair<int64_t, int64_t>{6, 29}));
    EXPECT_EQ(timing_window(0), (std::pair<int64_t, int64_t>{-1, -1}));
}

namespace {
LegData leg(const std::string& name, double l1, const std::string& sha, std::vector<int32_t> ids) {
    LegData l;
    l.name = name;
    l.status = "finished";
    l.trace.l1_ce = l1;
    l.trace.has_l2 = true;
    l.trace.l2.push_back({"model.norm.weight", "base", {4}, 4.0, 4.0, 1.0, sha});
    l.trace.has_l3 = true;
    L3Record r;
    r.index = 0;
    r.id = "pubmedqa:1";
    r.ids = std::move(ids);
    r.boundary = 2;
    r.supervised_count = 2;
    r.full_length = static_cast<int64_t>(r.ids.size());
    l.trace.l3.push_back(r);
    l.trace.evals = {{0, l1}};
    return l;
}
}  // namespace

// A level a leg never sent is missing, not different: n/a for the pair, named by the leg's
// completeness, and the verdict `incomplete`, never `different` (docs/report.md "The verdict").
TEST(CompareLegs, ALegThatSentNothingIsIncompleteNotDifferent) {
    ExperimentSpec spec;
    spec.model_config = "tiny";
    spec.lora_dropout = 0.0;
    const auto a = leg("a", 2.0, "aa", {1, 2, 3, 4});
    LegData never;
    never.name = "never";
    never.status = "failed";
    never.trace.error = "exited with status 127 without a done event";
    Comparison c = compare_legs({a, never}, spec);
    judge_completeness(c, {a, never}, ExpectedSeries{0, 1});
    EXPECT_TRUE(c.failures.empty()) << c.failures.front();
    EXPECT_EQ(c.l1[0].na, "no data from never");
    EXPECT_EQ(c.l2[0].na, "no data from never");
    EXPECT_TRUE(c.l2[0].mismatches.empty());
    EXPECT_EQ(c.l3[0].na, "no data from never");
    EXPECT_NE(c.l4[0].verdict, PairVerdict::Different);
    EXPECT_TRUE(c.different_without_localisation().empty());
    EXPECT_EQ(c.verdict().rfind("incomplete: never: leg failed (exited with status 127", 0), 0u) << c.verdict();
    EXPECT_FALSE(c.passed());

    // A finished leg that lacks only L2: incomplete (the missing level named), still not different.
    auto b = leg("b", 2.0, "aa", {1, 2, 3, 4});
    b.trace.has_l2 = false;
    b.trace.l2.clear();
    Comparison d = compare_legs({a, b}, spec);
    judge_completeness(d, {a, b}, ExpectedSeries{0, 1});
    EXPECT_TRUE(d.failures.empty());
    EXPECT_EQ(d.verdict(), "incomplete: b: no L2 (parameter digests) recorded");
}

TEST(CompareLegs, FlagsEachLevelThatDiffers) {
    ExperimentSpec spec;
    spec.model_config = "tiny";
    spec.lora_dropout = 0.0;
    auto a = leg("a", 2.0, "aa", {1, 2, 3, 4});
    auto b = leg("b", 2.0 * (1 + 5e-6), "aa", {1, 2, 3, 4});  // L1 within 1e-5
    b.trace.evals = a.trace.evals;                              // and the trajectory identical: equivalent
    Comparison ok = compare_legs({a, b}, spec);
    judge_completeness(ok, {a, b}, ExpectedSeries{0, 1});  // no update planned: the initial evaluation only
    EXPECT_TRUE(ok.l1[0].pass);
    EXPECT_TRUE(ok.l2[0].pass);
    EXPECT_TRUE(ok.l3[0].pass);
    EXPECT_TRUE(ok.passed()) << ok.verdict();
    EXPECT_EQ(ok.l4[0].verdict, PairVerdict::Equivalent);

    auto c = leg("c", 2.1, "bb", {1, 2, 9, 4});
    Comparison bad = compare_legs({a, c}, spec);
    judge_completeness(bad, {a, c}, ExpectedSeries{0, 1});
    EXPECT_FALSE(bad.l1[0].pass);
    EXPECT_FALSE(bad.l2[0].pass);
    ASSERT_EQ(bad.l2[0].mismatches.size(), 1u);
    EXPECT_NE(bad.l2[0].mismatches[0].find("model.norm.weight"), std::string::npos);
    EXPECT_FALSE(bad.l3[0].pass);
    EXPECT_EQ(bad.l3[0].what, "ids");
    ASSERT_TRUE(bad.l3[0].first_token.has_value());
    EXPECT_EQ(*bad.l3[0].first_token, 2);
    EXPECT_EQ(bad.l3[0].window_a, (std::vector<int32_t>{1, 2, 3, 4}));
    EXPECT_EQ(bad.l3[0].window_b, (std::vector<int32_t>{1, 2, 9, 4}));
    EXPECT_FALSE(bad.passed());
    EXPECT_GE(bad.failures.size(), 3u);
    // A level L1-L3 failed: the pair and the run are different, whatever the distances say; the reason
    // names the level, the update (0: before training) and the ratio to the threshold.
    EXPECT_EQ(bad.l4[0].verdict, PairVerdict::Different);
    EXPECT_EQ(bad.verdict().rfind("different: L1 a~c: initial held-out CE (update 0) differs by 0.0476 relative, 4.76e+03x the "
                                  "threshold 1e-05 (+2 more)",
                                  0),
              0u)
        << bad.verdict();
}

TEST(CompareLegs, ResidualPercentSeriesAreLegMinusReference) {
    ExperimentSpec spec;
    spec.model_config = "tiny";
    spec.lora_dropout = 0.0;
    auto engine = leg("engine-cpu", 2.0, "aa", {1, 2, 3, 4});
    engine.implementation = "engine";
    engine.trace.evals = {{0, 2.02}, {2, 1.5}};
    engine.trace.steps = {{0, 4.0, 2.0, 0, 0, 0}, {1, 3.0, 1.1, 0, 0, 0}, {2, 2.0, 0.9, 0, 0, 0}};
    auto ref = leg("reference-cpu", 2.0, "aa", {1, 2, 3, 4});
    ref.implementation = "reference";
    ref.trace.evals = {{0, 2.0}, {2, 1.6}};
    ref.trace.steps = {{0, 5.0, 2.5, 0, 0, 0}, {1, 3.0, 1.0, 0, 0, 0}, {2, 2.5, 1.0, 0, 0, 0}};

    // Default run order (engine, reference): the reference is b.
    Comparison c = compare_legs({engine, ref}, spec);
    ASSERT_EQ(c.l4.size(), 1u);
    const L4Entry& e = c.l4[0];
    EXPECT_EQ(e.residual_leg, "engine-cpu");
    EXPECT_EQ(e.residual_reference, "reference-cpu");
    ASSERT_EQ(e.eval_percent.points.size(), 2u);
    EXPECT_NEAR(e.eval_percent.points[0].percent, 1.0, 1e-12);        // 100 * 0.02 / 2.0
    EXPECT_NEAR(e.eval_percent.points[1].percent, -6.25, 1e-12);      // 100 * -0.1 / 1.6
    ASSERT_EQ(e.loss_percent.points.size(), 3u);
    EXPECT_DOUBLE_EQ(e.loss_percent.points[0].percent, -20.0);        // 100 * -1 / 5
    EXPECT_DOUBLE_EQ(e.loss_percent.points[1].percent, 0.0);
    EXPECT_DOUBLE_EQ(e.loss_percent.points[2].percent, -20.0);        // 100 * -0.5 / 2.5
    ASSERT_EQ(e.grad_points.size(), 3u);
    EXPECT_EQ(e.grad.n, 3);
    EXPECT_NEAR(e.grad.max_abs, 0.5, rounding_tol(1, 2.5));
    EXPECT_EQ(e.grad.max_abs_update, 0);
    ASSERT_EQ(e.grad_percent.points.size(), 3u);
    EXPECT_DOUBLE_EQ(e.grad_percent.points[0].percent, -20.0);        // 100 * -0.5 / 2.5
    EXPECT_NEAR(e.grad_percent.points[1].percent, 10.0, 1e-12);       // 100 * 0.1 / 1.0
    EXPECT_NEAR(e.grad_percent.points[2].percent, -10.0, 1e-12);      // 100 * -0.1 / 1.0
    EXPECT_DOUBLE_EQ(e.grad_percent.max_abs, 20.0);
    EXPECT_EQ(e.grad_percent.max_abs_update, 0);

    // Reference first: differences stay a - b (run order), the percent is still leg minus reference.
    Comparison r = compare_legs({ref, engine}, spec);
    const L4Entry& f = r.l4[0];
    EXPECT_EQ(f.residual_leg, "engine-cpu");
    EXPECT_EQ(f.residual_reference, "reference-cpu");
    EXPECT_NEAR(f.eval_points[0].diff, -0.02, rounding_tol(1, 2.02));
    EXPECT_NEAR(f.eval_percent.points[0].percent, 1.0, 1e-12);
    EXPECT_DOUBLE_EQ(f.loss_percent.points[0].percent, -20.0);
    EXPECT_DOUBLE_EQ(f.grad_percent.points[0].percent, -20.0);
}

TEST(Completeness, HolesRepeatsUnfinishedLegsAndNonFiniteValuesAreNamed) {
    ExperimentSpec spec;
    spec.model_config = "tiny";
    spec.lora_dropout = 0.0;
    auto full = [](const std::string& name) {
        LegData l = leg(name, 2.0, "aa", {1, 2, 3, 4});
        l.trace.steps.clear();
        for (int64_t u = 0; u < 6; ++u) l.trace.steps.push_back({u, 2.0 - 0.1 * u, 1.0, 1e-4, 10, 0.1});
        l.trace.evals = {{0, 2.0}, {4, 1.7}, {6, 1.6}};
        return l;
    };
    const ExpectedSeries six{6, 4};
    EXPECT_EQ(expected_eval_updates(6, 4), (std::vector<int64_t>{0, 4, 6}));
    EXPECT_EQ(expected_eval_updates(8, 4), (std::vector<int64_t>{0, 4, 8}));
    EXPECT_EQ(expected_eval_updates(0, 4), (std::vector<int64_t>{0}));

    LegData a = full("a"), b = full("b");
    Comparison c = compare_legs({a, b}, spec);
    judge_completeness(c, {a, b}, six);
    EXPECT_TRUE(c.passed()) << c.verdict();
    EXPECT_EQ(c.verdict(), "equivalent: a~b: held-out CE within the float32 error-model bound at all 3 paired evaluations "
                           "(largest 0 of the bound, update 0); lr on the schedule, training loss and pre-clip grad norm within "
                           "their bounds at all 6 updates (largest 0 and 0 of them)");

    // The resume defect the runner kill test found (docs/run-folder.md "Interruptions"): rows 0-3 lost, the levels themselves still agree.
    LegData holes = full("a");
    holes.trace.steps.erase(holes.trace.steps.begin(), holes.trace.steps.begin() + 4);
    c = compare_legs({holes, b}, spec);
    EXPECT_TRUE(c.failures.empty());  // nothing the levels can see
    judge_completeness(c, {holes, b}, six);
    EXPECT_FALSE(c.passed());
    ASSERT_EQ(c.incomplete.size(), 1u);
    EXPECT_EQ(c.incomplete[0], "a: 4 of 6 update rows missing (0-3)");
    EXPECT_EQ(c.verdict(), "incomplete: a: 4 of 6 update rows missing (0-3)");

    LegData twice = full("a");
    twice.trace.steps.insert(twice.trace.steps.begin() + 2, twice.trace.steps[2]);
    twice.trace.evals.erase(twice.trace.evals.begin() + 1);
    twice.status = "failed";
    auto lines = incompleteness(twice, six);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0], "a: leg failed");
    EXPECT_EQ(lines[1], "a: update(s) 2 recorded more than once");
    EXPECT_EQ(lines[2], "a: held-out evaluation(s) missing at update(s) 4");

    // Unknown plan length: completeness cannot be confirmed, so it is not claimed.
    EXPECT_FALSE(incompleteness(full("a"), ExpectedSeries{}).empty());

    LegData nan = full("a");
    nan.trace.steps[3].loss = std::nan("");
    c = compare_legs({nan, b}, spec);
    judge_completeness(c, {nan, b}, six);
    EXPECT_FALSE(c.passed());
    EXPECT_EQ(c.verdict().rfind("different: a: non-finite training loss at update 3", 0), 0u) << c.verdict();

    // A judged comparison without a leg, and one never judged, do not pass.
    Comparison none;
    judge_completeness(none, {}, six);
    EXPECT_FALSE(none.passed());
    EXPECT_FALSE(Comparison{}.passed());
}

#include "tandem/error.h"
#include "tandem/runner/runner.h"

TEST(PlanLegs, NamesImplementationsAndDevices) {
    auto legs = plan_legs("engine,reference", "cpu");
    ASSERT_EQ(legs.size(), 2u);
    EXPECT_EQ(legs[0].name, "engine");
    EXPECT_EQ(legs[1].implementation, "reference");
    EXPECT_EQ(legs[1].device, "cpu");
    legs = plan_legs("e1=engine,e2=engine,ref=reference", "cpu,cuda:0");
    EXPECT_EQ(legs[0].name, "e1");
    EXPECT_EQ(legs[1].implementation, "engine");
    EXPECT_EQ(legs[1].device, "cuda:0");
    EXPECT_EQ(legs[2].device, "cpu");  // round-robin
    EXPECT_THROW(plan_legs("engine,engine", "cpu"), tandem::Error);     // same name twice
    EXPECT_THROW(plan_legs("jax", "cpu"), tandem::Error);               // unknown implementation
    EXPECT_THROW(plan_legs("engine", "gpu0"), tandem::Error);           // bad device
    EXPECT_THROW(plan_legs("", "cpu"), tandem::Error);
}
