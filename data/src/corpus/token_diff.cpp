// First mismatch between two tokenisations of one record (token_diff.h).
#include "tandem/data/token_diff.h"

#include <algorithm>

namespace tandem::data {

TokenDiff diff_tokens(const TokenSequence& a, const TokenSequence& b, size_t window) {
    TokenDiff d;
    d.length_a = a.ids.size();
    d.length_b = b.ids.size();
    const size_t common = std::min(d.length_a, d.length_b);
    const bool compare_supervision = a.supervised.size() == a.ids.size() && b.supervised.size() == b.ids.size() &&
                                     !a.supervised.empty() && !b.supervised.empty();
    for (size_t i = 0; i < common; ++i) {
        const bool id_differs = a.ids[i] != b.ids[i];
        if (id_differs) {
            ++d.id_mismatches;
            d.mismatch_positions.push_back(i);
        } else if (compare_supervision && a.supervised[i] != b.supervised[i]) {
            d.mismatch_positions.push_back(i);
        }
        if (d.first_mismatch) continue;
        if (id_differs) {
            d.first_mismatch = i;
            d.what = "id";
        } else if (compare_supervision && a.supervised[i] != b.supervised[i]) {
            d.first_mismatch = i;
            d.what = "supervision";
        }
    }
    if (!d.first_mismatch && d.length_a != d.length_b) {
        d.first_mismatch = common;
        d.what = "length";
    }
    d.identical = !d.first_mismatch.has_value();
    const size_t longer = std::max(d.length_a, d.length_b);
    if (d.identical) {
        d.common_prefix = common;
        d.window_begin = 0;
        d.window_end = std::min(longer, window);
    } else {
        const size_t at = *d.first_mismatch;
        d.common_prefix = at;
        d.window_begin = at > window ? at - window : 0;
        d.window_end = std::min(longer, at + window + 1);
    }
    return d;
}

}  // namespace tandem::data
