// Item models of views/ (widget-free part): model invariants (QAbstractItemModelTester), filter and
// sort of the runs table, removal of a run, the string-table model, and the chart point transforms.
#include "tandem/views/curve_points.h"
#include "tandem/views/leg_progress.h"
#include "tandem/views/runs_model.h"
#include "tandem/views/string_table.h"

#include <QAbstractItemModelTester>
#include <QTemporaryDir>
#include "tandem/compare/run_overview.h"

#include <QtTest>

#include <cmath>
#include <fstream>
#include <random>

using namespace tandem::views;

namespace {

std::vector<CatalogLegRow> sample_rows() {
    auto row = [](const char* run, const char* leg, const char* status, const char* device, std::optional<double> loss,
                  std::optional<double> tps, std::optional<double> mem) {
        CatalogLegRow r;
        r.run_id = run;
        r.experiment = "clinical-tiny";
        r.run_path = std::string("/runs/") + run;
        r.run_file = r.run_path + "/run.h5";
        r.started = std::string("2026-11-29T0") + run[std::string(run).size() - 1] + ":00:00Z";
        r.leg = leg;
        r.status = status;
        r.device = device;
        r.final_loss = loss;
        r.tokens_per_s = tps;
        r.peak_memory_bytes = mem;
        r.updates_done = 40;
        r.updates_total = 40;
        return r;
    };
    return {row("clinical-tiny-1", "engine", "finished", "cpu", 2.5, 900, 3e8),
            row("clinical-tiny-1", "reference", "finished", "cpu", 2.25, 100, 9e8),
            row("clinical-tiny-2", "engine", "failed", "cuda:0", std::nullopt, std::nullopt, std::nullopt),
            row("clinical-tiny-3", "reference", "running", "cuda:1", 10.0, 5000, 2e9)};
}

Series sawtooth(int n) {
    Series s;
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> noise(-1, 1);
    for (int i = 0; i < n; ++i) s.push_back({static_cast<double>(i), std::sin(i * 0.01) + noise(rng)});
    return s;
}

}  // namespace

