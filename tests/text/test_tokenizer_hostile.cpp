// Hostile tokenizer.json files (docs/fuzzing.md: found by the bad-input suite tests/cli and by the
// fuzz target fuzz/fuzz_tokenizer.cpp): each must be one tandem::Error naming the file and what is
// wrong -- before, an invalid UTF-8 vocab string escaped as nlohmann's type_error ("internal
// error"), a negative added-token id segfaulted, and an id of 2^31-1 threw std::length_error.
// The base is the fuzz seed fuzz/corpus/tokenizer/mini_qwen3.json (the Qwen3 pipeline, the 256
// byte-level symbols, 120 merges, 5 added tokens).
#include "tandem/atomic_file.h"
#include "tandem/data/tokenizer.h"
#include "tandem/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

using tandem::data::Tokenizer;
using nlohmann::json;

namespace {

std::string seed() { return tandem::read_file(std::string(TANDEM_TEST_SOURCE_DIR) + "/fuzz/corpus/tokenizer/mini_qwen3.json"); }

std::string error_of(const std::string& text) {
    try {
        Tokenizer::from_json_text(text, "t/tokenizer.json");
    } catch (const tandem::Error& e) {
        return e.what();
    }
    return "";
}

std::string with(const std::function<void(json&)>& change) {
    json j = json::parse(seed());
    change(j);
    return j.dump();
}

}  // namespace

TEST(TokenizerHostile, TheSeedLoadsAndRoundTrips) {
    const Tokenizer t = Tokenizer::from_json_text(seed(), "seed");
    for (const std::string s : {"Hello world 123", "<|im_start|>user\nhi<|im_end|>", "\xc3\xa9t\xc3\xa9"})
        EXPECT_EQ(t.decode(t.encode(s)), s);
}

TEST(TokenizerHostile, InvalidUtf8IsNamedNotAnInternalError) {
    // The fuzzer's find (fuzz/regressions/tokenizer/invalid_utf8_in_vocab.json): a raw 0xff byte
    // inside a vocab key.
    std::string text = seed();
    const size_t at = text.find("\"!\"");
    ASSERT_NE(at, std::string::npos);
    text.insert(at + 1, "\xff");
    EXPECT_EQ(error_of(text), "t/tokenizer.json: not valid UTF-8 at byte " + std::to_string(at + 1));
    EXPECT_EQ(error_of(tandem::read_file(std::string(TANDEM_TEST_SOURCE_DIR) +
                                         "/fuzz/regressions/tokenizer/invalid_utf8_in_vocab.json"))
                  .rfind("t/tokenizer.json: not valid UTF-8 at byte ", 0),
              0u);
}

TEST(TokenizerHostile, AddedTokensAreValidated) {
    EXPECT_EQ(error_of(with([](json& j) { j["added_tokens"][0]["id"] = -1; })),
              "t/tokenizer.json: added_tokens[0]: field 'id' must be an integer in [0, 2097152)");
    EXPECT_EQ(error_of(with([](json& j) { j["added_tokens"][0]["id"] = "x"; })),
              "t/tokenizer.json: added_tokens[0]: field 'id' must be an integer in [0, 2097152)");
    EXPECT_EQ(error_of(with([](json& j) { j["added_tokens"][1].erase("content"); })),
              "t/tokenizer.json: added_tokens[1]: field 'content' must be a string");
    EXPECT_EQ(error_of(with([](json& j) { j["added_tokens"] = json{{"id", 5}}; })),
              "t/tokenizer.json: field 'added_tokens' must be a list of {id, content, ...} objects");
    EXPECT_EQ(error_of(with([](json& j) { j["added_tokens"][1]["id"] = j["added_tokens"][0]["id"]; })),
              "t/tokenizer.json added token \"<|im_start|>\": its id or content repeats added token \"<|endoftext|>\"");
    EXPECT_EQ(error_of(with([](json& j) { j["added_tokens"][0]["id"] = 3; })),
              "t/tokenizer.json added token \"<|endoftext|>\": id 3 is the vocab entry \"$\"");
}

TEST(TokenizerHostile, IdsAreBoundedAndUnique) {
    EXPECT_EQ(error_of(with([](json& j) { j["model"]["vocab"]["zz"] = 2147483647; })),
              "t/tokenizer.json: model.vocab entry \"zz\" has id 2147483647, beyond the limit of 2097152 ids");
    EXPECT_EQ(error_of(with([](json& j) { j["model"]["vocab"]["zz"] = 1000000000000LL; })).rfind(
                  "t/tokenizer.json: not valid JSON at byte", 0),
              0u);
    EXPECT_EQ(error_of(with([](json& j) { j["model"]["vocab"]["zz"] = 5; })),
              "t/tokenizer.json: model.vocab id 5 is given to both \"&\" and \"zz\"");
    EXPECT_EQ(error_of(with([](json& j) { j["model"]["dropout"] = "0.1"; })),
              "t/tokenizer.json model: BPE dropout \"0.1\" is not supported");
}

TEST(TokenizerHostile, DeepNestingIsRefusedNotAStackOverflow) {
    std::string deep = seed();
    deep.insert(deep.size() - 1, ",\"x\":" + std::string(100000, '[') + std::string(100000, ']'));
    EXPECT_NE(error_of(deep).find("nested deeper than 256 levels"), std::string::npos);
    EXPECT_EQ(error_of("[]"), "t/tokenizer.json: must be a JSON object (a HuggingFace tokenizer.json)");
    EXPECT_NE(error_of("").find("t/tokenizer.json: not valid JSON"), std::string::npos);
}
