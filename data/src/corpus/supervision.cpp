// Supervision and truncation of one record (docs/spec.md §Supervision; rules in supervision.h).
#include "tandem/data/supervision.h"

#include <algorithm>

namespace tandem::data {

RenderedRecord render_record(TemplateKind kind, const std::vector<Message>& messages) {
    if (messages.size() < 2) throw RecordRejected("fewer than two messages");
    if (messages.back().role != "assistant") throw RecordRejected("the last message is not the assistant turn");
    const std::vector<Message> prompt_messages(messages.begin(), messages.end() - 1);
    RenderedRecord r;
    r.prompt_text = render_chat(kind, prompt_messages, RenderOptions{true, false});
    r.full_text = render_chat(kind, messages, RenderOptions{false, std::nullopt});
    return r;
}

SupervisionSpan supervision_span(const std::vector<int32_t>& ids, const std::vector<size_t>& begin,
                                 size_t prompt_bytes, int32_t im_end_id) {
    // Offsets never decrease, so the supervised run starts at the first token at/after the prompt.
    SupervisionSpan span;
    span.boundary = ids.size();
    for (size_t i = 0; i < ids.size(); ++i) {
        if (begin[i] >= prompt_bytes) {
            span.boundary = i;
            break;
        }
    }
    if (span.boundary == ids.size()) throw RecordRejected("no token starts after the prompt");
    for (size_t i = span.boundary; i < ids.size(); ++i) {
        if (ids[i] == im_end_id) {
            span.end = i + 1;
            return span;
        }
    }
    throw RecordRejected("no <|im_end|> after the prompt");
}

TokenizedRecord tokenize_record(const Tokenizer& tokenizer, TemplateKind kind, const std::vector<Message>& messages,
                                size_t max_len) {
    return tokenize_rendered(tokenizer, render_record(kind, messages), max_len);
}

TokenizedRecord tokenize_rendered(const Tokenizer& tokenizer, RenderedRecord rendered, size_t max_len) {
    if (rendered.full_text.compare(0, rendered.prompt_text.size(), rendered.prompt_text) != 0)
        throw RecordRejected("full_text does not start with prompt_text");
    const auto im_end = tokenizer.token_id("<|im_end|>");
    if (!im_end) throw Error(tokenizer.directory().string() + ": the tokenizer has no <|im_end|> token");

    TokenizedRecord r;
    r.prompt_text = std::move(rendered.prompt_text);
    r.full_text = std::move(rendered.full_text);
    r.prompt_bytes = r.prompt_text.size();

    const std::vector<Token> tokens = tokenizer.encode_with_offsets(r.full_text);
    r.full_length = tokens.size();
    r.ids.reserve(tokens.size());
    r.begin.reserve(tokens.size());
    r.end.reserve(tokens.size());
    for (const Token& t : tokens) {
        r.ids.push_back(t.id);
        r.begin.push_back(t.begin);
        r.end.push_back(t.end);
    }
    const SupervisionSpan span = supervision_span(r.ids, r.begin, r.prompt_bytes, *im_end);
    r.boundary = span.boundary;
    r.supervised_end = span.end;
    r.supervised_full = span.end - span.boundary;

    r.truncated_length = (max_len == 0) ? r.full_length : std::min(r.full_length, max_len);
    r.ids.resize(r.truncated_length);
    r.begin.resize(r.truncated_length);
    r.end.resize(r.truncated_length);
    r.supervised.assign(r.truncated_length, 0);
    for (size_t i = span.boundary; i < std::min(span.end, r.truncated_length); ++i) r.supervised[i] = 1;
    r.supervised_count = span.end <= r.truncated_length ? r.supervised_full
                         : span.boundary < r.truncated_length ? r.truncated_length - span.boundary
                                                               : 0;
    return r;
}

}  // namespace tandem::data
