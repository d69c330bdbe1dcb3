// The fault catalogue and the data/template faults (docs/faults.md): the catalogue's
// entries, switches as text / JSON and their errors, every fault mapped onto exactly one switch,
// each data fault changing only what it names in the engine leg's encoding of a record (real Qwen3
// tokenizer from ../shared), the banner, the matrix's JSON form and the size search's bisection.
#include "tandem/error.h"
#include "tandem/spec/fault_matrix.h"
#include "tandem/spec/faults.h"
#include "tandem/studies/faults_run.h"
#include "tandem/compare/report.h"
#include "tandem/compare/judge/series.h"

#include <gtest/gtest.h>

#include "compare/finished_leg.h"
#include "qwen3_records.h"

#include <cmath>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using namespace tandem::experiments;
using tandem::data::Message;
using tandem::data::TemplateKind;
using tandem::data::Tokenizer;

namespace {

const Tokenizer& qwen3() { return tandem::test::qwen3_tokenizer(); }
using tandem::test::qa;

const auto kRecord = qa("Which drug lowers blood pressure by blocking ACE?", "Lisinopril, an ACE inhibitor.");

tandem::data::TokenizedRecord clean(size_t max_len = 0) {
    return tandem::data::tokenize_record(qwen3(), TemplateKind::Qwen3, kRecord, max_len);
}

tandem::data::TokenizedRecord faulty(const DataFaults& f, size_t max_len = 0) {
    return encode_record(qwen3(), TemplateKind::Qwen3, kRecord, max_len, f);
}

std::vector<size_t> supervised_positions(const tandem::data::TokenizedRecord& r) {
    std::vector<size_t> p;
    for (size_t i = 0; i < r.supervised.size(); ++i)
        if (r.supervised[i]) p.push_back(i);
    return p;
}

// The message of the tandem::Error that `f` throws, or "no error".
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const tandem::Error& e) {
        return std::string(e.what());
    }
    return std::string("no error");
}

}  // namespace

TEST(FaultCatalogue, AtLeastTwentyNamedDocumentedFaults) {
    const auto& c = fault_catalogue();
    EXPECT_GE(c.size(), 20u);
    std::set<std::string> names;
    const std::set<std::string> levels = {"L1", "L2", "L3", "L4", "gate"};
    for (const auto& f : c) {
        EXPECT_TRUE(names.insert(f.name).second) << f.name << " twice";
        EXPECT_FALSE(f.description.empty()) << f.name;
        EXPECT_EQ(f.description.find('\n'), std::string::npos) << f.name << ": one line";
        EXPECT_FALSE(f.expected.empty()) << f.name;
        for (const auto& e : f.expected) EXPECT_TRUE(levels.count(e)) << f.name << ": " << e;
        if (f.size) {
            EXPECT_GE(f.size->default_value, f.size->smallest) << f.name;
            EXPECT_FALSE(f.size->unit.empty()) << f.name;
        }
        EXPECT_EQ(&fault_info(f.name), &f);
    }
    for (const char* issue_fault : {"template-chatml", "boundary-early", "boundary-late", "im-end-unsupervised",
                                    "truncate-left", "think-dropped", "rmsnorm-eps", "rope-theta", "rope-interleaved",
                                    "qk-norm-skipped", "gqa-modulo", "bf16-truncation", "adapter-wrong-projection",
                                    "rslora-ignored", "raw-alpha", "lora-b-grad-transposed", "labels-unshifted",
                                    "labels-shifted-twice", "grad-accum-mean-of-means", "clip-skipped",
                                    "clip-per-micro-batch", "adamw-no-bias-correction", "adamw-eps-inside-sqrt",
                                    "warmup-off-by-one", "dropout-in-eval", "eval-without-adapter",
                                    "dropout-mask-reused", "slow-after-eval"})
        EXPECT_TRUE(names.count(issue_fault)) << issue_fault;
    EXPECT_THROW(fault_info("no-such-fault"), tandem::Error);
}

