// What a new user found on the workbench (docs/workbench.md), one test (or more) each: what they saw on screen, checked
// offscreen against what the chart, window or file really holds.
#include "views_test_support.h"

#include "tandem/compare/comparison_io.h"
#include "tandem/compare/report.h"
#include "tandem/views/axis_ticks.h"
#include "tandem/views/export.h"
#include "tandem/views/export_dialog.h"
#include "tandem/views/launcher_view.h"
#include "tandem/views/main_window.h"
#include "tandem/views/tables_view.h"
#include "tandem/views/tandem_binary.h"
#include "tandem/views/token_diff_view.h"
#include "tandem/views/trajectory_view.h"

#include <QAbstractButton>
#include <QApplication>
#include <QChart>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFontMetricsF>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QMenuBar>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextEdit>
#include <QValueAxis>
#include <QXYSeries>
#include <QtTest>

#include <cmath>
#include <fstream>

using namespace tandem::views;
using namespace tandem::views::test;
namespace ex = tandem::experiments;

namespace {

// Two legs at different updates: engine evaluated every 5, reference every 10 and shorter.
std::vector<TestLeg> two_legs(int engine_steps = 30, int reference_steps = 20) {
    TestLeg engine{"engine", "engine", engine_steps, 5, [](const std::string& m, int u) {
                       if (m == "loss") return 3.0 - 0.01 * u;
                       if (m == "grad") return 11.95 + 1e-4 * std::sin(u);  // the "11.95 five times" axis
                       if (m == "lr") return 1e-4 * (u + 1) / 31.0;
                       return 3.1 - 0.01 * u;
                   }};
    TestLeg reference{"reference", "reference", reference_steps, 10, [](const std::string& m, int u) {
                          if (m == "loss") return 3.0 - 0.01 * u + 1e-7;
                          if (m == "grad") return 11.95 + 1e-4 * std::cos(u);
                          if (m == "lr") return 1e-4 * (u + 1) / 31.0;
                          return 3.1 - 0.01 * u + 2e-7;
                      }};
    return {engine, reference};
}

RunSnapshot load(const std::filesystem::path& file) { return load_run_snapshot(file); }

// `view` (1000 x 1000, on screen) showing the run `run_id` of two_legs(31, 31), written in `dir`.
void show_two_leg_run(TrajectoryView& view, const QTemporaryDir& dir, const std::string& run_id) {
    const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
    write_test_run(file, run_id, two_legs(31, 31));
    view.resize(1000, 1000);
    view.show();
    view.set_snapshot(load(file));
}

void write_executable(const QString& path, const QString& text) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(text.toUtf8());
    f.close();
    f.setPermissions(f.permissions() | QFileDevice::ExeOwner | QFileDevice::ExeUser);
}

