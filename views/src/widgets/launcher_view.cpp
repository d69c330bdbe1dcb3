#include "tandem/views/launcher_view.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QTableWidget>
#include <QToolButton>

#include <tuple>
#include <QVBoxLayout>

namespace tandem::views {

namespace {
enum LegColumn { ColLeg, ColDevice, ColProgress, ColState, ColControl, ColCount };
}

QStringList run_arguments(const QString& experiment, const std::vector<LegChoice>& legs, const QString& runs_dir,
                          const QString& catalog) {
    QStringList names, devices;
    for (const auto& leg : legs) {
        names << (leg.leg == leg.implementation ? leg.leg : leg.leg + QLatin1Char('=') + leg.implementation);
        devices << leg.device;
    }
    QStringList args{QStringLiteral("run"), experiment, QStringLiteral("--legs"), names.join(QLatin1Char(',')),
                     QStringLiteral("--devices"), devices.join(QLatin1Char(','))};
    if (!runs_dir.isEmpty()) args << QStringLiteral("--out") << runs_dir;
    if (!catalog.isEmpty()) args << QStringLiteral("--catalog") << catalog;
    return args;
}

QStringList leg_control_arguments(const QString& action, const QString& run_folder, const QString& leg, const QString& catalog) {
    QStringList args{QStringLiteral("leg"), action, run_folder, leg};
    if (!catalog.isEmpty()) args << QStringLiteral("--catalog") << catalog;
    return args;
}

QStringList resume_arguments(const QString& run_folder, const QString& catalog) {
    QStringList args{QStringLiteral("run"), QStringLiteral("--resume"), run_folder};
    if (!catalog.isEmpty()) args << QStringLiteral("--catalog") << catalog;
    return args;
}

LauncherView::LauncherView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    auto* row = new QHBoxLayout;
    experiment_ = new QLineEdit(this);
    experiment_->setObjectName(QStringLiteral("experiment"));
    experiment_->setPlaceholderText(tr("Experiment file (.json)"));
    auto* browse = new QPushButton(tr("&Browse…"), this);
    row->addWidget(new QLabel(tr("Experiment:"), this));
    row->addWidget(experiment_, 1);
    row->addWidget(browse);
    layout->addLayout(row);

    legs_ = new QTableWidget(0, ColCount, this);
    legs_->setObjectName(QStringLiteral("legs"));
    legs_->setHorizontalHeaderLabels({tr("Leg"), tr("Device"), tr("Progress"), tr("State"), tr("This leg")});
    legs_->horizontalHeader()->setStretchLastSection(true);
    legs_->verticalHeader()->hide();
    legs_->setSelectionMode(QAbstractItemView::NoSelection);

    auto* buttons = new QHBoxLayout;
    start_ = new QPushButton(tr("&Start"), this);
    stop_ = new QPushButton(tr("S&top"), this);
    resume_ = new QPushButton(tr("&Resume"), this);
    start_->setObjectName(QStringLiteral("start"));
    stop_->setEnabled(false);
    resume_->setEnabled(false);
    buttons->addWidget(start_);
    buttons->addWidget(stop_);
    buttons->addWidget(resume_);
    state_ = new QLabel(this);
    buttons->addWidget(state_, 1);
    layout->addLayout(buttons);

    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->addWidget(legs_);
    log_ = new QPlainTextEdit(splitter);
    log_->setObjectName(QStringLiteral("log"));
    log_->setReadOnly(true);
    log_->setMaximumBlockCount(5000);
    log_->setPlaceholderText(tr("Runner output, and for a failed leg its last events and stderr."));
    splitter->addWidget(log_);
    layout->addWidget(splitter, 1);

