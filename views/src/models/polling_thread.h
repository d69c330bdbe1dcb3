#pragma once
// What RunFollower and LegProgressFollower share: a worker that polls a path on a timer, on a
// thread of its own so the GUI thread never waits on a file, told to start (a new path) and stop
// by queued calls from the GUI thread, and halted and joined when its owner goes.
#include <QMetaObject>
#include <QObject>
#include <QString>
#include <QThread>
#include <QTimer>

namespace tandem::views {

// Polls path() every interval_ms once started, and once at the start; a subclass says what a poll
// reads and emits.
class PollingWorker : public QObject {
public:
    void start(const QString& path, int interval_ms) {
        path_ = path;
        restart();
        if (!timer_) {
            timer_ = new QTimer(this);
            connect(timer_, &QTimer::timeout, this, [this] { poll(); });
        }
        timer_->start(interval_ms);
        poll();
    }
    void halt() {
        if (timer_) timer_->stop();
    }

protected:
    const QString& path() const { return path_; }
    virtual void restart() {}  // a new path: forget what was read from the last one
    virtual void poll() = 0;

private:
    QString path_;
    QTimer* timer_ = nullptr;
};

// Runs `worker` (taken over) on a thread named `name`, started at once: the worker emits nothing
// before follow(), so its owner connects its signals (queued) after. Going, it halts the worker,
// ends the thread and waits for it; the worker is deleted on its thread as that finishes.
class PollingThread {
public:
    PollingThread(PollingWorker* worker, const QString& name) : worker_(worker) {
        worker_->moveToThread(&thread_);
        QObject::connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
        thread_.setObjectName(name);
        thread_.start();
    }
    ~PollingThread() {
        QMetaObject::invokeMethod(worker_, [w = worker_] { w->halt(); }, Qt::BlockingQueuedConnection);
        thread_.quit();
        thread_.wait();
    }
    PollingThread(const PollingThread&) = delete;
    PollingThread& operator=(const PollingThread&) = delete;

    // Starts polling `path` (replacing any earlier one) every interval_ms.
    void follow(const QString& path, int interval_ms) {
        QMetaObject::invokeMethod(worker_, [w = worker_, path, interval_ms] { w->start(path, interval_ms); }, Qt::QueuedConnection);
    }
    void stop() {
        QMetaObject::invokeMethod(worker_, [w = worker_] { w->halt(); }, Qt::QueuedConnection);
    }

private:
    QThread thread_;
    PollingWorker* worker_;
};

}  // namespace tandem::views
