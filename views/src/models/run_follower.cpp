#include "tandem/views/run_follower.h"

#include "tandem/views/run_source.h"

#include <QDateTime>
#include <QFileInfo>
#include <QTimer>

namespace tandem::views {

class RunFollowerWorker : public QObject {
    Q_OBJECT
public:
    void start(const QString& path, int interval_ms) {
        path_ = path;
        reader_.clear();
        last_size_ = -1;
        last_modified_ = {};
        if (!timer_) {
            timer_ = new QTimer(this);
            connect(timer_, &QTimer::timeout, this, &RunFollowerWorker::poll);
        }
        timer_->start(interval_ms);
        poll();
    }
    void halt() {
        if (timer_) timer_->stop();
    }

Q_SIGNALS:
    void delta_ready(std::shared_ptr<const tandem::views::RunDelta> delta);
    void load_failed(const QString& message);

private:
    void poll() {
        QString file = path_;
        if (QFileInfo(path_).isDir()) file = path_ + QStringLiteral("/run.h5");
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

    QString path_;
    IncrementalRunReader reader_;
    qint64 last_size_ = -1;
    QDateTime last_modified_;
    QTimer* timer_ = nullptr;
};

RunFollower::RunFollower(QObject* parent) : QObject(parent) {
    qRegisterMetaType<std::shared_ptr<const RunDelta>>();
    worker_ = new RunFollowerWorker;
    worker_->moveToThread(&thread_);
    connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
    connect(worker_, &RunFollowerWorker::delta_ready, this, &RunFollower::delta_ready, Qt::QueuedConnection);
    connect(worker_, &RunFollowerWorker::load_failed, this, &RunFollower::load_failed, Qt::QueuedConnection);
    thread_.setObjectName(QStringLiteral("run follower"));
    thread_.start();
}

RunFollower::~RunFollower() {
    QMetaObject::invokeMethod(worker_, [w = worker_] { w->halt(); }, Qt::BlockingQueuedConnection);
    thread_.quit();
    thread_.wait();
}

void RunFollower::follow(const QString& path, int interval_ms) {
    QMetaObject::invokeMethod(worker_, [w = worker_, path, interval_ms] { w->start(path, interval_ms); }, Qt::QueuedConnection);
}

void RunFollower::stop() {
    QMetaObject::invokeMethod(worker_, [w = worker_] { w->halt(); }, Qt::QueuedConnection);
}

}  // namespace tandem::views

#include "run_follower.moc"
