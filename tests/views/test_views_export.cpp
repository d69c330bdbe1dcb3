// Exports: figures as PDF (checked with poppler's pdfinfo), SVG (parsed as XML) and PNG (loaded
// with QImage) at the chosen physical size; tables through experiments' renderers; curves as CSV.
#include "tandem/views/export.h"

#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QXmlStreamReader>
#include <QtTest>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace tandem::views;

namespace {

RunSnapshot snapshot() {
    RunSnapshot s;
    s.experiment = "export-test";
    for (int l = 0; l < 2; ++l) {
        LegTrajectory leg;
        leg.leg = l == 0 ? "engine" : "reference";
        for (int u = 0; u < 200; ++u) {
            leg.grad_norm.push_back({double(u), 1.0 + 0.5 * std::sin(u * 0.1) + 0.01 * l});
            leg.train_loss.push_back({double(u), 3.0 - 0.005 * u});
        }
        for (int u = 0; u <= 200; u += 20) leg.heldout_loss.push_back({double(u), 3.2 - 0.005 * u + 0.001 * l});
        s.legs.push_back(leg);
    }
    return s;
}

std::string slurp(const QString& path) {
    std::ifstream in(path.toStdString(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
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
        const StringTable t{"l1", "L1: initial held-out loss", {"leg_a", "rel diff"}, {{"engine & co", "1e-07"}}, {}};
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

    void curves_csv_has_every_point_or_the_visible_range_only() {
        const auto s = snapshot();
        const auto all = curves_csv(s, std::nullopt);
        const auto lines = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n'); };
        // header + 2 legs x (200 grad norm + 200 train loss + 11 evals)
        QCOMPARE(lines(all), 1 + 2 * (200 + 200 + 11));
        const auto visible = curves_csv(s, std::make_pair(50.0, 59.0));
        QCOMPARE(lines(visible), 1 + 2 * (10 + 10 + 0));
        QVERIFY(visible.find("engine,grad_norm,50,") != std::string::npos);
        QVERIFY(visible.find(",49,") == std::string::npos);
    }
};

QTEST_MAIN(TestViewsExport)
#include "test_views_export.moc"
