#include "tandem/views/trajectory_chart.h"

#include "tandem/views/curve_points.h"

#include <QChart>
#include <QLegendMarker>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

namespace tandem::views {

const char* const residual_axis_title = "leg − reference (%)";

std::string residual_name(const ResidualTrajectory& r) { return r.leg + " − " + r.reference; }

QColor leg_color(std::size_t leg_index) {
    // Okabe–Ito palette: distinguishable for colour-blind readers and in greyscale print.
    static const QColor palette[] = {QColor(0, 114, 178), QColor(213, 94, 0), QColor(0, 158, 115),
                                     QColor(204, 121, 167), QColor(86, 180, 233), QColor(230, 159, 0),
                                     QColor(0, 0, 0), QColor(240, 228, 66)};
    return palette[leg_index % (sizeof(palette) / sizeof(palette[0]))];
}

TrajectoryChart::TrajectoryChart() : chart_(new QChart) {
    chart_->setMargins(QMargins(4, 4, 4, 4));
    chart_->legend()->setAlignment(Qt::AlignBottom);
    x_axis_ = new QValueAxis;
    x_axis_->setTitleText(QStringLiteral("update"));
    x_axis_->setLabelFormat(QStringLiteral("%.0f"));
    chart_->addAxis(x_axis_, Qt::AlignBottom);
    set_y_axis(false);
}

void TrajectoryChart::set_y_axis(bool log) {
    if (y_axis_ && y_is_log_ == log) return;
    if (y_axis_) {
        for (auto* s : chart_->series()) s->detachAxis(y_axis_);
        chart_->removeAxis(y_axis_);
        delete y_axis_;
    }
    if (log) {
        auto* axis = new QLogValueAxis;
        axis->setBase(10);
        axis->setLabelFormat(QStringLiteral("%.3g"));
        axis->setMinorTickCount(-1);
        y_axis_ = axis;
    } else {
        auto* axis = new QValueAxis;
        axis->setLabelFormat(QStringLiteral("%.4g"));
        y_axis_ = axis;
    }
    y_is_log_ = log;
    chart_->addAxis(y_axis_, Qt::AlignLeft);
    for (auto* s : chart_->series()) s->attachAxis(y_axis_);
}

QXYSeries* TrajectoryChart::series_for(const QString& name, const QColor& color, bool smoothed) {
    auto it = series_.find(name);
    if (it != series_.end()) return it->second;
    auto* series = new QLineSeries;
    series->setName(name);
    QPen pen(color);
    pen.setWidthF(smoothed ? 2.0 : 1.2);
    series->setPen(pen);
    chart_->addSeries(series);
    series->attachAxis(x_axis_);
    series->attachAxis(y_axis_);
    series_[name] = series;
    return series;
}

std::optional<std::pair<double, double>> TrajectoryChart::full_x_range(const RunSnapshot& snapshot, const ChartOptions& options) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    auto extend = [&](const Series& s) {
        if (s.empty()) return;
        lo = std::min(lo, s.front().update);
        hi = std::max(hi, s.back().update);
    };
    if (options.residual) {
        for (const auto& r : snapshot.residuals)
            if (r.metric == options.metric) extend(r.percent);
    } else {
        for (const auto& leg : snapshot.legs) extend(leg.series(options.metric));
    }
    if (!(hi >= lo)) return std::nullopt;
    if (hi == lo) hi = lo + 1;
    return std::make_pair(lo, hi);
}