    process_ = new QProcess(this);
    process_->setProcessChannelMode(QProcess::MergedChannels);
    control_ = new QProcess(this);
    control_->setProcessChannelMode(QProcess::MergedChannels);
    connect(control_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus) {
        const QString out = QString::fromUtf8(control_->readAll()).trimmed();
        if (!out.isEmpty()) append_log(out);
        // Say what happened, not "… requested" forever: the command's own line (it names the leg
        // and what the runner will do), or its error.
        const QString last = out.section(QLatin1Char('\n'), -1);
        // A request sent to a running runner that answers after the runner ended (a busy machine)
        // stays in the log: the state line already says how the run ended, naming every leg.
        const bool run_end_said = control_sent_while_running_ && process_->state() == QProcess::NotRunning;
        if (run_end_said) {
            // keep the end of the run
        } else if (code != 0) {
            state_->setText(out.isEmpty() ? tr("tandem leg %1 %2 exited with %3.").arg(control_action_, control_leg_).arg(code) : last);
        } else {
            state_->setText(last.isEmpty() ? tr("Leg %1: %2 taken.").arg(control_leg_, control_action_) : last);
        }
        if (!run_folder_.isEmpty()) on_progress(std::make_shared<RunProgress>(read_run_progress(run_folder_.toStdString())));
        Q_EMIT leg_request_finished(code);
    });
    follower_ = new LegProgressFollower(this);

    connect(browse, &QPushButton::clicked, this, [this] {
        const auto file = QFileDialog::getOpenFileName(this, tr("Experiment file"), experiment_->text(), tr("Experiments (*.json)"));
        if (!file.isEmpty()) set_experiment(file);
    });
    connect(start_, &QPushButton::clicked, this, &LauncherView::start);
    connect(stop_, &QPushButton::clicked, this, &LauncherView::stop);
    connect(resume_, &QPushButton::clicked, this, &LauncherView::resume);
    connect(process_, &QProcess::readyRead, this, &LauncherView::on_output);
    connect(process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
        on_output();  // whatever is still buffered, the error line included
        find_run_folder();
        const int exit_code = status == QProcess::NormalExit ? code : -1;
        // One last read so the table shows the final state (and the message can name the legs).
        RunProgress final_state;
        if (!run_folder_.isEmpty()) final_state = read_run_progress(run_folder_.toStdString());
        QString text = exit_code == 0 ? tr("Finished.") : tr("Runner exited with %1.").arg(exit_code);
        if (exit_code != 0 && !last_error_.isEmpty()) {
            text += QLatin1Char(' ') + last_error_;  // the runner's own error line (a parse error names the file and field)
        } else if (exit_code != 0 && !stopping_) {
            // No error line: legs stopped or paused on request end the run incomplete. Say so per leg.
            QStringList legs;
            bool requested = false;
            for (const auto& leg : final_state) {
                const QString word = leg.done ? tr("done") : !leg.error.empty() ? tr("failed") : QString::fromStdString(leg.status.empty() ? "interrupted" : leg.status);
                requested = requested || leg.status == "stopped" || leg.status == "paused";
                legs << QStringLiteral("%1 %2").arg(QString::fromStdString(leg.leg), word);
            }
            if (requested) text = tr("Runner finished with legs stopped or paused on request: %1. Resume continues them.").arg(legs.join(QStringLiteral(", ")));
        } else if (stopping_) {
            text = tr("Stopped (legs keep their checkpoints; Resume continues them).");
        }
        stopping_ = false;
        state_->setText(text);
        start_->setEnabled(true);
        stop_->setEnabled(false);
        resume_->setEnabled(!run_folder_.isEmpty() && exit_code != 0);
        if (!run_folder_.isEmpty()) on_progress(std::make_shared<RunProgress>(std::move(final_state)));
        follower_->stop();
        Q_EMIT run_finished(exit_code);
    });
    connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
        if (error == QProcess::FailedToStart) {
            state_->setText(tr("Could not start %1: %2").arg(tandem_, process_->errorString()));
            append_log(state_->text());
            start_->setEnabled(true);
            stop_->setEnabled(false);
            Q_EMIT run_finished(-1);
        }
    });
    connect(follower_, &LegProgressFollower::progress, this, &LauncherView::on_progress);
}

