#pragma once
// The trajectories page: held-out loss, grad norm and the residual panel stacked on one update axis.
// Zoom (rubber band or wheel) and pan (right-drag or arrow keys) are shared by every panel; hovering
// shows every leg's value at the nearest recorded update. New data (live runs) is coalesced into
// one redraw per 40 ms, PlotJuggler style.
#include "tandem/views/run_snapshot.h"
#include "tandem/views/trajectory_chart.h"

#include <QChartView>
#include <QWidget>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

QT_BEGIN_NAMESPACE
class QCheckBox;
class QComboBox;
class QLabel;
class QSlider;
class QTimer;
QT_END_NAMESPACE

namespace tandem::views {

class ChartPanel;

class TrajectoryView : public QWidget {
    Q_OBJECT
public:
    explicit TrajectoryView(QWidget* parent = nullptr);
    ~TrajectoryView() override;

    // Takes a new snapshot; the redraw happens on the coalescing timer (or now, with redraw_now()).
    void set_snapshot(RunSnapshot snapshot);
    void redraw_now();
    const RunSnapshot& snapshot() const { return snapshot_; }

    void set_log_y(bool on);
    void set_smoothing(double weight);
    void set_x_range(std::optional<std::pair<double, double>> range);  // nullopt: fit everything
    std::optional<std::pair<double, double>> visible_x_range() const { return x_range_; }
    // What the residual panel shows: held-out loss, training loss or grad norm (percent, leg − reference).
    void set_residual_metric(Metric metric);
    Metric residual_metric() const;

    // The panels, for export and tests: 0 held-out loss, 1 grad norm, 2 residual.
    int panel_count() const { return static_cast<int>(panels_.size()); }
    ChartOptions panel_options(int panel) const;
    const TrajectoryChart& panel_chart(int panel) const;
    QChartView* panel_view(int panel) const;
    QString hover_text() const;

Q_SIGNALS:
    void x_range_changed(double lo, double hi);

private:
    void on_panel_zoom(double lo, double hi);
    void on_hover(double update);
    void schedule_redraw();

    RunSnapshot snapshot_;
    std::vector<ChartPanel*> panels_;
    std::vector<std::unique_ptr<TrajectoryChart>> charts_;
    std::optional<std::pair<double, double>> x_range_;
    bool log_y_ = false;
    double smoothing_ = 0;
    QTimer* redraw_timer_ = nullptr;
    QCheckBox* log_box_ = nullptr;
    QSlider* smoothing_slider_ = nullptr;
    QComboBox* residual_metric_ = nullptr;
    QLabel* hover_label_ = nullptr;
};

}  // namespace tandem::views
