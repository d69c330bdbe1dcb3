#include "tandem/views/trajectory_chart.h"

#include "tandem/views/axis_ticks.h"
#include "tandem/views/curve_points.h"

#include <QCategoryAxis>
#include <QChart>
#include <QLegendMarker>
#include <QGraphicsLayout>
#include <QLegend>
#include <QLineSeries>
#include <QScatterSeries>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

namespace tandem::views {

// Short, so it fits the height of the smallest panel; the chart title says what it is the percent of.
const char* const residual_axis_title = "%";

QString residual_chart_title(Metric metric) {
    return QStringLiteral("%1: leg − reference, %2 of |reference|").arg(QString::fromLatin1(metric_label(metric)), QStringLiteral("%"));
}

std::string residual_name(const ResidualTrajectory& r) { return r.leg + " − " + r.reference; }

const char* const envelope_min_name = "envelope min";
const char* const envelope_max_name = "envelope max";
const char* const envelope_lo_name = "envelope mean − 2σ";
const char* const envelope_hi_name = "envelope mean + 2σ";
const char* const flags_curve_name = "gate flags";

QString z_chart_title(const RunSnapshot& snapshot) {
    const std::string stack = snapshot.z_scores.empty() ? std::string() : snapshot.z_scores.front().stack;
    return stack.empty() ? QStringLiteral("held-out CE: z in the seed envelope — this run has no envelope (tandem envelope)")
                         : QStringLiteral("held-out CE: z = (leg − %1 envelope mean) / envelope std").arg(QString::fromStdString(stack));
}

QString metric_axis_title(Metric metric) {
    switch (metric) {
    case Metric::HeldoutCe: return QStringLiteral("held-out CE");
    case Metric::TrainLoss: return QStringLiteral("training loss");
    case Metric::GradNorm: return QStringLiteral("grad norm");
    case Metric::LearningRate: return QStringLiteral("learning rate");
    case Metric::Throughput: return QStringLiteral("tokens/s");
    }
    return {};
}

QColor leg_color(std::size_t index) {
    // Okabe–Ito palette: distinguishable for colour-blind readers and in greyscale print.
    static const QColor palette[] = {QColor(0, 114, 178), QColor(213, 94, 0), QColor(0, 158, 115),
                                     QColor(204, 121, 167), QColor(86, 180, 233), QColor(230, 159, 0),
                                     QColor(0, 0, 0), QColor(240, 228, 66)};
    return palette[index % (sizeof(palette) / sizeof(palette[0]))];
}

std::vector<Curve> run_curves(const RunSnapshot& snapshot, const ChartOptions& options) {
    std::vector<Curve> curves;
    auto leg_index = [&](const std::string& name) {
        for (std::size_t i = 0; i < snapshot.legs.size(); ++i)
            if (snapshot.legs[i].leg == name) return i;
        return std::size_t(0);
    };
    auto styled = [](Curve c, std::size_t index) {
        // The first leg wide and solid, the others thinner and dashed: curves that coincide (what a
        // passing cross-check looks like) still show every leg.
        c.color = leg_color(index);
        c.style = index == 0 ? Qt::SolidLine : Qt::DashLine;
        c.width = index == 0 ? 2.6 : 1.4;
        return c;
    };
    if (options.residual && options.z) {
        for (const auto& z : snapshot.z_scores)
            curves.push_back(styled({QString::fromStdString(z.leg), {}, {}, 0, &z.z}, leg_index(z.leg)));
    } else if (options.residual) {
        for (const auto& r : snapshot.residuals)
            if (r.metric == options.metric)
                curves.push_back(styled({QString::fromStdString(residual_name(r)), {}, {}, 0, &r.percent}, leg_index(r.leg)));
    } else {
        // The seed envelope behind the legs: min/max dotted, mean -/+ 2 std dashed, in grey.
        if (options.envelope)
            for (const auto& b : snapshot.bands) {
                if (b.metric != options.metric) continue;
                const QColor edge(150, 150, 150), sigma(190, 190, 190);
                curves.push_back({QString::fromUtf8(envelope_min_name), edge, Qt::DotLine, 1.2, &b.min});
                curves.push_back({QString::fromUtf8(envelope_max_name), edge, Qt::DotLine, 1.2, &b.max});
                curves.push_back({QString::fromUtf8(envelope_lo_name), sigma, Qt::DashLine, 1.0, &b.lo});
                curves.push_back({QString::fromUtf8(envelope_hi_name), sigma, Qt::DashLine, 1.0, &b.hi});
            }
        for (std::size_t i = 0; i < snapshot.legs.size(); ++i)
            curves.push_back(styled({QString::fromStdString(snapshot.legs[i].leg), {}, {}, 0, &snapshot.legs[i].series(options.metric)}, i));
        for (const auto& [metric, points] : snapshot.flag_points)
            if (metric == options.metric && !points.empty())
                curves.push_back({QString::fromUtf8(flags_curve_name), QColor(200, 30, 30), Qt::SolidLine, 1.0, &points, true});
    }
    return curves;
}

TrajectoryChart::TrajectoryChart() : chart_(new QChart) {
    chart_->setMargins(QMargins(4, 4, 4, 4));
    chart_->legend()->setAlignment(Qt::AlignBottom);
    x_axis_ = new QCategoryAxis;
    x_axis_->setTitleText(QStringLiteral("update"));
    x_axis_->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
    chart_->addAxis(x_axis_, Qt::AlignBottom);
    y_axis_ = new QCategoryAxis;
    y_axis_->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
    chart_->addAxis(y_axis_, Qt::AlignLeft);
    // Qt elides a category label to its category's width (the first one is nearly empty): our
    // ticks are few and spaced, so labels and titles are drawn whole.
    x_axis_->setTruncateLabels(false);
    y_axis_->setTruncateLabels(false);
    // The residual panel's zero line: thin grey, no legend entry.
    zero_line_ = new QLineSeries;
    zero_line_->setName(QStringLiteral("0"));
    QPen zero(QColor(110, 110, 110));
    zero.setWidthF(1.0);
    zero_line_->setPen(zero);
    chart_->addSeries(zero_line_);
    zero_line_->attachAxis(x_axis_);
    zero_line_->attachAxis(y_axis_);
    for (auto* marker : chart_->legend()->markers(zero_line_)) marker->setVisible(false);
    zero_line_->setVisible(false);
}

QValueAxis* TrajectoryChart::x_axis() const { return x_axis_; }

QXYSeries* TrajectoryChart::series_for(const QString& name, bool markers) {
    auto it = series_.find(name);
    if (it != series_.end()) return it->second;
    QXYSeries* series = nullptr;
    if (markers) {
        auto* scatter = new QScatterSeries;
        scatter->setMarkerShape(QScatterSeries::MarkerShapeTriangle);
        scatter->setMarkerSize(11);
        series = scatter;
    } else {
        series = new QLineSeries;
    }
    series->setName(name);
    chart_->addSeries(series);
    series->attachAxis(x_axis_);
    series->attachAxis(y_axis_);
    series_[name] = series;
    return series;
}

std::optional<std::pair<double, double>> TrajectoryChart::full_x_range(const std::vector<Curve>& curves) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& c : curves) {
        if (!c.series || c.series->empty()) continue;
        lo = std::min(lo, c.series->front().update);
        hi = std::max(hi, c.series->back().update);
    }
    if (!(hi >= lo)) return std::nullopt;
    if (hi == lo) hi = lo + 1;
    return std::make_pair(lo, hi);
}

