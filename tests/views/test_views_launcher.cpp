// Launching a tiny run from the launcher page: the same `tandem run` the CLI user runs is started
// as a child process with the legs and devices chosen in the page; the run must end up in the
// catalog with both legs finished, and the window must have followed its folder.
#include "views_test_support.h"

#include "tandem/store/catalog.h"
#include "tandem/views/launcher_view.h"
#include "tandem/views/main_window.h"
#include "tandem/views/runs_browser.h"
#include "tandem/views/trajectory_view.h"

#include <nlohmann/json.hpp>

#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

namespace ex = tandem::experiments;
using namespace tandem::views;

class TestViewsLauncher : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { tandem::views::test::use_test_settings("test_views_launcher"); }

    void arguments_match_the_cli() {
        const auto args = run_arguments(QStringLiteral("x.json"),
                                        {{QStringLiteral("engine"), QStringLiteral("engine"), QStringLiteral("cpu")},
                                         {QStringLiteral("b"), QStringLiteral("engine"), QStringLiteral("cuda:0")}},
                                        QStringLiteral("/r"), QStringLiteral("/c.db"));
        QCOMPARE(args, (QStringList{"run", "x.json", "--legs", "engine,b=engine", "--devices", "cpu,cuda:0", "--out", "/r",
                                    "--catalog", "/c.db"}));
        QCOMPARE(resume_arguments(QStringLiteral("/r/x"), QStringLiteral("/c.db")),
                 (QStringList{"run", "--resume", "/r/x", "--catalog", "/c.db"}));
    }

    void launching_a_tiny_run_puts_it_in_the_catalog() {
        QTemporaryDir dir;
        // clinical-tiny on its random base, made smaller still: 3 updates, evaluation every update on 4 records.
        nlohmann::json spec;
        std::ifstream(std::string(TANDEM_TEST_SOURCE_DIR) + "/experiments/clinical-tiny-random.json") >> spec;
        spec["name"] = "launcher-test";
        spec["batch"]["max_updates"] = 3;
        spec["eval"]["interval"] = 1;
        spec["eval"]["prefix_size"] = 4;
        spec["corpus"]["max_records_per_source"] = 40;  // ~12 held out, enough for the eval prefix
        spec["checkpoint"]["interval"] = 0;
        spec["l3_records"] = 4;
        const auto experiment = dir.filePath(QStringLiteral("launcher-test.json"));
        std::ofstream(experiment.toStdString()) << spec.dump(2);
        const auto catalog = dir.filePath(QStringLiteral("tandem.db"));

        MainWindow window;
        window.show();
        window.open_catalog(catalog);
        auto* launcher = window.launcher();
        launcher->set_tandem_binary(QStringLiteral(TANDEM_TEST_CLI));
        launcher->set_runs_dir(dir.filePath(QStringLiteral("runs")));
        launcher->set_experiment(experiment);
        launcher->set_legs({{QStringLiteral("a"), QStringLiteral("engine"), QStringLiteral("cpu")},
                            {QStringLiteral("b"), QStringLiteral("engine"), QStringLiteral("cpu")}});
        QSignalSpy found(launcher, &LauncherView::run_folder_found);
        QSignalSpy finished(launcher, &LauncherView::run_finished);
        launcher->start();
        QVERIFY(launcher->running());
        QVERIFY(finished.wait(900 * 1000));
        const auto* log = launcher->findChild<QPlainTextEdit*>(QStringLiteral("log"));
        QVERIFY2(finished.first().first().toInt() == 0, qPrintable(log->toPlainText()));
        QCOMPARE(found.size(), 1);
        const auto folder = found.first().first().toString();
        QVERIFY(QFileInfo::exists(folder + QStringLiteral("/run.h5")));

        ex::Catalog db(catalog.toStdString());
        const auto runs = db.runs();
        QCOMPARE(runs.size(), std::size_t(1));
        QCOMPARE(runs[0].status, std::string("finished"));
        QCOMPARE(QFileInfo(QString::fromStdString(runs[0].folder)).canonicalFilePath(), QFileInfo(folder).canonicalFilePath());
        const auto legs = db.legs(runs[0].id);
        QCOMPARE(legs.size(), std::size_t(2));
        for (const auto& leg : legs) {
            QCOMPARE(leg.status, std::string("finished"));
            QCOMPARE(leg.updates_done.value_or(-1), std::int64_t(3));
        }
        // The window followed the run: both legs' curves, every update, and the runs page lists it.
        QTRY_COMPARE_WITH_TIMEOUT(window.trajectories()->snapshot().legs.size(), std::size_t(2), 10000);
        window.trajectories()->redraw_now();
        QTRY_COMPARE_WITH_TIMEOUT(window.trajectories()->panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).drawn_point_count(QStringLiteral("a")), 3, 10000);
        QCOMPARE(window.runs_browser()->model()->rowCount(), 1);  // the run, its two legs under it
        QCOMPARE(window.runs_browser()->model()->leg_count(), 2);
    }
};

QTEST_MAIN(TestViewsLauncher)
#include "test_views_launcher.moc"