LauncherView::~LauncherView() {
    // Both child processes outlive this object's members (QObject deletes children after them): a
    // process still running then reports `finished` into a half-destroyed view. Cut the connections
    // first, then end the processes here. (Seen as a crash when `tandem leg stop` was still running as
    // the window closed, on a busy machine.)
    for (QProcess* p : {process_, control_}) {
        p->disconnect(this);
        if (p->state() == QProcess::NotRunning) continue;
        p->terminate();
        if (!p->waitForFinished(5000)) p->kill();
        p->waitForFinished(2000);
    }
}

void LauncherView::set_runs_dir(const QString& dir) { runs_dir_ = dir; }

void LauncherView::set_tandem(const TandemBinary& binary) {
    binary_ = binary;
    tandem_ = binary.path;
}

void LauncherView::set_tandem_binary(const QString& path) { set_tandem(find_tandem_binary({}, {}, {}, path)); }

void LauncherView::set_experiment(const QString& path) {
    if (experiment_->text() == path) return;
    experiment_->setText(path);
    if (!running()) {
        // Another experiment: the previous run's rows, folder and state no longer apply.
        run_folder_.clear();
        follower_->stop();
        reset_rows();
        resume_->setEnabled(false);
        state_->clear();
    }
}

void LauncherView::set_leg_buttons(int row, bool running_leg, bool resumable) {
    auto* control = legs_->cellWidget(row, ColControl);
    if (!control) return;
    const QString leg = legs_->item(row, ColLeg)->text();
    for (const auto& [action, on] : {std::pair{QStringLiteral("pause"), running_leg}, std::pair{QStringLiteral("stop"), running_leg},
                                     std::pair{QStringLiteral("resume"), resumable}})
        if (auto* button = control->findChild<QToolButton*>(QStringLiteral("%1_%2").arg(action, leg))) button->setEnabled(on);
}

bool LauncherView::leg_button_enabled(int row, const QString& action) const {
    auto* control = legs_->cellWidget(row, ColControl);
    auto* button = control ? control->findChild<QToolButton*>(QStringLiteral("%1_%2").arg(action, legs_->item(row, ColLeg)->text())) : nullptr;
    return button && button->isEnabled();
}

void LauncherView::reset_rows() {
    for (int r = 0; r < legs_->rowCount(); ++r) {
        auto* bar = static_cast<QProgressBar*>(legs_->cellWidget(r, ColProgress));
        bar->setRange(0, 1);
        bar->setValue(0);
        bar->setFormat(tr("—"));  // no "0 / 1": the total comes with the run's plan.json
        legs_->item(r, ColState)->setText(tr("not started"));
        legs_->item(r, ColState)->setForeground(palette().text().color());
        set_leg_buttons(r, false, false);
    }
}

QString LauncherView::state_text() const { return state_->text(); }

QString LauncherView::leg_progress_text(int row) const {
    auto* bar = static_cast<QProgressBar*>(legs_->cellWidget(row, ColProgress));
    return bar ? bar->text() : QString();
}

QString LauncherView::leg_state_text(int row) const {
    auto* item = legs_->item(row, ColState);
    return item ? item->text() : QString();
}

void LauncherView::append_log(const QString& text) {
    log_->appendPlainText(text);
    // Keep the newest lines (the error) in view.
    log_->verticalScrollBar()->setValue(log_->verticalScrollBar()->maximum());
}

