#include "tandem/views/trajectory_chart.h"

#include "tandem/views/axis_ticks.h"
#include "tandem/views/curve_points.h"

#include <QCategoryAxis>
#include <QChart>
#include <QFontMetricsF>
#include <QGraphicsLineItem>
#include <QGraphicsTextItem>
#include <QPainter>
#include <QPolygonF>
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
#include <tuple>

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

QString residual_figure_title(Metric metric, bool short_label) {
    const auto& m = experiments::metric_info(metric);
    return QStringLiteral("Δ %1 [%]").arg(QString::fromLatin1(short_label ? m.short_label : m.label));
}

QString metric_title(Metric metric, bool short_label) {
    return QString::fromStdString(experiments::metric_axis_title(metric, short_label));
}

QString y_axis_title(const ChartOptions& o, bool short_label) {
    if (!o.y_title.isEmpty()) return o.y_title;
    if (o.residual && o.z) return o.compact ? QStringLiteral("z (%1)").arg(QString::fromLatin1(metric_label(Metric::HeldoutCe))) : QStringLiteral("z");
    if (o.residual) return o.compact ? residual_figure_title(o.metric, short_label) : QString::fromUtf8(residual_axis_title);
    return metric_title(o.metric, short_label);
}

QColor leg_color(std::size_t index) {
    // Okabe–Ito (distinguishable for colour-blind readers and in greyscale print) without its
    // yellow, which vanishes on white, then purple, brown, green, magenta and dark red from
    // ColorBrewer's Dark2/Set1: twelve runs before a colour comes back.
    static const QColor palette[kPaletteSize] = {
        QColor(0, 114, 178),  QColor(213, 94, 0),   QColor(0, 158, 115),  QColor(204, 121, 167),
        QColor(86, 180, 233), QColor(230, 159, 0),  QColor(0, 0, 0),      QColor(117, 112, 179),
        QColor(166, 118, 29), QColor(102, 166, 30), QColor(231, 41, 138), QColor(139, 0, 0)};
    const QColor base = palette[index % kPaletteSize];
    const std::size_t round = index / kPaletteSize;
    if (round == 0) return base;
    // Beyond twelve: the palette again, lighter (black becomes grey), so run 13 is not run 1.
    if (base == QColor(0, 0, 0)) return QColor(110, 110, 110);
    return round % 2 == 1 ? base.lighter(140) : base.darker(150);
}

QPen curve_pen(const Curve& c) {
    QPen pen(c.color);
    pen.setWidthF(c.width);
    pen.setStyle(c.style);
    return pen;
}

Curve on_clock(Curve c, const Series* clock) {
    if (!clock || !c.series) return c;
    auto mapped = std::make_shared<Series>();
    mapped->reserve(c.series->size());
    for (const auto& p : *c.series)
        if (auto x = value_at(*clock, p.update); x && std::isfinite(*x)) mapped->push_back({*x, p.value});  // an imported leg has no wall times
    c.owned = mapped;
    c.series = mapped.get();
    return c;
}

void paint_legend_sample(QPainter& painter, const QRectF& box, const Curve& c) {
    painter.save();
    if (c.markers) {
        const double r = std::min(box.height(), box.width()) * 0.4;
        const QPointF m = box.center();
        QPolygonF triangle{{m.x(), m.y() - r}, {m.x() + r, m.y() + r * 0.8}, {m.x() - r, m.y() + r * 0.8}};
        painter.setPen(Qt::NoPen);
        painter.setBrush(c.color);
        painter.drawPolygon(triangle);
    } else {
        painter.setPen(curve_pen(c));
        painter.drawLine(QPointF(box.left(), box.center().y()), QPointF(box.right(), box.center().y()));
    }
    painter.restore();
}

