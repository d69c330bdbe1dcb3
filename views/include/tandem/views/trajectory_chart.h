#pragma once
// One trajectory panel as a QChart: curves of one metric (every leg of one run, chosen legs of
// several runs, or the residuals experiments/ computed) on a shared update axis. Used by the
// on-screen panels and, built afresh at the chosen size and font, by the exporter, so a figure
// shows exactly what the window shows. Ticks are nice numbers at their values (axis_ticks.h).
#include "tandem/views/run_snapshot.h"

#include <QColor>
#include <QString>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

QT_BEGIN_NAMESPACE
class QChart;
class QCategoryAxis;
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
    double smoothing = 0;      // display EMA weight; the raw curve stays drawn underneath
    std::optional<std::pair<double, double>> x_range;  // nullopt: everything
    int columns = 800;         // horizontal pixels available; more points than 2x this -> envelope
    int rows = 300;            // vertical pixels available (how many y ticks fit)
    int font_pt = 0;           // 0: the application font
    QString font_family;       // empty: the application font's family
    bool legend = true;
    bool title = true;         // the residual panel's title (metric, leg − reference)
    bool x_title = true;       // "update" under the x axis (a stacked figure keeps it on the bottom panel)
    bool compact = false;      // figure export: no margins around the plot and the legend
};

QColor leg_color(std::size_t index);  // Okabe–Ito palette

// One drawn line: its legend name, pen, and the recorded points (owned by the caller).
struct Curve {
    QString name;
    QColor color;
    Qt::PenStyle style = Qt::SolidLine;
    double width = 1.4;
    const Series* series = nullptr;
    bool markers = false;  // drawn as markers, not a line (the gate's flags)
};

// The curves of one run's legs (colour per leg; the first leg wide and solid, the others dashed on
// top so coinciding curves still show every leg), or of its residuals when options.residual.
std::vector<Curve> run_curves(const RunSnapshot& snapshot, const ChartOptions& options);

// The residual panel's y-axis title, its chart title for a metric, and one residual curve's name.
extern const char* const residual_axis_title;
QString residual_chart_title(Metric metric);
QString z_chart_title(const RunSnapshot& snapshot);  // the z panel's title (names the envelope)
// The names of the envelope band's curves and of the flag markers (legend, hover, tests).
extern const char* const envelope_min_name;
extern const char* const envelope_max_name;
extern const char* const envelope_lo_name;
extern const char* const envelope_hi_name;
extern const char* const flags_curve_name;
std::string residual_name(const ResidualTrajectory& r);
// Each panel's y-axis title ("held-out CE", "learning rate", ...).
QString metric_axis_title(Metric metric);

class TrajectoryChart {
public:
    TrajectoryChart();  // creates the QChart (owned by whoever takes chart(): a QChartView or the caller)
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
    // The tick values and labels currently set on the axes (y in data units, also on a log axis).
    const std::vector<double>& x_ticks() const { return x_ticks_; }
    const std::vector<double>& y_ticks() const { return y_ticks_; }

private:
    QXYSeries* series_for(const QString& name, bool markers = false);
    void set_ticks(QCategoryAxis* axis, double lo, double hi, const std::vector<double>& values,
                   const std::vector<std::string>& labels, bool log);

    QChart* chart_ = nullptr;
    QCategoryAxis* x_axis_ = nullptr;
    QCategoryAxis* y_axis_ = nullptr;
    QXYSeries* zero_line_ = nullptr;
    std::vector<double> x_ticks_, y_ticks_;
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
        double y_lo = 0, y_hi = 0;
    };
    std::map<QString, Drawn> drawn_;
    Series smoothed_storage_;
};

}  // namespace tandem::views
