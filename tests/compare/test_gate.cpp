// The live trajectory gate (experiments/compare/include/tandem/compare/judge/gate.h) on synthetic traces whose
// flags are known by construction.
#include "tandem/error.h"
#include "tandem/compare/judge/gate.h"
#include "tandem/compare/metrics.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <set>

using namespace tandem::experiments;

namespace {
LegTrace steady(int64_t n, double wall = 0.1) {
    LegTrace t;
    for (int64_t u = 0; u < n; ++u) t.steps.push_back({u, 3.0 - 0.01 * static_cast<double>(u % 7), 1.0, 1e-4, 10, wall});
    return t;
}
}  // namespace

TEST(Gate, ACleanTrajectoryRaisesNoFlag) {
    TrajectoryGate g;
    LegTrace t = steady(200);
    for (size_t i = 0; i < t.steps.size(); ++i) t.steps[i].wall_s = 0.1 + 0.02 * static_cast<double>(i % 5);  // jitter
    EXPECT_TRUE(g.check("engine", t, 0).empty());
}

TEST(Gate, AnUpdateFarAboveTheRunningMedianIsAStepTimeFlag) {
    TrajectoryGate g;
    LegTrace t = steady(20);
    EXPECT_TRUE(g.check("engine", t, 0).empty());
    t.steps.push_back({20, 2.9, 1.0, 1e-4, 10, 0.45});  // 4.5x the 0.1 s median: above 4x
    auto f = g.check("engine", t, 0);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].kind, "step-time");
    EXPECT_EQ(f[0].update, 20);
    EXPECT_DOUBLE_EQ(f[0].threshold, 0.4);
    EXPECT_EQ(f[0].action, GateAction::Warn);
    EXPECT_EQ(f[0].message, "engine: update 20 took 0.45 s, 4.5x its running median 0.1 s");
    t.steps.push_back({21, 2.9, 1.0, 1e-4, 10, 0.39});  // below the limit
    EXPECT_TRUE(g.check("engine", t, 0).empty());        // and update 20 is not flagged twice
}

TEST(Gate, StepTimeIsMeasuredInCpuTimeWhenTheLegReportsIt) {
    // A loaded machine: wall time of clean updates jumps 6x while the CPU they cost stays put (before CPU time,
    // the wall-time flag fired on 3 of 10 clean seeds). In CPU time: no flag.
    TrajectoryGate g;
    LegTrace t = steady(20);
    for (auto& s : t.steps) s.cpu_s = 0.2;  // two threads busy for the update's 0.1 s
    t.steps[12].wall_s = 0.6;
    t.steps[17].wall_s = 0.6;
    EXPECT_TRUE(g.check("engine", t, 0).empty());
    // An update that does 4.5x the work: flagged, in CPU seconds.
    t.steps.push_back({20, 2.9, 1.0, 1e-4, 10, 0.45});
    t.steps.back().cpu_s = 0.9;
    auto f = g.check("engine", t, 0);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].kind, "step-time");
    EXPECT_EQ(f[0].update, 20);
    EXPECT_DOUBLE_EQ(f[0].value, 0.9);
    EXPECT_DOUBLE_EQ(f[0].threshold, 0.8);
    EXPECT_EQ(f[0].series, "cpu_s");
    EXPECT_EQ(f[0].message, "engine: update 20 took 0.9 s of CPU, 4.5x its running median 0.2 s of CPU");
    // A leg that reports no CPU time (cpu_s NaN) is judged in wall time, as before.
    TrajectoryGate wall_gate;  // a fresh gate: one remembers the rows it has checked per leg
    LegTrace w = steady(20);
    w.steps[12].wall_s = 0.6;
    f = wall_gate.check("engine", w, 0);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].update, 12);
    EXPECT_EQ(f[0].series, "wall_s");
}

TEST(Gate, StepTimeNeedsHistoryOfTheCurrentAttempt) {
    TrajectoryGate g;
    LegTrace t = steady(10, 2.0);  // an earlier attempt on a slower machine
    EXPECT_TRUE(g.check("engine", t, 0).empty());
    // Resumed at update 10: its first updates are compared with nothing from the old attempt.
    for (int64_t u = 10; u < 14; ++u) t.steps.push_back({u, 2.9, 1.0, 1e-4, 10, 0.1});
    EXPECT_TRUE(g.check("engine", t, 10).empty());
}

TEST(Gate, ALossFarAboveItsRecentSpreadIsASpikeAndNonFiniteStops) {
    TrajectoryGate g;
    LegTrace t = steady(40);
    EXPECT_TRUE(g.check("reference", t, 0).empty());
    t.steps.push_back({40, 30.0, 1.0, 1e-4, 10, 0.1});
    auto f = g.check("reference", t, 0);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].kind, "loss-spike");
    t.steps.push_back({41, std::nan(""), 1.0, 1e-4, 10, 0.1});
    t.evals.push_back({42, INFINITY});
    f = g.check("reference", t, 0);
    ASSERT_EQ(f.size(), 2u);
    EXPECT_EQ(f[0].kind, "non-finite");
    EXPECT_EQ(f[0].action, GateAction::Stop);
    EXPECT_EQ(f[0].message, "reference: non-finite training loss at update 41");
    EXPECT_EQ(f[1].message, "reference: non-finite held-out CE at update 42");
}