std::vector<Curve> run_curves(const RunSnapshot& snapshot, const ChartOptions& options) {
    std::vector<Curve> curves;
    auto leg_index = [&](const std::string& name) {
        for (std::size_t i = 0; i < snapshot.legs.size(); ++i)
            if (snapshot.legs[i].leg == name) return i;
        return std::size_t(0);
    };
    auto clock_of = [&](std::size_t leg) -> const Series* {
        return leg < snapshot.legs.size() ? snapshot.legs[leg].clock(options.x_axis) : nullptr;
    };
    auto styled = [](Curve c, std::size_t index) {
        // The first leg wide and solid, the others thinner and dashed: curves that coincide (what a
        // passing cross-check looks like) still show every leg.
        c.color = leg_color(index);
        c.style = index == 0 ? Qt::SolidLine : Qt::DashLine;
        c.width = index == 0 ? 2.6 : 1.4;
        return c;
    };
    const bool smooth = options.smooth_all || experiments::metric_info(options.metric).smoothed;
    if (options.residual && options.z) {
        for (const auto& z : snapshot.z_scores)
            curves.push_back(on_clock(styled({QString::fromStdString(z.leg), {}, {}, 0, &z.z}, leg_index(z.leg)), clock_of(leg_index(z.leg))));
    } else if (options.residual) {
        for (const auto& r : snapshot.residuals)
            if (r.metric == options.metric)
                curves.push_back(on_clock(styled({QString::fromStdString(residual_name(r)), {}, {}, 0, &r.percent}, leg_index(r.leg)),
                                          clock_of(leg_index(r.leg))));
        if (curves.size() == 1) {
            // One pair: drawn dark grey, so its legend entry is not read as the leg's own curve.
            curves.front().color = QColor(64, 64, 64);
            curves.front().width = 1.8;
        }
    } else {
        // The seed envelope behind the legs: min/max dotted, mean -/+ 2 std dashed, in grey.
        if (options.envelope)
            for (const auto& b : snapshot.bands) {
                if (b.metric != options.metric) continue;
                const QColor edge(150, 150, 150), sigma(190, 190, 190);
                for (const auto& [name, color, style, width, series] :
                     {std::tuple{envelope_min_name, edge, Qt::DotLine, 1.2, &b.min}, std::tuple{envelope_max_name, edge, Qt::DotLine, 1.2, &b.max},
                      std::tuple{envelope_lo_name, sigma, Qt::DashLine, 1.0, &b.lo}, std::tuple{envelope_hi_name, sigma, Qt::DashLine, 1.0, &b.hi}})
                    curves.push_back(on_clock({QString::fromUtf8(name), color, style, width, series}, clock_of(0)));
            }
        for (std::size_t i = 0; i < snapshot.legs.size(); ++i) {
            Curve c = styled({QString::fromStdString(snapshot.legs[i].leg), {}, {}, 0, &snapshot.legs[i].series(options.metric)}, i);
            c.smooth = smooth;
            curves.push_back(on_clock(std::move(c), clock_of(i)));
        }
        for (const auto& [metric, points] : snapshot.flag_points) {
            if (metric != options.metric || points.empty()) continue;
            Curve flags{QString::fromUtf8(flags_curve_name), QColor(200, 30, 30), Qt::SolidLine, 1.0, &points, true};
            if (options.x_axis != XAxis::Update) {
                // Each flag at its own leg's clock.
                auto mapped = std::make_shared<Series>();
                for (const auto& f : snapshot.flags) {
                    if (f.metric != metric) continue;
                    const auto* clock = clock_of(leg_index(f.leg));
                    if (auto x = clock ? value_at(*clock, f.update) : std::nullopt) mapped->push_back({*x, f.y});
                }
                std::sort(mapped->begin(), mapped->end(), [](const SeriesPoint& a, const SeriesPoint& b) { return a.update < b.update; });
                flags.owned = mapped;
                flags.series = mapped.get();
            }
            curves.push_back(std::move(flags));
        }
    }
    return curves;
}

namespace {

// The hover tooltip: rich text on a white, framed box (QGraphicsTextItem paints no background).
class TipItem : public QGraphicsTextItem {
public:
    using QGraphicsTextItem::QGraphicsTextItem;
    void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override {
        painter->setPen(QPen(QColor(120, 120, 120), 1));
        painter->setBrush(QColor(255, 255, 255, 235));
        painter->drawRect(boundingRect().adjusted(0.5, 0.5, -0.5, -0.5));
        QGraphicsTextItem::paint(painter, option, widget);
    }
};

}  // namespace

TrajectoryChart::TrajectoryChart() : chart_(new QChart) {
    chart_->setMargins(QMargins(4, 4, 4, 4));
    chart_->legend()->setAlignment(Qt::AlignBottom);
    // A line series' marker is a stretch of its line: a dashed leg looks dashed in the legend too.
    chart_->legend()->setMarkerShape(QLegend::MarkerShapeFromSeries);
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
    // The hover crosshair and its read-out, children of the chart so they move with it.
    crosshair_ = new QGraphicsLineItem(chart_);
    QPen cross(QColor(90, 90, 90));
    cross.setWidthF(1.0);
    cross.setStyle(Qt::DashLine);
    crosshair_->setPen(cross);
    crosshair_->setZValue(1000);
    crosshair_->setVisible(false);
    tip_ = new TipItem(chart_);
    tip_->setZValue(1001);
    tip_->setVisible(false);
    // The plot moves when the window or its labels change size: the crosshair follows it.
    follow_plot_ = QObject::connect(chart_, &QChart::plotAreaChanged, chart_, [this](const QRectF&) { place_crosshair(); });
}

