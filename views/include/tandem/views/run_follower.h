#pragma once
// Follows a run file while legs write to it: a worker thread polls its size and mtime and, when it
// changed, reads only the rows appended since the last read (IncrementalRunReader) and hands them
// to the GUI thread as a queued delta. The GUI never waits on HDF5 and the worker never touches a
// widget (hotspot/PlotJuggler habit); a long run costs O(new rows) per change, not a re-read.
#include "tandem/views/run_source.h"

#include <QObject>
#include <QString>

#include <memory>

namespace tandem::views {

class PollingThread;
using RunDelta = IncrementalRunReader::Delta;

class RunFollower : public QObject {
    Q_OBJECT
public:
    explicit RunFollower(QObject* parent = nullptr);
    ~RunFollower() override;  // stops the worker thread and waits for it

    // Starts following `path` (a run.h5 or a run folder); replaces any previous path (the next
    // delta is then a reset).
    void follow(const QString& path, int interval_ms = 500);
    void stop();

Q_SIGNALS:
    void delta_ready(std::shared_ptr<const tandem::views::RunDelta> delta);
    void load_failed(const QString& message);

private:
    std::unique_ptr<PollingThread> thread_;  // a worker thread reading the file
};

}  // namespace tandem::views
