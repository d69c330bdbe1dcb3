// The leg-name rule (tandem/leg_name.h).
#include "tandem/leg_name.h"

#include <algorithm>
#include <cctype>

#include "tandem/error.h"

namespace tandem {

void validate_leg_name(const std::string& leg) {
    const bool bad_chars = std::any_of(leg.begin(), leg.end(), [](char c) {
        return !(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-');
    });
    if (leg.empty() || leg.size() > 64 || bad_chars || leg == "." || leg == "..")
        throw Error("invalid leg name '" + leg + "' (1..64 characters from A-Z a-z 0-9 _ . + -)");
}

}  // namespace tandem
