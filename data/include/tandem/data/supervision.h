#pragma once
// Supervision and truncation of one record (docs/spec.md §Supervision). The engine leg uses this; the reference leg
// implements the same rules with HuggingFace's tokenizer and template (docs/data-corpus.md).
//
//   prompt_text = template(messages without the final assistant turn,
//                          add_generation_prompt = true, enable_thinking = false)
//   full_text   = template(all messages, add_generation_prompt = false)
//   full_text must start with prompt_text, else the record is rejected (RecordRejected).
//   ids         = tokenize(full_text), special tokens recognised
//   supervised  = tokens whose span begins at or after len(prompt_text), up to and including the first
//                 <|im_end|> at or after that point; the newline after it is not supervised
//   truncation  = keep the first max_len tokens (right truncation)
//
// Unit of len(prompt_text): UTF-8 BYTES here; HuggingFace reports character offsets. The two agree on
// every token because prompt_text is a complete UTF-8 string, so its end is a character boundary: a
// token starts at byte >= len_bytes(prompt) exactly when it starts at character >= len_chars(prompt)
// (a token that starts inside a multi-byte character is given that character's offset by HF).
#include "tandem/data/chat_template.h"
#include "tandem/data/tokenizer.h"
#include "tandem/error.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::data {

// A record that cannot be trained on (prefix check failed, no <|im_end|> after the prompt, no
// supervised token within max_len, ...). The message is the rejection reason shown in accounting.
class RecordRejected : public tandem::Error {
public:
    explicit RecordRejected(const std::string& reason) : tandem::Error(reason) {}
};

struct RenderedRecord {
    std::string prompt_text;  // conversation without the final assistant turn + generation prompt
    std::string full_text;    // whole conversation
};

// Renders prompt_text and full_text. The last message must be the assistant turn (RecordRejected
// otherwise). Does NOT check the prefix; tokenize_record does.
RenderedRecord render_record(TemplateKind kind, const std::vector<Message>& messages);

struct TokenizedRecord {
    std::string prompt_text;
    std::string full_text;
    size_t prompt_bytes = 0;         // len(prompt_text) in UTF-8 bytes

    // Kept tokens only (size == truncated_length).
    std::vector<int32_t> ids;
    std::vector<uint8_t> supervised;  // 1 = supervised, 0 = not
    std::vector<size_t> begin;        // byte offset of each token's span in full_text
    std::vector<size_t> end;          // one past the last byte

    size_t full_length = 0;       // tokens of full_text before truncation
    size_t truncated_length = 0;  // min(full_length, max_len): the truncation point
    size_t boundary = 0;          // index of the first supervised token (in the untruncated sequence)
    size_t supervised_end = 0;    // one past the last supervised token (the <|im_end|>), untruncated
    size_t supervised_full = 0;   // supervised tokens before truncation = supervised_end - boundary
    size_t supervised_count = 0;  // supervised tokens kept after truncation

    bool truncated() const { return truncated_length < full_length; }
};

// Renders, checks the prefix, tokenizes with offsets, marks supervision and truncates to max_len
// (max_len == 0 means no truncation). Throws RecordRejected for a record that breaks the rules above
// (but NOT for zero supervised tokens after truncation: callers decide; see corpus build).
TokenizedRecord tokenize_record(const Tokenizer& tokenizer, TemplateKind kind,
                                const std::vector<Message>& messages, size_t max_len);
// The same from texts already rendered (tokenize_record = render_record + this): checks the prefix,
// tokenizes, marks supervision, truncates.
TokenizedRecord tokenize_rendered(const Tokenizer& tokenizer, RenderedRecord rendered, size_t max_len);

// The supervision rule alone, on given token spans (for tests and for ids that came from elsewhere):
// returns {boundary, supervised_end} in token indices of the untruncated sequence. `im_end_id` is
// the id of <|im_end|>. Throws RecordRejected when no token starts at/after prompt_bytes or no
// <|im_end|> follows.
struct SupervisionSpan {
    size_t boundary = 0;
    size_t end = 0;  // one past the <|im_end|>
};
SupervisionSpan supervision_span(const std::vector<int32_t>& ids, const std::vector<size_t>& begin,
                                 size_t prompt_bytes, int32_t im_end_id);

}  // namespace tandem::data