// The chart may outlive this object (its view owns it): it must not call back into it.
TrajectoryChart::~TrajectoryChart() { QObject::disconnect(follow_plot_); }

QValueAxis* TrajectoryChart::x_axis() const { return x_axis_; }
QValueAxis* TrajectoryChart::y_axis() const { return y_axis_; }
std::pair<double, double> TrajectoryChart::y_range() const { return {y_axis_->min(), y_axis_->max()}; }

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
    apply_fonts_and_frame(options);
    set_y_title(options);
    const auto full = full_x_range(curves);
    const auto range = options.x_range ? options.x_range : full;
    YExtent y = draw_curves(curves, options, range, log);
    if (range) set_x_ticks(options, *range);
    set_y_ticks(options, y, range.has_value(), log);
    zero_line_->setVisible(options.residual && range.has_value());
    if (options.residual && range) zero_line_->replace(QList<QPointF>{QPointF(range->first, 0), QPointF(range->second, 0)});
    for (auto* marker : chart_->legend()->markers(zero_line_)) marker->setVisible(false);
    set_title(curves, options);
    place_crosshair();
}

void TrajectoryChart::apply_fonts_and_frame(const ChartOptions& options) {
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
    x_axis_->setLabelsVisible(options.x_labels);
    x_axis_->setTitleText(QString::fromStdString(experiments::x_axis_title(options.x_axis)));
    if (options.compact) {
        // Paper figures: every millimetre goes to the plot (the exporter places the plot area).
        chart_->setMargins(QMargins(0, 0, 0, 0));
        chart_->layout()->setContentsMargins(0, 0, 0, 0);
        chart_->setBackgroundRoundness(0);
        chart_->legend()->setContentsMargins(0, 0, 0, 0);
        chart_->legend()->setAlignment(Qt::AlignTop);
    }
}

// The long title with its unit when it fits the plot's height, else the metric table's short one.
void TrajectoryChart::set_y_title(const ChartOptions& options) {
    const QFontMetricsF fm(y_axis_->titleFont());
    QString title = y_axis_title(options, false);
    const double room = options.compact ? options.rows : options.rows * 0.7;
    if (fm.horizontalAdvance(title) > room) title = y_axis_title(options, true);
    y_axis_->setTitleText(title);
}

// One series of the chart drawn (or kept: a series whose recorded points, range and display settings
// are as at the last update keeps its drawn points, so a live batch that appends to one run recomputes
// that run's curves only); its y extent joins `y` unless it is hidden.
QXYSeries* TrajectoryChart::draw_series(const QString& name, const Series& source, bool smoothed, bool markers,
                                        bool hidden, const DrawContext& ctx, YExtent& y) {
    const ChartOptions& options = ctx.options;
    const auto& range = ctx.range;
    auto* series = series_for(name, markers);
    series->setVisible(!hidden);
    DrawnKey key{&source, source.size(), source.empty() ? 0.0 : source.back().update, source.empty() ? 0.0 : source.back().value,
                 range ? range->first : 0.0, range ? range->second : 0.0, options.columns, ctx.log, smoothed ? options.smoothing : 0.0};
    auto cached = drawn_.find(name);
    if (cached == drawn_.end() || !(cached->second.key == key)) {
        const Series& s = smoothed ? (smoothed_storage_ = smoothed_for_display(source, options.smoothing)) : source;
        // Buckets two pixels wide: each keeps its minimum and maximum, so no recorded value leaves
        // the picture, and a long run costs about one point per pixel to paint.
        const int buckets = std::max(50, options.columns / 2);
        QList<QPointF> points = range ? envelope_points(s, range->first, range->second, buckets) : QList<QPointF>{};
        if (ctx.log) {
            points.removeIf([](const QPointF& p) { return !(p.y() > 0); });
            for (auto& p : points) p.setY(std::log10(p.y()));  // a linear axis over log10(y): labels stay ours
        }
        Drawn d{key};
        d.y_lo = d.full_lo = std::numeric_limits<double>::infinity();
        d.y_hi = d.full_hi = -d.y_lo;
        for (const auto& p : points) {
            if (range && (p.x() < range->first || p.x() > range->second)) continue;
            if (!std::isfinite(p.y())) continue;
            d.y_lo = std::min(d.y_lo, p.y());
            d.y_hi = std::max(d.y_hi, p.y());
        }
        for (const auto& p : s) {
            const double v = ctx.log ? (p.value > 0 ? std::log10(p.value) : std::nan("")) : p.value;
            if (!std::isfinite(v)) continue;
            d.full_lo = std::min(d.full_lo, v);
            d.full_hi = std::max(d.full_hi, v);
        }
        // Markers show where the few points of a short series are; with many curves they only clutter.
        if (!markers) {
            // In print only the few points of an evaluation series get a marker.
            series->setPointsVisible(points.size() <= (options.compact ? 12 : 60) && ctx.line_count <= 8);
            if (options.compact) series->setMarkerSize(3.5);  // a point, not a blot, at print size
        }
        series->replace(points);
        cached = drawn_.insert_or_assign(name, d).first;
    }
    if (!hidden) {
        // Hidden curves leave the autoscale: the visible ones fill the plot.
        y.lo = std::min(y.lo, cached->second.y_lo);
        y.hi = std::max(y.hi, cached->second.y_hi);
        y.full_lo = std::min(y.full_lo, cached->second.full_lo);
        y.full_hi = std::max(y.full_hi, cached->second.full_hi);
    }
    return series;
}

