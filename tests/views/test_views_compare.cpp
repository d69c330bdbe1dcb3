// Comparing runs (docs/workbench.md "Compare"): runs picked in the runs browser (selection or
// filter, tags and notes included) are overlaid on the compare page; every overlaid series must
// equal what h5py reads from the run files, colours stay with their runs, and the diff view's
// tables are what `tandem compare RUN_A:LEG RUN_B:LEG` prints.
#include "views_test_support.h"

#include "tandem/store/catalog.h"
#include "tandem/compare/report.h"
#include "tandem/views/compare_view.h"
#include "tandem/views/main_window.h"
#include "tandem/views/runs_browser.h"
#include "tandem/views/tables_view.h"
#include "tandem/views/trajectory_view.h"

#include <nlohmann/json.hpp>

#include <QChart>
#include <QProcess>
#include <QSignalSpy>
#include <QTableView>
#include <QTreeView>
#include <QTemporaryDir>
#include <QXYSeries>
#include <QtTest>

#include <cmath>

using namespace tandem::views;
using namespace tandem::views::test;
namespace ex = tandem::experiments;

namespace {

std::vector<TestLeg> legs_of(double shift) {
    TestLeg engine{"engine", "engine", 25, 5, [shift](const std::string& m, int u) {
                       if (m == "loss") return 3.0 - 0.01 * u + shift;
                       if (m == "grad") return 1.0 + 0.1 * std::sin(u) + shift;
                       if (m == "lr") return 1e-4 * (1 + shift) * (u + 1) / 25.0;
                       return 3.1 - 0.012 * u + shift;
                   }};
    TestLeg reference = engine;
    reference.name = "reference";
    reference.implementation = "reference";
    reference.steps = 20;
    reference.eval_every = 10;
    reference.value = [shift](const std::string& m, int u) {
        if (m == "loss") return 3.0 - 0.01 * u + shift + 1e-6;
        if (m == "grad") return 1.0 + 0.1 * std::sin(u) + shift + 1e-5;
        if (m == "lr") return 1e-4 * (1 + shift) * (u + 1) / 25.0;
        return 3.1 - 0.012 * u + shift + 2e-6;
    };
    return {engine, reference};
}

// The name the overlay gives a leg of a run: the run's label, then the leg.
QString curve(const TrajectoryView* overlay, const std::string& run_id, const std::string& leg) {
    return overlay->run_label(run_id) + QStringLiteral(" · ") + QString::fromStdString(leg);
}

std::string spec(double lr) {
    return R"({"name":"views-test","model":{"config":"tiny"},"optimizer":{"name":"adamw","lr":)" + std::to_string(lr) + "}}";
}

// h5py's reading of every leg's steps and evaluations: {leg: {"update": [...], "loss": [...], ...}}.
nlohmann::json h5py_read(const QString& file) {
    return test::refenv_python_json(QStringLiteral(R"(
import h5py, json, math, sys
out = {}
num = lambda x: float(x) if math.isfinite(x) else None  # cpu_s is NaN where a leg does not report it: JSON null
with h5py.File(sys.argv[1], "r") as f:
    for leg in f["legs"]:
        s = f["legs"][leg]["steps"][()]
        e = f["legs"][leg]["eval"][()]
        out[leg] = {k: [num(x) for x in s[k]] for k in s.dtype.names}
        out[leg]["eval_update"] = [float(x) for x in e["update"]]
        out[leg]["heldout_ce"] = [float(x) for x in e["heldout_ce"]]
print(json.dumps(out))
)"), file);
}

QList<QPointF> drawn(const TrajectoryView* view, int panel, const QString& name) {
    for (auto* s : view->panel_view(panel)->chart()->series())
        if (s->name() == name) return static_cast<QXYSeries*>(s)->points();
    return {};
}

QColor pen_color(const TrajectoryView* view, int panel, const QString& name) {
    for (auto* s : view->panel_view(panel)->chart()->series())
        if (s->name() == name) return static_cast<QXYSeries*>(s)->pen().color();
    return {};
}

}  // namespace

class TestViewsCompare : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { tandem::views::test::use_test_settings("test_views_compare"); }

