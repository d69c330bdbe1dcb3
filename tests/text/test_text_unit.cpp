// Unit tests for pieces of tandem's tokenizer and templates. The real check is the comparison with
// HuggingFace (test_tokenizer_hf.py, test_template_hf.py); these pin behaviour that must not drift.
#include "tandem/data/chat_template.h"
#include "tandem/data/tokenizer.h"
#include "tandem/error.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace {

std::filesystem::path tokenizer_dir() {
    if (const char* env = std::getenv("TANDEM_ASSETS")) return std::filesystem::path(env) / "assets/qwen3-tokenizer";
    return std::filesystem::path(TANDEM_TEXT_TEST_SOURCE_DIR) / "../shared/assets/qwen3-tokenizer";
}

const tandem::data::Tokenizer& tok() {
    static const auto t = tandem::data::Tokenizer::load(tokenizer_dir());
    return t;
}

TEST(Tokenizer, SpecialTokensHaveTheirIds) {
    EXPECT_EQ(tok().token_id("<|im_start|>"), 151644);
    EXPECT_EQ(tok().token_id("<|im_end|>"), 151645);
    EXPECT_EQ(tok().token_id("<think>"), 151667);
    EXPECT_EQ(tok().vocab_size(), 151669u);
    EXPECT_FALSE(tok().token_id("<|no such token|>").has_value());
}

TEST(Tokenizer, ByteLevelAlphabetMapsSpaceAndNewline) {
    // GPT-2's byte map: ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ'.
    auto ids = tok().encode(" \n");
    ASSERT_FALSE(ids.empty());
    std::string all;
    for (int32_t id : ids) all += tok().token_text(id);
    EXPECT_EQ(all, "\xC4\xA0\xC4\x8A");
}

TEST(Tokenizer, DecodeRoundTripsNfcText) {
    for (std::string text : {"Hello, world!", "It's 2026 — naïve café\n\n  x", "中文 😀 👨‍👩‍👧", "<|im_start|>user\nhi<|im_end|>\n"})
        EXPECT_EQ(tok().decode(tok().encode(text)), text) << text;
}

TEST(Tokenizer, NfcComposesAndOffsetsPointIntoTheOriginal) {
    // "e" + COMBINING ACUTE composes to "é": one token, aligned with the "e" only (HF's alignment).
    const std::string text = "e\xCC\x81";
    auto toks = tok().encode_with_offsets(text);
    ASSERT_EQ(toks.size(), 1u);
    EXPECT_EQ(tok().decode({toks[0].id}), "\xC3\xA9");
    EXPECT_EQ(toks[0].begin, 0u);
    EXPECT_EQ(toks[0].end, 1u);
}

TEST(Tokenizer, DigitsAreSplitOneByOne) {
    auto ids = tok().encode("2026");
    EXPECT_EQ(ids.size(), 4u);
}

TEST(Tokenizer, PartialSpecialTokenIsPlainText) {
    auto ids = tok().encode("<|im_end");
    for (int32_t id : ids) EXPECT_NE(id, 151645);
}

TEST(Tokenizer, InvalidUtf8IsAnError) {
    EXPECT_THROW(tok().encode(std::string("a\xC3", 2)), tandem::Error);
    EXPECT_THROW(tok().encode(std::string("\xED\xA0\x80", 3)), tandem::Error);  // a surrogate
}

// A tokenizer.json describing another pipeline is refused with the field named, never tokenised differently.
TEST(Tokenizer, LoadRefusesOtherPipelinesAndBadJson) {
    const auto dir = std::filesystem::temp_directory_path() / ("tandem-text-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto load_with = [&](const std::string& json) {
        std::ofstream(dir / "tokenizer.json") << json;
        try {
            tandem::data::Tokenizer::load(dir);
        } catch (const tandem::Error& e) {
            return std::string(e.what());
        }
        return std::string("loaded");
    };
    EXPECT_NE(load_with("{\"model\": [1, 2").find("not valid JSON"), std::string::npos);
    EXPECT_NE(load_with("{\"normalizer\": {\"type\": \"NFKC\"}}").find("normalizer"), std::string::npos);
    EXPECT_NE(load_with("{\"normalizer\": {\"type\": \"NFC\"}}").find("pre_tokenizer"), std::string::npos);
    std::filesystem::remove_all(dir);
    EXPECT_THROW(tandem::data::Tokenizer::load(dir), tandem::Error);  // no file at all
}

TEST(Template, ChatMLIsTheGenericLayout) {
    using namespace tandem::data;
    std::vector<Message> m{{"user", "hi", std::nullopt, {}}, {"assistant", "yo", std::nullopt, {}}};
    EXPECT_EQ(render_chat(TemplateKind::ChatML, m, {}), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n");
    EXPECT_EQ(render_chat(TemplateKind::Qwen3, m, {}),
              "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nyo<|im_end|>\n");
    EXPECT_THROW(render_chat(TemplateKind::Qwen3, {}, {}), tandem::Error);
    EXPECT_THROW(parse_template_kind("jinja"), tandem::Error);
}

}  // namespace
