// Exports: figures as PDF (checked with poppler's pdfinfo), SVG (parsed as XML) and PNG (loaded
// with QImage) at the chosen physical size; tables through experiments' renderers; curves as CSV.
#include "views_test_support.h"

#include "tandem/views/export.h"

#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QXmlStreamReader>
#include <QtTest>

#include <cmath>
#include <sstream>

using namespace tandem::views;
using tandem::views::test::slurp;

namespace {

RunSnapshot snapshot() {
    RunSnapshot s;
    s.experiment = "export-test";
    for (int l = 0; l < 2; ++l) {
        LegTrajectory leg;
        leg.leg = l == 0 ? "engine" : "reference";
        for (int u = 0; u < 200; ++u) {
            leg.series(Metric::GradNorm).push_back({double(u), 1.0 + 0.5 * std::sin(u * 0.1) + 0.01 * l});
            leg.series(Metric::TrainLoss).push_back({double(u), 3.0 - 0.005 * u});
        }
        for (int u = 0; u <= 200; u += 20) leg.series(Metric::HeldoutCe).push_back({double(u), 3.2 - 0.005 * u + 0.001 * l});
        s.legs.push_back(leg);
    }
    return s;
}

}  // namespace

class TestViewsExport : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void pdf_is_valid_and_has_the_chosen_page_size() {
        QTemporaryDir dir;
        const auto path = dir.filePath(QStringLiteral("loss.pdf"));
        FigureSize size;
        size.width = 16;
        size.height = 10;
        size.unit = LengthUnit::Centimetres;
        size.font_pt = 9;
        export_figure(snapshot(), ChartOptions{}, size, FigureFormat::Pdf, path.toStdString());
        QProcess pdfinfo;
        pdfinfo.start(QStringLiteral("pdfinfo"), {path});
        QVERIFY2(pdfinfo.waitForFinished(30000), "pdfinfo did not finish");
        const auto out = QString::fromUtf8(pdfinfo.readAllStandardOutput());
        QVERIFY2(pdfinfo.exitCode() == 0, qPrintable(QString::fromUtf8(pdfinfo.readAllStandardError())));
        QVERIFY(out.contains(QRegularExpression(QStringLiteral("Pages:\\s+1"))));
        // 16 cm x 10 cm = 453.54 x 283.46 pt.
        const auto m = QRegularExpression(QStringLiteral("Page size:\\s+([0-9.]+) x ([0-9.]+) pts")).match(out);
        QVERIFY2(m.hasMatch(), qPrintable(out));
        QVERIFY(std::abs(m.captured(1).toDouble() - 16 / 2.54 * 72) < 1.0);
        QVERIFY(std::abs(m.captured(2).toDouble() - 10 / 2.54 * 72) < 1.0);
        QVERIFY(out.contains(QStringLiteral("tandem-workbench")));  // Creator
    }

    void svg_parses_as_xml_is_vector_and_has_the_chosen_size() {
        QTemporaryDir dir;
        const auto path = dir.filePath(QStringLiteral("grad.svg"));
        FigureSize size;
        size.width = 6;
        size.height = 4;
        size.unit = LengthUnit::Inches;
        ChartOptions options;
        options.metric = Metric::GradNorm;
        export_figure(snapshot(), options, size, FigureFormat::Svg, path.toStdString());
        const auto text = slurp(path);
        QXmlStreamReader xml(QByteArray::fromStdString(text));
        int paths = 0, texts = 0;
        QString width, height;
        while (!xml.atEnd()) {
            xml.readNext();
            if (!xml.isStartElement()) continue;
            if (xml.name() == QStringLiteral("svg")) {
                width = xml.attributes().value(QStringLiteral("width")).toString();
                height = xml.attributes().value(QStringLiteral("height")).toString();
            }
            if (xml.name() == QStringLiteral("path") || xml.name() == QStringLiteral("polyline")) ++paths;
            if (xml.name() == QStringLiteral("text")) ++texts;
        }
        QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
        QVERIFY(paths > 0);   // the curves are vector paths, not an embedded bitmap
        QVERIFY(texts > 0);   // axis labels and the legend are text
        QVERIFY(text.find("<image") == std::string::npos);
        QVERIFY(text.find("engine") != std::string::npos);     // legend
        QVERIFY(text.find("reference") != std::string::npos);
        // QSvgGenerator writes the physical size in millimetres: 6 x 4 inches = 152.4 x 101.6 mm.
        QVERIFY2(width.endsWith(QStringLiteral("mm")), qPrintable(width));
        QVERIFY(std::abs(width.chopped(2).toDouble() - 152.4) < 1.0);
        QVERIFY(std::abs(height.chopped(2).toDouble() - 101.6) < 1.0);
    }

    void png_loads_and_has_the_chosen_pixel_size() {
        QTemporaryDir dir;
        const auto path = dir.filePath(QStringLiteral("loss.png"));
        FigureSize size;
        size.width = 8;
        size.height = 5;
        size.unit = LengthUnit::Centimetres;
        size.png_dpi = 200;
        export_figure(snapshot(), ChartOptions{}, size, FigureFormat::Png, path.toStdString());
        QImage image;
        QVERIFY(image.load(path));
        QCOMPARE(image.width(), int(std::lround(8 / 2.54 * 200)));
        QCOMPARE(image.height(), int(std::lround(5 / 2.54 * 200)));
        QVERIFY(std::abs(image.dotsPerMeterX() - 200 / 0.0254) < 2);
        // Something was drawn: not a blank page.
        int non_white = 0;
        for (int y = 0; y < image.height(); y += 4)
            for (int x = 0; x < image.width(); x += 4) non_white += image.pixel(x, y) != qRgb(255, 255, 255);
        QVERIFY(non_white > 100);
    }

    void tables_use_the_report_renderers_and_formats_follow_the_suffix() {
        const StringTable t{"l1", "L1: initial held-out CE", {"leg_a", "rel diff"}, {{"engine & co", "1e-07"}}, {}};
        const auto tex = format_table(t, TableFormat::Latex);
        QVERIFY(tex.find("\\toprule") != std::string::npos);
        QVERIFY(tex.find("\\bottomrule") != std::string::npos);
        QVERIFY(tex.find("engine \\& co") != std::string::npos);
        QCOMPARE(format_table(t, TableFormat::Csv), tandem::experiments::render_table(t, tandem::experiments::ReportFormat::Csv));
        QCOMPARE(format_table(t, TableFormat::Markdown), tandem::experiments::render_table(t, tandem::experiments::ReportFormat::Markdown));
        QVERIFY(format_table(t, TableFormat::Markdown).find("| --- | --- |") != std::string::npos);
        QCOMPARE(table_format_for(QStringLiteral("a.TEX")), std::optional<TableFormat>(TableFormat::Latex));
        QCOMPARE(figure_format_for(QStringLiteral("a.Svg")), std::optional<FigureFormat>(FigureFormat::Svg));
        QVERIFY(!figure_format_for(QStringLiteral("a.jpg")));
    }

    // CSV for machines: the timing table's "493.8 MiB", "1.6 GiB", "1.960 (6-29)", "100.0%" and "n/a"
    // become plain numbers with the unit (or the note's column) in the header; words stay words.
    void table_csv_has_plain_numbers_and_units_in_the_header() {
        const StringTable t{"timing", "Timing and memory",
                            {"leg", "status", "median s/update (window)", "tokens/s", "above clip", "peak host", "largest (update)"},
                            {{"engine (engine)", "finished", "1.960 (6-29)", "81.6", "100.0%", "493.8 MiB", "4.532e-06 (0)"},
                             {"reference (reference)", "finished", "4.728 (6-29)", "33.2", "n/a", "1.6 GiB", "1.56e-05 (29)"}},
                            {"window: 0-based updates"}};
        const auto csv = format_table(t, TableFormat::Csv);
        QCOMPARE(csv, std::string("leg,status,median s/update,window,tokens/s,above clip [%],peak host [MiB],largest,update\n"
                                  "engine (engine),finished,1.960,6-29,81.6,100.0,493.8,4.532e-06,0\n"
                                  "reference (reference),finished,4.728,6-29,33.2,,1638.4,1.56e-05,29\n"));
        // The same text `tandem report --format csv` prints (one renderer).
        QCOMPARE(csv, tandem::experiments::render_table(t, tandem::experiments::ReportFormat::Csv));
        // Text and LaTeX keep what a reader wants.
        QVERIFY(format_table(t, TableFormat::Markdown).find("493.8 MiB") != std::string::npos);
    }

    // One action, several panels: held-out CE + residual + grad norm at a journal column width,
    // vector PDF with every font embedded (poppler's pdffonts), each panel's axis title in the text
    // layer (pdftotext), and ink in each third of the page once rasterised (pdftoppm).
    void multi_panel_pdf_at_a_journal_column_width_embeds_its_fonts() {
        QTemporaryDir dir;
        dir.setAutoRemove(qEnvironmentVariableIsEmpty("TANDEM_TEST_KEEP"));  // to look at the figure
        if (!dir.autoRemove()) qInfo() << "figure in" << dir.path();
        const auto path = dir.filePath(QStringLiteral("figure.pdf"));
        auto s = snapshot();
        ResidualTrajectory r{"engine", "reference", Metric::HeldoutCe, {}};
        for (int u = 0; u <= 200; u += 20) r.percent.push_back({double(u), 0.03 * std::sin(u * 0.05)});
        s.residuals.push_back(r);
        ChartOptions heldout, residual, grad;
        residual.residual = true;
        grad.metric = Metric::GradNorm;
        std::vector<PanelFigure> panels{{run_curves(s, heldout), heldout}, {run_curves(s, residual), residual}, {run_curves(s, grad), grad}};
        FigureSize size;
        size.width = kJournalColumnCm;
        size.height = 12;
        size.font_pt = 8;
        size.font_family = QStringLiteral("DejaVu Serif");
        export_figure_panels(panels, size, FigureFormat::Pdf, path.toStdString(), QStringLiteral("tandem: test"));
        auto run = [](const QString& program, const QStringList& args) {
            QProcess p;
            p.start(program, args);
            p.waitForFinished(30000);
            return std::make_pair(p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()));
        };
        const auto [info_rc, info] = run(QStringLiteral("pdfinfo"), {path});
        QCOMPARE(info_rc, 0);
        const auto m = QRegularExpression(QStringLiteral("Page size:\\s+([0-9.]+) x ([0-9.]+) pts")).match(info);
        QVERIFY2(m.hasMatch(), qPrintable(info));
        QVERIFY(std::abs(m.captured(1).toDouble() - kJournalColumnCm / 2.54 * 72) < 1.0);
        QVERIFY(std::abs(m.captured(2).toDouble() - 12 / 2.54 * 72) < 1.0);
        // pdffonts: a header, a rule, then one line per font whose "emb" column says yes.
        const auto [fonts_rc, fonts] = run(QStringLiteral("pdffonts"), {path});
        QCOMPARE(fonts_rc, 0);
        const auto lines = fonts.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
        QVERIFY2(lines.size() >= 3, qPrintable(fonts));
        for (int i = 2; i < lines.size(); ++i) {
            QVERIFY2(lines[i].contains(QStringLiteral("DejaVu")), qPrintable(lines[i]));
            const auto columns = lines[i].split(QLatin1Char(' '), Qt::SkipEmptyParts);
            QVERIFY2(columns.size() >= 5 && columns[columns.size() - 5] == QStringLiteral("yes"), qPrintable(fonts));  // emb
        }
        const auto [text_rc, text] = run(QStringLiteral("pdftotext"), {path, QStringLiteral("-")});
        QCOMPARE(text_rc, 0);
        for (const auto& title : {QStringLiteral("held-out CE"), QStringLiteral("grad norm"), QStringLiteral("[%]"), QStringLiteral("engine − reference")})
            QVERIFY2(text.contains(title), qPrintable(text));
        const auto png = dir.filePath(QStringLiteral("page"));
        QCOMPARE(run(QStringLiteral("pdftoppm"), {QStringLiteral("-png"), QStringLiteral("-r"), QStringLiteral("100"), QStringLiteral("-singlefile"), path, png}).first, 0);
        QImage image;
        QVERIFY(image.load(png + QStringLiteral(".png")));
        for (int third = 0; third < 3; ++third) {
            int ink = 0;
            for (int y = third * image.height() / 3; y < (third + 1) * image.height() / 3; y += 2)
                for (int x = 0; x < image.width(); x += 2) ink += qGray(image.pixel(x, y)) < 128;
            QVERIFY2(ink > 200, qPrintable(QStringLiteral("panel %1: %2 dark pixels").arg(third).arg(ink)));
        }
    }

    void curves_csv_has_every_point_or_the_visible_range_only() {
        auto s = snapshot();
        s.run_id = "csv-run";
        for (auto& leg : s.legs)
            for (int u = 0; u <= 200; ++u) {
                leg.tokens_seen.push_back({double(u), 100.0 * u});
                leg.wall_time.push_back({double(u), 0.5 * u});
            }
        const auto all = curves_csv(s, std::nullopt);
        const auto lines = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n'); };
        // A header, then one line per (leg, update): updates 0..199 have steps, 200 only an evaluation.
        QCOMPARE(lines(all), 1 + 2 * 201);
        // Units in the header, plain numbers in the cells.
        QCOMPARE(all.substr(0, all.find('\n')),
                 std::string("run,leg,update,tokens_seen,wall_time [s],heldout_ce [nats],loss [nats],grad_norm,lr,tokens_per_s [tokens/s]"));
        QVERIFY2(all.find("csv-run,engine,20,2000,10,3.1000000000000001,2.8999999999999999,") != std::string::npos, all.substr(0, 600).c_str());
        std::ostringstream last;
        last.precision(17);
        last << "csv-run,reference,200,20000,100," << (3.2 - 0.005 * 200 + 0.001) << ",,,,\n";  // an evaluation only
        QVERIFY2(all.find(last.str()) != std::string::npos, last.str().c_str());
        QVERIFY(all.find("MiB") == std::string::npos && all.find(" (") == std::string::npos);
        const auto visible = curves_csv(s, std::make_pair(50.0, 59.0));
        QCOMPARE(lines(visible), 1 + 2 * 10);
        QVERIFY(visible.find("csv-run,engine,50,") != std::string::npos);
        QVERIFY(visible.find(",49,") == std::string::npos);
        // The visible range on the tokens axis: updates whose tokens seen lie inside it.
        const auto by_tokens = curves_csv(s, std::make_pair(1000.0, 1500.0), XAxis::TokensSeen);
        QCOMPARE(lines(by_tokens), 1 + 2 * 6);
    }
};

QTEST_MAIN(TestViewsExport)
#include "test_views_export.moc"
