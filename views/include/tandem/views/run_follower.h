#pragma once
// Follows a run file while legs write to it: a worker thread re-reads the file when it changed
// (polling its size and mtime) and hands a complete snapshot to the GUI thread as a queued signal.
// The GUI never waits on HDF5 and the worker never touches a widget (hotspot/PlotJuggler habit).
#include "tandem/views/run_snapshot.h"

#include <QObject>
#include <QString>
#include <QThread>

#include <memory>

namespace tandem::views {

class RunFollowerWorker;

class RunFollower : public QObject {
    Q_OBJECT
public:
    explicit RunFollower(QObject* parent = nullptr);
    ~RunFollower() override;  // stops the worker thread and waits for it

    // Starts following `path` (a run.h5 or a run folder); replaces any previous path.
    void follow(const QString& path, int interval_ms = 500);
    void stop();

Q_SIGNALS:
    void snapshot_ready(std::shared_ptr<const tandem::views::RunSnapshot> snapshot);
    void load_failed(const QString& message);

private:
    QThread thread_;
    RunFollowerWorker* worker_ = nullptr;
};

}  // namespace tandem::views
