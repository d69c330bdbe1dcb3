// The fault matrix heatmap (docs/faults.md): exported as PNG (QImage: size and the cells' colours),
// SVG (XML with the fault names and levels) and PDF (%PDF header) through the one figure writer, and
// the Faults page drawing what experiments computed (a caught cell dark, a missed expected level framed).
#include "views_test_support.h"

#include "tandem/store/catalog.h"
#include "tandem/views/fault_heatmap.h"
#include "tandem/views/run_source.h"
#include "tandem/views/runs_model.h"

#include <QImage>
#include <QTemporaryDir>
#include <QtTest>

using namespace tandem::views;
using tandem::views::test::slurp;
namespace ex = tandem::experiments;

namespace {

ex::FaultMatrix matrix() {
    ex::FaultMatrix m;
    m.reference_leg = "reference";
    m.clean_leg = "engine";
    m.updates = 30;
    m.clean.first_update.assign(ex::fault_matrix_levels().size(), std::nullopt);
    ex::FaultRow a;
    a.fault = "rope-theta";
    a.expected = {"L1", "L4"};
    a.first_update = {0, std::nullopt, std::nullopt, 0, std::nullopt};
    ex::FaultRow b;
    b.fault = "clip-skipped";
    b.expected = {"L4"};
    b.first_update = {std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt};
    m.rows = {a, b};
    return m;
}

}  // namespace

class TestViewsFaults : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void heatmap_exports_in_every_format() {
        QTemporaryDir dir;
        FigureSize size;
        size.width = 8.5;
        size.height = 5;
        size.png_dpi = 150;
        const auto m = matrix();
        export_fault_heatmap(m, size, FigureFormat::Png, (dir.path() + "/h.png").toStdString());
        export_fault_heatmap(m, size, FigureFormat::Svg, (dir.path() + "/h.svg").toStdString());
        export_fault_heatmap(m, size, FigureFormat::Pdf, (dir.path() + "/h.pdf").toStdString());
        QImage png(dir.path() + "/h.png");
        QVERIFY(!png.isNull());
        QCOMPARE(png.width(), static_cast<int>(std::lround(8.5 / 2.54 * 150)));
        QCOMPARE(png.height(), static_cast<int>(std::lround(5 / 2.54 * 150)));
        // the L1 cell of rope-theta (caught at update 0: the darkest blue) is somewhere in the image
        bool dark_blue = false;
        for (int y = 0; y < png.height() && !dark_blue; ++y)
            for (int x = 0; x < png.width() && !dark_blue; ++x) {
                const QColor c = png.pixelColor(x, y);
                dark_blue = c.red() < 20 && c.green() < 60 && c.blue() > 90 && c.blue() < 120;
            }
        QVERIFY(dark_blue);
        const std::string svg = slurp(dir.path() + "/h.svg");
        QVERIFY(svg.find("rope-theta") != std::string::npos);
        QVERIFY(svg.find("clip-skipped") != std::string::npos);
        QVERIFY(svg.find("gate") != std::string::npos);
        QVERIFY(slurp(dir.path() + "/h.pdf").rfind("%PDF", 0) == 0);
    }

    void runs_browser_lists_a_faulty_leg_as_such() {
        // the catalog's legs.faults column (schema 6) reaches the Runs page's Faults column
        QTemporaryDir dir;
        const std::filesystem::path db = (dir.path() + "/tandem.db").toStdString();
        {
            ex::Catalog c(db);
            ex::RunRecord run;
            run.id = "clinical-tiny-20261201-120000";
            run.experiment = "clinical-tiny";
            run.folder = "/runs/x";
            run.run_file = "/runs/x/run.h5";
            run.started_at = "2026-12-01T12:00:00Z";
            run.faults = "FAULT INJECTED: faulty: rope-theta=100";
            c.upsert_run(run);
            for (const char* leg : {"clean", "faulty"}) {
                ex::LegRecord l;
                l.run_id = run.id;
                l.name = leg;
                l.implementation = "engine";
                l.device = "cpu";
                l.status = "finished";
                if (std::string(leg) == "faulty") l.faults = "rope-theta=100";
                c.upsert_leg(l);
            }
        }
        RunsModel model;
        model.set_rows(load_catalog_rows(db));
        QCOMPARE(model.leg_count(), 2);
        const auto run = model.index(0, 0);
        QCOMPARE(model.rowCount(run), 2);
        QStringList cells;
        for (int r = 0; r < 2; ++r) cells << model.index(r, RunsModel::Faults, run).data().toString();
        cells.sort();
        QCOMPARE(cells, (QStringList{QString(), QStringLiteral("FAULT INJECTED: rope-theta=100")}));
        // The run's row names the faulty leg too.
        QCOMPARE(model.index(0, RunsModel::Faults).data().toString(), QStringLiteral("FAULT INJECTED: faulty: rope-theta=100"));
        QCOMPARE(model.headerData(RunsModel::Faults, Qt::Horizontal, Qt::DisplayRole).toString(), QStringLiteral("Faults"));
    }

    void page_draws_the_matrix_or_says_why_not() {
        FaultHeatmapView view;
        view.resize(600, 300);
        view.set_matrix(std::nullopt);
        QVERIFY(view.grab().width() == 600);
        view.set_matrix(matrix());
        const QImage img = view.grab().toImage();
        // clip-skipped is expected at L4 and not caught there: a red frame (176, 0, 32) is drawn
        bool red = false;
        for (int y = 0; y < img.height() && !red; ++y)
            for (int x = 0; x < img.width() && !red; ++x) {
                const QColor c = img.pixelColor(x, y);
                red = c.red() > 150 && c.green() < 30 && c.blue() < 60;
            }
        QVERIFY(red);
    }
};

QTEST_MAIN(TestViewsFaults)
#include "test_views_faults.moc"
