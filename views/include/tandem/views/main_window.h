#pragma once
// The workbench window: pages Runs, Launch, Trajectories, Token diff, Tables; menus and shortcuts
// for the main actions; window layout, recent runs and the catalog remembered in QSettings;
// run files dropped on the window are opened.
#include "tandem/views/export.h"
#include "tandem/views/run_follower.h"
#include "tandem/views/run_snapshot.h"

#include <QMainWindow>

#include <memory>

QT_BEGIN_NAMESPACE
class QLabel;
class QMenu;
class QTabWidget;
QT_END_NAMESPACE

namespace tandem::views {

class CompareView;
class FaultHeatmapView;
class DivergenceView;
class LauncherView;
class RunFollower;
class RunsBrowser;
class TablesView;
class TokenDiffView;
class TrajectoryView;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    enum Page { RunsPage, LaunchPage, TrajectoriesPage, TokenDiffPage, TablesPage, ComparePage, FaultsPage, DivergencePage };

    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    void open_catalog(const QString& path);
    // Opens a run file or folder: follows it (live while legs write), fills every page. A path
    // that is not a run is refused at once with an error naming it; the open run stays open and
    // Recent runs is not touched. `pending`: a run folder the runner is still preparing (launcher).
    bool open_run(const QString& path, bool pending = false);
    QString current_run() const { return run_path_; }
    // The error shown in the window's error bar (empty when none).
    QString error_text() const;
    void show_error(const QString& message);

    void show_page(Page page);
    // Grabs every page into `dir` as runs.png, launch.png, trajectories.png, token-diff.png, tables.png
    // (and token-diff-templates.png when tandem's own template renderings are available).
    QStringList save_screenshots(const QString& dir);
    // Held-out CE + residual + grad norm of the open run in one figure at a preset's size (default
    // a journal column, 8.5 cm, 8 pt): what File ▸ Export multi-panel figure… writes with a preset.
    bool export_multi_panel_figure(const QString& path, FigurePreset preset = FigurePreset::SingleColumn);

    RunsBrowser* runs_browser() const { return runs_; }
    LauncherView* launcher() const { return launcher_; }
    TrajectoryView* trajectories() const { return trajectories_; }
    TokenDiffView* token_diff() const { return token_diff_; }
    TablesView* tables() const { return tables_; }
    CompareView* compare() const { return compare_; }
    FaultHeatmapView* faults() const { return faults_; }
    // The open run's fault matrix as a heatmap figure (PNG/SVG/PDF by suffix); false without one.
    bool export_fault_heatmap(const QString& path);
    DivergenceView* divergence() const { return divergence_; }

Q_SIGNALS:
    // Emitted after a snapshot of the current run reached the views (tests wait on it).
    void run_snapshot_shown();

protected:
    void closeEvent(QCloseEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void build_menus();
    void on_delta(std::shared_ptr<const RunDelta> delta);
    void load_static_pages(const QString& run_file);
    void remember_recent(const QString& path);
    void rebuild_recent_menu();
    void export_figure_dialog();
    void export_figure_with(bool several_panels);
    void export_table_dialog();
    void export_curves_dialog(bool visible_only);
    TrajectoryView* figure_source() const;  // what figure and curve exports take: the page in front

    QTabWidget* pages_ = nullptr;
    RunsBrowser* runs_ = nullptr;
    LauncherView* launcher_ = nullptr;
    TrajectoryView* trajectories_ = nullptr;
    TokenDiffView* token_diff_ = nullptr;
    TablesView* tables_ = nullptr;
    CompareView* compare_ = nullptr;
    FaultHeatmapView* faults_ = nullptr;
    QLabel* fault_banner_ = nullptr;
    DivergenceView* divergence_ = nullptr;
    RunFollower* follower_ = nullptr;
    QMenu* recent_menu_ = nullptr;
    QLabel* status_ = nullptr;
    QLabel* error_ = nullptr;
    QString run_path_;
    std::size_t last_point_count_ = 0;
    RunSnapshot snapshot_;  // the open run as followed so far
    bool static_pages_loaded_ = false;
};

}  // namespace tandem::views
