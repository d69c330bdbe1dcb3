#pragma once
// A small strict JSON reader for tokenizer.json (internal to tandem_text). The file is 11 MB,
// almost all of it model.vocab and model.merges; a generic DOM parser spends most of the load
// time building 300k tiny json values that are thrown away. This reader hands those two sections
// straight to the caller and builds an nlohmann::json tree only for the small rest.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::data::text {

struct TokenizerJsonModel {
    std::vector<std::pair<std::string, int32_t>> vocab;            // model.vocab, in file order
    std::vector<std::pair<std::string, std::string>> merges;       // model.merges ([a, b] or "a b")
};

// Parses `text`; model.vocab and model.merges go into `model` and appear as empty containers in
// the returned tree. Throws tandem::Error("<where>: ...") naming the byte offset on bad JSON.
nlohmann::json parse_tokenizer_json(std::string_view text, TokenizerJsonModel& model, const std::string& where);

}  // namespace tandem::data::text