void TrajectoryChart::style_series(QXYSeries* series, const Curve& c, bool faded, const ChartOptions& options) {
    QPen pen = curve_pen(c);
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
}

// Every curve's series (a smoothed curve: its faded raw line under the smoothed one, one legend entry),
// the series no curve wants any more removed; returns the y extent of the visible ones.
TrajectoryChart::YExtent TrajectoryChart::draw_curves(const std::vector<Curve>& curves, const ChartOptions& options,
                                                      const std::optional<std::pair<double, double>>& range, bool log) {
    const DrawContext ctx{options, range, log,
                          std::count_if(curves.begin(), curves.end(), [](const Curve& c) { return c.series && !c.markers; })};
    YExtent y;
    std::set<QString> wanted;
    for (const auto& c : curves) {
        if (!c.series) continue;
        const bool hidden = options.hidden.count(c.name) > 0;
        wanted.insert(c.name);
        if (c.markers) {
            auto* series = draw_series(c.name, *c.series, false, true, hidden, ctx, y);
            if (series->color() != c.color) {
                series->setColor(c.color);
                if (auto* scatter = qobject_cast<QScatterSeries*>(series)) scatter->setBorderColor(c.color);
            }
            continue;
        }
        auto* raw = draw_series(c.name, *c.series, false, false, hidden, ctx, y);
        const bool smoothed = options.smoothing > 0 && c.smooth;
        style_series(raw, c, smoothed, options);
        for (auto* marker : chart_->legend()->markers(raw)) marker->setVisible(!smoothed);  // one entry: the smoothed line
        if (smoothed) {
            const QString name = c.name + QStringLiteral(" (smoothed)");
            wanted.insert(name);
            style_series(draw_series(name, *c.series, true, false, hidden, ctx, y), c, false, options);
        }
    }
    for (auto it = series_.begin(); it != series_.end();) {
        if (wanted.count(it->first)) { ++it; continue; }
        chart_->removeSeries(it->second);
        delete it->second;
        drawn_.erase(it->first);
        it = series_.erase(it);
    }
    return y;
}

// The x axis: nice ticks placed at their values (integers on the update and token axes), as many as
// fit without their labels touching.
void TrajectoryChart::set_x_ticks(const ChartOptions& options, const std::pair<double, double>& range) {
    const QFontMetricsF fm(x_axis_->labelsFont());
    const double plot_w = options.plot_width > 0 ? options.plot_width : options.columns * 0.85;
    const bool integers = experiments::x_axis_info(options.x_axis).integers;
    // Start with ticks every ~50 px in a figure (70 on screen) and thin them until labels do not touch.
    int max_x = std::clamp(static_cast<int>(plot_w / (options.compact ? 50 : 70)), 2, 11);
    AxisTicks t;
    for (;;) {
        t = linear_ticks(range.first, range.second, max_x, integers);
        double widest = 0;
        for (const auto& l : t.labels) widest = std::max(widest, fm.horizontalAdvance(QString::fromStdString(l)));
        const double step_px = t.step / (range.second - range.first) * plot_w;
        if (max_x <= 2 || t.values.size() < 2 || step_px >= widest + 1.5 * fm.averageCharWidth()) break;
        max_x = std::min(max_x - 1, static_cast<int>(t.values.size()) - 1);
    }
    set_ticks(x_axis_, range.first, range.second, t.values, t.labels, false);
    if (!options.compact && !t.labels.empty()) {
        // The last label is centred on the plot's right edge: room for its right half.
        const int half = static_cast<int>(std::ceil(fm.horizontalAdvance(QString::fromStdString(t.labels.back())) / 2)) + 4;
        QMargins m = chart_->margins();  // the left one is the view's (aligned plot areas)
        if (m.right() != std::max(4, half)) {
            m.setRight(std::max(4, half));
            chart_->setMargins(m);
        }
    }
}

