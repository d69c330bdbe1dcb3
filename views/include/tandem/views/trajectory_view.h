#pragma once
// The trajectories page (and the compare page's overlay): a panel per metric of experiments' metric
// table (held-out CE, training loss, grad norm, learning rate, throughput) and the residual panel
// stacked on one x axis (update, tokens seen or wall time). Zoom (rubber band or wheel) and pan (right-drag or arrow keys) are shared by every
// panel and kept inside the data; y follows the visible x range. Hovering draws a crosshair on
// every panel and, in the panel under the pointer, a read-out of every curve at that x. One legend
// beside the panels names every curve with a stretch of its line; clicking an entry hides or shows
// that curve on every panel. New data (live runs) is appended and coalesced into one redraw per
// 40 ms, PlotJuggler style; another run resets the zoom.
//
// One run: a colour per leg. Several runs (compare): a colour per run, kept for as long as the view
// lives (adding or removing a run never recolours the others), a line style per leg, and curves
// named "<what tells the run apart> · <leg>" (experiments' run_labels: the run's own tags, else the
// settings that differ between the runs); `set_shown_legs` picks which legs of which runs are drawn.
#include "tandem/views/run_snapshot.h"
#include "tandem/views/run_source.h"
#include "tandem/views/trajectory_chart.h"

#include <QChartView>
#include <QWidget>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

QT_BEGIN_NAMESPACE
class QCheckBox;
class QComboBox;
class QLabel;
class QListWidget;
class QSlider;
class QTimer;
QT_END_NAMESPACE

namespace tandem::views {

class ChartPanel;

// A leg of a run, as the compare page names it.
struct RunLeg {
    std::string run_id;
    std::string leg;
    bool operator<(const RunLeg& o) const { return std::tie(run_id, leg) < std::tie(o.run_id, o.leg); }
    bool operator==(const RunLeg& o) const { return run_id == o.run_id && leg == o.leg; }
};

class TrajectoryView : public QWidget {
    Q_OBJECT
public:
    // The panels are experiments' metric table, in its order (panel i draws metric_table()[i]), then
    // the residual panel: a metric added to the table gets a panel of its own and moves no other
    // metric's (no list of panels is written here). Name a panel by its metric, never by number.
    static int panel_count();  // every panel: one per metric, and the residual panel
    static int metric_panel(Metric metric);
    static int residual_panel();
    static std::optional<Metric> panel_metric(int panel);  // nullopt for the residual panel
    static QString panel_name(int panel);                  // the metric's label; "residual"
    // The panels of the paper figure (File > Export multi-panel figure; the compare page's figure
    // dialog starts with them): held-out CE, its residual, grad norm, named by metric.
    static std::vector<int> figure_panels();

    explicit TrajectoryView(QWidget* parent = nullptr);
    ~TrajectoryView() override;

    // One run: replaces everything (the hover read-out clears when it is another run).
    void set_snapshot(RunSnapshot snapshot);
    // New rows of the run `delta.added.run_id` (appended; a reset delta replaces that run).
    void apply_delta(const IncrementalRunReader::Delta& delta);
    // Several runs (compare): replaces the set; colours stay with their runs.
    void set_runs(std::vector<RunSnapshot> runs);
    void remove_run(const std::string& run_file);
    // Which legs are drawn (empty: every leg of every run).
    void set_shown_legs(std::set<RunLeg> legs);
    void redraw_now();
    const RunSnapshot& snapshot() const;  // the first run (an empty one when none)
    const std::vector<RunSnapshot>& runs() const { return runs_; }
    bool multi_run() const { return runs_.size() > 1; }
    QColor run_color(const std::string& run_id);
    // The user's tags per run id (from the catalog): a run's own tags name it in the legend.
    void set_run_tags(std::map<std::string, std::vector<std::string>> tags);
    // What names each run's curves (several runs): run id -> label.
    QString run_label(const std::string& run_id) const;