    void two_runs_overlay_their_legs_and_diff_like_the_cli() {
        QTemporaryDir dir;
        const auto root = std::filesystem::path(dir.path().toStdString());
        const char* ids[] = {"cmp-a-20261201-090000", "cmp-b-20261201-100000", "cmp-c-20261201-110000"};
        const double shifts[] = {0.0, 0.05, 0.1};
        const auto db = root / "tandem.db";
        {
            ex::Catalog catalog(db);
            for (int i = 0; i < 3; ++i) {
                std::filesystem::create_directories(root / ids[i]);
                write_test_run(root / ids[i] / "run.h5", ids[i], legs_of(shifts[i]), spec(i == 1 ? 2e-4 : 1e-4));
                ex::RunRecord run;
                run.id = ids[i];
                run.experiment = "views-test";
                run.folder = (root / ids[i]).string();
                run.run_file = (root / ids[i] / "run.h5").string();
                run.started_at = "2026-12-01T0" + std::to_string(9 + i) + ":00:00Z";
                run.status = "finished";
                catalog.upsert_run(run);
                for (const auto& leg : legs_of(0)) {
                    ex::LegRecord l;
                    l.run_id = ids[i];
                    l.name = leg.name;
                    l.implementation = leg.implementation;
                    l.status = "finished";
                    catalog.upsert_leg(l);
                }
            }
        }
        MainWindow window;
        window.resize(1300, 950);
        window.show();
        window.open_catalog(QString::fromStdString(db.string()));
        auto* runs = window.runs_browser();
        QCOMPARE(runs->model()->rowCount(), 3);
        QCOMPARE(runs->model()->leg_count(), 6);

        // Tags and notes: written to the catalog, shown, searched by the filter.
        QVERIFY(runs->set_annotation(QString::fromLatin1(ids[0]), {QStringLiteral("baseline"), QStringLiteral("cpu")},
                                     QStringLiteral("first run, lr 1e-4")));
        QVERIFY(runs->set_annotation(QString::fromLatin1(ids[1]), {QStringLiteral("lr-sweep")}, QStringLiteral("double lr")));
        {
            ex::Catalog check(db);
            QCOMPARE(check.annotation(ids[0]).tags, (std::vector<std::string>{"baseline", "cpu"}));
            QCOMPARE(check.annotation(ids[1]).note, std::string("double lr"));
        }
        runs->set_filter_text(QStringLiteral("baseline"));
        QCOMPARE(runs->proxy()->rowCount(), 1);  // run a, with both its legs
        QCOMPARE(runs->proxy()->rowCount(runs->proxy()->index(0, 0)), 2);
        QCOMPARE(runs->shown_run_files(), QStringList{QString::fromStdString((root / ids[0] / "run.h5").string())});
        runs->set_filter_text(QStringLiteral("double LR"));
        QCOMPARE(runs->shown_run_files(), QStringList{QString::fromStdString((root / ids[1] / "run.h5").string())});
        runs->set_filter_text({});

        // Multi-select runs a and b in the browser and compare them.
        auto* table = runs->table();
        table->clearSelection();
        for (int r = 0; r < runs->proxy()->rowCount(); ++r) {
            const auto id = runs->proxy()->index(r, RunsModel::Run).data().toString();
            if (id == QLatin1String(ids[0]) || id == QLatin1String(ids[1]))
                table->selectionModel()->select(runs->proxy()->index(r, 0), QItemSelectionModel::Select | QItemSelectionModel::Rows);
        }
        QCOMPARE(runs->selected_run_files().size(), 2);
        auto* compare = window.compare();
        QSignalSpy updated(compare, &CompareView::runs_updated);
        Q_EMIT runs->compare_requested(runs->selected_run_files());
        QTRY_COMPARE_WITH_TIMEOUT(compare->overlay()->runs().size(), std::size_t(2), 10000);
        auto* overlay = compare->overlay();
        overlay->set_panel_visible(TrajectoryView::metric_panel(Metric::LearningRate), true);
        overlay->set_panel_visible(TrajectoryView::metric_panel(Metric::Throughput), true);
        overlay->redraw_now();

        // Every overlaid series equals h5py's reading of the run file.
        const std::pair<int, const char*> panels[] = {{TrajectoryView::metric_panel(Metric::TrainLoss), "loss"},
                                                      {TrajectoryView::metric_panel(Metric::GradNorm), "grad_norm"},
                                                      {TrajectoryView::metric_panel(Metric::LearningRate), "lr"}};
        for (int i = 0; i < 2; ++i) {
            const auto oracle = h5py_read(QString::fromStdString((root / ids[i] / "run.h5").string()));
            QVERIFY2(!oracle.is_null(), "h5py could not read the run file");
            for (const auto& leg : {std::string("engine"), std::string("reference")}) {
                const auto name = curve(overlay, ids[i], leg);
                const auto& o = oracle.at(leg);
                for (const auto& [panel, column] : panels) {
                    const auto points = drawn(overlay, panel, name);
                    QCOMPARE(points.size(), qsizetype(o.at("update").size()));
                    for (std::size_t k = 0; k < o.at("update").size(); ++k) {
                        QCOMPARE(points[qsizetype(k)].x(), o.at("update")[k].get<double>());
                        QCOMPARE(points[qsizetype(k)].y(), o.at(column)[k].get<double>());
                    }
                }
                const auto tps = drawn(overlay, TrajectoryView::metric_panel(Metric::Throughput), name);
                for (std::size_t k = 0; k < o.at("update").size(); ++k)
                    QCOMPARE(tps[qsizetype(k)].y(), o.at("tokens")[k].get<double>() / o.at("wall_s")[k].get<double>());
                const auto heldout = drawn(overlay, TrajectoryView::metric_panel(Metric::HeldoutCe), name);
                QCOMPARE(heldout.size(), qsizetype(o.at("heldout_ce").size()));
                for (std::size_t k = 0; k < o.at("heldout_ce").size(); ++k)
                    QCOMPARE(heldout[qsizetype(k)].y(), o.at("heldout_ce")[k].get<double>());
            }
        }
        // Colours: one per run (both legs of a run share it), distinct between runs; hiding a leg
        // removes its curve only.
        // The legend names a run by its own tags (not every compared run has them).
        QCOMPARE(overlay->run_label(ids[0]), QStringLiteral("baseline, cpu"));
        QCOMPARE(overlay->run_label(ids[1]), QStringLiteral("lr-sweep"));
        const auto a_engine = curve(overlay, ids[0], "engine");
        const auto a_reference = curve(overlay, ids[0], "reference");
        const auto b_engine = curve(overlay, ids[1], "engine");
        const QColor a_color = pen_color(overlay, TrajectoryView::metric_panel(Metric::GradNorm), a_engine);
        QCOMPARE(pen_color(overlay, TrajectoryView::metric_panel(Metric::GradNorm), a_reference), a_color);
        QVERIFY(pen_color(overlay, TrajectoryView::metric_panel(Metric::GradNorm), b_engine) != a_color);
        compare->set_leg_shown(ids[0], "reference", false);
        overlay->redraw_now();
        QCOMPARE(overlay->panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).drawn_point_count(a_reference), -1);
        QCOMPARE(overlay->panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).drawn_point_count(a_engine), 25);
        compare->set_leg_shown(ids[0], "reference", true);
        // Run b goes, run c comes: run a keeps its colour.
        compare->remove_run(QString::fromStdString((root / ids[1] / "run.h5").string()));
        QVERIFY(compare->add_run(QString::fromStdString((root / ids[2]).string())));
        QTRY_COMPARE_WITH_TIMEOUT(overlay->runs().size(), std::size_t(2), 10000);
        overlay->redraw_now();
        QCOMPARE(pen_color(overlay, TrajectoryView::metric_panel(Metric::GradNorm), a_engine), a_color);
        compare->remove_run(QString::fromStdString((root / ids[2]).string()));
        QVERIFY(compare->add_run(QString::fromStdString((root / ids[1] / "run.h5").string())));
        QTRY_COMPARE_WITH_TIMEOUT(overlay->runs().size(), std::size_t(2), 10000);

        // Diff runs: the GUI's tables are what `tandem compare` prints.
        const QString a = QString::fromLatin1(ids[0]) + QStringLiteral(":engine");
        const QString b = QString::fromLatin1(ids[1]) + QStringLiteral(":engine");
        QTRY_VERIFY(compare->diff_choices().contains(a) && compare->diff_choices().contains(b));
        QVERIFY2(compare->compare(a, b), qPrintable(compare->status_text()));
        QProcess cli;
        cli.start(QStringLiteral(TANDEM_TEST_CLI), {QStringLiteral("compare"),
                                                    QString::fromStdString((root / ids[0]).string()) + QStringLiteral(":engine"),
                                                    QString::fromStdString((root / ids[1] / "run.h5").string()) + QStringLiteral(":engine")});
        QVERIFY(cli.waitForFinished(60000));
        const std::string printed = cli.readAllStandardOutput().toStdString();
        QVERIFY2(cli.exitCode() == 0 || cli.exitCode() == 3, cli.readAllStandardError().constData());
        auto* tables = compare->diff_view();
        QVERIFY(tables->tables().size() >= 5);
        bool saw_config = false, saw_l4 = false;
        for (int t = 0; t < int(tables->tables().size()); ++t) {
            tables->set_current_index(t);
            // The table as the GUI shows it, cell by cell from its model.
            StringTable shown = tables->tables()[std::size_t(t)];
            shown.rows.clear();
            auto* model = tables->model();
            for (int r = 0; r < model->rowCount(); ++r) {
                std::vector<std::string> row;
                for (int c = 0; c < model->columnCount(); ++c) row.push_back(model->index(r, c).data().toString().toStdString());
                shown.rows.push_back(row);
            }
            const auto text = ex::render_table(shown, ex::ReportFormat::Text);
            QVERIFY2(printed.find(text) != std::string::npos, (text + "\n--- not in ---\n" + printed).c_str());
            if (shown.id == "config") {
                saw_config = true;
                QCOMPARE(shown.rows.size(), std::size_t(1));
                QCOMPARE(shown.rows[0][0], std::string("optimizer.lr"));
            }
            if (shown.id == "l4") saw_l4 = shown.rows.size() == 2;
        }
        QVERIFY(saw_config);
        QVERIFY(saw_l4);
        QVERIFY(printed.find(std::string(ids[0]) + ":engine vs " + ids[1] + ":engine") != std::string::npos);
    }
};

QTEST_MAIN(TestViewsCompare)
#include "test_views_compare.moc"