class TestViewsModels : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void runs_model_passes_model_tester() {
        RunsModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.set_rows(sample_rows());
        // Three runs at the top, each leg under its run.
        QCOMPARE(model.rowCount(), 3);
        QCOMPARE(model.leg_count(), 4);
        QCOMPARE(model.columnCount(), int(RunsModel::ColumnCount) + int(tandem::experiments::default_setting_columns().size()));
        const auto run1 = model.run_index("clinical-tiny-1");
        QCOMPARE(model.rowCount(run1), 2);
        QCOMPARE(model.index(0, RunsModel::FinalLoss, run1).data().toString(), QStringLiteral("2.500000"));
        QCOMPARE(model.index(1, RunsModel::PeakMemory, run1).data().toString(), QStringLiteral("858.3 MiB"));
        QCOMPARE(model.index(0, RunsModel::Progress, run1).data().toString(), QStringLiteral("40 / 40"));
        QCOMPARE(model.index(0, RunsModel::FinalLoss, model.run_index("clinical-tiny-2")).data().toString(), QStringLiteral("—"));
        model.remove_run("clinical-tiny-1");
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(model.leg_count(), 2);
        QCOMPARE(model.index(0, RunsModel::Run).data().toString(), QStringLiteral("clinical-tiny-2"));
        model.set_rows({});
        QCOMPARE(model.rowCount(), 0);
    }

    void proxy_filters_and_sorts_numbers_as_numbers() {
        RunsModel model;
        RunsFilterProxy proxy;
        proxy.setSourceModel(&model);
        QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
        // One run with four legs: tokens/s 900, 100, none, 5000.
        auto rows = sample_rows();
        for (auto& r : rows) {
            r.leg = r.run_id + "-" + r.leg;
            r.run_id = "one-run";
        }
        model.set_rows(rows);
        const auto run = proxy.index(0, 0);
        // Ascending numeric order puts the missing value last (a text sort would give 100, 5000, 900).
        proxy.sort(RunsModel::TokensPerSecond, Qt::AscendingOrder);
        QStringList order;
        for (int r = 0; r < proxy.rowCount(run); ++r) order << proxy.index(r, RunsModel::TokensPerSecond, run).data().toString();
        QCOMPARE(order, (QStringList{"100", "900", "5000", "—"}));
        // A run stays with the legs that match; a leg that does not match leaves.
        proxy.set_filter_text(QStringLiteral("CUDA"));
        QCOMPARE(proxy.rowCount(), 1);
        QCOMPARE(proxy.rowCount(proxy.index(0, 0)), 2);
        proxy.set_filter_text(QStringLiteral("failed"));
        QCOMPARE(proxy.rowCount(proxy.index(0, 0)), 1);
        QCOMPARE(proxy.index(0, RunsModel::Run, proxy.index(0, 0)).data().toString(), QStringLiteral("clinical-tiny-2-engine"));
        // A run that matches keeps all its legs.
        proxy.set_filter_text(QStringLiteral("one-run"));
        QCOMPARE(proxy.rowCount(proxy.index(0, 0)), 4);
        proxy.set_filter_text({});
        QCOMPARE(proxy.rowCount(proxy.index(0, 0)), 4);
    }

    void string_table_model_passes_model_tester() {
        StringTableModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        // A short row shows empty cells.
        const StringTable t{"l1", "L1 table", {"leg a", "leg b", "rel diff"}, {{"engine", "reference", "3e-07"}, {"engine", "engine2"}}, {}};
        model.set_table(t);
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(model.columnCount(), 3);
        QCOMPARE(model.index(0, 2).data().toString(), QStringLiteral("3e-07"));
        QCOMPARE(model.index(1, 2).data().toString(), QString());
        QCOMPARE(model.headerData(2, Qt::Horizontal).toString(), QStringLiteral("rel diff"));
    }

    void envelope_keeps_every_value_on_the_drawn_line() {
        const auto s = sawtooth(100000);
        const int columns = 500;
        const auto points = envelope_points(s, 0, 99999, columns);
        QVERIFY(points.size() <= 2 * columns + 2);
        QVERIFY(points.size() >= columns);
        // Every recorded value lies within [min, max] of the drawn points of its bucket, and the
        // global extremes are drawn exactly.
        double lo = 1e300, hi = -1e300;
        for (const auto& p : s) lo = std::min(lo, p.value), hi = std::max(hi, p.value);
        double dlo = 1e300, dhi = -1e300;
        for (const auto& p : points) dlo = std::min(dlo, p.y()), dhi = std::max(dhi, p.y());
        QCOMPARE(dlo, lo);
        QCOMPARE(dhi, hi);
        const double width = 99999.0 / columns;
        for (int b = 0; b < columns; ++b) {
            double rmin = 1e300, rmax = -1e300, pmin = 1e300, pmax = -1e300;
            for (const auto& p : s) {
                if (static_cast<int>(std::floor(p.update / width)) != b) continue;
                rmin = std::min(rmin, p.value), rmax = std::max(rmax, p.value);
            }
            for (const auto& p : points) {
                if (static_cast<int>(std::floor(p.x() / width)) != b) continue;
                pmin = std::min(pmin, p.y()), pmax = std::max(pmax, p.y());
            }
            if (rmin > rmax) continue;
            QCOMPARE(pmin, rmin);
            QCOMPARE(pmax, rmax);
        }
        // x stays in update order (the polyline never doubles back).
        for (int i = 1; i < points.size(); ++i) QVERIFY(points[i].x() >= points[i - 1].x());
    }

    void envelope_draws_raw_points_when_zoomed_in() {
        const auto s = sawtooth(1000);
        const auto points = envelope_points(s, 100, 199, 800);
        QCOMPARE(points.size(), 102);  // 100..199 plus one neighbour on each side
        QCOMPARE(points.front().x(), 99.0);
        QCOMPARE(points.back().x(), 200.0);
        QCOMPARE(points[1].y(), s[100].value);
    }

    void smoothing_is_a_debiased_ema_and_nearest_point_picks_the_closest_update() {
        const Series s{{0, 1}, {1, 3}, {2, 5}};
        const auto sm = smoothed_for_display(s, 0.5);
        QCOMPARE(sm.size(), std::size_t(3));
        QCOMPARE(sm[0].value, 1.0);                      // debiased: first point unchanged
        QCOMPARE(sm[1].value, (0.25 + 1.5) / 0.75);      // (0.5*(0.5*1) + 0.5*3) / (1 - 0.25)
        QCOMPARE(smoothed_for_display(s, 0)[2].value, 5.0);
        const Series evals{{0, 4}, {10, 3}, {20, 2}};
        QCOMPARE(nearest_point(evals, 4)->update, 0.0);
        QCOMPARE(nearest_point(evals, 6)->update, 10.0);
        QCOMPARE(nearest_point(evals, 99)->value, 2.0);
        QVERIFY(!nearest_point({}, 1));
    }

    void leg_progress_reads_counts_and_a_crashed_legs_last_words() {
        // A run folder as the runner leaves it: plan.json with 5 updates, one leg that finished
        // 3 updates and is still running, one that crashed after 2 with an error and a traceback.
        QTemporaryDir dir;
        const std::filesystem::path run = dir.path().toStdString();
        std::filesystem::create_directories(run / "legs" / "a");
        std::filesystem::create_directories(run / "legs" / "b");
        std::ofstream(run / "plan.json") << R"({"version": 1, "updates": [[[0]], [[1]], [[2]], [[3]], [[4]]]})";
        auto step = [](int u) {
            return "{\"v\": 1, \"event\": \"step\", \"update\": " + std::to_string(u) +
                   ", \"loss\": 2.5, \"grad_norm\": 1.0, \"lr\": 0.001, \"tokens\": 10, \"wall_s\": 0.1}\n";
        };
        {
            std::ofstream a(run / "legs" / "a" / "events.jsonl");
            a << R"({"v": 1, "event": "hello", "implementation": "engine"})" << "\n" << step(0) << step(1) << step(2);
            std::ofstream b(run / "legs" / "b" / "events.jsonl");
            b << R"({"v": 1, "event": "hello", "implementation": "reference"})" << "\n" << step(0) << step(1)
              << R"({"v": 1, "event": "error", "message": "CUDA out of memory"})" << "\n";
            std::ofstream(run / "legs" / "b" / "stderr.log") << std::string(5000, 'x') << "Traceback: RuntimeError at the end\n";
        }
        const auto progress = read_run_progress(run);
        QCOMPARE(progress.size(), std::size_t(2));
        QCOMPARE(progress[0].leg, std::string("a"));
        QCOMPARE(progress[0].implementation, std::string("engine"));
        QCOMPARE(progress[0].updates_done, std::int64_t(3));
        QCOMPARE(progress[0].updates_total, std::int64_t(5));
        QVERIFY(progress[0].error.empty());
        QCOMPARE(progress[1].updates_done, std::int64_t(2));
        QCOMPARE(progress[1].error, std::string("CUDA out of memory"));
        QCOMPARE(progress[1].last_events.size(), std::size_t(4));
        QVERIFY(progress[1].last_events.back().find("CUDA out of memory") != std::string::npos);
        QCOMPARE(progress[1].stderr_tail.size(), std::size_t(4096));  // the end of the log, not its start
        QVERIFY(progress[1].stderr_tail.find("RuntimeError at the end") != std::string::npos);
        QVERIFY(read_run_progress(run / "missing").empty());
    }
};

QTEST_MAIN(TestViewsModels)
#include "test_views_models.moc"