// The y axis: the visible points' extent (the zero line always in view on a residual panel; the data's
// whole range when nothing is inside a zoom; never narrower than 1 % of it), padded, with as many ticks
// as fit.
void TrajectoryChart::set_y_ticks(const ChartOptions& options, YExtent y, bool has_range, bool log) {
    if (options.residual && has_range) {
        y.lo = std::min(y.lo, 0.0);
        y.hi = std::max(y.hi, 0.0);
    }
    if (!(y.hi >= y.lo) && y.full_hi >= y.full_lo) {
        y.lo = y.full_lo;
        y.hi = y.full_hi;
    }
    if (options.x_range && y.full_hi > y.full_lo && y.hi >= y.lo) {
        // Zoomed in: two nearly equal points would otherwise fill the plot with float noise.
        const double floor = 0.01 * (y.full_hi - y.full_lo);
        if (y.hi - y.lo < floor) {
            const double mid = 0.5 * (y.lo + y.hi);
            y.lo = mid - floor / 2;
            y.hi = mid + floor / 2;
        }
    }
    if (!(y.hi >= y.lo)) return;
    double pad = (y.hi - y.lo) * 0.05;
    if (pad == 0) pad = log ? 0.02 : std::max(std::abs(y.hi) * 0.05, 1e-12);
    const double lo = y.lo - pad, hi = y.hi + pad;
    // As many ticks as fit 2.2 label heights apart, at least three labelled.
    const double label_h = QFontMetricsF(y_axis_->labelsFont()).height();
    const double plot_h = options.compact ? options.rows : options.rows * 0.75;
    const int y_max = std::clamp(static_cast<int>(plot_h / (2.2 * label_h)), 3, 8);
    AxisTicks t = log ? log_ticks(std::pow(10.0, lo), std::pow(10.0, hi), y_max) : linear_ticks(lo, hi, y_max, false);
    for (int more = y_max + 1; t.values.size() < 3 && more <= 16; ++more)
        t = log ? log_ticks(std::pow(10.0, lo), std::pow(10.0, hi), more) : linear_ticks(lo, hi, more, false);
    if (log && t.values.size() < 3) t = linear_ticks(std::pow(10.0, lo), std::pow(10.0, hi), 4, false);
    set_ticks(y_axis_, lo, hi, t.values, t.labels, log);
    y_ticks_ = t.values;
}

void TrajectoryChart::set_title(const std::vector<Curve>& curves, const ChartOptions& options) {
    if (options.compact || !options.title)
        chart_->setTitle(QString());  // a figure's residual panel says what it is in its y title
    else if (options.residual && options.z)
        chart_->setTitle(options.z_title.isEmpty() ? QStringLiteral("held-out CE: z in the seed envelope") : options.z_title);
    else if (options.residual)
        chart_->setTitle(curves.empty() ? QStringLiteral("%1 — no paired points yet (experiments/ compares two legs once both have them)")
                                              .arg(residual_chart_title(options.metric))
                                        : residual_chart_title(options.metric));
    else
        chart_->setTitle(QString());
}

void TrajectoryChart::set_crosshair(std::optional<double> x, const QString& tip) {
    crosshair_at_ = x;
    tip_->setHtml(tip);
    tip_->setVisible(x.has_value() && !tip.isEmpty());
    place_crosshair();
}

void TrajectoryChart::place_crosshair() {
    const QRectF plot = chart_->plotArea();
    if (!crosshair_at_ || plot.isEmpty() || *crosshair_at_ < x_axis_->min() || *crosshair_at_ > x_axis_->max()) {
        crosshair_->setVisible(false);
        tip_->setVisible(false);
        return;
    }
    const double x = chart_->mapToPosition(QPointF(*crosshair_at_, y_axis_->min()), zero_line_).x();
    crosshair_->setLine(QLineF(x, plot.top(), x, plot.bottom()));
    crosshair_->setVisible(true);
    if (tip_->toPlainText().isEmpty()) return;
    // Beside the line, inside the plot: right of it when there is room, else left.
    const QRectF box = tip_->boundingRect();
    double left = x + 8;
    if (left + box.width() > plot.right()) left = std::max(plot.left(), x - 8 - box.width());
    tip_->setPos(left, plot.top() + 4);
    tip_->setVisible(true);
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
