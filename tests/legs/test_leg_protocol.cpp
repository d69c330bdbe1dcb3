// The leg-protocol parser: events accumulate into a LegTrace; malformed lines are kept with their
// content and never throw; unknown fields and events are ignored; resumed updates replace old ones.
#include "tandem/legs/leg_protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace tandem::experiments;

TEST(LegProtocol, AccumulatesEvents) {
    LegTrace t;
    EXPECT_EQ(apply_event_line(t, R"({"v":1,"event":"hello","implementation":"engine","future_field":[1,2]})"), EventKind::Hello);
    EXPECT_EQ(t.implementation(), "engine");
    EXPECT_EQ(apply_event_line(t, R"({"v":1,"event":"l1","heldout_ce":11.5,"tokens":550})"), EventKind::L1);
    ASSERT_TRUE(t.l1_ce.has_value());
    EXPECT_DOUBLE_EQ(*t.l1_ce, 11.5);
    apply_event_line(t, R"({"v":1,"event":"step","update":0,"loss":3.5,"grad_norm":1.25,"lr":0,"tokens":10,"wall_s":0.5})");
    apply_event_line(t, R"({"v":1,"event":"step","update":1,"loss":3.25,"grad_norm":null,"lr":1e-4,"tokens":12,"wall_s":0.5})");
    ASSERT_EQ(t.steps.size(), 2u);
    EXPECT_TRUE(std::isnan(t.steps[1].grad_norm));  // null = non-finite
    apply_event_line(t, R"({"v":1,"event":"eval","update":0,"heldout_ce":4.0})");
    apply_event_line(t, R"({"v":1,"event":"timing","model_load_s":1.5,"tokenize_s":0.25})");
    apply_event_line(t, R"({"v":1,"event":"memory","peak_host_rss_bytes":1000,"peak_device_bytes":null})");
    apply_event_line(t, R"({"v":1,"event":"some_future_event","x":1})");
    apply_event_line(t, R"({"v":1,"event":"done","updates":2})");
    EXPECT_DOUBLE_EQ(t.model_load_s, 1.5);
    EXPECT_DOUBLE_EQ(t.tokenize_s, 0.25);
    EXPECT_EQ(t.peak_host_bytes, 1000);
    EXPECT_EQ(t.peak_device_bytes, -1);
    EXPECT_TRUE(t.done);
    EXPECT_TRUE(t.malformed.empty());
}

// Every member of a step and an eval row is read from the event field of its name (the rows come
// from one list, tandem/store/row_columns.h); a field a leg leaves out is "not reported": NaN for
// a real, the list's value for an integer.
TEST(LegProtocol, EveryRowMemberIsReadFromItsFieldAndAbsentOnesAreNotReported) {
    LegTrace t;
    apply_event_line(t, R"({"v":1,"event":"step","update":7,"loss":2.5,"grad_norm":0.75,"lr":3e-4,"tokens":41,)"
                        R"("wall_s":1.25,"cpu_s":2.0})");
    apply_event_line(t, R"({"v":1,"event":"eval","update":8,"heldout_ce":1.875})");
    ASSERT_EQ(t.steps.size(), 1u);
    ASSERT_EQ(t.evals.size(), 1u);
    const StepRow& s = t.steps[0];
    EXPECT_EQ(s.update, 7);
    EXPECT_EQ(s.loss, 2.5);
    EXPECT_EQ(s.grad_norm, 0.75);
    EXPECT_EQ(s.lr, 3e-4);
    EXPECT_EQ(s.tokens, 41);
    EXPECT_EQ(s.wall_s, 1.25);
    EXPECT_EQ(s.cpu_s, 2.0);
    EXPECT_EQ(t.evals[0].update, 8);
    EXPECT_EQ(t.evals[0].heldout_ce, 1.875);

    LegTrace bare;
    apply_event_line(bare, R"({"v":1,"event":"step"})");
    apply_event_line(bare, R"({"v":1,"event":"eval"})");
    ASSERT_EQ(bare.steps.size(), 1u);
    ASSERT_EQ(bare.evals.size(), 1u);
    const StepRow& b = bare.steps[0];
    EXPECT_EQ(b.update, -1);
    EXPECT_EQ(b.tokens, 0);
    for (double x : {b.loss, b.grad_norm, b.lr, b.wall_s, b.cpu_s}) EXPECT_TRUE(std::isnan(x));
    EXPECT_EQ(bare.evals[0].update, -1);
    EXPECT_TRUE(std::isnan(bare.evals[0].heldout_ce));
    // A row built in code starts at zero but for the CPU time, which a leg may not measure.
    const StepRow fresh;
    EXPECT_EQ(fresh.loss, 0.0);
    EXPECT_EQ(fresh.wall_s, 0.0);
    EXPECT_TRUE(std::isnan(fresh.cpu_s));
}

