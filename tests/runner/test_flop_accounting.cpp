// Work and utilisation in every run: the sgemm probe and its run-file attributes, a leg's
// FLOP/s over its timing window, the FLOPs of a run folder's shared plan, and the timing table that
// shows them. The formula itself is checked against torch's FlopCounterMode in test_flops.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tandem/data/batch_plan.h"
#include "tandem/engine/config.h"
#include "tandem/compare/comparison.h"
#include "tandem/spec/experiment.h"
#include "tandem/compare/flops.h"
#include "tandem/measure/probe.h"
#include "tandem/compare/report.h"
#include "tandem/runner/run_flops.h"
#include "tandem/store/run_file.h"
#include "test_support.h"

namespace {

using namespace tandem::experiments;
namespace fs = std::filesystem;

TEST(SgemmProbe, MeasuresEachThreadCountAndRoundTripsThroughTheRunFile) {
    CpuProbeOptions memcpy_options;
    memcpy_options.bytes = 16 << 20;
    memcpy_options.repeats = 2;
    ProbeResult p = probe_cpu(memcpy_options);
    SgemmProbeOptions o;
    o.size = 192;
    o.repeats = 3;
    probe_cpu_sgemm(p, {1, 2}, o);
    ASSERT_EQ(p.sgemm.size(), 2u);
    for (const auto& s : p.sgemm) {
        EXPECT_EQ(s.m, 192);
        EXPECT_GT(s.best_seconds, 0.0);
        EXPECT_LE(s.best_seconds, s.median_seconds);
        EXPECT_DOUBLE_EQ(s.flops_per_s, 2.0 * 192 * 192 * 192 / s.best_seconds);
        EXPECT_DOUBLE_EQ(s.median_flops_per_s, 2.0 * 192 * 192 * 192 / s.median_seconds);
        EXPECT_GT(s.flops_per_s, 1e8);   // any CPU this runs on does more than 0.1 GFLOP/s
        EXPECT_LT(s.flops_per_s, 1e14);  // and less than 100 TFLOP/s
    }
    EXPECT_NE(p.sgemm_method.find("OpenBLAS"), std::string::npos) << p.sgemm_method;
    ASSERT_NE(p.sgemm_at(2), nullptr);
    EXPECT_EQ(p.sgemm_at(3), nullptr);

    const fs::path file = fs::path(tandem::test::fresh_dir("sgemm-probe")) / "run.h5";
    {
        RunFileWriter w(file);
        w.write_probe(p);
    }
    const auto back = RunFileReader(file).probes();
    ASSERT_EQ(back.size(), 1u);
    ASSERT_EQ(back[0].sgemm.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(back[0].sgemm[i].threads, p.sgemm[i].threads);
        EXPECT_EQ(back[0].sgemm[i].k, 192);
        EXPECT_EQ(back[0].sgemm[i].flops_per_s, p.sgemm[i].flops_per_s);
        EXPECT_EQ(back[0].sgemm[i].median_seconds, p.sgemm[i].median_seconds);
    }
    EXPECT_EQ(back[0].sgemm_method, p.sgemm_method);
    EXPECT_EQ(back[0].directions.size(), p.directions.size());  // memcpy still there beside it
}

TEST(FlopFigures, RateOverTheTimingWindowAndTheFractionOfThePeak) {
    LegTrace t;
    std::vector<double> flops;
    for (int64_t u = 0; u < 10; ++u) {  // timing_window(10) = updates 2..9
        t.steps.push_back({u, 1.0, 1.0, 1e-4, 100, 0.5 + 0.1 * double(u)});
        flops.push_back(1e9 * double(u + 1));
    }
    const FlopFigures f = flop_figures(t, flops, 50e9);
    // window updates 2..9: FLOPs 3..10 GFLOP (sum 52), wall 0.7..1.4 s (sum 8.4)
    EXPECT_DOUBLE_EQ(f.flops_per_update, 6.5e9);  // median of 3..10 GFLOP
    EXPECT_DOUBLE_EQ(f.flops_per_s, 52e9 / 8.4);
    EXPECT_DOUBLE_EQ(f.peak_flops_per_s, 50e9);
    EXPECT_DOUBLE_EQ(f.utilisation, 52e9 / 8.4 / 50e9);
    // no peak: the rate without a fraction; no FLOPs (a leg with its own plan): nothing
    EXPECT_EQ(flop_figures(t, flops, -1).utilisation, -1);
    EXPECT_EQ(flop_figures(t, {}, 50e9).flops_per_s, -1);
    // a non-finite wall time is left out of both sums, not counted as zero
    t.steps[5].wall_s = std::nan("");
    EXPECT_DOUBLE_EQ(flop_figures(t, flops, 50e9).flops_per_s, (52e9 - 6e9) / (8.4 - 1.0));
}

TEST(FlopFigures, RunFolderPlanGivesEachUpdatesMicroBatchShapes) {
    const fs::path run = tandem::test::fresh_dir("run-flops");
    fs::create_directories(run / "base");
    fs::create_directories(run / "corpus");
    const tandem::engine::Qwen3Config cfg{.vocab_size = 1000, .hidden_size = 64, .intermediate_size = 160,
                                          .num_hidden_layers = 2, .num_attention_heads = 4,
                                          .num_key_value_heads = 2, .head_dim = 16};
    std::ofstream(run / "base" / "config.json") << cfg.to_json().dump();
    // records: (length, boundary, supervised); the run's max_len 40 cuts record 2
    const std::vector<std::array<size_t, 3>> rec = {{30, 10, 20}, {25, 5, 20}, {50, 10, 40}, {12, 4, 8}};
    {
        std::ofstream out(run / "corpus" / "records.jsonl");
        for (size_t i = 0; i < rec.size(); ++i)
            out << R"({"index":)" << i << R"(,"id":"x:)" << i << R"(","source":"pubmedqa","split":"train","messages":[)"
                << R"({"role":"user","content":"q"},{"role":"assistant","content":"a"}],"tokens":{"full_length":)"
                << rec[i][0] << R"(,"length":)" << rec[i][0] << R"(,"boundary":)" << rec[i][1] << R"(,"supervised":)"
                << rec[i][2] << "}}\n";
    }
    tandem::data::BatchPlan plan;
    plan.micro_batch = 2;
    plan.accumulation = 2;
    plan.max_len = 40;
    plan.updates = {{{0, 1}, {2}}, {{3}}};
    tandem::data::write_plan(plan, run / "plan.json");
    ExperimentSpec spec;
    spec.max_len = 40;
    spec.lora_rank = 8;
    spec.lora_targets = {"q_proj", "v_proj"};
    const std::vector<double> got = run_update_flops(run, spec);
    ASSERT_EQ(got.size(), 2u);
    tandem::engine::LoraConfig lora;
    lora.rank = 8;
    lora.targets = {"q_proj", "v_proj"};
    // update 0: [records 0, 1] -> 2 x 30, 40 labels; [record 2 cut to 40] -> 1 x 40, 30 labels
    EXPECT_DOUBLE_EQ(got[0], update_flops(cfg, lora, {{2, 30, 40}, {1, 40, 30}}).total());
    EXPECT_DOUBLE_EQ(got[1], update_flops(cfg, lora, {{1, 12, 8}}).total());
}

TEST(FlopFigures, TimingTableShowsFlopsPerSecondAndTheFractionOfThePeak) {
    Comparison c;
    c.legs = {"engine", "reference"};
    TimingRow a;
    a.leg = "engine";
    a.implementation = "engine";
    a.flops = {15.0e9, 9.0e9, 45.0e9, 0.2};
    TimingRow b = a;
    b.leg = "reference";
    b.flops = {15.0e9, -1, -1, -1};  // nothing measured: said, not zero
    c.timing = {a, b};
    const auto tables = report_tables(c);
    const auto t = std::find_if(tables.begin(), tables.end(), [](const Table& x) { return x.id == "timing"; });
    ASSERT_NE(t, tables.end());
    const auto col = [&](const std::string& name) {
        return size_t(std::find(t->columns.begin(), t->columns.end(), name) - t->columns.begin());
    };
    ASSERT_LT(col("GFLOP/s"), t->columns.size());
    ASSERT_LT(col("of sgemm peak"), t->columns.size());
    EXPECT_EQ(t->rows[0][col("GFLOP/update")], "15.0");
    EXPECT_EQ(t->rows[0][col("GFLOP/s")], "9.0");
    EXPECT_EQ(t->rows[0][col("of sgemm peak")], "20%");
    EXPECT_EQ(t->rows[1][col("GFLOP/s")], "n/a");
    EXPECT_EQ(t->rows[1][col("of sgemm peak")], "n/a");
}

}  // namespace
