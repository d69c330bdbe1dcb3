// bench_views_follow [RUNS LEGS UPDATES] — live following at scale (docs/workbench.md, docs/benchmarks.md).
// Writes RUNS run files of LEGS legs × UPDATES updates (through experiments' RunFileWriter), opens
// them all in one TrajectoryView (the compare page's overlay, offscreen, 1280×960, default panels),
// then measures, best of 10:
//   read    — a follower's read after a commit of 100 new rows to one run (IncrementalRunReader),
//             against the reference in the same run: re-reading that whole run (load_run_snapshot,
//             what the workbench did per change before);
//   redraw  — one coalesced redraw batch: apply the delta to the view, redraw every panel, and
//             paint it (QWidget::grab), against the same with only one run open.
// Prints the figures and the ratios (docs/benchmarks.md).
#include "views_test_support.h"

#include "tandem/views/run_source.h"
#include "tandem/views/trajectory_view.h"

#include <QApplication>
#include <QChart>
#include <QXYSeries>
#include <QTemporaryDir>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

using namespace tandem::views;
using Clock = std::chrono::steady_clock;

namespace {

double best_ms(int repeats, const std::function<void()>& f) {
    double best = 1e300;
    for (int i = 0; i < repeats; ++i) {
        const auto t0 = Clock::now();
        f();
        best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return best;
}

std::vector<test::TestLeg> legs_for(int run, int legs, int updates) {
    std::vector<test::TestLeg> out;
    for (int l = 0; l < legs; ++l) {
        test::TestLeg leg{"leg" + std::to_string(l), l == 0 ? "reference" : "engine", updates, 100,
                          [run, l](const std::string& m, int u) {
                              const double wiggle = 0.01 * std::sin(0.37 * u + run + l);
                              if (m == "loss") return 3.0 * std::exp(-u / 4000.0) + wiggle;
                              if (m == "grad") return 1.0 + 0.5 * std::fabs(std::sin(0.01 * u)) + wiggle;
                              if (m == "lr") return 1e-4 * std::min(1.0, u / 300.0);
                              return 3.1 * std::exp(-u / 4000.0) + wiggle;
                          }};
        out.push_back(leg);
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    const int runs = argc > 1 ? std::atoi(argv[1]) : 10;
    const int legs = argc > 2 ? std::atoi(argv[2]) : 3;
    const int updates = argc > 3 ? std::atoi(argv[3]) : 10000;
    QTemporaryDir dir;
    const auto root = std::filesystem::path(dir.path().toStdString());
    const auto t_write = Clock::now();
    std::vector<std::filesystem::path> files;
    for (int r = 0; r < runs; ++r) {
        files.push_back(root / ("run" + std::to_string(r) + ".h5"));
        test::write_test_run(files.back(), "bench-run-" + std::to_string(r), legs_for(r, legs, updates));
    }
    std::printf("wrote %d runs x %d legs x %d updates in %.1f s\n", runs, legs, updates,
                std::chrono::duration<double>(Clock::now() - t_write).count());

    // Followers, one per run, as the compare page keeps them; the view gets every run.
    std::vector<IncrementalRunReader> readers(static_cast<std::size_t>(runs));
    TrajectoryView view;
    view.resize(1280, 960);
    view.show();
    for (int r = 0; r < runs; ++r) view.apply_delta(readers[static_cast<std::size_t>(r)].read(files[static_cast<std::size_t>(r)]));
    view.redraw_now();
    app.processEvents();
    std::size_t points = 0;
    for (const auto& run : view.runs()) points += run.point_count();
    std::printf("open: %zu runs, %zu points\n", view.runs().size(), points);

    // A live batch: 100 new updates appended to every leg of run 0 (one writer commit).
    int next = updates;
    auto append_batch = [&] {
        tandem::experiments::RunFileWriter w(files[0]);
        for (int l = 0; l < legs; ++l) {
            std::vector<tandem::experiments::StepRow> rows;
            for (int u = next; u < next + 100; ++u) rows.push_back({u, 2.0 + 0.001 * l, 1.0, 1e-4, 100, 0.5});
            w.append_steps("leg" + std::to_string(l), rows);
        }
        next += 100;
    };
    IncrementalRunReader::Delta delta;
    double read_incremental = 1e300, read_full = 1e300, redraw_all = 1e300;
    for (int i = 0; i < 10; ++i) {
        append_batch();
        read_incremental = std::min(read_incremental, best_ms(1, [&] { delta = readers[0].read(files[0]); }));
        read_full = std::min(read_full, best_ms(1, [&] { (void)load_run_snapshot(files[0]); }));
        redraw_all = std::min(redraw_all, best_ms(1, [&] {
                                  view.apply_delta(delta);
                                  view.redraw_now();
                                  (void)view.grab();
                              }));
    }
    // Reference: the same batch with one run open.
    TrajectoryView single;
    single.resize(1280, 960);
    single.show();
    IncrementalRunReader single_reader;
    single.apply_delta(single_reader.read(files[0]));
    single.redraw_now();
    app.processEvents();
    double redraw_one = 1e300;
    for (int i = 0; i < 10; ++i) {
        append_batch();
        const auto d = single_reader.read(files[0]);
        redraw_one = std::min(redraw_one, best_ms(1, [&] {
                                  single.apply_delta(d);
                                  single.redraw_now();
                                  (void)single.grab();
                              }));
    }
    if (qEnvironmentVariableIsSet("TANDEM_BENCH_BREAKDOWN")) {
        const double redraw = best_ms(3, [&] { view.redraw_now(); });
        const double paint = best_ms(3, [&] { (void)view.grab(); });
        std::printf("breakdown: redraw_now %.1f ms, paint %.1f ms\n", redraw, paint);
        for (int p = 0; p < view.panel_count(); ++p) view.panel_view(p)->setRenderHint(QPainter::Antialiasing, false);
        std::printf("breakdown: paint without antialiasing %.1f ms\n", best_ms(3, [&] { (void)view.grab(); }));
        for (int p = 0; p < view.panel_count(); ++p)
            for (auto* s : view.panel_view(p)->chart()->series()) {
                auto* xy = static_cast<QXYSeries*>(s);
                QPen pen = xy->pen();
                pen.setStyle(Qt::SolidLine);
                xy->setPen(pen);
            }
        std::printf("breakdown: ... and solid pens %.1f ms\n", best_ms(3, [&] { (void)view.grab(); }));
        for (int p = 0; p < view.panel_count(); ++p) view.panel_view(p)->setRenderHint(QPainter::Antialiasing, true);
        std::printf("breakdown: solid pens with antialiasing %.1f ms\n", best_ms(3, [&] { (void)view.grab(); }));
    }
    std::printf("read after a 100-row commit: incremental %.2f ms, whole run re-read %.2f ms (%.1fx)\n", read_incremental,
                read_full, read_full / read_incremental);
    std::printf("redraw batch (apply + redraw + paint): %d runs open %.1f ms, 1 run open %.1f ms (%.1fx); budget 50 ms: %s\n",
                runs, redraw_all, redraw_one, redraw_all / redraw_one, redraw_all < 50 ? "within" : "OVER");
    return redraw_all < 50 ? 0 : 1;
}
