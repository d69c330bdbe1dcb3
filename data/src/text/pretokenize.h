#pragma once
// The Qwen3 (Qwen2) pre-tokenizer split, hand-written (internal to tandem_text). It reproduces the
// Oniguruma regex of tokenizer.json, with the "Isolated" split behaviour:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Each alternative is a small function below; the first that matches at a position wins, as in a
// backtracking regex engine. docs/data-text.md explains each one's backtracking outcome.
#include "unicode.h"

#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::data::text {

// The regex source this splitter implements; the loader refuses a tokenizer.json with another one.
inline constexpr std::string_view kQwenSplitPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Splits chars[0..n) into consecutive pieces [begin, end) (character indices) covering everything.
void split_pretokens(const AlignedChar* chars, size_t n, std::vector<std::pair<size_t, size_t>>& pieces);
// The same on text that is all ASCII (bytes < 0x80: NFC leaves it as it is, byte = character).
void split_pretokens_ascii(std::string_view ascii, std::vector<std::pair<size_t, size_t>>& pieces);

}  // namespace tandem::data::text