TEST(FaultCatalogue, EveryFaultSetsItsOwnSwitchAndNoFaultSetsNone) {
    EXPECT_FALSE(leg_faults({}).any());
    // each fault alone turns the leg faulty, and two different faults never give the same switches
    // (compared whole by FaultConfig's and DataFaults' defaulted ==, so a new switch is compared too)
    std::vector<std::pair<std::string, LegFaults>> seen;
    for (const auto& f : fault_catalogue()) {
        const LegFaults lf = leg_faults({FaultSwitch{f.name, f.size ? std::optional(f.size->default_value) : std::nullopt}});
        EXPECT_TRUE(lf.any()) << f.name;
        const bool data = f.category == "data/template";
        EXPECT_EQ(lf.data.any(), data) << f.name << ": data faults live in the data path, the others in the engine";
        EXPECT_EQ(lf.engine.any(), !data) << f.name;
        for (const auto& [other, o] : seen)
            EXPECT_FALSE(o.engine == lf.engine && o.data == lf.data) << f.name << " sets the same switches as " << other;
        seen.emplace_back(f.name, lf);
    }
    // sizes reach the switch
    EXPECT_EQ(leg_faults({parse_fault_switch("rope-theta=7", "t")}).engine.rope_theta_divisor, 7);
    EXPECT_EQ(leg_faults({parse_fault_switch("boundary-early=3", "t")}).data.boundary_shift, -3);
    EXPECT_EQ(leg_faults({parse_fault_switch("boundary-late=2", "t")}).data.boundary_shift, 2);
    EXPECT_EQ(leg_faults({parse_fault_switch("bf16-truncation=8", "t")}).engine.truncated_mantissa_bits, 8);
}

TEST(FaultSwitches, TextJsonAndErrors) {
    EXPECT_EQ(fault_text(parse_fault_switch("rope-theta", "t")), "rope-theta=100");  // default size filled in
    EXPECT_EQ(fault_text(parse_fault_switch("qk-norm-skipped", "t")), "qk-norm-skipped");
    const auto list = parse_fault_list(" rope-theta=10, qk-norm-skipped ,boundary-late=2", "--faults");
    ASSERT_EQ(list.size(), 3u);
    EXPECT_EQ(faults_text(list), "rope-theta=10, qk-norm-skipped, boundary-late=2");
    EXPECT_EQ(faults_from_json(faults_to_json(list), "x"), list);
    EXPECT_EQ(faults_from_json(nlohmann::json::parse(R"(["rope-theta=10", {"name": "qk-norm-skipped"}, {"name": "boundary-late", "size": 2}])"), "x"),
              list);
    EXPECT_NE(error_of([] { parse_fault_list("nope", "--faults"); }).find("--faults: unknown fault 'nope'"), std::string::npos);
    EXPECT_NE(error_of([] { parse_fault_list("qk-norm-skipped=3", "--faults"); }).find("has no size"), std::string::npos);
    EXPECT_NE(error_of([] { parse_fault_list("rope-theta=abc", "--faults"); }).find("is not a number"), std::string::npos);
    EXPECT_NE(error_of([] { parse_fault_list("boundary-late=1.5", "--faults"); }).find("whole number"), std::string::npos);
    EXPECT_NE(error_of([] { parse_fault_list("boundary-late=0", "--faults"); }).find(">= 1"), std::string::npos);
    EXPECT_NE(error_of([] { parse_fault_list("rope-theta,rope-theta=3", "--faults"); }).find("given twice"), std::string::npos);
    EXPECT_NE(error_of([] { faults_from_json(nlohmann::json::parse("{}"), "e.json: field faults"); }).find("e.json: field faults: must be a list"),
              std::string::npos);
    EXPECT_NE(error_of([] { faults_from_json(nlohmann::json::parse(R"([{"name": "rope-theta", "sise": 3}])"), "f"); })
                  .find("unknown field 'sise'"),
              std::string::npos);
}