TEST(LegProtocol, MalformedLinesAreReportedWithTheirContent) {
    LegTrace t;
    EXPECT_EQ(apply_event_line(t, "Traceback (most recent call last):"), EventKind::Malformed);
    EXPECT_EQ(apply_event_line(t, R"({"event":"step","update":0})"), EventKind::Malformed);      // no version
    EXPECT_EQ(apply_event_line(t, R"({"v":2,"event":"step"})"), EventKind::Malformed);            // unknown version
    EXPECT_EQ(apply_event_line(t, R"([1,2,3])"), EventKind::Malformed);                            // not an object
    EXPECT_EQ(apply_event_line(t, R"({"v":1,"event":"step","update":0,"loss":)"), EventKind::Malformed);  // truncated
    EXPECT_EQ(apply_event_line(t, R"({"v":1,"event":"step","update":"zero"})"), EventKind::Step);  // wrong type -> defaults
    ASSERT_EQ(t.malformed.size(), 5u);
    EXPECT_NE(t.malformed[0].find("Traceback"), std::string::npos);
    EXPECT_NE(t.malformed[0].find("not JSON"), std::string::npos);
    EXPECT_NE(t.malformed[1].find("version"), std::string::npos);
    EXPECT_NE(t.malformed[4].find("\"loss\":"), std::string::npos);
    EXPECT_EQ(apply_event_line(t, ""), EventKind::Malformed);  // blank lines are skipped, not malformed
    EXPECT_EQ(t.malformed.size(), 5u);
}

TEST(LegProtocol, ResumedUpdatesReplaceTheTail) {
    LegTrace t;
    for (int u = 0; u < 5; ++u)
        apply_event_line(t, R"({"v":1,"event":"step","update":)" + std::to_string(u) + R"(,"loss":1.0})");
    apply_event_line(t, R"({"v":1,"event":"error","message":"killed"})");
    apply_event_line(t, R"({"v":1,"event":"resume","update":3})");
    EXPECT_FALSE(t.error.has_value());
    apply_event_line(t, R"({"v":1,"event":"step","update":3,"loss":2.0})");
    ASSERT_EQ(t.steps.size(), 4u);
    EXPECT_EQ(t.steps.back().update, 3);
    EXPECT_DOUBLE_EQ(t.steps.back().loss, 2.0);
    EXPECT_EQ(t.resumes, 1);
}

TEST(LegProtocol, WriterAndDigestRoundTrip) {
    std::FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    EventWriter w(f);
    float data[3] = {1.0f, -2.0f, 0.5f};
    TensorDigest d = digest_tensor("x", "base", {3}, data, 3);
    EXPECT_DOUBLE_EQ(d.sum, -0.5);
    EXPECT_DOUBLE_EQ(d.sumsq, 5.25);
    EXPECT_DOUBLE_EQ(d.maxabs, 2.0);
    // sha256 of the 12 little-endian bytes 00 00 80 3f | 00 00 00 c0 | 00 00 00 3f
    EXPECT_EQ(d.sha256.size(), 64u);
    LegTrace src;
    src.l2 = {d};
    w.emit("l2", l2_to_json(src));
    std::rewind(f);
    char buf[4096] = {};
    ASSERT_NE(std::fgets(buf, sizeof buf, f), nullptr);
    std::fclose(f);
    LegTrace t;
    EXPECT_EQ(apply_event_line(t, buf), EventKind::L2);
    ASSERT_EQ(t.l2.size(), 1u);
    EXPECT_EQ(t.l2[0].sha256, d.sha256);
    EXPECT_EQ(t.l2[0].shape, std::vector<int64_t>{3});
}

