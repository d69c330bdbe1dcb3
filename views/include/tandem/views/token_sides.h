#pragma once
// The two sides of the token diff view, widget-free: one record's token ids as a leg recorded them
// (its L3 check) or as tandem's tokenizer renders it with a given chat template, with the text of
// every token for display, the supervision span and the truncation point. The comparison itself is
// data/'s diff_tokens (the same logic as `tandem tokens diff`).
#include "tandem/data/token_diff.h"
#include "tandem/views/run_source.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::data {
class Tokenizer;
struct Message;
enum class TemplateKind;
}  // namespace tandem::data

namespace tandem::views {

struct TokenSide {
    std::string label;
    std::vector<std::int32_t> ids;          // after truncation
    std::vector<std::string> pieces;        // UTF-8 text of each token (may be a partial character)
    std::int64_t boundary = -1;             // first supervised token (untruncated index), -1 none
    std::int64_t supervised_end = -1;       // one past the last supervised token kept
    std::optional<std::int64_t> truncated_at;  // the kept length when the record was truncated
    std::int64_t full_length = 0;
    bool supervised(std::size_t i) const {
        return boundary >= 0 && static_cast<std::int64_t>(i) >= boundary && static_cast<std::int64_t>(i) < supervised_end;
    }
};

// `tokenizer` may be null: pieces are then "⟨id⟩".
TokenSide side_from_leg_record(const LegTokenRecord& record, const data::Tokenizer* tokenizer);
TokenSide side_from_template(const data::Tokenizer& tokenizer, data::TemplateKind kind, const std::string& label,
                             const std::vector<data::Message>& messages, std::size_t max_len);

data::TokenDiff diff_sides(const TokenSide& a, const TokenSide& b);

}  // namespace tandem::views