// The test faults (docs/thresholds.md "Injected faults") are fault switches like the catalogue's, with a
// first update, and hidden from the catalogue users see.
TEST(FaultSwitches, TestFaultsStartAtTheirUpdateAndAreHiddenFromTheCatalogue) {
    std::set<std::string> documented;
    for (const auto& f : fault_catalogue()) documented.insert(f.name);
    ASSERT_EQ(test_faults().size(), 5u);
    for (const auto& f : test_faults()) {
        EXPECT_TRUE(f.test_only) << f.name;
        EXPECT_FALSE(documented.count(f.name)) << f.name << " is listed in the catalogue";
        EXPECT_EQ(&fault_info(f.name), &f);
        EXPECT_EQ(f.name.rfind("test-", 0), 0u) << f.name;
    }
    const auto list = parse_fault_list("test-lr-scale=100@3, test-bf16-adapter@2, test-warmup-shift", "--faults");
    ASSERT_EQ(list.size(), 3u);
    EXPECT_EQ(list[0].from_update, 3);
    EXPECT_EQ(list[1].from_update, 2);
    EXPECT_EQ(list[2].from_update, 0);
    EXPECT_EQ(faults_text(list), "test-lr-scale=100@3, test-bf16-adapter@2, test-warmup-shift=1");
    EXPECT_EQ(parse_fault_list(faults_text(list), "x"), list);  // what the runner hands the engine leg
    EXPECT_EQ(faults_from_json(faults_to_json(list), "x"), list);
    EXPECT_EQ(faults_from_json(nlohmann::json::parse(R"([{"name": "test-lr-scale", "size": 100, "from_update": 3}])"), "x")[0],
              list[0]);
    // the engine leg's list: in order, sizes filled in, nothing in the engine's or the data path's switches
    const LegFaults lf = leg_faults(list);
    EXPECT_FALSE(lf.engine.any());
    EXPECT_FALSE(lf.data.any());
    EXPECT_TRUE(lf.any());
    EXPECT_EQ(lf.test, (std::vector<TestFault>{{"test-lr-scale", 100, 3}, {"test-bf16-adapter", 0, 2}, {"test-warmup-shift", 1, 0}}));
    EXPECT_EQ(leg_faults(parse_fault_list("test-residual-noise@1", "x")).test, (std::vector<TestFault>{{"test-residual-noise", 1e-5, 1}}));
    EXPECT_EQ(error_of([] { parse_fault_list("rope-theta=10@2", "--faults"); }),
              "--faults: fault 'rope-theta' acts from update 0 (@UPDATE is for the test faults)");
    EXPECT_EQ(error_of([] { parse_fault_list("test-lr-scale=2@x", "--faults"); }), "--faults: fault 'test-lr-scale': update 'x' is not a whole number");
    EXPECT_EQ(error_of([] { parse_fault_list("test-lr-scale=2@-1", "--faults"); }), "--faults: fault 'test-lr-scale': the first update must be >= 0");
    // an unknown name lists the documented faults only
    EXPECT_EQ(error_of([] { fault_info("nope"); }).find("test-"), std::string::npos);
}

TEST(FaultBanner, NamesEveryFaultyLegAndNothingForCleanRuns) {
    EXPECT_EQ(fault_banner({{"engine", ""}, {"reference", ""}}), "");
    EXPECT_EQ(fault_banner({{"engine", "rope-theta=100"}, {"reference", ""}, {"b", "qk-norm-skipped"}}),
              "FAULT INJECTED: engine: rope-theta=100; b: qk-norm-skipped");
}

// ---- the data/template faults on one record -------------------------------------------------------

TEST(DataFaults, NoFaultIsExactlyTokenizeRecord) {
    for (size_t max_len : {size_t(0), size_t(12)}) {
        const auto a = clean(max_len), b = faulty(DataFaults{}, max_len);
        EXPECT_EQ(a.ids, b.ids);
        EXPECT_EQ(a.supervised, b.supervised);
        EXPECT_EQ(a.full_text, b.full_text);
    }
}

TEST(DataFaults, ChatmlRendersTheGenericTemplate) {
    DataFaults f;
    f.chatml = true;
    const auto r = faulty(f);
    const auto c = tandem::data::tokenize_record(qwen3(), TemplateKind::ChatML, kRecord, 0);
    EXPECT_EQ(r.ids, c.ids);
    EXPECT_EQ(r.supervised, c.supervised);
    EXPECT_NE(r.ids, clean().ids);
    EXPECT_EQ(r.full_text.find("<think>"), std::string::npos);
}

TEST(DataFaults, BoundaryShiftMovesOnlyTheFirstSupervisedToken) {
    const auto c = clean();
    const auto pc = supervised_positions(c);
    for (int64_t shift : {-2, -1, 1, 2}) {
        DataFaults f;
        f.boundary_shift = shift;
        const auto r = faulty(f);
        EXPECT_EQ(r.ids, c.ids) << shift;  // the tokens are the same
        const auto p = supervised_positions(r);
        ASSERT_FALSE(p.empty());
        EXPECT_EQ(int64_t(p.front()), int64_t(pc.front()) + shift) << shift;
        EXPECT_EQ(p.back(), pc.back()) << shift;  // the end (<|im_end|>) stays
        EXPECT_EQ(int64_t(p.size()), int64_t(pc.size()) - shift);
        EXPECT_EQ(p.back() - p.front() + 1, p.size());  // contiguous
    }
    // one token early supervises the last token of the assistant header ("\n" after "assistant" or the
    // think block's last piece): a token of the prompt
    DataFaults early;
    early.boundary_shift = -1;
    const auto r = faulty(early);
    EXPECT_LT(r.begin[supervised_positions(r).front()], r.prompt_bytes);
}

