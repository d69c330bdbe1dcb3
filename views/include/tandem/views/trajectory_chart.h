#pragma once
// One trajectory panel as a QChart: curves of one metric (every leg of one run, chosen legs of
// several runs, or the residuals experiments/ computed) on a shared update axis. Used by the
// on-screen panels and, built afresh at the chosen size and font, by the exporter, so a figure
// shows exactly what the window shows. Ticks are nice numbers at their values (axis_ticks.h).
#include "tandem/views/run_snapshot.h"

#include <QColor>
#include <QMetaObject>
#include <QPen>
#include <QRectF>
#include <QString>

#include <map>
#include <memory>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

QT_BEGIN_NAMESPACE
class QChart;
class QCategoryAxis;
class QGraphicsLineItem;
class QGraphicsTextItem;
class QPainter;
class QValueAxis;
class QXYSeries;
QT_END_NAMESPACE

namespace tandem::views {

struct ChartOptions {
    Metric metric = Metric::HeldoutCe;
    bool residual = false;     // draw the residuals of `metric` instead of the legs' values
    bool z = false;            // with `residual`: the legs' held-out CE in envelope std (z) instead of percent
    QString z_title;           // the z panel's title (z_chart_title of the run)
    bool envelope = true;      // the seed envelope's band behind the legs (when the run has one)
    bool log_y = false;        // ignored for residuals (they change sign)
    double smoothing = 0;      // display EMA weight of the curves marked `smooth`; the raw curve stays drawn underneath
    bool smooth_all = false;   // smooth every curve, evaluations included (else the metric table's training series only)
    XAxis x_axis = XAxis::Update;  // what x counts: the curves' points are mapped by the legs' clocks
    std::optional<std::pair<double, double>> x_range;  // nullopt: everything (in x_axis units)
    int columns = 800;         // horizontal pixels available; more points than 2x this -> envelope
    int rows = 300;            // vertical pixels available (how many y ticks fit)
    int font_pt = 0;           // 0: the application font
    QString font_family;       // empty: the application font's family
    bool legend = true;        // Qt's legend inside the chart (the trajectory page and figures draw their own)
    bool title = true;         // the residual panel's title (metric, leg − reference)
    bool x_title = true;       // "update" under the x axis (a stacked figure keeps it on the bottom panel)
    bool x_labels = true;      // the x tick labels (a stacked figure: the bottom panel only)
    bool compact = false;      // figure export: no margins, short titles with units, no chart title
    QString y_title;           // non-empty: the y axis title instead of the metric's (other pages' charts)
    std::set<QString> hidden;  // curve names hidden by a click on their legend entry
    double plot_width = 0;     // the plot area's width when known (figures): how many x labels fit
};

// A palette of 12 colours that stay apart on white, in print and for colour-blind readers (Okabe–Ito's
// seven without its yellow, then five of ColorBrewer's Dark2/Set1); index 12 on repeats it darker.
inline constexpr std::size_t kPaletteSize = 12;
QColor leg_color(std::size_t index);

// One drawn line: its legend name, pen, and the recorded points (owned by the caller).
struct Curve {
    QString name;
    QColor color;
    Qt::PenStyle style = Qt::SolidLine;
    double width = 1.4;
    const Series* series = nullptr;
    bool markers = false;  // drawn as markers, not a line (the gate's flags)
    bool smooth = false;   // display smoothing applies (a per-update training series: experiments' metric table)
    std::shared_ptr<const Series> owned = nullptr;  // the points on another x axis (series points into it)
};
// The pen a curve is drawn with (legend samples use it too, so a dashed leg looks dashed there).
QPen curve_pen(const Curve& curve);
// The curve drawn against the x of `clock` (a leg's tokens-seen or wall-time series): points whose
// update the clock has, at the clock's value; unchanged for a null clock.
Curve on_clock(Curve curve, const Series* clock);
// A legend sample: a short stretch of the curve's line (or its marker) in `box`.
void paint_legend_sample(QPainter& painter, const QRectF& box, const Curve& curve);

// The curves of one run's legs (colour per leg; the first leg wide and solid, the others dashed on
// top so coinciding curves still show every leg), or of its residuals when options.residual.
std::vector<Curve> run_curves(const RunSnapshot& snapshot, const ChartOptions& options);

// The residual panel's y-axis title, its chart title for a metric, and one residual curve's name.
extern const char* const residual_axis_title;
QString residual_chart_title(Metric metric);
// A figure's y title for the residual panel, with its unit: "Δ held-out CE [%]" (the legend names the pairs).
QString residual_figure_title(Metric metric, bool short_label = false);
QString z_chart_title(const RunSnapshot& snapshot);  // the z panel's title (names the envelope)
// The names of the envelope band's curves and of the flag markers (legend, hover, tests).
extern const char* const envelope_min_name;
extern const char* const envelope_max_name;
extern const char* const envelope_lo_name;
extern const char* const envelope_hi_name;
extern const char* const flags_curve_name;
std::string residual_name(const ResidualTrajectory& r);
// Each panel's y-axis title with its unit from the metric table ("held-out CE [nats]", "grad norm").
QString metric_title(Metric metric, bool short_label = false);
// The y title of a panel drawn with these options (metric, residual, z, or options.y_title).
QString y_axis_title(const ChartOptions& options, bool short_label = false);

class TrajectoryChart {
public:
    TrajectoryChart();  // creates the QChart (owned by whoever takes chart(): a QChartView or the caller)
    ~TrajectoryChart();
    TrajectoryChart(const TrajectoryChart&) = delete;
    TrajectoryChart& operator=(const TrajectoryChart&) = delete;
    QChart* chart() const { return chart_; }

