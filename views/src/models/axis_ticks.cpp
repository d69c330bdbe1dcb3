#include "tandem/views/axis_ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace tandem::views {

namespace {

// Labels for `values` with the fewest digits that keep them apart (and show the step exactly).
std::vector<std::string> labels_for(const std::vector<double>& values, double step) {
    double largest = 0;
    for (double v : values) largest = std::max(largest, std::fabs(v));
    const int step_exp = step > 0 ? static_cast<int>(std::floor(std::log10(step) + 1e-9)) : 0;
    const double mantissa = step > 0 ? step / std::pow(10.0, step_exp) : 1;
    // 2.5 × 10^k needs one digit more than 10^k.
    const int extra = std::fabs(mantissa - 2.5) < 1e-6 ? 1 : 0;
    const bool scientific = largest >= 1e6 || (largest > 0 && largest < 1e-3) || (step > 0 && step < 1e-4 && largest < 1e-2);
    int decimals = scientific ? std::max(0, static_cast<int>(std::floor(std::log10(std::max(largest, step)))) - step_exp + extra)
                              : std::max(0, -step_exp + extra);
    for (int tries = 0; tries < 12; ++tries, ++decimals) {
        std::vector<std::string> labels;
        for (double v : values) labels.push_back(tick_label(v, decimals, scientific));
        if (std::set<std::string>(labels.begin(), labels.end()).size() == labels.size()) return labels;
    }
    std::vector<std::string> labels;
    for (double v : values) labels.push_back(tick_label(v, 15, true));
    return labels;
}

}  // namespace

std::string tick_label(double value, int decimals, bool scientific) {
    if (value == 0) return "0";
    char text[64];
    std::snprintf(text, sizeof text, scientific ? "%.*e" : "%.*f", std::clamp(decimals, 0, 17), value);
    std::string s = text;
    // "-0", "-0.00": a tick at zero is written 0.
    if (s[0] == '-' && s.find_first_of("123456789") == std::string::npos) s.erase(0, 1);
    if (scientific) {
        // 1.5e-07 -> 1.5e-7 (shorter; still what printf/strtod read)
        const auto e = s.find('e');
        if (e != std::string::npos) {
            std::string mant = s.substr(0, e), exp = s.substr(e + 1);
            const char sign = exp[0];
            std::string digits = exp.substr(1);
            while (digits.size() > 1 && digits[0] == '0') digits.erase(0, 1);
            s = mant + "e" + (sign == '-' ? "-" : "") + digits;
        }
    }
    return s;
}

double nice_step(double span, int target, bool integers) {
    if (!(span > 0) || target < 1) return integers ? 1 : 1;
    const double raw = span / target;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    double step = 10 * magnitude;
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
        if (integers && m == 2.5 && magnitude < 10) continue;  // 2.5 is not a whole number; 25 is
        if (m * magnitude >= raw * (1 - 1e-9)) {
            step = m * magnitude;
            break;
        }
    }
    if (integers) step = std::max(1.0, std::round(step));
    return step;
}

AxisTicks linear_ticks(double lo, double hi, int max_ticks, bool integers) {
    AxisTicks t;
    if (!std::isfinite(lo) || !std::isfinite(hi)) return t;
    if (hi < lo) std::swap(lo, hi);
    max_ticks = std::max(2, max_ticks);
    if (hi == lo) {
        t.values = {lo};
        t.step = 0;
        t.labels = labels_for(t.values, std::fabs(lo) > 0 ? std::fabs(lo) / 10 : 1);
        return t;
    }
    // The smallest nice step giving at most max_ticks values inside [lo, hi]: start fine and go
    // up the sequence 1, 2, 2.5, 5, 10, ... (2.5 skipped below 10 on an integer axis).
    auto next_nice = [integers](double step) {
        const double magnitude = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
        const double m = step / magnitude;
        if (m < 1.5) return 2 * magnitude;
        if (m < 2.25) return (integers && magnitude < 10) ? 5 * magnitude : 2.5 * magnitude;
        if (m < 3.75) return 5 * magnitude;
        return 10 * magnitude;
    };
    double step = nice_step(hi - lo, max_ticks * 4, integers);
    for (int guard = 0; guard < 64; ++guard, step = next_nice(step)) {
        const double first = std::ceil(lo / step - 1e-9) * step;
        const auto count = static_cast<int>(std::floor((hi - first) / step + 1e-9)) + 1;
        if (count <= max_ticks) {
            t.step = step;
            for (int i = 0; i < count; ++i) {
                double v = first + i * step;
                // Snap to the exact multiple so 0.1 * 3 prints as 0.3 and sits where 0.3 is.
                v = std::round(v / step) * step;
                if (std::fabs(v) < step * 1e-9) v = 0;
                t.values.push_back(v);
            }
            break;
        }
    }
    t.labels = labels_for(t.values, t.step);
    return t;
}

AxisTicks log_ticks(double lo, double hi, int max_ticks) {
    AxisTicks t;
    if (!(lo > 0) || !(hi > 0)) return t;
    if (hi < lo) std::swap(lo, hi);
    std::vector<double> values;
    for (int e = static_cast<int>(std::floor(std::log10(lo))); e <= static_cast<int>(std::ceil(std::log10(hi))); ++e)
        for (double m : {1.0, 2.0, 5.0}) {
            const double v = m * std::pow(10.0, e);
            if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12)) values.push_back(v);
        }
    if (values.size() < 2) return linear_ticks(lo, hi, max_ticks, false);
    // Too many (several decades): keep the decades only.
    if (static_cast<int>(values.size()) > max_ticks) {
        std::vector<double> decades;
        for (double v : values)
            if (std::fabs(std::log10(v) - std::round(std::log10(v))) < 1e-9) decades.push_back(v);
        if (decades.size() >= 2) values = decades;
    }
    t.values = values;
    double smallest = values.front();
    t.labels = labels_for(values, std::pow(10.0, std::floor(std::log10(smallest))));
    return t;
}

}  // namespace tandem::views