    void set_log_y(bool on);
    void set_smoothing(double weight);
    double smoothing() const { return chosen_.smoothing; }
    QString smoothing_text() const;  // the value shown beside the slider ("0.60", "off")
    // Smoothing applies to the per-update training series (experiments' metric table); on: to
    // every curve, the held-out CE's few evaluations included.
    void set_smooth_all(bool on);
    // What x counts on every panel; the zoom resets (another unit).
    void set_x_axis(XAxis axis);
    XAxis x_axis() const { return chosen_.x_axis; }
    // Curves hidden by a click on their legend entry (by name, on every panel).
    void set_curve_hidden(const QString& name, bool hidden);
    const std::set<QString>& hidden_curves() const { return chosen_.hidden; }
    QListWidget* legend() const { return legend_; }
    // The x range every curve spans (nullopt without data): zoom and pan stay inside it.
    std::optional<std::pair<double, double>> data_x_range() const;
    void set_x_range(std::optional<std::pair<double, double>> range);  // nullopt: fit everything
    std::optional<std::pair<double, double>> visible_x_range() const { return chosen_.x_range; }
    // What the residual panel shows: held-out CE, training loss or grad norm (percent, leg − reference).
    void set_residual_metric(Metric metric);
    Metric residual_metric() const;
    // The residual panel in units of the seed envelope's spread (z per evaluation, experiments'
    // envelope_z_points) instead of percent.
    void set_residual_z(bool on);
    bool residual_z() const;
    // The verdict line shown at the top (one run), as drawn.
    QString verdict_text() const;
    void set_panel_visible(int panel, bool visible);
    bool panel_visible(int panel) const;

    // The panels, for export and tests.
    ChartOptions panel_options(int panel) const;
    // The curves panel `panel` draws now (pointing into this view's runs).
    std::vector<Curve> panel_curves(int panel) const;
    const TrajectoryChart& panel_chart(int panel) const;
    QChartView* panel_view(int panel) const;
    QString hover_text() const;
    // The read-out for the pointer at x (in x-axis units) over panel `panel` (what moving the mouse
    // over a panel does): the crosshair on every shown panel, the tooltip on `panel` (-1: none).
    void hover_at(double x, int panel = -1);
    void clear_hover();
    // The hovered panel's tooltip text (plain), "" when none.
    QString hover_tooltip_text() const;

Q_SIGNALS:
    void x_range_changed(double lo, double hi);

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    static constexpr int kZScores = 1000;  // the residual choice "z" (not a Metric)
    void update_verdict();
    void on_panel_zoom(double lo, double hi, bool pan);
    void schedule_redraw();
    void refresh_labels();
    void rebuild_legend();
    void fit_legend_width();
    void align_plot_areas();
    void new_run_shown();  // another run: zoom and hover start afresh
    QString curve_name(std::size_t run, const std::string& leg) const;
    bool shown(std::size_t run, const std::string& leg) const;

    std::vector<RunSnapshot> runs_;
    std::set<RunLeg> shown_legs_;
    std::map<std::string, std::size_t> run_colors_;  // run id -> palette index, never reassigned
    std::map<std::string, std::vector<std::string>> run_tags_;
    std::map<std::string, QString> run_labels_;  // run id -> what names its curves (several runs)
    std::vector<ChartPanel*> panels_;
    std::vector<std::unique_ptr<TrajectoryChart>> charts_;
    std::vector<QCheckBox*> panel_boxes_;
    // What the user chose (log y, smoothing, x axis and range, hidden curves): every panel's
    // options start from it.
    ChartOptions chosen_;
    std::optional<double> hovered_;
    int hovered_panel_ = -1;
    QListWidget* legend_ = nullptr;
    QStringList legend_names_;  // what the legend lists now (rebuilt when it changes)
    int legend_width_ = 120;    // what its longest name needs
    QComboBox* x_axis_box_ = nullptr;
    QLabel* smoothing_value_ = nullptr;
    QCheckBox* smooth_all_box_ = nullptr;
    QTimer* redraw_timer_ = nullptr;
    QCheckBox* log_box_ = nullptr;
    QSlider* smoothing_slider_ = nullptr;
    QComboBox* residual_metric_ = nullptr;
    QLabel* hover_label_ = nullptr;
    QLabel* verdict_label_ = nullptr;
};

}  // namespace tandem::views