TEST(Gate, ConfigParsesActionsAndRejectsUnknownFields) {
    auto c = GateConfig::from_json(nlohmann::json::parse(R"({"step_time": "pause", "step_time_factor": 3})"), "x.json");
    EXPECT_EQ(c.step_time, GateAction::Pause);
    EXPECT_EQ(c.step_time_factor, 3.0);
    EXPECT_FALSE(c.is_default());
    EXPECT_TRUE(GateConfig{}.is_default());
    EXPECT_THROW(GateConfig::from_json(nlohmann::json::parse(R"({"step_time": "explode"})"), "x.json"), tandem::Error);
    EXPECT_THROW(GateConfig::from_json(nlohmann::json::parse(R"({"nonfinite": "stop"})"), "x.json"), tandem::Error);
    auto flags = flags_from_json(flags_to_json({{"a", "step-time", 3, 1.5, 0.4, GateAction::Pause, "m", "wall_s"}}));
    ASSERT_EQ(flags.size(), 1u);
    EXPECT_EQ(flags[0].action, GateAction::Pause);
    EXPECT_EQ(flags[0].value, 1.5);
    EXPECT_EQ(flags[0].series, "wall_s");
}

TEST(Gate, FlagSeriesIsTheRecordedOneElseWhatAnOlderFlagsKindAndWordingSay) {
    // What the workbench draws a flag on: the series the gate recorded; a flag from a run file
    // written before the gate named it gets the one its kind, or the gate's wording, names.
    auto flag = [](const char* kind, const char* message, const char* series) {
        GateFlag f;
        f.kind = kind;
        f.message = message;
        f.series = series;
        return f;
    };
    EXPECT_EQ(flag_series(flag("step-time", "a: update 5 took 2 s of CPU", "cpu_s")), "cpu_s");
    EXPECT_EQ(flag_series(flag("non-finite", "a: non-finite held-out CE at update 9", "grad_norm")), "grad_norm");  // recorded wins
    EXPECT_EQ(flag_series(flag("paired-bound", "a: ...", "")), "heldout_ce");
    EXPECT_EQ(flag_series(flag("step-time", "a: update 5 took 2 s", "")), "wall_s");
    EXPECT_EQ(flag_series(flag("loss-spike", "a: loss 3 at update 7", "")), "loss");
    EXPECT_EQ(flag_series(flag("non-finite", "a: non-finite held-out CE at update 9", "")), "heldout_ce");
    EXPECT_EQ(flag_series(flag("non-finite", "a: non-finite grad norm at update 3", "")), "grad_norm");
    EXPECT_EQ(flag_series(flag("non-finite", "a: non-finite loss at update 10", "")), "loss");
    EXPECT_EQ(flag_series(flag("envelope", "a: held-out CE 3 at update 8 is above", "")), "heldout_ce");
    EXPECT_EQ(flag_series(flag("envelope", "a: training loss 3 at update 6 is above", "")), "loss");
}

// One name per quantity: every flag that names a metric's series says it with the metric table's
// label, the words of its panel (the table is where a label is written; tests/compare/test_metric_labels.py
// checks that no other file writes one).
TEST(Gate, EveryFlagNamesItsSeriesWithTheMetricTablesLabel) {
    TrajectoryGate g;
    TrajectoryGate::Context ctx;
    ctx.implementation = {{"engine", "engine"}, {"reference", "reference"}};
    ctx.paired = {{"engine", "reference"}};
    ctx.model.layers = 2;
    ctx.model.seq_len = 256;
    g.set_context(ctx);
    LegTrace t = steady(40);
    std::vector<GateFlag> flags = g.check("engine", t, 0);
    t.steps.push_back({40, 30.0, 1.0, 1e-4, 10, 0.1});               // loss spike
    t.steps.push_back({41, std::nan(""), 1.0, 1e-4, 10, 0.1});       // non-finite training loss
    t.steps.push_back({42, 2.9, std::nan(""), 1e-4, 10, 0.1});       // non-finite grad norm
    t.evals = {{0, 3.0}, {10, INFINITY}};                            // non-finite held-out CE
    for (auto& f : g.check("engine", t, 0)) flags.push_back(f);
    LegTrace ref;
    ref.evals = {{0, 1.5}};  // the engine's held-out CE twice the reference's: beyond the paired bound
    std::map<std::string, const LegTrace*> traces{{"engine", &t}, {"reference", &ref}};
    for (auto& f : g.check_pairs(traces)) flags.push_back(f);

    std::set<std::string> named;
    for (const auto& f : flags) {
        const auto metric = metric_of_series(f.series);
        ASSERT_TRUE(metric) << f.kind << ": " << f.series;
        const std::string label = metric_info(*metric).label;
        EXPECT_EQ(series_label(f.series), label);
        EXPECT_NE(f.message.find("engine: " + (f.kind == "non-finite" ? "non-finite " + label : label) + " "), std::string::npos)
            << f.message << " (the label of " << f.series << " is '" << label << "')";
        named.insert(f.kind + " " + f.series);
    }
    EXPECT_EQ(named, (std::set<std::string>{"loss-spike loss", "non-finite loss", "non-finite grad_norm", "non-finite heldout_ce",
                                            "paired-bound heldout_ce"}));
}