TEST(DataFaults, ImEndUnsupervisedDropsOnlyTheClosingToken) {
    const auto c = clean();
    DataFaults f;
    f.im_end_unsupervised = true;
    const auto r = faulty(f);
    EXPECT_EQ(r.ids, c.ids);
    const auto pc = supervised_positions(c), p = supervised_positions(r);
    ASSERT_EQ(p.size() + 1, pc.size());
    EXPECT_EQ(c.ids[pc.back()], *qwen3().token_id("<|im_end|>"));
    EXPECT_EQ(std::vector<size_t>(pc.begin(), pc.end() - 1), p);
}

TEST(DataFaults, TruncateLeftKeepsTheLastTokens) {
    const auto full = clean();
    const size_t n = full.ids.size(), keep = n - 5;
    DataFaults f;
    f.truncate_left = true;
    const auto r = faulty(f, keep);
    ASSERT_EQ(r.ids.size(), keep);
    EXPECT_EQ(r.ids, std::vector<int32_t>(full.ids.end() - int64_t(keep), full.ids.end()));
    EXPECT_EQ(r.supervised, std::vector<uint8_t>(full.supervised.end() - int64_t(keep), full.supervised.end()));
    EXPECT_NE(r.ids, clean(keep).ids);
    // a record that fits is untouched
    const auto fits = faulty(f, n + 10);
    EXPECT_EQ(fits.ids, full.ids);
    EXPECT_EQ(fits.supervised, full.supervised);
}

TEST(DataFaults, ThinkDroppedRemovesOnlyTheEmptyThinkBlock) {
    const auto c = clean();
    DataFaults f;
    f.think_dropped = true;
    const auto r = faulty(f);
    const std::string block = "<think>\n\n</think>\n\n";
    std::string expect = c.full_text;
    const size_t at = expect.find(block);
    ASSERT_NE(at, std::string::npos);
    expect.erase(at, block.size());
    EXPECT_EQ(r.full_text, expect);
    EXPECT_EQ(r.full_text.find("<think>"), std::string::npos);
    // the answer is supervised the same: the same supervised token ids
    std::vector<int32_t> sc, sr;
    for (auto i : supervised_positions(c)) sc.push_back(c.ids[i]);
    for (auto i : supervised_positions(r)) sr.push_back(r.ids[i]);
    EXPECT_EQ(sc, sr);
    EXPECT_LT(r.ids.size(), c.ids.size());
}

// ---- the matrix's stored form and the size search ------------------------------------------------

TEST(FaultMatrix, JsonRoundTrip) {
    FaultMatrix m;
    m.reference_leg = "reference";
    m.clean_leg = "engine";
    m.clean.first_update.assign(fault_matrix_levels().size(), std::nullopt);
    m.l1_threshold = 1e-5;
    m.l4_threshold = 1e-4;
    m.eval_interval = 10;
    m.updates = 30;
    FaultRow r;
    r.fault = "rope-theta";
    r.leg = "fault-rope-theta";
    r.category = "loading/config";
    r.size = 100;
    r.expected = {"L1", "L4"};
    r.status = "finished";
    r.first_update = {0, std::nullopt, std::nullopt, 10, std::nullopt};
    r.end_update = 30;
    r.ce_leg = 11.9;
    r.ce_reference = 11.8;
    r.ce_diff_abs = 0.1;
    r.ce_diff_rel = 0.1 / 11.8;
    r.ce_diff_clean_units = 1e6;
    r.probes = {{"fault-rope-theta-s1", 1.001, {}}, {"fault-rope-theta-s2", 10, {"L1"}}};
    r.searches = {{"L1", 10, 1.001, 2}};
    r.no_effect = "every number equals the clean engine leg's";
    m.rows.push_back(r);
    const FaultMatrix back = fault_matrix_from_json(fault_matrix_to_json(m));
    EXPECT_EQ(fault_matrix_to_json(back), fault_matrix_to_json(m));
    ASSERT_NE(back.row("rope-theta"), nullptr);
    EXPECT_EQ(back.row("rope-theta")->caught_by(), (std::vector<std::string>{"L1", "L4"}));
    EXPECT_EQ(back.row("rope-theta")->first_caught(), 0);
    EXPECT_FALSE(back.clean.caught());
    EXPECT_THROW(fault_matrix_from_json(nlohmann::json::parse(R"({"rows": 3})")), tandem::Error);
}

