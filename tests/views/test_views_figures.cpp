// Paper figures: every preset (single column 8.5 cm, double column 17.8 cm, 16:9 slide) at one and
// at three panels, drawn offscreen and checked from the files themselves — the PDF's page size
// (pdfinfo) and text boxes (poppler's pdftotext -bbox), the SVG's size and the plot areas its grid
// lines span: page size within 0.1 mm; every panel's plot area has the same left and right edge;
// no text box leaves the page or overlaps another; every y axis has at least 3 labelled ticks.
#include "views_test_support.h"

#include "tandem/views/export.h"
#include "tandem/views/trajectory_chart.h"

#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTransform>
#include <QXmlStreamReader>
#include <QtTest>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace tandem::views;

namespace {

constexpr double kPtPerMm = 72.0 / 25.4;

RunSnapshot snapshot(int runs_like_legs = 2) {
    RunSnapshot s;
    s.run_id = "figure-run";
    for (int l = 0; l < runs_like_legs; ++l) {
        LegTrajectory leg;
        leg.leg = l == 0 ? "engine" : l == 1 ? "reference" : "leg" + std::to_string(l);
        double tokens = 0, wall = 0;
        for (int u = 0; u < 300; ++u) {
            leg.series(Metric::GradNorm).push_back({double(u), 1.0 + 0.5 * std::sin(u * 0.1) + 0.01 * l});
            leg.series(Metric::TrainLoss).push_back({double(u), 3.0 - 0.004 * u + 0.05 * std::sin(u * 0.7)});
            leg.tokens_seen.push_back({double(u), tokens});
            leg.wall_time.push_back({double(u), wall});
            tokens += 4000;
            wall += 1.7;
        }
        for (int u = 0; u <= 300; u += 30) leg.series(Metric::HeldoutCe).push_back({double(u), 7.2 - 0.0007 * u + 0.0004 * l});
        s.legs.push_back(leg);
    }
    ResidualTrajectory r{"engine", "reference", Metric::HeldoutCe, {}};
    for (int u = 0; u <= 300; u += 30) r.percent.push_back({double(u), 0.002 * std::sin(u * 0.05) - 0.001});
    s.residuals.push_back(r);
    return s;
}

std::pair<int, QString> run(const QString& program, const QStringList& args) {
    QProcess p;
    p.start(program, args);
    p.waitForFinished(60000);
    return {p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()) + QString::fromUtf8(p.readAllStandardError())};
}

