#include "tandem/views/leg_progress.h"

#include "polling_thread.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/store/run_file.h"

#include <algorithm>
#include <deque>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tandem::views {

namespace fs = std::filesystem;

namespace {

std::int64_t plan_updates(const fs::path& run_folder) {
    std::ifstream in(run_folder / "plan.json");
    if (!in) return 0;
    try {
        const auto j = nlohmann::json::parse(in);
        return static_cast<std::int64_t>(j.at("updates").size());
    } catch (const std::exception&) {
        return 0;  // being written; the next poll reads it
    }
}

std::vector<std::string> last_lines(const fs::path& file, std::size_t n) {
    std::ifstream in(file);
    std::deque<std::string> lines;
    for (std::string line; std::getline(in, line);) {
        lines.push_back(std::move(line));
        if (lines.size() > n) lines.pop_front();
    }
    return {lines.begin(), lines.end()};
}

std::string tail(const fs::path& file, std::size_t bytes) {
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    if (!in) return {};
    const auto size = static_cast<std::size_t>(in.tellg());
    const auto start = size > bytes ? size - bytes : 0;
    in.seekg(static_cast<std::streamoff>(start));
    std::string out(size - start, '\0');
    in.read(out.data(), static_cast<std::streamsize>(out.size()));
    return out;
}

}  // namespace

RunProgress read_run_progress(const fs::path& run_folder) {
    RunProgress result;
    std::error_code ec;
    const auto legs_dir = run_folder / "legs";
    if (!fs::is_directory(legs_dir, ec)) return result;
    const auto total = plan_updates(run_folder);
    std::vector<fs::path> legs;
    for (const auto& entry : fs::directory_iterator(legs_dir, ec))
        if (entry.is_directory()) legs.push_back(entry.path());
    std::sort(legs.begin(), legs.end());
    // The runner's status of each leg (paused and stopped legs are said there, not in events.jsonl).
    std::map<std::string, std::string> statuses;
    if (fs::exists(run_folder / "run.h5", ec)) {
        try {
            experiments::RunFileReader reader(run_folder / "run.h5", 0.2);
            for (const auto& leg : reader.legs()) {
                const auto attributes = reader.leg_attributes(leg);
                if (auto it = attributes.find("status"); it != attributes.end())
                    if (auto s = std::get_if<std::string>(&it->second)) statuses[leg] = *s;
            }
        } catch (const std::exception&) {
            // being replaced by a commit: the next poll reads it
        }
    }
    for (const auto& dir : legs) {
        LegProgress p;
        p.leg = dir.filename().string();
        const auto trace = experiments::read_events_file(dir / "events.jsonl");
        p.implementation = trace.implementation();
        p.updates_done = trace.steps.empty() ? 0 : trace.steps.back().update + 1;
        p.updates_total = total;
        p.done = trace.done;
        if (trace.error) p.error = *trace.error;
        p.last_events = last_lines(dir / "events.jsonl", 8);
        p.stderr_tail = tail(dir / "stderr.log", 4096);
        if (auto it = statuses.find(p.leg); it != statuses.end()) p.status = it->second;
        if (fs::exists(dir / "stopped", ec)) p.status = "stopped";
        p.request_pending = fs::exists(dir / "request", ec);
        result.push_back(std::move(p));
    }
    return result;
}

// path(): the run folder.
class LegProgressWorker : public PollingWorker {
    Q_OBJECT
Q_SIGNALS:
    void progress(std::shared_ptr<const tandem::views::RunProgress> progress);

private:
    void poll() override { Q_EMIT progress(std::make_shared<RunProgress>(read_run_progress(path().toStdString()))); }
};

LegProgressFollower::LegProgressFollower(QObject* parent) : QObject(parent) {
    qRegisterMetaType<std::shared_ptr<const RunProgress>>();
    auto* worker = new LegProgressWorker;
    thread_ = std::make_unique<PollingThread>(worker, QStringLiteral("leg progress"));
    connect(worker, &LegProgressWorker::progress, this, &LegProgressFollower::progress, Qt::QueuedConnection);
}

LegProgressFollower::~LegProgressFollower() = default;

void LegProgressFollower::follow(const QString& run_folder, int interval_ms) { thread_->follow(run_folder, interval_ms); }

void LegProgressFollower::stop() { thread_->stop(); }

}  // namespace tandem::views

#include "leg_progress.moc"
