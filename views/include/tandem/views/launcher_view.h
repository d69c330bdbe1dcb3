#pragma once
// The launch page: pick an experiment file, the legs and a device for each, start. The legs run
// through the same runner as the CLI: the page starts `tandem run …` as a child process (a crash
// of the runner or a leg cannot take the window down) and follows the run folder it creates —
// per-leg progress, and for a failed leg its last events and stderr. Stop sends SIGTERM to the
// runner (it interrupts its legs, which keep their checkpoints); Resume runs `tandem run --resume`
// on the same folder.
#include "tandem/views/leg_progress.h"
#include "tandem/views/tandem_binary.h"

#include <QProcess>
#include <QStringList>
#include <QWidget>

QT_BEGIN_NAMESPACE
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QTableWidget;
QT_END_NAMESPACE

namespace tandem::views {

struct LegChoice {
    QString leg;             // leg name (legs/<leg>/ in the run folder)
    QString implementation;  // "engine" | "reference"
    QString device;          // "cpu", "cuda:0", ...
};

// The command line the launcher runs, in the CLI's terms (app/cli/cmd_run.cpp):
//   tandem run EXPERIMENT --legs NAME=IMPL,... --devices DEV,... --out RUNS_DIR --catalog DB
//   tandem run --resume RUN_FOLDER --catalog DB
QStringList run_arguments(const QString& experiment, const std::vector<LegChoice>& legs, const QString& runs_dir,
                          const QString& catalog);
QStringList resume_arguments(const QString& run_folder, const QString& catalog);
// One leg, while the others go on (docs/gate.md): tandem leg stop|pause|resume RUN LEG --catalog DB
QStringList leg_control_arguments(const QString& action, const QString& run_folder, const QString& leg, const QString& catalog);

class LauncherView : public QWidget {
    Q_OBJECT
public:
    explicit LauncherView(QWidget* parent = nullptr);
    ~LauncherView() override;

    // The CLI to run, as found by find_tandem_binary (its "tried" list is what Start reports when
    // nothing was found). set_tandem_binary(path) is the same with one explicit file.
    void set_tandem(const TandemBinary& binary);
    void set_tandem_binary(const QString& path);
    void set_runs_dir(const QString& dir);
    void set_catalog(const QString& path) { catalog_ = path; }
    void set_experiment(const QString& path);
    // The legs offered (name + default device); each row has a checkbox and a device chooser.
    // Choosing another experiment resets the rows (no progress, "not started") and forgets the run.
    void set_legs(const std::vector<LegChoice>& legs);
    std::vector<LegChoice> chosen_legs() const;

    bool running() const;
    QString run_folder() const { return run_folder_; }
    // What the page shows (for tests): the state line, and a leg row's progress and state.
    QString state_text() const;
    QString leg_progress_text(int row) const;
    QString leg_state_text(int row) const;
    // Whether a leg row's Pause / Stop / Resume button ("pause", "stop", "resume") can be pressed now.
    bool leg_button_enabled(int row, const QString& action) const;

public Q_SLOTS:
    void start();
    void stop();
    void resume();
    // Pause, stop or resume one leg of the followed run (`tandem leg …`, a separate process); the
    // leg's row says what happened once the runner took the request.
    void control_leg(const QString& leg, const QString& action);

Q_SIGNALS:
    void run_folder_found(const QString& folder);  // the runner created the run's folder
    void run_finished(int exit_code);
    void leg_request_finished(int exit_code);  // a `tandem leg …` request has answered

private:
    void launch(const QStringList& arguments);
    void on_output();
    void on_progress(std::shared_ptr<const RunProgress> progress);
    void find_run_folder();
    void reset_rows();
    void set_leg_buttons(int row, bool running_leg, bool resumable);
    void append_log(const QString& text);

    TandemBinary binary_;
    QString tandem_;
    QString last_error_;
    QString runs_dir_;
    QString catalog_;
    QString run_folder_;
    QString control_action_, control_leg_;  // the last `tandem leg` request
    bool control_sent_while_running_ = false;  // ... was sent while the runner ran
    bool stopping_ = false;                 // Stop was pressed: the runner's exit is expected
    QStringList folders_before_;
    QProcess* process_ = nullptr;
    QProcess* control_ = nullptr;
    LegProgressFollower* follower_ = nullptr;
    QLineEdit* experiment_ = nullptr;
    QTableWidget* legs_ = nullptr;
    QPushButton* start_ = nullptr;
    QPushButton* stop_ = nullptr;
    QPushButton* resume_ = nullptr;
    QLabel* state_ = nullptr;
    QPlainTextEdit* log_ = nullptr;
};

}  // namespace tandem::views