void TrajectoryChart::update(const RunSnapshot& snapshot, const ChartOptions& options) {
    const bool log = options.log_y && !options.residual;
    set_y_axis(log);
    QFont font = chart_->font();
    if (options.font_pt > 0) {
        font.setPointSizeF(options.font_pt);
        for (auto* axis : chart_->axes()) {
            axis->setLabelsFont(font);
            axis->setTitleFont(font);
        }
        chart_->legend()->setFont(font);
    }
    chart_->legend()->setVisible(options.legend);
    y_axis_->setTitleText(options.residual ? QString::fromUtf8(residual_axis_title) : QString::fromLatin1(metric_label(options.metric)));
    if (!log) static_cast<QValueAxis*>(y_axis_)->setLabelFormat(options.residual ? QStringLiteral("%.1e") : QStringLiteral("%.4g"));

    // What to draw: (name, color index, series) triples.
    struct Curve { QString name; std::size_t color; const Series* series; };
    std::vector<Curve> curves;
    if (options.residual) {
        for (const auto& r : snapshot.residuals) {
            if (r.metric != options.metric) continue;
            std::size_t color = 0;
            for (std::size_t i = 0; i < snapshot.legs.size(); ++i)
                if (snapshot.legs[i].leg == r.leg) color = i;
            curves.push_back({QString::fromStdString(residual_name(r)), color, &r.percent});
        }
    } else {
        for (std::size_t i = 0; i < snapshot.legs.size(); ++i)
            curves.push_back({QString::fromStdString(snapshot.legs[i].leg), i, &snapshot.legs[i].series(options.metric)});
    }

    const auto full = full_x_range(snapshot, options);
    const auto range = options.x_range ? options.x_range : full;
    double y_lo = std::numeric_limits<double>::infinity(), y_hi = -y_lo;
    std::set<QString> wanted;
    auto draw = [&](const QString& name, const QColor& color, bool smoothed, const Series& s) {
        wanted.insert(name);
        QList<QPointF> points = range ? envelope_points(s, range->first, range->second, options.columns) : QList<QPointF>{};
        if (log) points.removeIf([](const QPointF& p) { return !(p.y() > 0); });
        for (const auto& p : points) {
            if (range && (p.x() < range->first || p.x() > range->second)) continue;
            if (!std::isfinite(p.y())) continue;
            y_lo = std::min(y_lo, p.y());
            y_hi = std::max(y_hi, p.y());
        }
        auto* series = series_for(name, color, smoothed);
        series->setPointsVisible(points.size() <= 60);
        series->replace(points);
    };
    for (const auto& c : curves) {
        QColor color = leg_color(c.color);
        if (options.smoothing > 0) {
            QColor faint = color;
            faint.setAlpha(90);  // raw curve stays visible underneath the smoothed one
            draw(c.name, faint, false, *c.series);
            draw(c.name + QStringLiteral(" (smoothed)"), color, true, smoothed_for_display(*c.series, options.smoothing));
        } else {
            draw(c.name, color, false, *c.series);
        }
    }
    for (auto it = series_.begin(); it != series_.end();) {
        if (wanted.count(it->first)) { ++it; continue; }
        chart_->removeSeries(it->second);
        delete it->second;
        it = series_.erase(it);
    }
    // Pens: the first leg wide and solid, the others thinner and dashed, so curves that coincide
    // (what a passing cross-check looks like) still show every leg. Raw curves fade under smoothing.
    for (const auto& c : curves) {
        const bool first = c.color == 0;
        auto style = [&](QXYSeries* series, bool smoothed) {
            QPen pen = series->pen();
            QColor color = leg_color(c.color);
            if (options.smoothing > 0 && !smoothed) color.setAlpha(90);
            pen.setColor(color);
            pen.setWidthF(first ? 2.6 : 1.4);
            pen.setStyle(first ? Qt::SolidLine : Qt::DashLine);
            series->setPen(pen);
        };
        style(series_.at(c.name), false);
        if (auto it = series_.find(c.name + QStringLiteral(" (smoothed)")); it != series_.end()) style(it->second, true);
    }
    if (range) x_axis_->setRange(range->first, range->second);
    if (y_hi >= y_lo) {
        double pad = (y_hi - y_lo) * 0.05;
        if (pad == 0) pad = std::max(std::abs(y_hi) * 0.05, 1e-12);
        if (log) {
            y_axis_->setRange(y_lo / 1.1, y_hi * 1.1);
        } else {
            auto* axis = static_cast<QValueAxis*>(y_axis_);
            axis->setRange(y_lo - pad, y_hi + pad);
            // Round tick labels (the range only grows); residuals of 1e-7 keep the exact range,
            // as nice numbers at that scale make Qt Charts elide every label.
            if (!options.residual) axis->applyNiceNumbers();
            else axis->setTickCount(5);
        }
    }
    if (curves.empty() && options.residual)
        chart_->setTitle(QStringLiteral("no paired points yet (experiments/ compares two legs once both have them)"));
    else
        chart_->setTitle(QString());
}

int TrajectoryChart::drawn_point_count(const QString& name) const {
    auto it = series_.find(name);
    return it == series_.end() ? -1 : static_cast<int>(it->second->count());
}

}  // namespace tandem::views
