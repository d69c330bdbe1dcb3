// The statistics of a comparison (docs/report.md "Statistics conventions"): the one pairing of two
// series by update and the one summary of a paired series. Everything else in compare/ builds on
// these; nothing here reads or writes a file.
#include "tandem/compare/statistics.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace tandem::experiments {

double mean(const std::vector<double>& x) {
    if (x.empty()) return std::nan("");
    double s = 0;
    for (double v : x) s += v;
    return s / static_cast<double>(x.size());
}

double population_std(const std::vector<double>& x) {
    if (x.empty()) return std::nan("");
    double m = mean(x), s = 0;
    for (double v : x) s += (v - m) * (v - m);
    return std::sqrt(s / static_cast<double>(x.size()));
}

double percentile(std::vector<double> x, double q) {
    if (x.empty()) return std::nan("");
    std::sort(x.begin(), x.end());
    double pos = q / 100.0 * static_cast<double>(x.size() - 1);
    size_t lo = static_cast<size_t>(std::floor(pos));
    size_t hi = std::min(lo + 1, x.size() - 1);
    double frac = pos - static_cast<double>(lo);
    return x[lo] + (x[hi] - x[lo]) * frac;
}

int64_t sign_changes(const std::vector<double>& diffs) {
    int64_t n = 0;
    int last = 0;
    for (double d : diffs) {
        int s = d > 0 ? 1 : (d < 0 ? -1 : 0);
        if (s == 0) continue;
        if (last != 0 && s != last) ++n;
        last = s;
    }
    return n;
}

DiffStats diff_stats(const std::vector<PairedPoint>& points) {
    DiffStats s;
    s.n = static_cast<int64_t>(points.size());
    if (points.empty()) return s;
    std::vector<double> d, ad;
    double sum_abs_b = 0;
    for (const auto& p : points) {
        d.push_back(p.diff);
        ad.push_back(std::fabs(p.diff));
        sum_abs_b += std::fabs(p.b);
        if (std::fabs(p.diff) > s.max_abs || s.max_abs_update < 0) {
            s.max_abs = std::fabs(p.diff);
            s.max_abs_update = p.update;
        }
    }
    s.mean_signed = mean(d);
    s.mean_abs = mean(ad);
    s.std = population_std(d);
    s.sign_changes = sign_changes(d);
    double mean_abs_b = sum_abs_b / static_cast<double>(points.size());
    s.mean_abs_rel = mean_abs_b > 0 ? s.mean_abs / mean_abs_b : std::nan("");
    return s;
}


template <class Row>
std::vector<PairedPoint> pair_series(const std::vector<Row>& a, const std::vector<Row>& b, double Row::*value,
                                     NonFinite non_finite) {
    auto keep = [&](const Row& r) { return non_finite == NonFinite::Keep || std::isfinite(r.*value); };
    std::map<int64_t, double> mb;
    for (const auto& r : b)
        if (keep(r)) mb[r.update] = r.*value;
    std::vector<PairedPoint> out;
    for (const auto& r : a) {
        if (!keep(r)) continue;
        if (auto it = mb.find(r.update); it != mb.end()) out.push_back({r.update, r.*value, it->second, r.*value - it->second});
    }
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.update < y.update; });
    return out;
}
template std::vector<PairedPoint> pair_series(const std::vector<EvalRow>&, const std::vector<EvalRow>&, double EvalRow::*, NonFinite);
template std::vector<PairedPoint> pair_series(const std::vector<StepRow>&, const std::vector<StepRow>&, double StepRow::*, NonFinite);

PercentSeries residual_percent(const std::vector<PairedPoint>& points, bool reference_is_a) {
    PercentSeries s;
    for (const auto& p : points) {
        PercentPoint q;
        q.update = p.update;
        q.leg = reference_is_a ? p.b : p.a;
        q.reference = reference_is_a ? p.a : p.b;
        const double denom = std::fabs(q.reference);
        q.percent = denom > 0 && std::isfinite(denom) ? 100.0 * (q.leg - q.reference) / denom : std::nan("");
        if (std::isfinite(q.percent) && (s.max_abs_update < 0 || std::fabs(q.percent) > s.max_abs)) {
            s.max_abs = std::fabs(q.percent);
            s.max_abs_update = q.update;
        }
        s.points.push_back(q);
    }
    return s;
}


std::pair<int64_t, int64_t> timing_window(int64_t updates) {
    if (updates <= 0) return {-1, -1};
    if (updates > 200) return {100, std::min<int64_t>(updates - 1, 499)};
    return {updates / 5, updates - 1};
}

}  // namespace tandem::experiments
