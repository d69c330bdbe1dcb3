#include "tandem/studies/export_tensorboard.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/spec/leg_paths.h"
#include "tandem/compare/metrics.h"
#include "tandem/store/run_file.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <regex>
#include <unistd.h>

namespace tandem::experiments {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// The run's start from its id ("<experiment>-YYYYmmdd-HHMMSS", UTC); 0 when the id has no stamp.
double run_start_unix(const std::string& run_id) {
    static const std::regex stamp(R"((\d{8})-(\d{6})$)");
    std::smatch m;
    if (!std::regex_search(run_id, m, stamp)) return 0;
    std::tm t{};
    const std::string d = m[1], h = m[2];
    t.tm_year = std::stoi(d.substr(0, 4)) - 1900;
    t.tm_mon = std::stoi(d.substr(4, 2)) - 1;
    t.tm_mday = std::stoi(d.substr(6, 2));
    t.tm_hour = std::stoi(h.substr(0, 2));
    t.tm_min = std::stoi(h.substr(2, 2));
    t.tm_sec = std::stoi(h.substr(4, 2));
    return static_cast<double>(timegm(&t));
}

json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }  // NaN/inf: null (the writer logs NaN)

}  // namespace

TensorboardExport export_tensorboard(const fs::path& run, const fs::path& dir, bool overwrite, const std::string& python) {
    const fs::path file = fs::is_directory(run) ? run / "run.h5" : run;
    if (!fs::exists(file)) throw Error(run.string() + ": not a tandem run (no run.h5)");
    RunFileReader reader(file);
    const auto experiment = reader.experiment();
    TensorboardExport out;
    out.run_id = experiment && !experiment->run_id.empty() ? experiment->run_id : file.parent_path().filename().string();
    const double start = run_start_unix(out.run_id);
    json request{{"run_id", out.run_id}, {"overwrite", overwrite}, {"legs", json::array()}};
    for (const auto& leg : reader.legs()) {
        const auto steps = reader.steps(leg);
        const auto evals = reader.eval(leg);
        json scalars = json::object();
        auto add = [&](const std::string& tag, std::int64_t step, double value, double wall) {
            // An imported leg may have no wall times (NaN): its events carry the run's start.
            scalars[tag].push_back(json::array({step, number(value), start + (std::isfinite(wall) ? wall : 0.0)}));
        };
        const auto clock = update_clock(steps);
        auto clock_at = [&](std::int64_t update) -> ClockPoint {
            for (const auto& c : clock)
                if (c.update == update) return c;
            return clock.empty() ? ClockPoint{update, 0, 0} : clock.back();
        };
        for (const auto& row : steps) {
            // A training value of update u is logged at step u + 1 (updates done), when update u ended.
            const auto after = clock_at(row.update + 1);
            const std::int64_t step = row.update + 1;
            // Every per-update metric of the table under its TensorBoard tag (HF Trainer's names).
            for (const auto& m : metric_table())
                if (m.of_step) add(m.tensorboard, step, m.of_step(row), after.wall_s);
            add("train/num_input_tokens_seen", step, after.tokens_seen, after.wall_s);
        }
        for (const auto& row : evals)
            for (const auto& m : metric_table())
                if (m.of_eval) add(m.tensorboard, row.update, m.of_eval(row), clock_at(row.update).wall_s);
        const fs::path leg_dir = dir / out.run_id / leg;
        request["legs"].push_back({{"name", leg}, {"dir", leg_dir.string()}, {"scalars", scalars}});
        out.leg_dirs.push_back(leg_dir);
        for (const auto& [tag, points] : scalars.items())
            out.lines.push_back(leg + ": " + tag + " " + std::to_string(points.size()) + " points");
    }
    if (out.leg_dirs.empty()) throw Error(file.string() + ": the run has no legs to export");

    const fs::path script = legs_dir() / "tensorboard_write.py";
    if (!fs::exists(script)) throw Error(script.string() + ": missing (the TensorBoard writer of `tandem export tensorboard`)");
    char request_path[] = "/tmp/tandem-tb-request-XXXXXX";
    const int fd = mkstemp(request_path);
    if (fd < 0) throw Error("tandem export tensorboard: cannot create a temporary file");
    close(fd);
    write_file_atomic(request_path, request.dump());
    const std::string py = python.empty() ? reference_python() : python;
    const std::string command = shell_quote(py) + " " + shell_quote(script.string()) + " " + shell_quote(request_path) + " 2>&1";
    std::string said;
    int status = -1;
    {
        std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
        if (pipe) {
            std::array<char, 4096> buf{};
            while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe.get())) said.append(buf.data(), n);
            status = pclose(pipe.release());
        }
    }
    fs::remove(request_path);
    if (status != 0) {
        // The writer's last line says what went wrong (a folder with events already, no tensorboard).
        while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
        std::string last = said.substr(said.rfind('\n') == std::string::npos ? 0 : said.rfind('\n') + 1);
        if (last.find("No module named") != std::string::npos)
            last = "the reference environment (" + py + ") lacks torch or tensorboard; run scripts/setup";
        // The writer's line names the output folder; the run read is not what failed.
        throw Error("tandem export tensorboard: " + (last.empty() ? "the writer failed writing under " + dir.string() : last));
    }
    return out;
}

}  // namespace tandem::experiments
