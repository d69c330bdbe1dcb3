#pragma once
// Unicode pieces of the tokenizer (internal to tandem_text): UTF-8, the character classes of the
// pre-tokenizer regex, and NFC with the alignment HuggingFace tokenizers keeps (see unicode.cpp).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data::text {

// Decodes `s`; throws tandem::Error naming the byte offset on ill-formed UTF-8.
// `byte_offsets` receives the starting byte of every code point, plus s.size() at the end.
void decode_utf8(std::string_view s, std::vector<char32_t>& cps, std::vector<uint32_t>& byte_offsets);
void append_utf8(std::string& out, char32_t cp);
// Byte offset of the first byte that does not start a well-formed UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are ill-formed); s.size() when all of `s` is valid.
size_t first_invalid_utf8(std::string_view s);

enum class CharClass : uint8_t { Other = 0, Letter = 1, Number = 2, Space = 3 };
CharClass char_class(char32_t cp);
// char_class of the 128 ASCII characters, as one table (initialised on first use).
const std::array<CharClass, 128>& ascii_char_classes();
uint8_t combining_class(char32_t cp);

// One character of the normalised text and the range of ORIGINAL bytes it is aligned with.
struct AlignedChar {
    char32_t cp;
    uint32_t orig_begin;
    uint32_t orig_end;
};

// NFC of `cps` (whose characters start at byte_offsets[i] of the original, byte_offsets has one extra
// entry for the end), with HuggingFace's alignment: each output character is aligned with the
// original character at the same position of the (composition-aware) walk, so a combining mark that
// composes into its base is aligned with nothing and the composite keeps the base's range only.
// Appends to `out`.
void nfc_aligned(const char32_t* cps, const uint32_t* byte_offsets, size_t n, std::vector<AlignedChar>& out);

// True when NFC cannot change this text (no character that decomposes, combines or composes).
bool is_nfc_quick(const char32_t* cps, size_t n);

}  // namespace tandem::data::text
