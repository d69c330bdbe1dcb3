#pragma once
// Axis ticks for the trajectory charts and their exports: "nice numbers" (1, 2, 2.5 or 5 × 10^k)
// placed exactly at their values, integers only on an update axis, and labels with just enough
// digits that no two are equal. A display concern (where the labels go), not a statistic.
#include <string>
#include <vector>

namespace tandem::views {

struct AxisTicks {
    std::vector<double> values;       // increasing, inside [lo, hi]
    std::vector<std::string> labels;  // one per value, pairwise distinct
    double step = 0;                  // spacing of the values (linear ticks); 0 for log ticks
};

// The nice step for a range split into about `target` intervals: 1, 2, 2.5 or 5 × 10^k (never
// 2.5 × 10^k below 10 and never below 1 when `integers`).
double nice_step(double span, int target, bool integers);

// Ticks on a linear axis covering [lo, hi] with at most `max_ticks` values (at least 2 when the
// range allows it). `integers`: the values are whole numbers (the update axis).
AxisTicks linear_ticks(double lo, double hi, int max_ticks, bool integers);

// Ticks on a log axis over [lo, hi] (both > 0): the decades and their 2× and 5× multiples that fall
// inside; when fewer than two of those do (a narrow range), linear nice ticks inside the range.
AxisTicks log_ticks(double lo, double hi, int max_ticks);

// The label of `value` with `decimals` digits after the point, or in scientific notation
// (`decimals` digits of mantissa) when `scientific`; "−0" never appears.
std::string tick_label(double value, int decimals, bool scientific);

}  // namespace tandem::views
