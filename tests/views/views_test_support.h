#pragma once
// Helpers shared by the QtTest suites of views/: the suite's application name and throw-away
// settings, a run file written through experiments' own RunFileWriter, a file's bytes, h5py's
// reading of a run file (the reference environment's Python), and the axis tick labels a chart
// actually drew (read back from its scene).
#include "tandem/store/run_file.h"

#include <nlohmann/json.hpp>

#include <QChart>
#include <QCoreApplication>
#include <QDebug>
#include <QDir>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QGraphicsTextItem>
#include <QFont>
#include <QFontMetricsF>
#include <QProcess>
#include <QRegularExpression>
#include <QSettings>
#include <QStandardPaths>
#include <QString>
#include <QStringList>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace tandem::views::test {

// Names the suite's application (what QSettings file under) and sends QSettings and
// QStandardPaths to QtTest's throw-away locations, emptied, so no run sees the user's settings
// or another run's. Call from initTestCase().
inline void use_test_settings(const char* application) {
    QCoreApplication::setOrganizationName(QStringLiteral("tandem-test"));
    QCoreApplication::setApplicationName(QString::fromUtf8(application));
    QStandardPaths::setTestModeEnabled(true);
    QSettings().clear();
}

// The bytes of the file at `path` (empty when it cannot be read).
inline std::string slurp(const QString& path) {
    std::ifstream in(path.toStdString(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// What the Python `script` prints as JSON when run on `file` (its sys.argv[1]) by the reference
// environment's Python, which has h5py (experiments/legs/requirements.txt); ctest passes it in
// TANDEM_REFENV_PYTHON. Null, with Python's stderr as a warning, when it fails.
inline nlohmann::json refenv_python_json(const QString& script, const QString& file) {
    QProcess py;
    const QString python = qEnvironmentVariable("TANDEM_REFENV_PYTHON", QDir::homePath() + QStringLiteral("/.cache/tandem/refenv/bin/python"));
    py.start(python, {QStringLiteral("-c"), script, file});
    if (!py.waitForFinished(60000) || py.exitCode() != 0) {
        qWarning() << py.readAllStandardError();
        return {};
    }
    return nlohmann::json::parse(py.readAllStandardOutput().toStdString());
}

struct TestLeg {
    std::string name;
    std::string implementation;
    int steps = 0;
    int eval_every = 1;
    // value(metric, update): "loss", "grad", "lr", "eval"; tokens(update), wall(update)
    std::function<double(const std::string&, int)> value;
    std::function<std::int64_t(int)> tokens = [](int u) { return 100 + u; };
    std::function<double(int)> wall = [](int u) { return 0.5 + 0.01 * u; };
};

inline void write_test_run(const std::filesystem::path& file, const std::string& run_id, const std::vector<TestLeg>& legs,
                           const std::string& spec_json = R"({"name":"views-test","model":{"config":"tiny"}})") {
    namespace ex = tandem::experiments;
    ex::RunFileWriter w(file);
    ex::ExperimentInfo info;
    info.name = "views-test";
    info.run_id = run_id;
    info.spec_json = spec_json;
    w.write_experiment(info);
    for (const auto& leg : legs) {
        w.create_leg(leg.name, {{"implementation", leg.implementation}, {"device", std::string("cpu")},
                                {"status", std::string("finished")}});
        std::vector<ex::StepRow> steps;
        for (int u = 0; u < leg.steps; ++u)
            steps.push_back({u, leg.value("loss", u), leg.value("grad", u), leg.value("lr", u), leg.tokens(u), leg.wall(u)});
        w.append_steps(leg.name, steps);
        std::vector<ex::EvalRow> evals;
        for (int u = 0; u <= leg.steps; u += leg.eval_every) evals.push_back({u, leg.value("eval", u)});
        w.append_eval(leg.name, evals);
    }
}

struct AxisLabel {
    QString text;
    double number = 0;
    QPointF center;  // in chart coordinates
};

// The numeric tick labels drawn along the bottom (Qt::Horizontal) or left (Qt::Vertical) axis of
// `chart`, as the scene holds them.
inline std::vector<AxisLabel> drawn_axis_labels(QChart* chart, Qt::Orientation orientation) {
    std::vector<AxisLabel> out;
    const QRectF plot = chart->plotArea();
    for (auto* item : chart->scene()->items()) {
        QString text;
        if (auto* t = dynamic_cast<QGraphicsTextItem*>(item)) text = t->toPlainText();
        else if (auto* s = dynamic_cast<QGraphicsSimpleTextItem*>(item)) text = s->text();
        else continue;
        if (!item->isVisible() || text.isEmpty()) continue;
        bool ok = false;
        QString plain = text;
        plain.replace(QChar(0x2212), QLatin1Char('-'));
        const double number = plain.toDouble(&ok);
        if (!ok) continue;
        const QPointF c = chart->mapFromScene(item->sceneBoundingRect().center());
        const bool below = c.y() > plot.bottom() && c.x() >= plot.left() - 30 && c.x() <= plot.right() + 30;
        const bool left = c.x() < plot.left() - 2 && c.y() >= plot.top() - 8 && c.y() <= plot.bottom() + 8;
        if ((orientation == Qt::Horizontal && below) || (orientation == Qt::Vertical && left)) out.push_back({text, number, c});
    }
    std::sort(out.begin(), out.end(), [&](const AxisLabel& a, const AxisLabel& b) {
        return orientation == Qt::Horizontal ? a.center.x() < b.center.x() : a.center.y() > b.center.y();
    });
    return out;
}

// Whether `step` is 1, 2, 2.5 or 5 × 10^k.
inline bool is_nice(double step) {
    if (!(step > 0)) return false;
    const double e = std::floor(std::log10(step) + 1e-9);
    const double m = step / std::pow(10.0, e);
    for (double n : {1.0, 2.0, 2.5, 5.0, 10.0})
        if (std::fabs(m - n) < 1e-6) return true;
    return false;
}

// The natural width in points of the first tabular in `tex`, set in `font` at its point size:
// every column as wide as its widest cell (a multi-line header cell: its widest line), plus
// 2 × \tabcolsep per column. \num{m e x} is measured as "m×10" plus the exponent at 70 %. Rows
// made of one \multicolumn cell are skipped (they span the table).
inline double latex_table_width_pt(const std::string& tex_text, const QFont& font) {
    const QString tex = QString::fromStdString(tex_text);
    const double size_pt = font.pointSizeF();
    QFont big = font;
    big.setPixelSize(100);  // measure at 100 px = 1 em x 100, then scale to points
    const QFontMetricsF fm(big);
    auto width_of = [&](QString text) {
        double extra = 0;
        static const QRegularExpression num(QStringLiteral(R"(\\num\{([^}]*)\})"));
        for (auto m = num.match(text); m.hasMatch(); m = num.match(text)) {
            QString n = m.captured(1);
            QString shown = n;
            const int e = n.indexOf(QLatin1Char('e'), 0, Qt::CaseInsensitive);
            if (e >= 0) {
                shown = n.left(e) + QStringLiteral("×10");
                extra += 0.7 * fm.horizontalAdvance(n.mid(e + 1)) * size_pt / 100;
            }
            shown.replace(QLatin1Char('-'), QChar(0x2212));
            text.replace(m.capturedStart(), m.capturedLength(), shown);
        }
        static const QRegularExpression command(QStringLiteral(R"(\\[a-zA-Z]+\*?(\[[^\]]*\])?)"));
        text.replace(QStringLiteral(R"(\%)"), QStringLiteral("%")).replace(QStringLiteral(R"(\&)"), QStringLiteral("&"));
        text.replace(QStringLiteral(R"(\_)"), QStringLiteral("_")).replace(QStringLiteral("$-$"), QString(QChar(0x2212)));
        text.remove(command).remove(QLatin1Char('{')).remove(QLatin1Char('}')).remove(QLatin1Char('$'));
        return fm.horizontalAdvance(text.trimmed()) * size_pt / 100 + extra;
    };
    double colsep = 6;
    static const QRegularExpression sep(QStringLiteral(R"(\\setlength\{\\tabcolsep\}\{([0-9.]+)pt\})"));
    if (auto m = sep.match(tex); m.hasMatch()) colsep = m.captured(1).toDouble();
    // Every tabular of the table (a wide table may be set in blocks): the widest one counts.
    double widest = 0;
    for (int begin = tex.indexOf(QStringLiteral(R"(\begin{tabular})")); begin >= 0;
         begin = tex.indexOf(QStringLiteral(R"(\begin{tabular})"), begin + 1)) {
    const int end = tex.indexOf(QStringLiteral("\\end{tabular}\n"), begin);
    if (end < 0) return -1;
    QString body = tex.mid(begin, end - begin);
    body = body.mid(body.indexOf(QLatin1Char('\n')) + 1);
    std::vector<double> widths;
    for (QString row : body.split(QStringLiteral("\\\\\n"))) {
        row.remove(QRegularExpression(QStringLiteral(R"(\\(toprule|midrule|bottomrule|addlinespace|cmidrule\S*))")));
        row = row.trimmed();
        if (row.isEmpty() || row.startsWith(QStringLiteral(R"(\multicolumn)"))) continue;
        const auto cells = row.split(QRegularExpression(QStringLiteral(R"((?<!\\)&)")));
        if (widths.size() < std::size_t(cells.size())) widths.resize(std::size_t(cells.size()), 0);
        for (int i = 0; i < cells.size(); ++i) {
            const QString& cell = cells[i];
            // A stacked header: \shortstack[r]{a\\b}
            static const QRegularExpression stacked(QStringLiteral(R"(\\shortstack(\[.\])?\{(.*)\})"));
            double w = 0;
            if (auto m = stacked.match(cell); m.hasMatch()) {
                for (const auto& line : m.captured(2).split(QStringLiteral(R"(\\)"))) w = std::max(w, width_of(line));
            } else {
                w = width_of(cell);
            }
            widths[std::size_t(i)] = std::max(widths[std::size_t(i)], w);
        }
    }
    double total = 0;
    for (double w : widths) total += w + 2 * colsep;
    widest = std::max(widest, total);
    }
    return widest;
}

}  // namespace tandem::views::test
