#include "tandem/views/token_sides.h"

#include "tandem/data/supervision.h"
#include "tandem/data/tokenizer.h"

namespace tandem::views {

namespace {

std::vector<std::string> pieces_for(const std::vector<std::int32_t>& ids, const data::Tokenizer* tokenizer) {
    std::vector<std::string> pieces;
    pieces.reserve(ids.size());
    for (auto id : ids)
        pieces.push_back(tokenizer ? tokenizer->decode({id}) : "\u27e8" + std::to_string(id) + "\u27e9");
    return pieces;
}

}  // namespace

TokenSide side_from_leg_record(const LegTokenRecord& record, const data::Tokenizer* tokenizer) {
    TokenSide side;
    side.label = record.label;
    side.ids = record.ids;
    side.pieces = pieces_for(record.ids, tokenizer);
    side.boundary = record.boundary;
    side.supervised_end = record.boundary >= 0 ? record.boundary + record.supervised_count : -1;
    side.truncated_at = record.truncated_at;
    side.full_length = record.full_length;
    return side;
}

TokenSide side_from_template(const data::Tokenizer& tokenizer, data::TemplateKind kind, const std::string& label,
                             const std::vector<data::Message>& messages, std::size_t max_len) {
    const auto rec = data::tokenize_record(tokenizer, kind, messages, max_len);
    TokenSide side;
    side.label = label;
    side.ids = rec.ids;
    side.pieces.reserve(rec.ids.size());
    for (std::size_t i = 0; i < rec.ids.size(); ++i) side.pieces.push_back(rec.full_text.substr(rec.begin[i], rec.end[i] - rec.begin[i]));
    side.boundary = static_cast<std::int64_t>(rec.boundary);
    side.supervised_end = static_cast<std::int64_t>(rec.boundary + rec.supervised_count);
    if (rec.truncated()) side.truncated_at = static_cast<std::int64_t>(rec.truncated_length);
    side.full_length = static_cast<std::int64_t>(rec.full_length);
    return side;
}

data::TokenDiff diff_sides(const TokenSide& a, const TokenSide& b) {
    auto sequence = [](const TokenSide& s) {
        data::TokenSequence seq;
        seq.label = s.label;
        seq.ids = s.ids;
        seq.pieces = s.pieces;
        if (s.boundary >= 0) {
            seq.supervised.resize(s.ids.size());
            for (std::size_t i = 0; i < s.ids.size(); ++i) seq.supervised[i] = s.supervised(i) ? 1 : 0;
        }
        return seq;
    };
    return data::diff_tokens(sequence(a), sequence(b));
}

}  // namespace tandem::views