    // Replaces the drawn points (one QXYSeries::replace per series; series are reused by name).
    void update(const std::vector<Curve>& curves, const ChartOptions& options);
    void update(const RunSnapshot& snapshot, const ChartOptions& options) { update(run_curves(snapshot, options), options); }

    // The x range covering every point of these curves.
    static std::optional<std::pair<double, double>> full_x_range(const std::vector<Curve>& curves);
    static std::optional<std::pair<double, double>> full_x_range(const RunSnapshot& snapshot, const ChartOptions& options) {
        return full_x_range(run_curves(snapshot, options));
    }

    // Number of points in the series drawn for `name` (the raw, unsmoothed series); -1 if absent.
    int drawn_point_count(const QString& name) const;
    int drawn_point_total() const;  // over every series
    QValueAxis* x_axis() const;
    QValueAxis* y_axis() const;
    // The tick values and labels currently set on the axes (y in data units, also on a log axis).
    const std::vector<double>& y_ticks() const { return y_ticks_; }
    // The y range drawn (in axis units: log10 on a log axis).
    std::pair<double, double> y_range() const;

    // The hover crosshair: a vertical line at x (data units) across the plot; nullopt hides it.
    // `tip`: rich text listing every curve's value there, drawn beside the line inside the plot
    // (empty: none, as in the panels the pointer is not over).
    void set_crosshair(std::optional<double> x, const QString& tip = {});
    std::optional<double> crosshair_x() const { return crosshair_at_; }
    QGraphicsLineItem* crosshair_line() const { return crosshair_; }
    QGraphicsTextItem* crosshair_tip() const { return tip_; }

private:
    QXYSeries* series_for(const QString& name, bool markers = false);
    void set_ticks(QCategoryAxis* axis, double lo, double hi, const std::vector<double>& values,
                   const std::vector<std::string>& labels, bool log);

    QChart* chart_ = nullptr;
    QCategoryAxis* x_axis_ = nullptr;
    QCategoryAxis* y_axis_ = nullptr;
    QXYSeries* zero_line_ = nullptr;
    QGraphicsLineItem* crosshair_ = nullptr;
    QGraphicsTextItem* tip_ = nullptr;
    std::optional<double> crosshair_at_;
    QMetaObject::Connection follow_plot_;
    void place_crosshair();
    std::vector<double> y_ticks_;
    std::map<QString, QXYSeries*> series_;
    // What each series was last drawn from, to skip the ones a live batch did not touch.
    struct DrawnKey {
        const Series* source = nullptr;
        std::size_t size = 0;
        double last_update = 0, last_value = 0;
        double x_lo = 0, x_hi = 0;
        int columns = 0;
        bool log = false;
        double smoothing = 0;
        bool operator==(const DrawnKey&) const = default;
    };
    struct Drawn {
        DrawnKey key;
        double y_lo = 0, y_hi = 0;        // over the visible x range
        double full_lo = 0, full_hi = 0;  // over every point (the floor of a degenerate visible range)
    };
    std::map<QString, Drawn> drawn_;
    Series smoothed_storage_;

    // update()'s steps, in its order.
    struct YExtent {
        double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
        double full_lo = std::numeric_limits<double>::infinity(), full_hi = -std::numeric_limits<double>::infinity();
    };
    struct DrawContext {
        const ChartOptions& options;
        const std::optional<std::pair<double, double>>& range;
        bool log;
        std::ptrdiff_t line_count;  // curves drawn as lines (markers only where there are few)
    };
    void apply_fonts_and_frame(const ChartOptions& options);
    void set_y_title(const ChartOptions& options);
    YExtent draw_curves(const std::vector<Curve>& curves, const ChartOptions& options,
                        const std::optional<std::pair<double, double>>& range, bool log);
    QXYSeries* draw_series(const QString& name, const Series& source, bool smoothed, bool markers, bool hidden,
                           const DrawContext& ctx, YExtent& y);
    void style_series(QXYSeries* series, const Curve& c, bool faded, const ChartOptions& options);
    void set_x_ticks(const ChartOptions& options, const std::pair<double, double>& range);
    void set_y_ticks(const ChartOptions& options, YExtent y, bool has_range, bool log);
    void set_title(const std::vector<Curve>& curves, const ChartOptions& options);
};

}  // namespace tandem::views
