#pragma once
// The compare page: several runs side by side. A tree of the runs and their legs (tick the legs to
// overlay), the overlay itself (a TrajectoryView: held-out CE, training loss, grad norm, lr, tokens/s
// of every ticked leg of every run, a colour per run that stays with the run, a line style per leg,
// legend "run/leg"), and "Diff runs": two chosen legs of two runs compared by experiments'
// compare_run_legs — the experiment files' differences and the L1–L4 tables, the same ones
// `tandem compare RUN_A:LEG RUN_B:LEG` prints. Every run is followed live (only new rows are read).
#include "tandem/views/run_follower.h"
#include "tandem/views/string_table.h"

#include <QWidget>

#include <memory>
#include <vector>

QT_BEGIN_NAMESPACE
class QComboBox;
class QLabel;
class QTabWidget;
class QTreeWidget;
class QTreeWidgetItem;
QT_END_NAMESPACE

namespace tandem::views {

class TablesView;
class TrajectoryView;

class CompareView : public QWidget {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);
    ~CompareView() override;

    // Adds a run (folder or run.h5) and follows it; false (with the reason in the status line) when
    // the path is not a run. Every leg of a new run is ticked.
    bool add_run(const QString& path);
    void set_runs(const QStringList& paths);  // replaces the set
    void remove_run(const QString& path);

    // Tick or untick one leg of a run (by run id) in the overlay.
    void set_leg_shown(const std::string& run_id, const std::string& leg, bool shown);

    // Diff runs: the legs on offer are "run id:leg"; compare the two chosen ones.
    QStringList diff_choices() const;
    bool compare(const QString& a, const QString& b);  // "run id:leg" each; false + status on error
    const std::vector<StringTable>& diff_tables() const;

    TrajectoryView* overlay() const { return overlay_; }
    TablesView* diff_view() const { return diff_; }
    QString status_text() const;
    void show_diff_tab();

Q_SIGNALS:
    // Emitted after a followed run's rows reached the overlay (tests wait on it).
    void runs_updated();

private:
    struct Followed;
    void on_delta(Followed* run, std::shared_ptr<const RunDelta> delta);
    void sync_shown_legs();
    void refresh_choices();
    void refresh_labels();
    QString run_file_of(const std::string& run_id) const;

    std::vector<std::unique_ptr<Followed>> runs_;
    TrajectoryView* overlay_ = nullptr;
    TablesView* diff_ = nullptr;
    QTreeWidget* tree_ = nullptr;
    QComboBox* a_box_ = nullptr;
    QComboBox* b_box_ = nullptr;
    QLabel* status_ = nullptr;
    QTabWidget* tabs_ = nullptr;
    bool syncing_ = false;
};

}  // namespace tandem::views
