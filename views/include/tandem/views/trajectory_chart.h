#pragma once
// One trajectory panel as a QChart: every leg's series of one metric (or the residuals experiments/
// computed) on a shared update axis. Used by the on-screen panels and, built afresh at the chosen
// size and font, by the exporter, so a figure shows exactly what the window shows.
#include "tandem/views/run_snapshot.h"

#include <QColor>
#include <QString>

#include <map>
#include <optional>
#include <string>
#include <utility>

QT_BEGIN_NAMESPACE
class QChart;
class QAbstractAxis;
class QValueAxis;
class QXYSeries;
QT_END_NAMESPACE

namespace tandem::views {

struct ChartOptions {
    Metric metric = Metric::HeldoutLoss;
    bool residual = false;     // draw snapshot.residuals of `metric` instead of the legs' values
    bool log_y = false;        // ignored for residuals (they change sign)
    double smoothing = 0;      // display EMA weight; the raw curve stays drawn underneath
    std::optional<std::pair<double, double>> x_range;  // nullopt: everything
    int columns = 800;         // horizontal pixels available; more points than 2x this -> envelope
    int font_pt = 0;           // 0: the application font
    bool legend = true;
};

QColor leg_color(std::size_t leg_index);

// The residual panel's y-axis title and the name of one residual curve ("engine − reference").
extern const char* const residual_axis_title;
std::string residual_name(const ResidualTrajectory& r);

class TrajectoryChart {
public:
    TrajectoryChart();  // creates the QChart (owned by whoever takes chart(): a QChartView or the caller)
    QChart* chart() const { return chart_; }

    // Replaces the drawn points (one QXYSeries::replace per series; series are reused by name).
    void update(const RunSnapshot& snapshot, const ChartOptions& options);

    // The x range covering every point of the snapshot for this chart's metric.
    static std::optional<std::pair<double, double>> full_x_range(const RunSnapshot& snapshot, const ChartOptions& options);

    // Number of points in the series drawn for `name` (the raw, unsmoothed series); -1 if absent.
    int drawn_point_count(const QString& name) const;
    QValueAxis* x_axis() const { return x_axis_; }

private:
    QXYSeries* series_for(const QString& name, const QColor& color, bool smoothed);
    void set_y_axis(bool log);

    QChart* chart_ = nullptr;
    QValueAxis* x_axis_ = nullptr;
    QAbstractAxis* y_axis_ = nullptr;
    bool y_is_log_ = false;
    std::map<QString, QXYSeries*> series_;
};

}  // namespace tandem::views
