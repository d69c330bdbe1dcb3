// Commit cost of run.h5 (docs/hdf5-layout.md "Commit cost", docs/benchmarks.md): a commit of 30 new
// rows (3 legs x 10 updates) into a file already holding N rows per leg, with a fresh writer per
// commit (every session copies the whole file, the cost before double buffering) and with one
// long-lived writer (each session starts from the previous version and replays the last session's
// rows). Both measured in the same run; prints ms per commit and the ratio.
//
//   bench_run_file_commit [DIR] [COMMITS]
#include "tandem/store/run_file.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace ex = tandem::experiments;

namespace {
std::vector<ex::StepRow> rows(std::int64_t first, std::int64_t n) {
    std::vector<ex::StepRow> r;
    for (std::int64_t i = first; i < first + n; ++i) r.push_back({i, 2.0 + 1e-3 * static_cast<double>(i % 97), 1.5, 1e-4, 1000, 0.4});
    return r;
}

double ms_per_commit(const fs::path& file, std::int64_t start, int commits, bool long_lived) {
    std::optional<ex::RunFileWriter> keep;
    if (long_lived) keep.emplace(file);
    std::int64_t next = start;
    // Warm-up session so the long-lived writer has a previous version.
    auto session = [&] {
        std::optional<ex::RunFileWriter> fresh;
        ex::RunFileWriter& w = long_lived ? *keep : fresh.emplace(file);
        for (const char* leg : {"engine", "reference", "sdk"}) w.append_steps(leg, rows(next, 10));
        w.commit();
        next += 10;
    };
    session();
    session();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < commits; ++i) session();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / commits;
}
}  // namespace

int main(int argc, char** argv) {
    const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "tandem-bench-commit";
    const int commits = argc > 2 ? std::stoi(argv[2]) : 20;
    fs::create_directories(dir);
    std::printf("%12s %12s %16s %16s %8s\n", "rows/leg", "file MiB", "copy ms/commit", "reuse ms/commit", "ratio");
    for (std::int64_t n : {1000, 10000, 100000, 1000000}) {
        const fs::path file = dir / ("commit-" + std::to_string(n) + ".h5");
        fs::remove(file);
        {
            ex::RunFileWriter w(file);
            for (const char* leg : {"engine", "reference", "sdk"}) w.append_steps(leg, rows(0, n));
            w.commit();
        }
        const double copy = ms_per_commit(file, n, commits, false);
        const double reuse = ms_per_commit(file, n + 10 * (commits + 2), commits, true);
        std::printf("%12lld %12.1f %16.2f %16.2f %7.1fx\n", static_cast<long long>(n),
                    static_cast<double>(fs::file_size(file)) / 1048576.0, copy, reuse, copy / reuse);
        fs::remove(file);
    }
    return 0;
}
