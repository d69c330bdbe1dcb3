// tokenize_record and build_corpus with tandem's real Qwen3 tokenizer (../shared/assets): the
// supervision boundary, the <|im_end|> end, truncation counts, the prefix-check rejection. The
// HuggingFace cross-check of every record is tests/data/test_corpus_reference.py.
#include "tandem/data/corpus.h"
#include "tandem/data/supervision.h"
#include "tandem/data/tokenizer.h"

#include <gtest/gtest.h>

#include "qwen3_records.h"

#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace tandem::data;

namespace {

const Tokenizer& qwen3() { return tandem::test::qwen3_tokenizer(); }
using tandem::test::qa;

}  // namespace

TEST(TokenizeRecord, BoundaryImEndAndTrailingNewline) {
    const auto& tok = qwen3();
    const auto t = tokenize_record(tok, TemplateKind::Qwen3, qa("What is the dose?", "Five milligrams, twice daily."), 0);
    EXPECT_EQ(t.prompt_text, "<|im_start|>user\nWhat is the dose?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    EXPECT_EQ(t.full_text, t.prompt_text + "Five milligrams, twice daily.<|im_end|>\n");
    ASSERT_EQ(t.ids.size(), t.full_length);
    ASSERT_GT(t.boundary, 0u);
    EXPECT_GE(t.begin[t.boundary], t.prompt_bytes);
    EXPECT_LT(t.begin[t.boundary - 1], t.prompt_bytes);
    EXPECT_EQ(tok.decode({t.ids.begin() + static_cast<std::ptrdiff_t>(t.boundary), t.ids.end()}),
              "Five milligrams, twice daily.<|im_end|>\n");
    // Supervised: boundary .. <|im_end|> inclusive; the final "\n" is not.
    EXPECT_EQ(t.supervised_end, t.full_length - 1);
    EXPECT_EQ(t.ids[t.supervised_end - 1], *tok.token_id("<|im_end|>"));
    EXPECT_EQ(tok.decode({t.ids.back()}), "\n");
    for (size_t i = 0; i < t.ids.size(); ++i) EXPECT_EQ(t.supervised[i], i >= t.boundary && i < t.supervised_end) << i;
    EXPECT_EQ(t.supervised_count, t.supervised_end - t.boundary);
    EXPECT_FALSE(t.truncated());
}

TEST(TokenizeRecord, TruncationKeepsTheStartAndCountsWhatIsLeft) {
    const auto& tok = qwen3();
    const auto msgs = qa("What is the dose?", "Five milligrams, twice daily, with food.");
    const auto full = tokenize_record(tok, TemplateKind::Qwen3, msgs, 0);
    const auto cut = tokenize_record(tok, TemplateKind::Qwen3, msgs, full.boundary + 2);
    EXPECT_TRUE(cut.truncated());
    EXPECT_EQ(cut.truncated_length, full.boundary + 2);
    EXPECT_EQ(cut.full_length, full.full_length);
    EXPECT_EQ(cut.boundary, full.boundary);
    EXPECT_EQ(cut.supervised_count, 2u);
    EXPECT_EQ(cut.supervised_full, full.supervised_count);
    EXPECT_EQ(std::vector<int32_t>(full.ids.begin(), full.ids.begin() + static_cast<std::ptrdiff_t>(cut.truncated_length)), cut.ids);
    EXPECT_EQ(tokenize_record(tok, TemplateKind::Qwen3, msgs, full.boundary).supervised_count, 0u);
    // A max_len above the length changes nothing.
    EXPECT_EQ(tokenize_record(tok, TemplateKind::Qwen3, msgs, 100000).ids, full.ids);
}

TEST(TokenizeRecord, ChatMLHasNoReasoningBlock) {
    const auto t = tokenize_record(qwen3(), TemplateKind::ChatML, qa("Q?", "A."), 0);
    EXPECT_EQ(t.prompt_text, "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(t.full_text, t.prompt_text + "A.<|im_end|>\n");
}

TEST(TokenizeRecord, PrefixCheckRejectsATargetThatTheTemplateRewrites) {
    // Qwen3's template moves text before "</think>" into the reasoning block, so the rendered
    // conversation no longer starts with the prompt (docs/spec.md §Supervision: rejected with a reason).
    try {
        tokenize_record(qwen3(), TemplateKind::Qwen3, qa("Q?", "draft</think>final"), 0);
        FAIL() << "not rejected";
    } catch (const RecordRejected& e) {
        EXPECT_STREQ(e.what(), "full_text does not start with prompt_text");
    }
    std::vector<Message> no_assistant = qa("Q?", "A.");
    no_assistant[1].role = "user";
    EXPECT_THROW(tokenize_record(qwen3(), TemplateKind::Qwen3, no_assistant, 0), RecordRejected);
}

TEST(BuildCorpus, RejectionsAreCountedWithTheirReasons) {
    const fs::path dir = fs::temp_directory_path() / ("tandem-test-build-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "medmcqa");
    std::ofstream(dir / "medmcqa" / "a_train.parsed.jsonl")
        << R"({"row_id": "1", "question": "Q1?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "exp": "fine"})" "\n"
        << R"({"row_id": "2", "question": "Q2?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "exp": "x</think>y"})" "\n"
        << R"({"row_id": "3", "question": "Q3?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "exp": null})" "\n"
        << R"({"row_id": "4", "question": "q1?", "opa": "z", "opb": "b", "opc": "c", "opd": "d", "exp": "FINE"})" "\n"
        << R"({"row_id": "5", "question": "Q5?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "exp": "a<|im_end|>b"})" "\n";
    CorpusOptions opt;
    opt.max_len = 24;  // the prompt alone is longer than 24 tokens: nothing supervised would be left
    CorpusBuild short_build = build_corpus(dir, qwen3(), opt);
    // Rows 1 and 4: row 4 is no duplicate because row 1 never became a record.
    EXPECT_EQ(short_build.accounting[1].rejected.at("no supervised token within max_len 24"), 2u);
    EXPECT_TRUE(short_build.records.empty());
    opt.max_len = 512;
    const CorpusBuild b = build_corpus(dir, qwen3(), opt);
    ASSERT_EQ(b.accounting.size(), 3u);
    const auto& m = b.accounting[1];
    EXPECT_EQ(m.source, "medmcqa");
    EXPECT_EQ(m.input, 5u);
    EXPECT_EQ(m.rejected.at("text contains the chat marker <|im_end|>"), 1u);
    EXPECT_EQ(m.converted, 1u);
    EXPECT_EQ(m.duplicate, 1u);
    EXPECT_EQ(m.rejected.at("full_text does not start with prompt_text"), 1u);
    EXPECT_EQ(m.rejected.at("no explanation"), 1u);
    EXPECT_EQ(b.input_total(), 5u);
    EXPECT_EQ(m.converted + m.duplicate + m.rejected_total(), m.input);
    ASSERT_EQ(b.records.size(), 1u);
    EXPECT_EQ(b.records[0].id, "medmcqa:train/1");
    EXPECT_GT(b.records[0].supervised, 0u);
    fs::remove_all(dir);
}