void LauncherView::set_legs(const std::vector<LegChoice>& legs) {
    legs_->setRowCount(0);
    for (const auto& leg : legs) {
        const int r = legs_->rowCount();
        legs_->insertRow(r);
        auto* name = new QTableWidgetItem(leg.leg);
        name->setData(Qt::UserRole, leg.implementation);
        name->setToolTip(tr("implementation: %1").arg(leg.implementation));
        name->setFlags(Qt::ItemIsEnabled | Qt::ItemIsUserCheckable);
        name->setCheckState(Qt::Checked);
        legs_->setItem(r, ColLeg, name);
        auto* device = new QComboBox(legs_);
        device->setEditable(true);  // any cuda:N the machine has
        device->addItems({QStringLiteral("cpu"), QStringLiteral("cuda:0"), QStringLiteral("cuda:1")});
        device->setCurrentText(leg.device);
        legs_->setCellWidget(r, ColDevice, device);
        auto* bar = new QProgressBar(legs_);
        legs_->setCellWidget(r, ColProgress, bar);
        legs_->setItem(r, ColState, new QTableWidgetItem(tr("not started")));
        // Per-leg control: the others go on (needs a run folder: enabled once the run exists).
        auto* control = new QWidget(legs_);
        auto* control_layout = new QHBoxLayout(control);
        control_layout->setContentsMargins(0, 0, 0, 0);
        control_layout->setSpacing(2);
        const QString leg_name = leg.leg;
        for (const auto& [action, text, tip] : {std::tuple{QStringLiteral("pause"), tr("Pause"), tr("Stop this leg so it can continue from its last checkpoint")},
                                                std::tuple{QStringLiteral("stop"), tr("Stop"), tr("Stop this leg for good (a later resume of the run leaves it)")},
                                                std::tuple{QStringLiteral("resume"), tr("Resume"), tr("Continue this leg from its newest checkpoint")}}) {
            auto* button = new QToolButton(control);
            button->setText(text);
            button->setToolTip(tip);
            button->setObjectName(QStringLiteral("%1_%2").arg(action, leg_name));
            connect(button, &QToolButton::clicked, this, [this, leg_name, action = action] { control_leg(leg_name, action); });
            control_layout->addWidget(button);
        }
        control_layout->addStretch(1);
        legs_->setCellWidget(r, ColControl, control);
        set_leg_buttons(r, false, false);
    }
    reset_rows();
    legs_->resizeColumnsToContents();
}

std::vector<LegChoice> LauncherView::chosen_legs() const {
    std::vector<LegChoice> out;
    for (int r = 0; r < legs_->rowCount(); ++r) {
        if (legs_->item(r, ColLeg)->checkState() != Qt::Checked) continue;
        out.push_back({legs_->item(r, ColLeg)->text(), legs_->item(r, ColLeg)->data(Qt::UserRole).toString(),
                       static_cast<QComboBox*>(legs_->cellWidget(r, ColDevice))->currentText()});
    }
    return out;
}

bool LauncherView::running() const { return process_->state() != QProcess::NotRunning; }

void LauncherView::launch(const QStringList& arguments) {
    if (running()) return;
    if (tandem_.isEmpty()) {
        // Say where we looked and how to fix it, instead of starting "no program".
        const QString message = binary_.tried.isEmpty()
                                    ? tr("No tandem CLI given: start the workbench with --tandem FILE, or put tandem on PATH.")
                                    : binary_.not_found_message();
        state_->setText(message);
        append_log(message);
        return;
    }
    last_error_.clear();
    append_log(QStringLiteral("$ %1 %2").arg(tandem_, arguments.join(QLatin1Char(' '))));
    folders_before_ = QDir(runs_dir_).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
    start_->setEnabled(false);
    stop_->setEnabled(true);
    resume_->setEnabled(false);
    state_->setText(tr("Running…"));
    if (!runs_dir_.isEmpty()) QDir().mkpath(runs_dir_);
    process_->start(tandem_, arguments);
}

void LauncherView::start() {
    const auto legs = chosen_legs();
    if (experiment_->text().isEmpty() || legs.empty()) {
        state_->setText(tr("Choose an experiment file and at least one leg."));
        return;
    }
    run_folder_.clear();
    launch(run_arguments(experiment_->text(), legs, runs_dir_, catalog_));
}

void LauncherView::stop() {
    if (!running()) return;
    state_->setText(tr("Stopping (legs keep their checkpoints)…"));
    stopping_ = true;
    process_->terminate();  // SIGTERM: the runner interrupts its legs and records them as interrupted
}

void LauncherView::resume() {
    if (run_folder_.isEmpty()) return;
    launch(resume_arguments(run_folder_, catalog_));
    if (running()) follower_->follow(run_folder_, 500);  // the rows follow the resumed legs again
}

