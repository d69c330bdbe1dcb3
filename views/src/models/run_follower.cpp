#include "tandem/views/run_follower.h"

#include "polling_thread.h"
#include "tandem/views/run_source.h"

#include <QDateTime>
#include <QFileInfo>

namespace tandem::views {

class RunFollowerWorker : public PollingWorker {
    Q_OBJECT
Q_SIGNALS:
    void delta_ready(std::shared_ptr<const tandem::views::RunDelta> delta);
    void load_failed(const QString& message);

private:
    void restart() override {
        reader_.clear();
        last_size_ = -1;
        last_modified_ = {};
    }
    void poll() override {
        QString file = path();
        if (QFileInfo(path()).isDir()) file = path() + QStringLiteral("/run.h5");
        QFileInfo info(file);
        if (!info.exists()) return;  // the runner has not created it yet
        if (info.size() == last_size_ && info.lastModified() == last_modified_) return;
        try {
            auto delta = std::make_shared<RunDelta>(reader_.read(file.toStdString(), 0.5));
            last_size_ = info.size();
            last_modified_ = info.lastModified();
            Q_EMIT delta_ready(std::move(delta));  // the file changed: statuses may have, even without rows
        } catch (const std::exception& e) {
            // A writer holding the file: try again at the next tick; report other failures.
            Q_EMIT load_failed(QString::fromUtf8(e.what()));
        }
    }

    IncrementalRunReader reader_;
    qint64 last_size_ = -1;
    QDateTime last_modified_;
};

RunFollower::RunFollower(QObject* parent) : QObject(parent) {
    qRegisterMetaType<std::shared_ptr<const RunDelta>>();
    auto* worker = new RunFollowerWorker;
    thread_ = std::make_unique<PollingThread>(worker, QStringLiteral("run follower"));
    connect(worker, &RunFollowerWorker::delta_ready, this, &RunFollower::delta_ready, Qt::QueuedConnection);
    connect(worker, &RunFollowerWorker::load_failed, this, &RunFollower::load_failed, Qt::QueuedConnection);
}

RunFollower::~RunFollower() = default;

void RunFollower::follow(const QString& path, int interval_ms) { thread_->follow(path, interval_ms); }

void RunFollower::stop() { thread_->stop(); }

}  // namespace tandem::views

#include "run_follower.moc"
