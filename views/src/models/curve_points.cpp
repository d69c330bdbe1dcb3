#include "tandem/views/curve_points.h"

#include <algorithm>
#include <cmath>

namespace tandem::views {

namespace {
bool update_less(const SeriesPoint& p, double x) { return p.update < x; }
}  // namespace

QList<QPointF> envelope_points(const Series& series, double x_min, double x_max, int columns) {
    if (series.empty()) return {};
    auto first = std::lower_bound(series.begin(), series.end(), x_min, update_less);
    auto last = std::upper_bound(series.begin(), series.end(), x_max,
                                 [](double x, const SeriesPoint& p) { return x < p.update; });
    // One neighbour outside on each side, so the line runs to the plot edges.
    if (first != series.begin()) --first;
    if (last != series.end()) ++last;
    const auto inside = std::distance(first, last);
    QList<QPointF> points;
    if (columns < 1 || inside <= 2 * static_cast<std::ptrdiff_t>(columns) || !(x_max > x_min)) {
        points.reserve(inside);
        for (auto it = first; it != last; ++it) points.append(QPointF(it->update, it->value));
        return points;
    }
    const double width = (x_max - x_min) / columns;
    points.reserve(2 * columns + 4);
    auto bucket_of = [&](double x) {
        return static_cast<long>(std::floor((x - x_min) / width));
    };
    auto it = first;
    while (it != last) {
        const long bucket = bucket_of(it->update);
        auto lo = it, hi = it;
        auto end = it;
        while (end != last && bucket_of(end->update) == bucket) {
            if (end->value < lo->value) lo = end;
            if (end->value > hi->value) hi = end;
            ++end;
        }
        // Keep update order so the polyline does not double back.
        if (lo == hi) {
            points.append(QPointF(lo->update, lo->value));
        } else if (lo->update <= hi->update) {
            points.append(QPointF(lo->update, lo->value));
            points.append(QPointF(hi->update, hi->value));
        } else {
            points.append(QPointF(hi->update, hi->value));
            points.append(QPointF(lo->update, lo->value));
        }
        it = end;
    }
    return points;
}

Series smoothed_for_display(const Series& series, double weight) {
    if (weight <= 0 || series.empty()) return series;
    weight = std::min(weight, 0.999);
    Series out;
    out.reserve(series.size());
    double last = 0;
    std::size_t finite = 0;
    for (const auto& p : series) {
        if (!std::isfinite(p.value)) {
            out.push_back(p);
            continue;
        }
        last = last * weight + (1 - weight) * p.value;
        ++finite;
        const double debias = 1 - std::pow(weight, static_cast<double>(finite));
        out.push_back({p.update, last / debias});
    }
    return out;
}

std::optional<SeriesPoint> nearest_point(const Series& series, double update) {
    if (series.empty()) return std::nullopt;
    auto it = std::lower_bound(series.begin(), series.end(), update, update_less);
    if (it == series.end()) return series.back();
    if (it == series.begin()) return *it;
    auto before = std::prev(it);
    return (update - before->update <= it->update - update) ? *before : *it;
}

std::optional<double> value_at(const Series& series, double update) {
    auto it = std::lower_bound(series.begin(), series.end(), update, update_less);
    if (it == series.end() || it->update != update) return std::nullopt;
    return it->value;
}

std::optional<double> nearest_update(const std::vector<const Series*>& series, double update) {
    std::optional<double> best;
    for (const auto* s : series) {
        if (!s) continue;
        auto p = nearest_point(*s, update);
        if (!p) continue;
        const double d = std::fabs(p->update - update);
        // Ties go to the smaller update, whichever series comes first.
        if (!best || d < std::fabs(*best - update) || (d == std::fabs(*best - update) && p->update < *best)) best = p->update;
    }
    return best;
}

}  // namespace tandem::views