void TrajectoryChart::set_ticks(QCategoryAxis* axis, double lo, double hi, const std::vector<double>& values,
                                const std::vector<std::string>& labels, bool log) {
    for (const auto& label : axis->categoriesLabels()) axis->remove(label);
    // Categories end at the tick values; the label of a category is drawn at its end value.
    const double span = hi - lo;
    axis->setStartValue(lo - std::max(std::fabs(span), 1e-300) * 1e-6);
    axis->setRange(lo, hi);
    for (std::size_t i = 0; i < values.size(); ++i) {
        const double at = log ? std::log10(values[i]) : values[i];
        if (at < lo - span * 1e-9 || at > hi + span * 1e-9) continue;
        axis->append(QString::fromStdString(labels[i]), at);
    }
}

void TrajectoryChart::update(const std::vector<Curve>& curves, const ChartOptions& options) {
    const bool log = options.log_y && !options.residual;
    QFont font = chart_->font();
    if (options.font_pt > 0) font.setPointSizeF(options.font_pt);
    if (!options.font_family.isEmpty()) font.setFamily(options.font_family);
    if (options.font_pt > 0 || !options.font_family.isEmpty()) {
        for (auto* axis : {static_cast<QAbstractAxis*>(x_axis_), static_cast<QAbstractAxis*>(y_axis_)}) {
            axis->setLabelsFont(font);
            axis->setTitleFont(font);
        }
        chart_->legend()->setFont(font);
        chart_->setTitleFont(font);
    }
    chart_->legend()->setVisible(options.legend);
    x_axis_->setTitleVisible(options.x_title);
    if (options.compact) {
        // Paper figures: every millimetre goes to the plot.
        chart_->setMargins(QMargins(0, 0, 12, 0));  // room for the last x label, centred on the edge
        chart_->layout()->setContentsMargins(0, 0, 0, 0);
        chart_->setBackgroundRoundness(0);
        chart_->legend()->setContentsMargins(0, 0, 0, 0);
        chart_->legend()->setAlignment(Qt::AlignTop);
        chart_->legend()->setMarkerShape(QLegend::MarkerShapeFromSeries);
    }
    y_axis_->setTitleText(options.residual ? (options.z ? QStringLiteral("z") : QString::fromUtf8(residual_axis_title))
                                           : metric_axis_title(options.metric));

    auto full = full_x_range(curves);
    const auto range = options.x_range ? options.x_range : full;
    double y_lo = std::numeric_limits<double>::infinity(), y_hi = -y_lo;
    std::set<QString> wanted;
    // A series whose recorded points, range and display settings are as at the last update keeps
    // its drawn points: a live batch that appends to one run recomputes that run's curves only.
    auto draw = [&](const QString& name, const Series& source, bool smoothed, bool markers = false) {
        wanted.insert(name);
        auto* series = series_for(name, markers);
        DrawnKey key{&source, source.size(), source.empty() ? 0.0 : source.back().update, source.empty() ? 0.0 : source.back().value,
                     range ? range->first : 0.0, range ? range->second : 0.0, options.columns, log, smoothed ? options.smoothing : 0.0};
        auto cached = drawn_.find(name);
        if (cached != drawn_.end() && cached->second.key == key) {
            y_lo = std::min(y_lo, cached->second.y_lo);
            y_hi = std::max(y_hi, cached->second.y_hi);
            return series;
        }
        const Series& s = smoothed ? (smoothed_storage_ = smoothed_for_display(source, options.smoothing)) : source;
        // Buckets two pixels wide: each keeps its minimum and maximum, so no recorded value leaves
        // the picture, and a long run costs about one point per pixel to paint.
        const int buckets = std::max(50, options.columns / 2);
        QList<QPointF> points = range ? envelope_points(s, range->first, range->second, buckets) : QList<QPointF>{};
        if (log) {
            points.removeIf([](const QPointF& p) { return !(p.y() > 0); });
            for (auto& p : points) p.setY(std::log10(p.y()));  // a linear axis over log10(y): labels stay ours
        }
        double lo = std::numeric_limits<double>::infinity(), hi = -lo;
        for (const auto& p : points) {
            if (range && (p.x() < range->first || p.x() > range->second)) continue;
            if (!std::isfinite(p.y())) continue;
            lo = std::min(lo, p.y());
            hi = std::max(hi, p.y());
        }
        y_lo = std::min(y_lo, lo);
        y_hi = std::max(y_hi, hi);
        if (!markers) series->setPointsVisible(points.size() <= 60);
        series->replace(points);
        drawn_[name] = {key, lo, hi};
        return series;
    };
    auto style = [&](QXYSeries* series, const Curve& c, bool faded) {
        QPen pen = series->pen();
        QColor color = c.color;
        if (faded) color.setAlpha(90);  // raw curve stays visible underneath the smoothed one
        pen.setColor(color);
        // A dense curve (more points than half the plot's pixels) is drawn solid and thin: a dash
        // pattern is invisible at that density, and dashes or wide strokes cost several times the
        // painting of a one-pixel line (what keeps ten long runs under 50 ms per redraw).
        const bool dense = series->count() * 2 > options.columns && !options.compact;
        pen.setWidthF(dense ? std::min(c.width, 1.0) : c.width);
        pen.setStyle(dense ? Qt::SolidLine : c.style);
        if (pen != series->pen()) series->setPen(pen);
    };
    for (const auto& c : curves) {
        if (!c.series) continue;
        if (c.markers) {
            auto* series = draw(c.name, *c.series, false, true);
            if (series->color() != c.color) {
                series->setColor(c.color);
                if (auto* scatter = qobject_cast<QScatterSeries*>(series)) scatter->setBorderColor(c.color);
            }
            continue;
        }
        if (options.smoothing > 0 && !options.residual) {
            style(draw(c.name, *c.series, false), c, true);
            style(draw(c.name + QStringLiteral(" (smoothed)"), *c.series, true), c, false);
        } else {
            style(draw(c.name, *c.series, false), c, false);
        }
    }
    for (auto it = series_.begin(); it != series_.end();) {
        if (wanted.count(it->first)) { ++it; continue; }
        chart_->removeSeries(it->second);
        delete it->second;
        drawn_.erase(it->first);
        it = series_.erase(it);
    }

    // Axes: nice ticks placed at their values (integers on the update axis).
    const int x_ticks = std::clamp(options.columns / 90, 3, 11);
    const int y_ticks = std::clamp(options.rows / 38, 3, 8);
    if (range) {
        const auto t = linear_ticks(range->first, range->second, x_ticks, true);
        set_ticks(x_axis_, range->first, range->second, t.values, t.labels, false);
        x_ticks_ = t.values;
    }
    if (options.residual && range) {
        y_lo = std::min(y_lo, 0.0);  // the zero line is always in view
        y_hi = std::max(y_hi, 0.0);
    }
    if (y_hi >= y_lo) {
        double pad = (y_hi - y_lo) * 0.05;
        if (pad == 0) pad = log ? 0.02 : std::max(std::abs(y_hi) * 0.05, 1e-12);
        const double lo = y_lo - pad, hi = y_hi + pad;
        const auto t = log ? log_ticks(std::pow(10.0, lo), std::pow(10.0, hi), y_ticks) : linear_ticks(lo, hi, y_ticks, false);
        set_ticks(y_axis_, lo, hi, t.values, t.labels, log);
        y_ticks_ = t.values;
    }
    zero_line_->setVisible(options.residual && range.has_value());
    if (options.residual && range) zero_line_->replace(QList<QPointF>{QPointF(range->first, 0), QPointF(range->second, 0)});
    for (auto* marker : chart_->legend()->markers(zero_line_)) marker->setVisible(false);

    if (options.residual && options.z && options.title)
        chart_->setTitle(options.z_title.isEmpty() ? QStringLiteral("held-out CE: z in the seed envelope") : options.z_title);
    else if (options.residual && options.title)
        chart_->setTitle(curves.empty() ? QStringLiteral("%1 — no paired points yet (experiments/ compares two legs once both have them)")
                                              .arg(residual_chart_title(options.metric))
                                        : residual_chart_title(options.metric));
    else
        chart_->setTitle(QString());
}

int TrajectoryChart::drawn_point_total() const {
    int n = 0;
    for (const auto& [name, s] : series_) n += static_cast<int>(s->count());
    return n;
}

int TrajectoryChart::drawn_point_count(const QString& name) const {
    auto it = series_.find(name);
    return it == series_.end() ? -1 : static_cast<int>(it->second->count());
}

}  // namespace tandem::views
