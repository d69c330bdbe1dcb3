#pragma once
// Joining names into one line ("a, b, c"): the lists in messages, attributes and tables; and splitting
// a comma list (--legs, --vary, an envelope's `vary` attribute) back into its names.
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

inline std::string join(const std::vector<std::string>& parts, std::string_view separator) {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty()) out += separator;
        out += p;
    }
    return out;
}

// "a,b,,c" -> {"a", "b", "c"}: the non-empty items between commas.
inline std::vector<std::string> split_list(std::string_view s) {
    std::vector<std::string> out;
    for (size_t p = 0; p <= s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string_view::npos) q = s.size();
        if (q > p) out.emplace_back(s.substr(p, q - p));
        p = q + 1;
    }
    return out;
}

}  // namespace tandem
