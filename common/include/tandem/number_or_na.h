#pragma once
// A number as the report's words and tables print it: printf's `format` of x, and "n/a" for a value
// that is not finite (a missing statistic reads "n/a", never "nan"; docs/report.md).
#include <cmath>
#include <cstdio>
#include <string>

namespace tandem {

inline std::string number_or_na(double x, const char* format = "%.3g") {
    if (!std::isfinite(x)) return "n/a";
    char b[64];
    std::snprintf(b, sizeof b, format, x);
    return b;
}

}  // namespace tandem
