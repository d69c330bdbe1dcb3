#pragma once
// The shipped Qwen3 tokenizer (../shared, as CI lays it out) and a one-turn record, for the suites
// that tokenize real records (tests/ is on every suite's include path).
#include <filesystem>
#include <string>
#include <vector>

#include "tandem/data/chat_template.h"
#include "tandem/data/tokenizer.h"

namespace tandem::test {

inline const data::Tokenizer& qwen3_tokenizer() {
    static const data::Tokenizer tok = data::Tokenizer::load(std::filesystem::path(TANDEM_TEST_SOURCE_DIR) / ".." / "shared" /
                                                             "assets" / "qwen3-tokenizer");
    return tok;
}

// A user question and the assistant's answer.
inline std::vector<data::Message> qa(const std::string& question, const std::string& answer) {
    std::vector<data::Message> m(2);
    m[0].role = "user";
    m[0].content = question;
    m[1].role = "assistant";
    m[1].content = answer;
    return m;
}

}  // namespace tandem::test