namespace {
// A finished leg whose L1-L3 records agree with every other leg made here, with the given held-out CE
// at updates 0, 2, 4 and losses at updates 0-3.
LegData matrix_leg(const std::string& name, const std::string& implementation, double ce_shift, double loss_shift) {
    LegData l =
        tandem::test::finished_leg(name, implementation, {"model.embed_tokens.weight", "base", {4, 2}, 1, 2, 3, "ab12"}, "r0");
    l.trace.l1_ce = 11.9 + ce_shift;
    // The lr the default spec's schedule gives (the lr series is judged too: a constant lr would be a caught fault).
    for (int64_t u = 0; u < 4; ++u)
        l.trace.steps.push_back({u, 11.0 - 0.1 * static_cast<double>(u) + loss_shift, 1.5, scheduled_lr(ExperimentSpec{}, u, 4), 40, 0.2});
    for (int64_t u : {0, 2, 4}) l.trace.evals.push_back({u, 11.9 - 0.01 * static_cast<double>(u) + ce_shift});
    return l;
}
}  // namespace

TEST(FaultMatrix, AFaultThatChangedNothingHasNoEffectAndOneThatMovedTooLittleIsUncaught) {
    ExperimentSpec spec;
    spec.name = "synthetic";
    spec.model_config = "tiny";
    const std::vector<LegData> legs{matrix_leg("reference", "reference", 0, 0), matrix_leg("engine", "engine", 0, 0),
                                    matrix_leg("fault-bf16-truncation", "engine", 0, 0),
                                    // 1e-12 relative: far below the float32 error-model bound, but not the clean numbers
                                    matrix_leg("fault-dropout-mask-reused", "engine", 1.19e-11, 1e-12)};
    const FaultMatrix m = fault_matrix_of(legs, spec, "reference", "engine",
                                          {{{"bf16-truncation", 16}, "fault-bf16-truncation"},
                                           {{"dropout-mask-reused", std::nullopt}, "fault-dropout-mask-reused"}});
    ASSERT_EQ(m.rows.size(), 2u);
    EXPECT_FALSE(m.clean.caught());
    EXPECT_FALSE(m.rows[0].caught());
    EXPECT_NE(m.rows[0].no_effect, "");  // bit-identical to the clean engine leg: nothing to catch
    EXPECT_FALSE(m.rows[1].caught());
    EXPECT_EQ(m.rows[1].no_effect, "");  // it moved the numbers: uncaught, not "no effect"
    // The report counts only the faults that had an effect.
    const auto tables = fault_matrix_tables(m);
    ASSERT_FALSE(tables.empty());
    ASSERT_FALSE(tables[0].notes.empty());
    EXPECT_EQ(tables[0].notes[0].rfind("0 of 1 faults caught by at least one level (1 not caught); 0 caught by every level docs/faults.md expects; "
                                       "not counted: 1 had no effect", 0), 0u)
        << tables[0].notes[0];
}

TEST(SizeSearch, BisectsBetweenTheWeakestSizeAndTheDetectedOne) {
    // a level that detects sizes >= 37 (of 1..100, whole numbers): the search finds 37 exactly
    const FaultSize sz{"tokens", 100, 1, true, false};
    SearchState s{"L4", 100, std::nullopt, false, 0, false};
    std::vector<double> probed;
    while (auto next = next_probe_size(s, sz, 6)) {
        probed.push_back(*next);
        record_probe(s, sz, *next, *next >= 37, 6);
    }
    EXPECT_EQ(probed.front(), 1);  // the weakest size first
    EXPECT_EQ(s.detected, 37);
    ASSERT_TRUE(s.missed);
    EXPECT_GE(*s.missed, 35);  // 1, 50, 25, 37, 31, 34, 35: six midpoints bracket it to (35, 37]
    EXPECT_EQ(s.probes, 7);
    EXPECT_EQ(probed, (std::vector<double>{1, 50, 25, 37, 31, 34, 35}));
    // a log-scale size: geometric midpoints, 6 after the weakest, the bracket shrinks by 2^(1/2^6) in log
    const FaultSize lg{"x", 100, 1.001, false, true};
    SearchState t{"L1", 100, std::nullopt, false, 0, false};
    int n = 0;
    while (auto next = next_probe_size(t, lg, 6)) {
        ++n;
        record_probe(t, lg, *next, *next >= 3.0, 6);
    }
    EXPECT_EQ(n, 7);
    ASSERT_TRUE(t.missed);
    EXPECT_LT(*t.missed, 3.0);
    EXPECT_GE(t.detected, 3.0);
    EXPECT_LT(std::log(t.detected / *t.missed), std::log(100 / 1.001) / 60);
    // detected at the weakest size: done after one probe
    SearchState u{"L1", 100, std::nullopt, false, 0, false};
    auto first = next_probe_size(u, lg, 6);
    ASSERT_TRUE(first);
    record_probe(u, lg, *first, true, 6);
    EXPECT_TRUE(u.done);
    EXPECT_FALSE(next_probe_size(u, lg, 6));
}