std::string slurp(const QString& path) {
    std::ifstream in(path.toStdString(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// One word poppler placed on the page, in points from the top-left corner.
struct Word {
    QString text;
    QRectF box;
};

std::vector<Word> pdf_words(const QString& pdf) {
    const auto [rc, out] = run(QStringLiteral("pdftotext"), {QStringLiteral("-bbox"), pdf, QStringLiteral("-")});
    std::vector<Word> words;
    if (rc != 0) return words;
    static const QRegularExpression word(QStringLiteral(
        R"re(<word xMin="([-0-9.]+)" yMin="([-0-9.]+)" xMax="([-0-9.]+)" yMax="([-0-9.]+)">([^<]*)</word>)re"));
    for (auto it = word.globalMatch(out); it.hasNext();) {
        const auto m = it.next();
        const double x0 = m.captured(1).toDouble(), y0 = m.captured(2).toDouble(), x1 = m.captured(3).toDouble(), y1 = m.captured(4).toDouble();
        QString text = m.captured(5);
        text.replace(QStringLiteral("&amp;"), QStringLiteral("&")).replace(QStringLiteral("&lt;"), QStringLiteral("<")).replace(QStringLiteral("&gt;"), QStringLiteral(">"));
        words.push_back({text, QRectF(QPointF(x0, y0), QPointF(x1, y1))});
    }
    return words;
}

// The SVG's size in mm and every straight two-point line it draws (in mm from the top left).
struct SvgFigure {
    double width_mm = 0, height_mm = 0;
    std::vector<QLineF> lines;
};

QTransform parse_matrix(const QString& text) {
    static const QRegularExpression matrix(QStringLiteral(R"(matrix\(([^)]*)\))"));
    const auto m = matrix.match(text);
    if (!m.hasMatch()) return {};
    const auto v = m.captured(1).split(QRegularExpression(QStringLiteral("[ ,]+")), Qt::SkipEmptyParts);
    if (v.size() != 6) return {};
    return QTransform(v[0].toDouble(), v[1].toDouble(), v[2].toDouble(), v[3].toDouble(), v[4].toDouble(), v[5].toDouble());
}

SvgFigure svg_figure(const QString& path) {
    SvgFigure f;
    QXmlStreamReader xml(QByteArray::fromStdString(slurp(path)));
    QRectF view_box;
    std::vector<QTransform> stack{QTransform()};
    while (!xml.atEnd()) {
        xml.readNext();
        if (xml.isEndElement()) {
            if (xml.name() == QStringLiteral("g") && stack.size() > 1) stack.pop_back();
            continue;
        }
        if (!xml.isStartElement()) continue;
        const auto a = xml.attributes();
        if (xml.name() == QStringLiteral("svg")) {
            f.width_mm = a.value(QStringLiteral("width")).toString().chopped(2).toDouble();
            f.height_mm = a.value(QStringLiteral("height")).toString().chopped(2).toDouble();
            const auto v = a.value(QStringLiteral("viewBox")).toString().split(QLatin1Char(' '), Qt::SkipEmptyParts);
            if (v.size() == 4) view_box = QRectF(v[0].toDouble(), v[1].toDouble(), v[2].toDouble(), v[3].toDouble());
            continue;
        }
        if (xml.name() == QStringLiteral("g")) {
            stack.push_back(parse_matrix(a.value(QStringLiteral("transform")).toString()) * stack.back());
            continue;
        }
        std::vector<QPointF> points;
        if (xml.name() == QStringLiteral("polyline")) {
            for (const auto& p : a.value(QStringLiteral("points")).toString().split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
                const auto xy = p.split(QLatin1Char(','));
                if (xy.size() == 2) points.emplace_back(xy[0].toDouble(), xy[1].toDouble());
            }
        } else if (xml.name() == QStringLiteral("path")) {
            static const QRegularExpression move_line(QStringLiteral(R"(^M\s*([-0-9.e]+)[ ,]([-0-9.e]+)\s*L\s*([-0-9.e]+)[ ,]([-0-9.e]+)\s*$)"));
            const auto m = move_line.match(a.value(QStringLiteral("d")).toString().trimmed());
            if (m.hasMatch()) points = {{m.captured(1).toDouble(), m.captured(2).toDouble()}, {m.captured(3).toDouble(), m.captured(4).toDouble()}};
        } else {
            continue;
        }
        if (points.size() != 2 || view_box.isEmpty()) continue;
        const QTransform to_mm = QTransform::fromScale(f.width_mm / view_box.width(), f.height_mm / view_box.height());
        const QTransform t = stack.back() * to_mm;
        f.lines.emplace_back(t.map(points[0]), t.map(points[1]));
    }
    return f;
}

bool is_number(QString text) {
    text.replace(QChar(0x2212), QLatin1Char('-'));
    bool ok = false;
    text.toDouble(&ok);
    return ok;
}

}  // namespace

class TestViewsFigures : public QObject {
    Q_OBJECT

    // Draws `panels` at `preset` as PDF and SVG and checks every "must hold" of a paper figure.
    void check_preset(FigurePreset preset, const std::vector<PanelFigure>& panels, const QString& tag, const QString& x_word = QStringLiteral("update")) {
        QTemporaryDir dir;
        dir.setAutoRemove(qEnvironmentVariableIsEmpty("TANDEM_TEST_KEEP"));
        if (!dir.autoRemove()) qInfo() << tag << "in" << dir.path();
        const FigureSize size = preset_size(preset, static_cast<int>(panels.size()));
        QVERIFY(size.font_pt >= 6);
        const double want_w = size.width_inches() * 25.4, want_h = size.height_inches() * 25.4;
        const QString pdf = dir.filePath(tag + QStringLiteral(".pdf")), svg = dir.filePath(tag + QStringLiteral(".svg"));
        export_figure_panels(panels, size, FigureFormat::Pdf, pdf.toStdString(), tag);
        export_figure_panels(panels, size, FigureFormat::Svg, svg.toStdString(), tag);

        // Page size within 0.1 mm, in both files.
        const auto [info_rc, info] = run(QStringLiteral("pdfinfo"), {pdf});
        QCOMPARE(info_rc, 0);
        const auto m = QRegularExpression(QStringLiteral("Page size:\\s+([0-9.]+) x ([0-9.]+) pts")).match(info);
        QVERIFY2(m.hasMatch(), qPrintable(info));
        QVERIFY2(std::fabs(m.captured(1).toDouble() / kPtPerMm - want_w) <= 0.1, qPrintable(tag + QStringLiteral(" PDF width ") + m.captured(1)));
        QVERIFY2(std::fabs(m.captured(2).toDouble() / kPtPerMm - want_h) <= 0.1, qPrintable(tag + QStringLiteral(" PDF height ") + m.captured(2)));
        const auto figure = svg_figure(svg);
        QVERIFY2(std::fabs(figure.width_mm - want_w) <= 0.1, qPrintable(QStringLiteral("%1 SVG width %2 mm").arg(tag).arg(figure.width_mm)));
        QVERIFY2(std::fabs(figure.height_mm - want_h) <= 0.1, qPrintable(QStringLiteral("%1 SVG height %2 mm").arg(tag).arg(figure.height_mm)));

        // The plot areas, from the SVG: every horizontal line across most of the page (the y grid,
        // the residual's zero line, the x axis) starts and ends at the same x in every panel.
        std::vector<QLineF> spans;
        for (const auto& l : figure.lines)
            if (std::fabs(l.dy()) < 0.01 && std::fabs(l.dx()) > 0.4 * want_w) spans.push_back(l);
        QVERIFY2(spans.size() >= 3 * panels.size(), qPrintable(QStringLiteral("%1: %2 grid lines").arg(tag).arg(spans.size())));
        const double left = std::min(spans.front().x1(), spans.front().x2()), right = std::max(spans.front().x1(), spans.front().x2());
        for (const auto& l : spans) {
            QVERIFY2(std::fabs(std::min(l.x1(), l.x2()) - left) <= 0.1, qPrintable(QStringLiteral("%1: a plot starts at %2 mm, another at %3 mm").arg(tag).arg(std::min(l.x1(), l.x2())).arg(left)));
            QVERIFY2(std::fabs(std::max(l.x1(), l.x2()) - right) <= 0.1, qPrintable(QStringLiteral("%1: a plot ends at %2 mm, another at %3 mm").arg(tag).arg(std::max(l.x1(), l.x2())).arg(right)));
        }
        // The same edges the exporter says it laid out.
        const auto& layout = last_figure_layout();
        QCOMPARE(layout.plot_areas.size(), panels.size());
        for (const auto& p : layout.plot_areas) {
            QVERIFY(std::fabs(p.left() - left) <= 0.2);
            QVERIFY(std::fabs(p.right() - right) <= 0.2);
        }

        // Text, from the PDF: inside the page, no two boxes overlap.
        const auto words = pdf_words(pdf);
        QVERIFY2(words.size() > 10, qPrintable(tag));
        const QRectF page(0, 0, want_w * kPtPerMm, want_h * kPtPerMm);
        for (const auto& w : words)
            QVERIFY2(page.adjusted(-0.05, -0.05, 0.05, 0.05).contains(w.box),
                     qPrintable(QStringLiteral("%1: \"%2\" at (%3, %4)-(%5, %6) pt leaves the %7 x %8 pt page").arg(tag, w.text).arg(w.box.left()).arg(w.box.top()).arg(w.box.right()).arg(w.box.bottom()).arg(page.width()).arg(page.height())));
        for (std::size_t i = 0; i < words.size(); ++i)
            for (std::size_t j = i + 1; j < words.size(); ++j) {
                const QRectF overlap = words[i].box.intersected(words[j].box);
                QVERIFY2(overlap.width() <= 0.3 || overlap.height() <= 0.3,
                         qPrintable(QStringLiteral("%1: \"%2\" overlaps \"%3\"").arg(tag, words[i].text, words[j].text)));
            }
        // Every y axis: at least three numbers left of the plot, level with it.
        for (std::size_t p = 0; p < layout.plot_areas.size(); ++p) {
            const QRectF plot(layout.plot_areas[p].topLeft() * kPtPerMm, layout.plot_areas[p].bottomRight() * kPtPerMm);
            int labels = 0;
            for (const auto& w : words)
                if (is_number(w.text) && w.box.right() <= plot.left() + 0.5 && w.box.center().y() >= plot.top() - 1 && w.box.center().y() <= plot.bottom() + 1)
                    ++labels;
            QVERIFY2(labels >= 3, qPrintable(QStringLiteral("%1: panel %2 has %3 y labels").arg(tag).arg(p).arg(labels)));
        }
        // One x title, under the bottom panel, and the shortest title still has its unit.
        QCOMPARE(std::count_if(words.begin(), words.end(), [&](const Word& w) { return w.text == x_word; }), std::ptrdiff_t(1));
        QVERIFY2(std::any_of(words.begin(), words.end(), [](const Word& w) { return w.text == QStringLiteral("[nats]"); }), qPrintable(tag));
        // Fonts are the preset's size: the height of a digit's box is about the point size.
        for (const auto& w : words)
            if (w.text == x_word) QVERIFY2(w.box.height() > 0.8 * size.font_pt && w.box.height() < 1.6 * size.font_pt, qPrintable(QStringLiteral("%1: 'update' is %2 pt high").arg(tag).arg(w.box.height())));
    }

private Q_SLOTS:
    void every_preset_at_one_and_three_panels_is_paper_grade() {
        const auto s = snapshot();
        ChartOptions heldout, residual, grad;
        residual.residual = true;
        grad.metric = Metric::GradNorm;
        const std::vector<PanelFigure> one{{run_curves(s, heldout), heldout}};
        const std::vector<PanelFigure> three{{run_curves(s, heldout), heldout}, {run_curves(s, residual), residual}, {run_curves(s, grad), grad}};
        for (const auto& p : figure_presets()) {
            check_preset(p.preset, one, QString::fromLatin1(p.key) + QStringLiteral("-1"));
            check_preset(p.preset, three, QString::fromLatin1(p.key) + QStringLiteral("-3"));
        }
    }

    void tokens_and_wall_time_axes_export_too() {
        // The x axis of a figure follows the view's choice, titled with its unit.
        auto s = snapshot();
        ChartOptions heldout, grad;
        heldout.x_axis = grad.x_axis = XAxis::WallTime;
        grad.metric = Metric::GradNorm;
        check_preset(FigurePreset::SingleColumn, {{run_curves(s, heldout), heldout}, {run_curves(s, grad), grad}}, QStringLiteral("wall"), QStringLiteral("time"));
    }
};

QTEST_MAIN(TestViewsFigures)
#include "test_views_figures.moc"
