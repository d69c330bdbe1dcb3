#pragma once
// tandem's own Qwen3 tokenizer: byte-level BPE read from a HuggingFace tokenizer.json, written
// independently of the HuggingFace code (docs/data-text.md). The pipeline, in the order
// tokenizer.json specifies it:
//   1. added tokens (<|im_start|>, <think>, ...) are matched in the raw text first (leftmost-longest);
//   2. every piece between them is NFC-normalised;
//   3. split by the pre-tokenizer regex (contractions, letters, single digits, punctuation, spaces);
//   4. each piece's UTF-8 bytes are mapped to the byte-level alphabet and merged by BPE rank.
//
// Offsets (Token::begin/end) are BYTE offsets into the UTF-8 text passed to encode, [begin, end).
// They follow HuggingFace's alignment exactly: a token always covers whole characters of the
// original text (a token holding only part of a multi-byte character, e.g. half an emoji, spans the
// whole character, so two tokens can share one span), and a character that NFC composed into its
// predecessor is not covered by any token. Converting these to character indices gives
// tokenizers' Encoding.offsets.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

struct Token {
    int32_t id = 0;
    size_t begin = 0;  // byte offset into the input text, inclusive
    size_t end = 0;    // byte offset into the input text, exclusive
};

struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
};

class Tokenizer {
public:
    // `dir` holds tokenizer.json and (optionally) tokenizer_config.json. Throws tandem::Error naming
    // the file and field on anything it cannot use (e.g. a normaliser other than NFC).
    static Tokenizer load(const std::filesystem::path& dir);
    // The same from the text of a tokenizer.json (`where` names it in errors); no chat template,
    // directory() empty. Only tandem::Error escapes, whatever the bytes (fuzzed: fuzz/).
    static Tokenizer from_json_text(std::string_view tokenizer_json, const std::string& where);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Added/special tokens in the text are recognised (as HuggingFace does with
    // split_special_tokens=False). Invalid UTF-8 throws tandem::Error. Thread-safe.
    std::vector<int32_t> encode(std::string_view text) const;
    std::vector<Token> encode_with_offsets(std::string_view text) const;

    // Concatenated bytes of the tokens (byte-level decoded), special tokens included.
    // Ill-formed UTF-8 that results from decoding a partial sequence is kept as raw bytes.
    std::string decode(const std::vector<int32_t>& ids) const;

    std::string token_text(int32_t id) const;                        // vocab string (byte-level form)
    std::optional<int32_t> token_id(std::string_view token) const;   // e.g. "<|im_end|>"
    size_t vocab_size() const;                                       // highest id + 1 (added tokens included)
    const std::vector<AddedToken>& added_tokens() const;

    const std::filesystem::path& directory() const;

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::data
