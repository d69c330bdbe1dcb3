#pragma once
// Compares two tokenisations of the same record and points at the first mismatch (used by
// `tandem tokens diff` and by the workbench's token/template diff view). Pure logic, no I/O.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::data {

struct TokenSequence {
    std::string label;                 // "tandem", "reference", "qwen3", "chatml", "max_len 256", ...
    std::vector<int32_t> ids;
    std::vector<uint8_t> supervised;   // empty when unknown (then supervision is not compared)
    std::vector<std::string> pieces;   // optional: the text of each token, for display
};

struct TokenDiff {
    bool identical = true;
    // First index where the ids differ, or the supervision flags differ (both known), or where one
    // sequence ends and the other goes on. Empty when identical.
    std::optional<size_t> first_mismatch;
    std::string what;                  // "id", "supervision", "length" (empty when identical)
    size_t length_a = 0, length_b = 0;
    size_t common_prefix = 0;          // tokens equal before the first mismatch
    // Window of token indices [window_begin, window_end) around the mismatch (clamped to the longer
    // sequence); the whole short range when identical.
    size_t window_begin = 0, window_end = 0;
    size_t id_mismatches = 0;          // positions < min(length) whose ids differ (a count, for summaries)
    // Every position < min(length) whose ids (or, both known, supervision flags) differ, in order:
    // what a side-by-side view marks.
    std::vector<size_t> mismatch_positions;
};

TokenDiff diff_tokens(const TokenSequence& a, const TokenSequence& b, size_t window = 8);

}  // namespace tandem::data