// docs/leg-protocol.md, non-finite numbers: NaN / infinity travel as the strings "NaN", "Infinity", "-Infinity" (JSON has
// no non-finite numbers; Python's json.dumps would write a bare NaN, which no JSON parser reads),
// and null still reads as NaN (events.jsonl files written before the explicit form).
TEST(LegProtocol, NonFiniteNumbersAreExplicitOnTheWire) {
    std::FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    EventWriter w(f);
    const double inf = std::numeric_limits<double>::infinity();
    w.emit("step", {{"update", 3}, {"loss", std::nan("")}, {"grad_norm", inf}, {"lr", -inf}, {"wall_s", 0.5},
                    {"nested", {{"x", std::nan("")}, {"list", {1.0, -inf}}}}});
    float data[2] = {std::nanf(""), 1.0f};
    LegTrace src;
    src.l2 = {digest_tensor("model.norm.weight", "base", {2}, data, 2)};
    w.emit("l2", l2_to_json(src));
    std::rewind(f);
    char buf[4096];
    std::string step = std::fgets(buf, sizeof buf, f);
    std::string l2 = std::fgets(buf, sizeof buf, f);
    std::fclose(f);
    // Valid JSON for any strict parser, with the non-finite values spelt out.
    const auto j = nlohmann::json::parse(step);
    EXPECT_EQ(j["loss"], "NaN");
    EXPECT_EQ(j["grad_norm"], "Infinity");
    EXPECT_EQ(j["lr"], "-Infinity");
    EXPECT_EQ(j["nested"]["x"], "NaN");
    EXPECT_EQ(j["nested"]["list"][1], "-Infinity");
    EXPECT_DOUBLE_EQ(j["wall_s"].get<double>(), 0.5);
    LegTrace t;
    EXPECT_EQ(apply_event_line(t, step), EventKind::Step);
    EXPECT_EQ(apply_event_line(t, l2), EventKind::L2);
    ASSERT_TRUE(t.malformed.empty());
    ASSERT_EQ(t.steps.size(), 1u);
    EXPECT_TRUE(std::isnan(t.steps[0].loss));
    EXPECT_EQ(t.steps[0].grad_norm, inf);
    EXPECT_EQ(t.steps[0].lr, -inf);
    ASSERT_EQ(t.l2.size(), 1u);  // the l2 event of a base holding a NaN is parsed, not "malformed"
    EXPECT_TRUE(std::isnan(t.l2[0].sum));
    EXPECT_TRUE(std::isnan(t.l2[0].maxabs));  // NaN propagates (numpy's max over the reference leg's tensor)
    // Old files: null reads as NaN; any other string is not a number (the field's default).
    apply_event_line(t, R"({"v":1,"event":"step","update":4,"loss":null,"grad_norm":"1.5"})");
    EXPECT_TRUE(std::isnan(t.steps[1].loss));
    EXPECT_TRUE(std::isnan(t.steps[1].grad_norm));
    // The stored check records keep the explicit form and read back.
    LegTrace back;
    l2_from_json(back, nlohmann::json::parse(l2_to_json(t).dump()));
    EXPECT_TRUE(std::isnan(back.l2[0].sum));
    t.l1_ce = inf;
    l1_from_json(back, nlohmann::json::parse(l1_to_json(t).dump()));
    ASSERT_TRUE(back.l1_ce.has_value());
    EXPECT_EQ(*back.l1_ce, inf);
}

TEST(LegProtocol, IntegersOutOfRangeAreNotConverted) {
    LegTrace t;
    apply_event_line(t, R"({"v":1,"event":"step","update":1e300,"loss":1})");
    apply_event_line(t, R"({"v":1,"event":"l3","records":[{"index":2.5,"ids":[1,1e30,-5,18446744073709551615]}]})");
    ASSERT_EQ(t.steps.size(), 1u);
    EXPECT_EQ(t.steps[0].update, -1);
    ASSERT_EQ(t.l3.size(), 1u);
    EXPECT_EQ(t.l3[0].index, -1);
    EXPECT_EQ(t.l3[0].ids, (std::vector<int32_t>{1, -1, -1, -1}));
}

// settings: kept as sent (without v, event, t); optimizer_check: one per update, a repeat (a resumed leg)
// replaces from its update on; a malformed one is kept in the malformed lines.
TEST(LegProtocol, SettingsAndOptimizerChecksAreKept) {
    LegTrace t;
    EXPECT_EQ(apply_event_line(t, R"({"v":1,"event":"settings","t":1.5,"optimizer":"AdamW","groups":[{"lr":1e-4,"weight_decay":0.01,"tensors":["a"]}],"clip":null,"schedule":"cosine"})"),
              EventKind::Settings);
    ASSERT_TRUE(t.settings.has_value());
    EXPECT_FALSE(t.settings->contains("v") || t.settings->contains("event") || t.settings->contains("t"));
    EXPECT_EQ((*t.settings)["groups"][0]["weight_decay"].get<double>(), 0.01);
    EXPECT_TRUE((*t.settings)["clip"].is_null());
    for (const char* line : {R"({"v":1,"event":"optimizer_check","update":0,"max_ratio":0.1,"tensor":"a","over":0,"elements":4,"tensors":1})",
                             R"({"v":1,"event":"optimizer_check","update":1,"max_ratio":"Infinity","tensor":"a","over":4,"elements":4,"tensors":1})",
                             R"({"v":1,"event":"optimizer_check","update":1,"max_ratio":0.2,"tensor":"a","over":0,"elements":4,"tensors":1})"})
        EXPECT_EQ(apply_event_line(t, line), EventKind::OptimizerCheck);
    ASSERT_EQ(t.optimizer_checks.size(), 2u);
    EXPECT_EQ(t.optimizer_checks[1]["max_ratio"].get<double>(), 0.2);
    EXPECT_EQ(apply_event_line(t, R"({"v":1,"event":"optimizer_check","update":2,"max_ratio":"big"})"), EventKind::Malformed);
    EXPECT_EQ(apply_event_line(t, R"({"v":1,"event":"settings","optimizer":"AdamW"})"), EventKind::Malformed);
    EXPECT_EQ(t.malformed.size(), 2u);
}
