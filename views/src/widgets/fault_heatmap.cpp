#include "tandem/views/fault_heatmap.h"

#include "tandem/studies/faults_run.h"

#include <QPaintEvent>
#include <QFontMetricsF>
#include <QPainter>

#include <algorithm>
#include <cmath>

namespace tandem::views {

namespace ex = tandem::experiments;

std::optional<ex::FaultMatrix> load_fault_matrix(const std::filesystem::path& run_file) {
    const auto file = std::filesystem::is_directory(run_file) ? run_file / "run.h5" : run_file;
    return ex::read_fault_matrix(file);
}

namespace {

// Blues from dark (caught at update 0) to light (caught at the last update).
QColor cell_colour(double fraction) {
    const QColor dark(8, 48, 107), light(198, 219, 239);
    const double f = std::clamp(fraction, 0.0, 1.0);
    return QColor::fromRgbF(dark.redF() + f * (light.redF() - dark.redF()), dark.greenF() + f * (light.greenF() - dark.greenF()),
                            dark.blueF() + f * (light.blueF() - dark.blueF()));
}

}  // namespace

void paint_fault_heatmap(QPainter& p, const QRectF& page, const QSizeF& logical, const ex::FaultMatrix& m, int font_pt) {
    p.save();
    p.translate(page.topLeft());
    p.scale(page.width() / logical.width(), page.height() / logical.height());
    const double W = logical.width(), H = logical.height();
    QFont font = p.font();
    font.setPixelSize(std::max(1, static_cast<int>(std::lround(font_pt * 96.0 / 72.0))));
    p.setFont(font);
    const auto& levels = ex::fault_matrix_levels();
    const double line = font.pixelSize() * 1.5;
    const double title_h = line * 1.4;
    std::vector<const ex::FaultRow*> rows{&m.clean};
    for (const auto& r : m.rows) rows.push_back(&r);
    auto row_name = [&](const ex::FaultRow& r) {
        return r.fault.empty() ? QStringLiteral("(clean %1)").arg(QString::fromStdString(m.clean_leg))
                               : QString::fromStdString(r.outcome() == "caught" ? r.fault : r.fault + " (" + r.outcome() + ")");
    };
    // A font that fits `text` into `width` (never larger than the figure's font): exported figures are
    // a column wide, and a name cut off at the edge is a wrong name.
    auto fitting = [&](const QFont& base, const QString& text, double width) {
        QFont f = base;
        const double natural = QFontMetricsF(base).horizontalAdvance(text);
        if (natural > width && natural > 0)
            f.setPixelSize(std::max(1, static_cast<int>(std::floor(base.pixelSize() * width / natural))));
        return f;
    };
    QString widest;
    for (const auto* r : rows)
        if (QFontMetricsF(font).horizontalAdvance(row_name(*r)) > QFontMetricsF(font).horizontalAdvance(widest)) widest = row_name(*r);
    const double name_w = std::min(W * 0.5, std::max(W * 0.3, QFontMetricsF(font).horizontalAdvance(widest) + 8));
    const QFont name_font = fitting(font, widest, name_w - 4);
    const double cell_w = (W - name_w) / static_cast<double>(levels.size());
    const double cell_h = std::min(line * 1.2, (H - title_h - line) / static_cast<double>(rows.size()));
    p.setPen(Qt::black);
    const QString title = QStringLiteral("Fault matrix: first update each level caught (of %1; blank = not caught)").arg(m.updates);
    p.setFont(fitting(font, title, W));
    p.drawText(QRectF(0, 0, W, title_h), Qt::AlignLeft | Qt::AlignVCenter, title);
    p.setFont(font);
    for (std::size_t c = 0; c < levels.size(); ++c)
        p.drawText(QRectF(name_w + cell_w * static_cast<double>(c), title_h, cell_w, line), Qt::AlignCenter,
                   QString::fromStdString(levels[c]));
    const double updates = std::max<double>(1.0, static_cast<double>(m.updates));
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const ex::FaultRow& r = *rows[i];
        const double y = title_h + line + cell_h * static_cast<double>(i);
        p.setPen(Qt::black);
        p.setFont(name_font);
        p.drawText(QRectF(0, y, name_w - 4, cell_h), Qt::AlignRight | Qt::AlignVCenter, row_name(r));
        p.setFont(font);
        for (std::size_t c = 0; c < levels.size(); ++c) {
            const QRectF cell(name_w + cell_w * static_cast<double>(c), y, cell_w, cell_h);
            const auto& first = c < r.first_update.size() ? r.first_update[c] : std::nullopt;
            const bool expected = std::find(r.expected.begin(), r.expected.end(), levels[c]) != r.expected.end();
            if (first) {
                const double fraction = static_cast<double>(*first) / updates;
                p.fillRect(cell.adjusted(1, 1, -1, -1), cell_colour(fraction));
                p.setPen(fraction < 0.5 ? Qt::white : Qt::black);
                p.drawText(cell, Qt::AlignCenter, QString::number(*first));
            } else {
                p.fillRect(cell.adjusted(1, 1, -1, -1), QColor(245, 245, 245));
            }
            // docs/faults.md expects this level to catch the fault (unless the fault changed nothing here)
            if (expected && !first && r.no_effect.empty() && r.not_applicable.empty()) {
                p.setPen(QPen(QColor(176, 0, 32), 2));
                p.drawRect(cell.adjusted(2, 2, -2, -2));
            }
        }
    }
    p.restore();
}

void export_fault_heatmap(const ex::FaultMatrix& m, const FigureSize& size, FigureFormat format, const std::filesystem::path& path) {
    const QSizeF logical(size.width_inches() * 96.0, size.height_inches() * 96.0);
    write_painted_figure([&](QPainter& p, const QRectF& page) { paint_fault_heatmap(p, page, logical, m, size.font_pt); }, size,
                         format, path, QStringLiteral("tandem: fault matrix"));
}

FaultHeatmapView::FaultHeatmapView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("fault-heatmap"));
    setAutoFillBackground(true);
    QPalette pal = palette();
    pal.setColor(QPalette::Window, Qt::white);
    setPalette(pal);
}

void FaultHeatmapView::set_matrix(std::optional<ex::FaultMatrix> m, const QString& note) {
    matrix_ = std::move(m);
    note_ = note;
    update();
}

void FaultHeatmapView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    if (!matrix_) {
        p.drawText(rect().adjusted(12, 12, -12, -12), Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap,
                   note_.isEmpty() ? tr("This run is not a fault matrix (tandem faults EXPERIMENT makes one).") : note_);
        return;
    }
    const QRectF page = QRectF(rect()).adjusted(12, 12, -12, -12);
    paint_fault_heatmap(p, page, page.size(), *matrix_, 9);
}

}  // namespace tandem::views
