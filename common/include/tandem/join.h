#pragma once
// Joining names into one line ("a, b, c"): the lists in messages, attributes and tables.
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

}  // namespace tandem
