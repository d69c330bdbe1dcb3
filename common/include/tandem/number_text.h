#pragma once
// The one way a number becomes text, from event files to the screen: printf's `format` of x.
// number_text writes NaN as "nan" whatever its sign bit (as Python's f"{x:.9g}" does, so legs in both
// languages word a failure the same way); number_or_na writes "n/a" for a value that is not finite (a
// missing statistic in a report reads "n/a", never "nan"; docs/report.md).
#include <cmath>
#include <cstdio>
#include <string>

namespace tandem {

inline std::string number_text(double x, const char* format = "%.6g") {
    if (std::isnan(x)) return "nan";
    char b[64];
    std::snprintf(b, sizeof b, format, x);
    return b;
}

inline std::string number_or_na(double x, const char* format = "%.3g") {
    return std::isfinite(x) ? number_text(x, format) : "n/a";
}

}  // namespace tandem