// What the fake `tandem run` of legs a and b does first: takes --out, makes <out>/fake-run with a
// plan of `updates` updates and update 0 of each leg, and prints the folder line the launcher follows.
QString fake_run_of_two_legs(int updates) {
    QStringList plan;
    for (int u = 0; u < updates; ++u) plan << QStringLiteral("[%1]").arg(u);
    return QStringLiteral(R"(out=""
while [[ $# -gt 0 ]]; do [[ "$1" == "--out" ]] && out="$2"; shift; done
folder="$out/fake-run"; mkdir -p "$folder/legs/a" "$folder/legs/b"
echo '{"updates":[)") + plan.join(QLatin1Char(',')) + QStringLiteral(R"(]}' > "$folder/plan.json"
for leg in a b; do echo '{"v":1,"event":"step","update":0,"loss":2,"grad_norm":1,"lr":0.001,"tokens":10,"wall_s":0.1}' > "$folder/legs/$leg/events.jsonl"; done
echo "tandem run: run folder: $folder"
)");
}

// The drawn labels of an axis sit at their values (within 1.5 pixels), step by a nice number, are
// distinct, and (update axis) are integers.
void check_axis(QChart* chart, Qt::Orientation o, bool integers, bool log_scale = false) {
    const auto labels = drawn_axis_labels(chart, o);
    QVERIFY2(labels.size() >= 2, qPrintable(QStringLiteral("%1 labels drawn").arg(labels.size())));
    const QRectF plot = chart->plotArea();
    QStringList texts;
    for (const auto& l : labels) texts << l.text;
    QCOMPARE(QSet<QString>(texts.begin(), texts.end()).size(), texts.size());  // distinct
    for (const auto& l : labels) {
        const QPointF value = chart->mapToValue(l.center);
        if (o == Qt::Horizontal) {
            const auto* axis = static_cast<QValueAxis*>(chart->axes(Qt::Horizontal).value(0));
            const double per_pixel = (axis->max() - axis->min()) / plot.width();
            QVERIFY2(std::fabs(value.x() - l.number) <= 1.5 * per_pixel,
                     qPrintable(QStringLiteral("label %1 drawn at %2").arg(l.text).arg(value.x())));
            if (integers) QCOMPARE(l.number, std::round(l.number));
        } else {
            const auto* axis = static_cast<QValueAxis*>(chart->axes(Qt::Vertical).value(0));
            const double per_pixel = (axis->max() - axis->min()) / plot.height();
            const double drawn = log_scale ? value.y() : value.y();
            const double expected = log_scale ? std::log10(l.number) : l.number;
            QVERIFY2(std::fabs(drawn - expected) <= 1.5 * per_pixel,
                     qPrintable(QStringLiteral("label %1 drawn at %2").arg(l.text).arg(drawn)));
        }
    }
    if (!log_scale) {
        const double step = labels[1].number - labels[0].number;
        QVERIFY2(is_nice(std::fabs(step)), qPrintable(QStringLiteral("step %1 (%2, %3)").arg(step).arg(texts[0], texts[1])));
        for (std::size_t i = 1; i < labels.size(); ++i)
            QVERIFY(std::fabs((labels[i].number - labels[i - 1].number) - step) <= 1e-9 * std::max(1.0, std::fabs(step)) + std::fabs(step) * 1e-6);
    }
}

// A launcher on screen running the fake CLI `cli` on an empty experiment, legs a and b on the CPU.
void set_up_fake_launcher(LauncherView& launcher, const QTemporaryDir& dir, const QString& cli) {
    const auto exp = dir.filePath(QStringLiteral("x.json"));
    std::ofstream(exp.toStdString()) << "{}";
    launcher.show();
    launcher.set_tandem(find_tandem_binary({}, {}, {}, cli));
    launcher.set_runs_dir(dir.filePath(QStringLiteral("runs")));
    launcher.set_catalog(dir.filePath(QStringLiteral("t.db")));
    launcher.set_experiment(exp);
    launcher.set_legs({{QStringLiteral("a"), QStringLiteral("engine"), QStringLiteral("cpu")},
                       {QStringLiteral("b"), QStringLiteral("engine"), QStringLiteral("cpu")}});
}

}  // namespace

class TestViewsFixes : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { tandem::views::test::use_test_settings("test_views_fixes"); }

    // 1. The launcher finds `tandem` next to the GUI, in the build tree, installed, then on PATH,
    //    and says what it tried when none is there.
    void finds_the_tandem_binary_and_says_what_it_tried() {
        QTemporaryDir dir;
        QDir(dir.path()).mkpath(QStringLiteral("build/app/workbench"));
        QDir(dir.path()).mkpath(QStringLiteral("prefix/bin"));
        QDir(dir.path()).mkpath(QStringLiteral("onpath"));
        const QString gui_dir = dir.filePath(QStringLiteral("build/app/workbench"));
        const QString bindir = dir.filePath(QStringLiteral("prefix/bin"));
        const QString path_env = QStringLiteral("/nonexistent-a:") + dir.filePath(QStringLiteral("onpath"));
        const QString script = QStringLiteral("#!/bin/sh\nexit 0\n");

        auto none = find_tandem_binary(gui_dir, bindir, path_env);
        QVERIFY(none.path.isEmpty());
        const QStringList expected_order{gui_dir + "/tandem", dir.filePath("build/app/tandem"), bindir + "/tandem",
                                         "/nonexistent-a/tandem", dir.filePath("onpath/tandem")};
        QCOMPARE(none.tried, expected_order);
        for (const auto& p : expected_order) QVERIFY2(none.not_found_message().contains(p), qPrintable(none.not_found_message()));
        QVERIFY(none.not_found_message().contains(QStringLiteral("--tandem")));

        write_executable(dir.filePath("onpath/tandem"), script);
        QCOMPARE(find_tandem_binary(gui_dir, bindir, path_env).path, dir.filePath("onpath/tandem"));
        write_executable(bindir + "/tandem", script);
        QCOMPARE(find_tandem_binary(gui_dir, bindir, path_env).path, bindir + "/tandem");
        write_executable(dir.filePath("build/app/tandem"), script);
        QCOMPARE(find_tandem_binary(gui_dir, bindir, path_env).path, dir.filePath("build/app/tandem"));
        write_executable(gui_dir + "/tandem", script);
        QCOMPARE(find_tandem_binary(gui_dir, bindir, path_env).path, gui_dir + "/tandem");

        // A launcher without a CLI says so at Start, and runs nothing.
        LauncherView launcher;
        launcher.set_tandem(none);
        QTemporaryDir work;
        const auto exp = work.filePath(QStringLiteral("x.json"));
        std::ofstream(exp.toStdString()) << R"({"name":"x"})";
        launcher.set_experiment(exp);
        launcher.set_legs({{QStringLiteral("engine"), QStringLiteral("engine"), QStringLiteral("cpu")}});
        launcher.start();
        QVERIFY(!launcher.running());
        QVERIFY2(launcher.state_text().contains(dir.filePath("onpath/tandem")), qPrintable(launcher.state_text()));
        const auto* log = launcher.findChild<QPlainTextEdit*>(QStringLiteral("log"));
        QVERIFY2(!log->toPlainText().contains(QStringLiteral("$  run")), qPrintable(log->toPlainText()));
    }

    // 2. Hover at update k shows each leg's value at k (or "–"), and clears when the run changes.
    void hover_reads_every_leg_at_the_same_update_and_clears_on_run_change() {
        QTemporaryDir dir;
        const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        auto legs = two_legs();
        write_test_run(file, "hover-run", legs);
        TrajectoryView view;
        view.resize(1000, 900);
        view.show();
        view.set_snapshot(load(file));
        view.redraw_now();
        // Update 14: the nearest evaluation is the engine's at 15; the reference has none there.
        view.hover_at(14.2);
        const QString text = view.hover_text();
        QVERIFY2(text.contains(QStringLiteral("held-out CE</b> @ update 15")), qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("engine</span> ") + QString::number(legs[0].value("eval", 15), 'g', 8)), qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("reference</span> –")), qPrintable(text));
        // Grad norm at 19 (both legs have it): both values are update 19's, not the nearest of each.
        view.hover_at(19.0);
        QVERIFY2(view.hover_text().contains(QStringLiteral("grad norm</b> @ update 19: ")), qPrintable(view.hover_text()));
        QVERIFY(view.hover_text().contains(QString::number(legs[0].value("grad", 19), 'g', 8)));
        QVERIFY(view.hover_text().contains(QString::number(legs[1].value("grad", 19), 'g', 8)));
        // Update 25: only the engine ran that far.
        view.hover_at(25.0);
        QVERIFY2(view.hover_text().contains(QStringLiteral("grad norm</b> @ update 25: ")), qPrintable(view.hover_text()));
        QVERIFY2(view.hover_text().contains(QStringLiteral("reference</span> –")), qPrintable(view.hover_text()));
        // Another run: the read-out is cleared.
        const auto other = std::filesystem::path(dir.path().toStdString()) / "other.h5";
        write_test_run(other, "other-run", two_legs(12, 12));
        view.set_snapshot(load(other));
        QCOMPARE(view.hover_text(), QString());
    }

    // 3. Ticks are nice numbers at their values, integers on the update axis, distinct labels.
    void ticks_are_nice_numbers_at_their_values() {
        QCOMPARE(nice_step(30, 4, true), 10.0);
        QCOMPARE(nice_step(10, 4, true), 5.0);   // not 2.5 on an update axis
        QCOMPARE(nice_step(10, 5, true), 2.0);
        QCOMPARE(nice_step(10, 4, false), 2.5);
        const auto t = linear_ticks(11.9499, 11.9501, 6, false);
        QVERIFY(t.values.size() >= 2);
        QCOMPARE(QSet<std::string>(t.labels.begin(), t.labels.end()).size(), qsizetype(t.labels.size()));

        QTemporaryDir dir;
        TrajectoryView view;
        show_two_leg_run(view, dir, "ticks-run");
        view.redraw_now();
        QApplication::processEvents();
        for (int p : {int(TrajectoryView::metric_panel(Metric::HeldoutCe)), int(TrajectoryView::metric_panel(Metric::GradNorm))}) {
            auto* chart = view.panel_view(p)->chart();
            check_axis(chart, Qt::Horizontal, true);
            check_axis(chart, Qt::Vertical, false);
        }
        view.set_x_range(std::make_pair(5.0, 15.0));  // "5, 7, 10, 12, 15" before
        view.redraw_now();
        QApplication::processEvents();
        check_axis(view.panel_view(TrajectoryView::metric_panel(Metric::GradNorm))->chart(), Qt::Horizontal, true);

        // The exported figure uses the same ticks: the chart built for export has them too.
        TrajectoryChart exported;
        ChartOptions options;
        options.metric = Metric::GradNorm;
        options.columns = 600;
        QChartView holder(exported.chart());
        holder.resize(600, 400);
        holder.show();
        exported.update(view.snapshot(), options);
        QApplication::processEvents();
        check_axis(exported.chart(), Qt::Horizontal, true);
        check_axis(exported.chart(), Qt::Vertical, false);
    }

    // 4. Log y keeps its labels (a range inside one decade included).
    void log_y_keeps_the_axis_labels() {
        QTemporaryDir dir;
        TrajectoryView view;
        show_two_leg_run(view, dir, "log-run");
        view.set_panel_visible(TrajectoryView::metric_panel(Metric::LearningRate), true);
        view.set_log_y(true);
        view.redraw_now();
        QApplication::processEvents();
        for (int p : {int(TrajectoryView::metric_panel(Metric::HeldoutCe)), int(TrajectoryView::metric_panel(Metric::GradNorm)), int(TrajectoryView::metric_panel(Metric::LearningRate))})
            check_axis(view.panel_view(p)->chart(), Qt::Vertical, false, true);
    }

    // 5. A folder that is not a run (or a missing path) is refused at once; the open run stays.
    void a_non_run_path_leaves_the_open_run_and_recent_runs_unchanged() {
        QSettings().remove(QStringLiteral("recent_runs"));
        QTemporaryDir dir;
        const auto good = std::filesystem::path(dir.path().toStdString()) / "good";
        std::filesystem::create_directories(good);
        write_test_run(good / "run.h5", "good-run", two_legs());
        MainWindow window;
        window.show();
        QSignalSpy shown(&window, &MainWindow::run_snapshot_shown);
        window.open_run(QString::fromStdString(good.string()));
        QVERIFY(shown.wait(10000));
        const auto recent = QSettings().value(QStringLiteral("recent_runs")).toStringList();
        QCOMPARE(recent.size(), 1);

        const auto not_a_run = std::filesystem::path(dir.path().toStdString()) / "photos";
        std::filesystem::create_directories(not_a_run);
        std::ofstream(not_a_run / "cat.jpg") << "jpeg";
        const auto garbage = std::filesystem::path(dir.path().toStdString()) / "fake.h5";
        std::ofstream(garbage) << "not hdf5 at all";
        const std::pair<std::filesystem::path, QString> bad[] = {
            {std::filesystem::path(dir.path().toStdString()) / "missing", QStringLiteral("does not exist")},
            {not_a_run, QStringLiteral("not a tandem run folder")},
            {garbage, QStringLiteral("not an HDF5 file")}};
        for (const auto& [path, why] : bad) {
            window.open_run(QString::fromStdString(path.string()));
            // At once: no event loop turn needed.
            QVERIFY2(window.error_text().contains(QString::fromStdString(path.string())), qPrintable(window.error_text()));
            QVERIFY2(window.error_text().contains(why), qPrintable(window.error_text()));
            QCOMPARE(window.current_run(), QString::fromStdString(good.string()));
            QCOMPARE(QSettings().value(QStringLiteral("recent_runs")).toStringList(), recent);
            QTest::qWait(700);  // a follower poll later, the good run is still what is shown
            QCOMPARE(window.trajectories()->snapshot().legs.size(), std::size_t(2));
            QCOMPARE(QString::fromStdString(window.trajectories()->snapshot().path), QString::fromStdString((good / "run.h5").string()));
        }
    }

    // 6. Training loss, learning rate and throughput curves; the residual panel's title fits, its
    //    ticks are nice, it has a zero line, and its export names the metric.
    void every_recorded_metric_has_a_curve_and_the_residual_panel_reads_well() {
        QTemporaryDir dir;
        const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        const auto legs = two_legs();
        write_test_run(file, "metrics-run", legs);
        TrajectoryView view;
        view.resize(1100, 1400);
        view.show();
        view.set_snapshot(load(file));
        view.set_panel_visible(TrajectoryView::metric_panel(Metric::LearningRate), true);
        view.set_panel_visible(TrajectoryView::metric_panel(Metric::Throughput), true);
        view.redraw_now();
        QApplication::processEvents();
        auto points = [&](int panel, const QString& name) {
            for (auto* s : view.panel_view(panel)->chart()->series())
                if (s->name() == name) return static_cast<QXYSeries*>(s)->points();
            return QList<QPointF>{};
        };
        for (const auto& leg : legs) {
            const auto name = QString::fromStdString(leg.name);
            const auto loss = points(TrajectoryView::metric_panel(Metric::TrainLoss), name);
            const auto lr = points(TrajectoryView::metric_panel(Metric::LearningRate), name);
            const auto tps = points(TrajectoryView::metric_panel(Metric::Throughput), name);
            QCOMPARE(loss.size(), leg.steps);
            QCOMPARE(lr.size(), leg.steps);
            QCOMPARE(tps.size(), leg.steps);
            for (int u = 0; u < leg.steps; ++u) {
                QCOMPARE(loss[u].y(), leg.value("loss", u));
                QCOMPARE(lr[u].y(), leg.value("lr", u));
                QVERIFY(std::fabs(tps[u].y() - double(leg.tokens(u)) / leg.wall(u)) < 1e-9);  // supervised tokens / wall s
            }
        }
        for (Metric m : {Metric::HeldoutCe, Metric::TrainLoss, Metric::GradNorm}) {
            view.set_residual_metric(m);
            view.redraw_now();
            QApplication::processEvents();
            auto* chart = view.panel_view(TrajectoryView::residual_panel())->chart();
            // The y title fits the plot's height (not elided), and the chart says which metric it is.
            auto* y = chart->axes(Qt::Vertical).value(0);
            const double title_width = QFontMetricsF(y->titleFont()).horizontalAdvance(y->titleText());
            QVERIFY2(title_width <= chart->plotArea().height(), qPrintable(y->titleText()));
            QVERIFY2(chart->title().contains(QString::fromLatin1(metric_label(m))), qPrintable(chart->title()));
            check_axis(chart, Qt::Vertical, false);
            // A zero line across the whole x range.
            bool zero = false;
            for (auto* s : chart->series()) {
                const auto pts = static_cast<QXYSeries*>(s)->points();
                if (pts.size() == 2 && pts[0].y() == 0 && pts[1].y() == 0) zero = true;
            }
            QVERIFY(zero);
        }
        // The exported residual figure names its metric.
        const auto svg = dir.filePath(QStringLiteral("residual.svg"));
        auto options = view.panel_options(TrajectoryView::residual_panel());
        export_figure(view.snapshot(), options, FigureSize{}, FigureFormat::Svg, svg.toStdString());
        QFile f(svg);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QVERIFY(QString::fromUtf8(f.readAll()).contains(QString::fromLatin1(metric_label(view.residual_metric()))));
    }

    // 7. Launcher: state follows a resume, a new experiment clears the rows, no "0 / 1" before a
    //    start, and a runner's error is shown in the state line and scrolled to in the log.
    void launcher_state_stays_current_and_errors_are_visible() {
        QTemporaryDir dir;
        // A fake CLI speaking the runner's files: the first run stops after 2 of 4 updates, the
        // resume finishes them; an experiment named broken fails to parse after a long output.
        const QString cli = dir.filePath(QStringLiteral("tandem"));
        write_executable(cli, QStringLiteral(R"(#!/bin/bash
if [[ "$2" == "--resume" ]]; then
  folder="$3"
  sleep 1
  for u in 2 3; do echo '{"v":1,"event":"step","update":'$u',"loss":2,"grad_norm":1,"lr":0.001,"tokens":10,"wall_s":0.1}' >> "$folder/legs/a/events.jsonl"; done
  sleep 2
  echo '{"v":1,"event":"done"}' >> "$folder/legs/a/events.jsonl"
  exit 0
fi
exp="$2"; out=""
while [[ $# -gt 0 ]]; do [[ "$1" == "--out" ]] && out="$2"; shift; done
if [[ "$exp" == *broken* ]]; then
  for i in $(seq 1 300); do echo "preparing line $i"; done
  echo "tandem: error: $exp: batch.max_updates must be a positive integer" >&2
  exit 1
fi
folder="$out/fake-run"; mkdir -p "$folder/legs/a"
echo '{"updates":[[0],[1],[2],[3]]}' > "$folder/plan.json"
echo '{"v":1,"event":"hello","implementation":"engine"}' > "$folder/legs/a/events.jsonl"
for u in 0 1; do echo '{"v":1,"event":"step","update":'$u',"loss":2,"grad_norm":1,"lr":0.001,"tokens":10,"wall_s":0.1}' >> "$folder/legs/a/events.jsonl"; done
sleep 1
exit 130
)"));
        const auto good = dir.filePath(QStringLiteral("good.json"));
        const auto broken = dir.filePath(QStringLiteral("broken.json"));
        std::ofstream(good.toStdString()) << "{}";
        std::ofstream(broken.toStdString()) << "{}";
        LauncherView launcher;
        launcher.resize(900, 500);
        launcher.show();
        launcher.set_tandem(find_tandem_binary({}, {}, {}, cli));
        launcher.set_runs_dir(dir.filePath(QStringLiteral("runs")));
        launcher.set_experiment(good);
        launcher.set_legs({{QStringLiteral("a"), QStringLiteral("engine"), QStringLiteral("cpu")}});
        QVERIFY2(!launcher.leg_progress_text(0).contains(QStringLiteral("/ 1")), qPrintable(launcher.leg_progress_text(0)));
        QSignalSpy finished(&launcher, &LauncherView::run_finished);
        launcher.start();
        QVERIFY(finished.wait(20000));
        QTRY_COMPARE(launcher.leg_progress_text(0), QStringLiteral("2 / 4"));
        QCOMPARE(launcher.leg_state_text(0), QStringLiteral("stopped"));
        launcher.resume();
        QVERIFY(launcher.running());
        QTRY_COMPARE_WITH_TIMEOUT(launcher.leg_progress_text(0), QStringLiteral("4 / 4"), 10000);
        QTRY_COMPARE_WITH_TIMEOUT(launcher.leg_state_text(0), QStringLiteral("running"), 10000);  // during the resume
        QVERIFY(finished.wait(20000));
        QTRY_COMPARE(launcher.leg_state_text(0), QStringLiteral("done"));

        // Another experiment: the old run's rows and state go.
        launcher.set_experiment(broken);
        QCOMPARE(launcher.leg_state_text(0), QStringLiteral("not started"));
        QVERIFY(!launcher.leg_progress_text(0).contains(QLatin1Char('4')));
        QCOMPARE(launcher.run_folder(), QString());
        launcher.start();
        QVERIFY(finished.wait(20000));
        QVERIFY2(launcher.state_text().contains(QStringLiteral("batch.max_updates must be a positive integer")),
                 qPrintable(launcher.state_text()));
        auto* log = launcher.findChild<QPlainTextEdit*>(QStringLiteral("log"));
        QApplication::processEvents();
        QCOMPARE(log->verticalScrollBar()->value(), log->verticalScrollBar()->maximum());
        QVERIFY(log->toPlainText().contains(QStringLiteral("positive integer")));
    }

    // Per-leg control ("what to build" 4): the launcher runs `tandem leg stop|pause|resume RUN LEG`
    // for one leg while the run goes on, and the leg's row shows what the runner says of it.
    void launcher_stops_and_resumes_one_leg() {
        QTemporaryDir dir;
        const QString cli = dir.filePath(QStringLiteral("tandem"));
        const QString calls = dir.filePath(QStringLiteral("calls.txt"));
        write_executable(cli, QStringLiteral(R"(#!/bin/bash
echo "$@" >> ")") + calls + QStringLiteral(R"("
if [[ "$1" == "leg" ]]; then
  case "$2" in
    stop) echo "stopped by request" > "$3/legs/$4/stopped"; echo "tandem leg: $4 stopped";;
    resume) rm -f "$3/legs/$4/stopped"; echo "tandem leg: $4 resumed";;
  esac
  exit 0
fi
)") + fake_run_of_two_legs(4) + QStringLiteral(R"(sleep 10
exit 0
)"));
        LauncherView launcher;
        set_up_fake_launcher(launcher, dir, cli);
        // Nothing runs: no leg can be paused, stopped or resumed.
        for (int row : {0, 1})
            for (const auto* action : {"pause", "stop", "resume"}) QVERIFY(!launcher.leg_button_enabled(row, QString::fromLatin1(action)));
        QSignalSpy found(&launcher, &LauncherView::run_folder_found);
        launcher.start();
        QVERIFY(found.wait(10000));
        const QString folder = found.first().first().toString();
        auto* stop_a = launcher.findChild<QAbstractButton*>(QStringLiteral("stop_a"));
        QVERIFY(stop_a);
        QTRY_VERIFY(stop_a->isEnabled());
        QVERIFY(launcher.leg_button_enabled(0, QStringLiteral("pause")));
        QVERIFY(!launcher.leg_button_enabled(0, QStringLiteral("resume")));  // a running leg cannot be resumed
        stop_a->click();
        QTRY_COMPARE_WITH_TIMEOUT(launcher.leg_state_text(0), QStringLiteral("stopped"), 5000);
        QCOMPARE(launcher.leg_state_text(1), QStringLiteral("running"));  // the other leg goes on
        QVERIFY(launcher.running());
        // What happened, not "… requested" forever: the command's own line.
        QTRY_COMPARE_WITH_TIMEOUT(launcher.state_text(), QStringLiteral("tandem leg: a stopped"), 5000);
        QVERIFY(!launcher.leg_button_enabled(0, QStringLiteral("stop")));
        QVERIFY(launcher.leg_button_enabled(0, QStringLiteral("resume")));
        QVERIFY(launcher.leg_button_enabled(1, QStringLiteral("stop")));
        QFile f(calls);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QString recorded = QString::fromUtf8(f.readAll());
        QVERIFY2(recorded.contains(QStringLiteral("leg stop %1 a --catalog %2").arg(folder, dir.filePath(QStringLiteral("t.db")))),
                 qPrintable(recorded));
        launcher.findChild<QAbstractButton*>(QStringLiteral("resume_a"))->click();
        QTRY_COMPARE_WITH_TIMEOUT(launcher.leg_state_text(0), QStringLiteral("running"), 5000);
        QCOMPARE(leg_control_arguments(QStringLiteral("pause"), QStringLiteral("/r/x"), QStringLiteral("engine"), QStringLiteral("/c.db")),
                 (QStringList{"leg", "pause", "/r/x", "engine", "--catalog", "/c.db"}));
        QSignalSpy finished(&launcher, &LauncherView::run_finished);
        launcher.stop();  // the fake runner would otherwise sleep on
        QVERIFY(finished.wait(30000));
        QVERIFY2(launcher.state_text().startsWith(QStringLiteral("Stopped")), qPrintable(launcher.state_text()));
        for (int row : {0, 1}) {
            QVERIFY(!launcher.leg_button_enabled(row, QStringLiteral("pause")));
            QVERIFY(!launcher.leg_button_enabled(row, QStringLiteral("stop")));
        }
    }

    // The runner ends with exit status 1 when a leg was stopped on request: the state line says
    // which legs stopped and which finished, not "Runner exited with 1." The `tandem leg` request
    // here answers only after the runner has ended (as on a busy machine, where CI saw its line
    // replace the run's end): its line goes to the log, the state keeps the end of the run.
    void a_run_with_a_leg_stopped_on_request_says_so_when_it_ends() {
        QTemporaryDir dir;
        const QString cli = dir.filePath(QStringLiteral("tandem"));
        write_executable(cli, QStringLiteral(R"(#!/bin/bash
if [[ "$1" == "leg" ]]; then echo "stopped by request" > "$3/legs/$4/stopped"
  for i in $(seq 100); do [[ -f "$3/../runner-ended" ]] && break; sleep 0.1; done; sleep 0.3
  echo "tandem leg: $4 stopped"; exit 0; fi
)") + fake_run_of_two_legs(2) + QStringLiteral(R"(for i in $(seq 100); do [[ -f "$folder/legs/a/stopped" ]] && break; sleep 0.1; done
echo '{"v":1,"event":"step","update":1,"loss":2,"grad_norm":1,"lr":0.001,"tokens":10,"wall_s":0.1}' >> "$folder/legs/b/events.jsonl"
echo '{"v":1,"event":"done","updates":2,"final":"legs/b/final"}' >> "$folder/legs/b/events.jsonl"
touch "$out/runner-ended"
exit 1
)"));
        LauncherView launcher;
        set_up_fake_launcher(launcher, dir, cli);
        QSignalSpy found(&launcher, &LauncherView::run_folder_found);
        QSignalSpy finished(&launcher, &LauncherView::run_finished);
        QSignalSpy answered(&launcher, &LauncherView::leg_request_finished);
        launcher.start();
        QVERIFY(found.wait(10000));
        QTRY_VERIFY(launcher.leg_button_enabled(0, QStringLiteral("stop")));
        launcher.findChild<QAbstractButton*>(QStringLiteral("stop_a"))->click();
        QVERIFY(finished.wait(20000));
        QCOMPARE(finished.first().first().toInt(), 1);
        QVERIFY(answered.count() == 1 || answered.wait(20000));  // the leg request's line has come in
        const QString said = launcher.state_text();
        QVERIFY2(said != QStringLiteral("Runner exited with 1."), qPrintable(said));
        QVERIFY2(said.contains(QStringLiteral("a stopped")) && said.contains(QStringLiteral("b done")), qPrintable(said));
        QVERIFY(launcher.leg_button_enabled(0, QStringLiteral("resume")));  // the stopped leg can go on
        QVERIFY(!launcher.leg_button_enabled(1, QStringLiteral("resume")));  // the finished one cannot
    }

    // Closing the window while `tandem leg stop` still runs: the view ends its child processes
    // itself and nothing reports into a half-destroyed view (it crashed on a busy machine).
    void closing_while_a_leg_request_runs_does_not_crash() {
        QTemporaryDir dir;
        const QString cli = dir.filePath(QStringLiteral("tandem"));
        write_executable(cli, QStringLiteral(R"(#!/bin/bash
if [[ "$1" == "leg" ]]; then echo "tandem leg: asked"; sleep 30; exit 0; fi
)") + fake_run_of_two_legs(2) + QStringLiteral(R"(sleep 30
)"));
        {
            LauncherView launcher;
            set_up_fake_launcher(launcher, dir, cli);
            QSignalSpy found(&launcher, &LauncherView::run_folder_found);
            launcher.start();
            QVERIFY(found.wait(10000));
            QTRY_VERIFY(launcher.leg_button_enabled(0, QStringLiteral("stop")));
            launcher.findChild<QAbstractButton*>(QStringLiteral("stop_a"))->click();
            QTest::qWait(300);  // the request process has started and prints before it sleeps
        }  // destroyed with both the runner and the request still running: the failure is a crash here
    }

    // 8. Tables say what "pass" means (footnotes) in the GUI and in LaTeX; LaTeX tables fit an
    //    article page, text columns are left-aligned, numbers go through siunitx.
    void tables_keep_their_footnotes_and_latex_fits_the_page() {
        QTemporaryDir dir;
        const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        auto legs = two_legs();
        legs.push_back(legs[0]);
        legs.back().name = "engine2";
        write_test_run(file, "tables-run", legs);
        const auto tables = ex::report_tables(ex::compare_run_file(file));
        TablesView view;
        view.set_tables(tables, QStringLiteral("note"));
        int l4 = -1, timing = -1;
        for (std::size_t i = 0; i < tables.size(); ++i) {
            if (tables[i].id == "l4") l4 = int(i);
            if (tables[i].id == "timing") timing = int(i);
        }
        view.set_current_index(l4);
        QVERIFY2(view.notes_text().contains(QStringLiteral("differences are a - b")), qPrintable(view.notes_text()));
        QVERIFY(view.notes_text().contains(QStringLiteral("the pair's verdict")));  // how L4 is judged (docs/thresholds.md)
        view.set_current_index(0);
        QVERIFY2(view.notes_text().contains(QStringLiteral("relative difference <= 1e-05")), qPrintable(view.notes_text()));

        for (int index : {l4, timing}) {
            const auto& table = tables[std::size_t(index)];
            const auto tex = format_table(table, TableFormat::Latex);
            for (const auto& note : table.notes)
                QVERIFY2(tex.find(ex::latex_escape(note)) != std::string::npos || tex.find("a $-$ b") != std::string::npos, note.c_str());
            QVERIFY2(tex.find("\\num{") != std::string::npos, tex.c_str());
            QVERIFY(tex.find("e-07") == std::string::npos || tex.find("\\num{") != std::string::npos);
            // Width at \footnotesize with a serif wider than Computer Modern (DejaVu Serif): what
            // fits here fits LaTeX's default article text width (345 pt).
            QFont serif(QStringLiteral("DejaVu Serif"));
            serif.setPointSizeF(8);
            const double width = latex_table_width_pt(tex, serif);
            QVERIFY2(width > 50 && width <= 345, qPrintable(QStringLiteral("%1 is %2 pt wide").arg(QString::fromStdString(table.id)).arg(width)));
            // Text columns left-aligned: the column spec starts l (the leg/legs column).
            const auto spec_at = tex.find("\\begin{tabular}{");
            QVERIFY(spec_at != std::string::npos);
            QCOMPARE(tex.at(tex.find_first_not_of("@{}", spec_at + 16)), 'l');
        }
    }

    // 9. The token diff marks every mismatch, keeps the panes aligned, and the record picker
    //    searches and previews.
    void token_diff_marks_every_mismatch_and_keeps_panes_aligned() {
        TokenDiffView view;
        view.resize(1000, 600);
        view.show();
        auto side = [](const std::string& label, std::vector<std::int32_t> ids) {
            TokenSide s;
            s.label = label;
            s.ids = ids;
            for (auto id : ids) s.pieces.push_back("tok" + std::to_string(id) + " ");
            s.full_length = std::int64_t(ids.size());
            return s;
        };
        std::vector<std::int32_t> a(400), b(400);
        for (int i = 0; i < 400; ++i) a[i] = b[i] = 100 + i;
        for (int i : {3, 50, 399}) b[i] = 7;  // three mismatches
        std::vector<SideSource> sources{{"left", [&](std::int64_t) { return std::optional(side("left", a)); }},
                                        {"right", [&](std::int64_t r) {
                                             return std::optional(r == 0 ? side("right", b) : side("right", std::vector<std::int32_t>(a.begin(), a.begin() + 5)));
                                         }}};
        view.set_sources({{0, "pubmedqa:1"}, {1, "medqa:2"}, {2, "medmcqa:3"}}, sources,
                         {"Question about the heart", "Question about kidneys", "Question about lungs"});
        view.select(0, 0, 1);
        QCOMPARE(view.current_diff().id_mismatches, std::size_t(3));
        QCOMPARE(view.marked_tokens(0), (std::vector<std::size_t>{3, 50, 399}));
        QCOMPARE(view.marked_tokens(1), (std::vector<std::size_t>{3, 50, 399}));
        // Panes: same viewport width even when only one side needs a scrollbar.
        view.select(1, 0, 1);
        QApplication::processEvents();
        QCOMPARE(view.side_view(0)->viewport()->width(), view.side_view(1)->viewport()->width());
        // Record search filters the picker; the preview shows the record's text.
        auto* search = view.findChild<QLineEdit*>(QStringLiteral("record_search"));
        QVERIFY(search);
        QTest::keyClicks(search, QStringLiteral("kidney"));
        QCOMPARE(view.visible_record_count(), 1);
        QVERIFY(view.record_preview(0).contains(QStringLiteral("kidneys")));
        search->clear();
        QCOMPARE(view.visible_record_count(), 3);
        QTest::keyClicks(search, QStringLiteral("medmcqa"));
        QCOMPARE(view.visible_record_count(), 1);
    }

    // 10. The export dialog keeps the chosen chart but never the file: the name offered says which run
    //     and chart it is, and Save asks before it replaces a file. No label shows a literal "&".
    void export_dialog_keeps_the_chart_and_labels_have_no_literal_ampersand() {
        QTemporaryDir dir;
        const QStringList panels{"held-out CE", "training loss", "pre-clip grad norm", "learning rate", "throughput", "residual"};
        {
            FigureExportDialog dialog(panels, 0);
            dialog.set_run_id(QStringLiteral("run-a"));
            dialog.findChild<QComboBox*>(QStringLiteral("chart"))->setCurrentIndex(5);
            dialog.set_path(dir.filePath(QStringLiteral("residual.svg")));
            dialog.accept();
            QCOMPARE(dialog.result(), int(QDialog::Accepted));
        }
        std::ofstream(dir.filePath(QStringLiteral("residual.svg")).toStdString()) << "<svg/>";
        FigureExportDialog again(panels, 0);
        again.set_run_id(QStringLiteral("run-b"));
        QCOMPARE(again.panel(), 5);
        // The folder and suffix of the last export, a name of this run and chart.
        QCOMPARE(again.path(), dir.filePath(QStringLiteral("run-b-residual.svg")));
        // Replacing a file asks first; "no" keeps the dialog open and the file as it was.
        again.set_path(dir.filePath(QStringLiteral("residual.svg")));
        QStringList asked;
        again.confirm_overwrite = [&](const QString& file) {
            asked << file;
            return false;
        };
        again.accept();
        QCOMPARE(asked, QStringList{dir.filePath(QStringLiteral("residual.svg"))});
        QCOMPARE(again.result(), int(QDialog::Rejected));
        again.confirm_overwrite = [&](const QString&) { return true; };
        again.accept();
        QCOMPARE(again.result(), int(QDialog::Accepted));
        // A preset sets the size and font for the panels chosen.
        FigureExportDialog sized(panels, 0);
        sized.choose_panels({0, 5, 2});
        sized.apply_preset(FigurePreset::DoubleColumn);
        QCOMPARE(sized.size().width, kJournalTwoColumnsCm);
        QCOMPARE(sized.size().height, preset_size(FigurePreset::DoubleColumn, 3).height);
        QCOMPARE(sized.size().font_pt, 8);
        QCOMPARE(sized.findChild<QComboBox*>(QStringLiteral("preset"))->currentText(), QStringLiteral("double column (17.8 cm)"));
        if (const auto shots = qEnvironmentVariable("TANDEM_SCREENSHOT_DIR"); !shots.isEmpty()) {
            sized.show();
            QApplication::processEvents();
            sized.grab().save(QDir(shots).filePath(QStringLiteral("export-dialog.png")));
        }
        // A width typed by hand is no longer the preset.
        auto* width = sized.findChildren<QDoubleSpinBox*>().value(0);
        width->setValue(12.0);
        QCOMPARE(sized.findChild<QComboBox*>(QStringLiteral("preset"))->currentText(), QStringLiteral("custom"));
        auto check_labels = [](QWidget* root) {
            for (auto* label : root->findChildren<QLabel*>()) {
                const QString t = label->text();
                if (label->textFormat() == Qt::RichText || t.startsWith(QLatin1Char('<'))) continue;
                if (QString(t).remove(QStringLiteral("&&")).contains(QLatin1Char('&')))
                    QVERIFY2(label->buddy(), qPrintable(QStringLiteral("label \"%1\" shows a literal &").arg(t)));
            }
        };
        check_labels(&again);
        MainWindow window;
        check_labels(&window);
    }

    // 11. A minimum window size: controls and charts never collapse.
    void the_window_has_a_minimum_size() {
        MainWindow window;
        window.show_page(MainWindow::TrajectoriesPage);
        window.show();
        window.resize(320, 240);
        QApplication::processEvents();
        QVERIFY(window.minimumWidth() >= 800);
        QVERIFY(window.minimumHeight() >= 600);
        QVERIFY(window.width() >= window.minimumWidth());
        QVERIFY(window.height() >= window.minimumHeight());
        auto* view = window.trajectories();
        for (int p = 0; p < view->panel_count(); ++p)
            if (view->panel_view(p)->isVisible()) QVERIFY2(view->panel_view(p)->height() >= 120, qPrintable(QString::number(view->panel_view(p)->height())));
    }
};

QTEST_MAIN(TestViewsFixes)
#include "test_views_fixes.moc"
