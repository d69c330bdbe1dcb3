#pragma once
// Progress of the legs of a run folder while they run, read from what the runner writes there
// (legs/<leg>/events.jsonl, legs/<leg>/stderr.log, plan.json) on a worker thread. A leg that
// failed carries its last events and the tail of its stderr.
#include <QObject>
#include <QString>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tandem::views {

struct LegProgress {
    std::string leg;
    std::string implementation;
    std::int64_t updates_done = 0;
    std::int64_t updates_total = 0;  // from plan.json; 0 when unknown
    bool done = false;
    std::string error;               // the leg's error event, empty when none
    std::vector<std::string> last_events;  // up to 8 last lines of events.jsonl
    std::string stderr_tail;         // up to 4 KiB of stderr.log's end
    std::string status;              // the runner's word for the leg (run.h5 leg attribute; "stopped"
                                     // when legs/<leg>/stopped is there): paused, stopped, finished, ...
    bool request_pending = false;    // legs/<leg>/request waits for the runner (tandem leg …)
};
using RunProgress = std::vector<LegProgress>;

// Reads every legs/<leg>/ of `run_folder` once. Never throws for missing files.
RunProgress read_run_progress(const std::filesystem::path& run_folder);

class PollingThread;

class LegProgressFollower : public QObject {
    Q_OBJECT
public:
    explicit LegProgressFollower(QObject* parent = nullptr);
    ~LegProgressFollower() override;
    void follow(const QString& run_folder, int interval_ms = 1000);
    void stop();

Q_SIGNALS:
    void progress(std::shared_ptr<const tandem::views::RunProgress> progress);

private:
    std::unique_ptr<PollingThread> thread_;  // a worker thread reading the folder
};

}  // namespace tandem::views
