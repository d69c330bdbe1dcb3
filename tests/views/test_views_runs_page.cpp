// The runs page: a catalog of runs with the runner's verdict lines and run folders holding their
// experiment.json; the tree shows each run's legs under it, folds the member runs of a seed
// envelope under one row, colours the verdict by whether it passes, and lists the experiments'
// settings as columns (lr, rank, alpha, seed, max_updates, base; more from the header's menu). And a
// truncated run.h5 is refused at once, in the error bar, and never enters Recent runs.
#include "views_test_support.h"

#include "tandem/store/catalog.h"
#include "tandem/views/main_window.h"
#include "tandem/views/runs_browser.h"
#include "tandem/views/runs_model.h"

#include <nlohmann/json.hpp>

#include <QBrush>
#include <QFont>
#include <QHeaderView>
#include <QSettings>
#include <QTemporaryDir>
#include <QTreeView>
#include <QtTest>

#include <fstream>

using namespace tandem::views;
using namespace tandem::views::test;
namespace ex = tandem::experiments;

namespace {

struct RunSpec {
    std::string id, verdict;
    double lr;
    int rank;
    int seed;
    std::string folder;  // relative to the root
    std::string status = "finished";
};

nlohmann::json spec_of(const RunSpec& r) {
    nlohmann::json spec = {{"name", "clinical-tiny"}, {"seed", r.seed},
                           {"model", {{"base", "assets:qwen3-tiny-clinical"}}},
                           {"lora", {{"rank", r.rank}, {"alpha", 2 * r.rank}}},
                           {"optimizer", {{"name", "adamw"}, {"lr", r.lr}, {"weight_decay", 0.0}}},
                           {"batch", {{"max_updates", 30}}}};
    return spec;
}

// A catalog of `runs` whose folders hold experiment.json (what the runner writes).
void write_catalog(const std::filesystem::path& root, const std::vector<RunSpec>& runs) {
    ex::Catalog catalog(root / "tandem.db");
    int minute = 0;
    for (const auto& r : runs) {
        const auto folder = root / r.folder;
        std::filesystem::create_directories(folder);
        std::ofstream(folder / "experiment.json") << nlohmann::json{{"spec", spec_of(r)}, {"spec_sha256", "0"}}.dump();
        ex::RunRecord run;
        run.id = r.id;
        run.experiment = "clinical-tiny";
        run.folder = folder.string();
        run.run_file = (folder / "run.h5").string();
        char started[32];
        std::snprintf(started, sizeof started, "2026-12-01T10:%02d:00Z", minute++);
        run.started_at = started;
        run.status = r.status;
        run.note = r.verdict;
        catalog.upsert_run(run);
        for (const char* leg : {"engine", "reference"}) {
            ex::LegRecord l;
            l.run_id = r.id;
            l.name = leg;
            l.implementation = leg;
            l.device = "cpu";
            l.status = r.status == "running" ? "running" : "finished";
            l.updates_done = 30;
            l.updates_total = 30;
            l.final_loss = 5.88;
            catalog.upsert_leg(l);
        }
    }
}

}  // namespace