void LauncherView::control_leg(const QString& leg, const QString& action) {
    if (run_folder_.isEmpty() || control_->state() != QProcess::NotRunning) return;
    if (tandem_.isEmpty()) {
        state_->setText(binary_.not_found_message());
        return;
    }
    const auto args = leg_control_arguments(action, run_folder_, leg, catalog_);
    append_log(QStringLiteral("$ %1 %2").arg(tandem_, args.join(QLatin1Char(' '))));
    state_->setText(tr("%1 %2 requested…").arg(action, leg));
    control_action_ = action;
    control_leg_ = leg;
    control_sent_while_running_ = running();
    control_->start(tandem_, args);
    // A resumed leg is followed again (the runner relaunches it, or the command continues the run).
    if (action == QStringLiteral("resume")) follower_->follow(run_folder_, 500);
}

void LauncherView::on_output() {
    const QString text = QString::fromUtf8(process_->readAll()).trimmed();
    if (text.isEmpty()) return;
    for (const auto& line : text.split(QLatin1Char('\n')))
        if (line.startsWith(QStringLiteral("tandem: error:")) || line.startsWith(QStringLiteral("tandem: internal error:")))
            last_error_ = line.trimmed();
    append_log(text);
    if (run_folder_.isEmpty()) find_run_folder();
}

void LauncherView::find_run_folder() {
    if (!run_folder_.isEmpty() || runs_dir_.isEmpty()) return;
    // The runner names the folder <experiment>-<timestamp>: the new folder in runs_dir is ours.
    const auto now = QDir(runs_dir_).entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Time);
    for (const auto& name : now) {
        if (folders_before_.contains(name)) continue;
        run_folder_ = QDir(runs_dir_).absoluteFilePath(name);
        follower_->follow(run_folder_, 500);
        Q_EMIT run_folder_found(run_folder_);
        return;
    }
}

void LauncherView::on_progress(std::shared_ptr<const RunProgress> progress) {
    for (const auto& leg : *progress) {
        int row = -1;
        for (int r = 0; r < legs_->rowCount(); ++r)
            if (legs_->item(r, ColLeg)->text() == QString::fromStdString(leg.leg)) row = r;
        if (row < 0) continue;
        auto* bar = static_cast<QProgressBar*>(legs_->cellWidget(row, ColProgress));
        bar->setFormat(QStringLiteral("%v / %m"));
        bar->setRange(0, static_cast<int>(std::max<std::int64_t>(leg.updates_total, leg.updates_done)));
        bar->setValue(static_cast<int>(leg.updates_done));
        QString state = leg.done ? tr("done") : (running() ? tr("running") : tr("stopped"));
        // The runner's word wins for a leg paused or stopped on its own (tandem leg …, the gate).
        if (!leg.done && (leg.status == "paused" || leg.status == "stopped")) state = QString::fromStdString(leg.status);
        if (leg.request_pending) state += tr(" (request pending)");
        if (!leg.error.empty()) state = tr("failed: %1").arg(QString::fromStdString(leg.error));
        // Pause and Stop act on a running leg of a running runner; Resume on a paused or stopped
        // leg (the runner takes it, or `tandem leg resume` continues the run). Nothing else.
        const bool leg_running = running() && !leg.done && leg.error.empty() && leg.status != "paused" && leg.status != "stopped";
        const bool leg_resumable = !leg.done && !run_folder_.isEmpty() && (leg.status == "paused" || leg.status == "stopped");
        set_leg_buttons(row, leg_running, leg_resumable);
        auto* item = legs_->item(row, ColState);
        if (item->text() != state && !leg.error.empty()) {
            // A crash: show what the leg said last, without touching the other legs.
            append_log(tr("── leg %1 failed ── last events:").arg(QString::fromStdString(leg.leg)));
            for (const auto& line : leg.last_events) append_log(QString::fromStdString(line));
            append_log(tr("── stderr (tail) ──"));
            append_log(QString::fromStdString(leg.stderr_tail));
        }
        item->setText(state);
        item->setForeground(leg.error.empty() ? palette().text().color() : QColor(213, 94, 0));
    }
}

}  // namespace tandem::views