class TestViewsRunsPage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { tandem::views::test::use_test_settings("test_views_runs_page"); }

    void runs_tree_shows_verdicts_settings_and_folds_envelope_members() {
        QTemporaryDir dir;
        const auto root = std::filesystem::path(dir.path().toStdString());
        // Three ordinary runs, one still running, and a 3-member seed envelope.
        const std::vector<RunSpec> runs{
            {"clinical-tiny-20261201-100000", "equivalent: engine~reference: held-out CE within the float32 error-model bound", 1e-4, 16, 1234,
             "runs/clinical-tiny-20261201-100000"},
            {"clinical-tiny-lr2e-4-20261201-100100", "different: engine~reference: L2: 3 tensors differ", 2e-4, 16, 1234,
             "runs/clinical-tiny-lr2e-4-20261201-100100"},
            {"clinical-tiny-r8-20261201-100200", "incomplete: reference: 12 of 30 updates", 1e-4, 8, 1234, "runs/clinical-tiny-r8-20261201-100200"},
            {"clinical-tiny-20261201-100300", "", 1e-4, 16, 1234, "runs/clinical-tiny-20261201-100300", "running"},
            {"clinical-tiny-20261201-100400", "equivalent: engine~reference: ...", 1e-4, 16, 1234,
             "runs/clinical-tiny-envelope-20261201-100400/members/clinical-tiny-20261201-100400"},
            {"clinical-tiny-20261201-100500", "equivalent: engine~reference: ...", 1e-4, 16, 1235,
             "runs/clinical-tiny-envelope-20261201-100400/members/clinical-tiny-20261201-100500"},
            {"clinical-tiny-20261201-100600", "equivalent: engine~reference: ...", 1e-4, 16, 1236,
             "runs/clinical-tiny-envelope-20261201-100400/members/clinical-tiny-20261201-100600"},
        };
        write_catalog(root, runs);
        std::ofstream(root / "runs/clinical-tiny-envelope-20261201-100400/envelope.json") << "{}";

        MainWindow window;
        window.resize(1280, 720);
        window.show_page(MainWindow::RunsPage);
        window.show();
        window.open_catalog(QString::fromStdString((root / "tandem.db").string()));
        auto* browser = window.runs_browser();
        auto* model = browser->model();
        // Four runs at the top and one envelope row holding three member runs; every leg under its run.
        QCOMPARE(model->rowCount(), 5);
        QCOMPARE(model->run_count(), 7);
        QCOMPARE(model->leg_count(), 14);
        QModelIndex envelope;
        for (int r = 0; r < model->rowCount(); ++r)
            if (model->index(r, 0).data(RunsModel::KindRole).toInt() == RunsModel::EnvelopeRow) envelope = model->index(r, 0);
        QVERIFY(envelope.isValid());
        QCOMPARE(model->rowCount(envelope), 3);
        QVERIFY2(envelope.data().toString().contains(QStringLiteral("seed envelope clinical-tiny-envelope-20261201-100400")), qPrintable(envelope.data().toString()));
        QVERIFY(model->index(0, 0, envelope).data(Qt::FontRole).value<QFont>().italic());  // a member: marked
        // Folded in the view; ordinary runs open with their legs shown.
        auto* tree = browser->table();
        auto* proxy = browser->proxy();
        for (int r = 0; r < proxy->rowCount(); ++r) {
            const auto index = proxy->index(r, 0);
            const bool is_envelope = index.data(RunsModel::KindRole).toInt() == RunsModel::EnvelopeRow;
            QCOMPARE(tree->isExpanded(index), !is_envelope);
        }
        // The verdict: its word, green when it passes, red when it does not, grey without one.
        auto verdict = [&](const std::string& id) { return model->run_index(id, RunsModel::Verdict); };
        QCOMPARE(verdict(runs[0].id).data().toString(), QStringLiteral("equivalent"));
        QCOMPARE(verdict(runs[0].id).data(Qt::ForegroundRole).value<QBrush>().color(), QColor(0, 122, 77));
        QCOMPARE(verdict(runs[1].id).data().toString(), QStringLiteral("different"));
        QCOMPARE(verdict(runs[1].id).data(Qt::ForegroundRole).value<QBrush>().color(), QColor(176, 0, 32));
        QCOMPARE(verdict(runs[2].id).data().toString(), QStringLiteral("incomplete"));
        QCOMPARE(verdict(runs[2].id).data(Qt::ForegroundRole).value<QBrush>().color(), QColor(176, 0, 32));
        QCOMPARE(verdict(runs[3].id).data().toString(), QStringLiteral("—"));
        QVERIFY(verdict(runs[1].id).data(Qt::ToolTipRole).toString().contains(QStringLiteral("3 tensors differ")));
        // The settings columns, named and filled from each run's experiment.json.
        QStringList headers;
        for (int c = RunsModel::ColumnCount; c < model->columnCount(); ++c) headers << model->headerData(c, Qt::Horizontal).toString();
        QCOMPARE(headers, (QStringList{"lr", "rank", "alpha", "seed", "max_updates", "base"}));
        auto setting = [&](const std::string& id, int k) { return model->run_index(id, RunsModel::ColumnCount + k).data().toString(); };
        QCOMPARE(setting(runs[0].id, 0), QStringLiteral("1e-4"));
        QCOMPARE(setting(runs[1].id, 0), QStringLiteral("2e-4"));
        QCOMPARE(setting(runs[2].id, 1), QStringLiteral("8"));
        QCOMPARE(setting(runs[2].id, 2), QStringLiteral("16"));
        QCOMPARE(setting(runs[5].id, 3), QStringLiteral("1235"));
        QCOMPARE(setting(runs[0].id, 4), QStringLiteral("30"));
        QCOMPARE(setting(runs[0].id, 5), QStringLiteral("assets:qwen3-tiny-clinical"));
        // Shown next to the verdict and experiment, before the per-leg numbers.
        QCOMPARE(tree->header()->visualIndex(RunsModel::ColumnCount), tree->header()->visualIndex(RunsModel::Experiment) + 1);
        // Sorting by lr sorts numbers as numbers; the filter finds a setting's value.
        proxy->sort(RunsModel::ColumnCount, Qt::DescendingOrder);
        QCOMPARE(proxy->index(0, RunsModel::ColumnCount).data().toString(), QStringLiteral("2e-4"));
        browser->set_filter_text(QStringLiteral("2e-4"));
        QCOMPARE(proxy->rowCount(), 1);
        browser->set_filter_text({});
        // More columns from the settings the runs differ in (the header's menu).
        const auto differing = model->differing_settings();
        QVERIFY(std::find(differing.begin(), differing.end(), "lora.rank") != differing.end());
        browser->set_setting_column("optimizer.weight_decay", true);
        QCOMPARE(model->headerData(model->columnCount() - 1, Qt::Horizontal).toString(), QStringLiteral("weight_decay"));
        QCOMPARE(model->run_index(runs[0].id, model->columnCount() - 1).data().toString(), QStringLiteral("0"));
        // Selecting the envelope row compares its members.
        for (int r = 0; r < proxy->rowCount(); ++r)
            if (proxy->index(r, 0).data(RunsModel::KindRole).toInt() == RunsModel::EnvelopeRow)
                tree->selectionModel()->select(proxy->index(r, 0), QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
        QCOMPARE(browser->selected_run_files().size(), 3);
        browser->set_setting_column("optimizer.weight_decay", false);
        if (const auto shots = qEnvironmentVariable("TANDEM_SCREENSHOT_DIR"); !shots.isEmpty()) {
            tree->clearSelection();
            proxy->sort(RunsModel::Started, Qt::DescendingOrder);
            QApplication::processEvents();
            window.grab().save(QDir(shots).filePath(QStringLiteral("runs-tree.png")));
        }
    }

    void a_truncated_run_file_is_refused_and_not_remembered() {
        QTemporaryDir dir;
        const auto good = std::filesystem::path(dir.path().toStdString()) / "good";
        std::filesystem::create_directories(good);
        write_test_run(good / "run.h5", "good", {{"engine", "engine", 4, 2, [](const std::string&, int u) { return 1.0 + u; }}});
        // A copy cut short: the HDF5 signature is there, the rest is not.
        const auto cut = std::filesystem::path(dir.path().toStdString()) / "cut";
        std::filesystem::create_directories(cut);
        {
            std::ifstream in(good / "run.h5", std::ios::binary);
            std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            std::ofstream(cut / "run.h5", std::ios::binary) << bytes.substr(0, bytes.size() / 3);
        }
        QSettings().remove(QStringLiteral("recent_runs"));
        MainWindow window;
        window.show();
        QSignalSpy shown(&window, &MainWindow::run_snapshot_shown);
        QVERIFY(window.open_run(QString::fromStdString(good.string())));
        QVERIFY(shown.wait(10000));
        const auto recent = QSettings().value(QStringLiteral("recent_runs")).toStringList();
        QCOMPARE(recent.size(), 1);
        for (const auto& path : {cut, cut / "run.h5"}) {
            QVERIFY(!window.open_run(QString::fromStdString(path.string())));
            // At once, in the error bar, naming the file and saying it is truncated.
            QVERIFY2(window.error_text().contains(QString::fromStdString((cut / "run.h5").string())), qPrintable(window.error_text()));
            QVERIFY2(window.error_text().contains(QStringLiteral("truncated")), qPrintable(window.error_text()));
            QCOMPARE(window.current_run(), QString::fromStdString(good.string()));
            QCOMPARE(QSettings().value(QStringLiteral("recent_runs")).toStringList(), recent);
        }
    }
};

QTEST_MAIN(TestViewsRunsPage)
#include "test_views_runs_page.moc"
