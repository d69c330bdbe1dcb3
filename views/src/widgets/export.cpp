#include "tandem/views/export.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"

#include <QApplication>
#include <QBuffer>
#include <QChart>
#include <QChartView>
#include <QFileInfo>
#include <QImage>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QSvgGenerator>

#include <cmath>
#include <sstream>

namespace tandem::views {

namespace {

// The chart is laid out in logical pixels at this resolution; fonts are set in points, so the
// result has the requested physical font size once scaled onto the physical page.
constexpr double kLayoutDpi = 96.0;

std::string lowercase_suffix(const QString& path) { return QFileInfo(path).suffix().toLower().toStdString(); }

}  // namespace

std::optional<FigureFormat> figure_format_for(const QString& path) {
    const auto suffix = lowercase_suffix(path);
    if (suffix == "png") return FigureFormat::Png;
    if (suffix == "svg") return FigureFormat::Svg;
    if (suffix == "pdf") return FigureFormat::Pdf;
    return std::nullopt;
}

void export_figure(const RunSnapshot& snapshot, ChartOptions options, const FigureSize& size,
                   FigureFormat format, const std::filesystem::path& path) {
    if (!(size.width > 0 && size.height > 0)) throw Error("figure export " + path.string() + ": size must be positive");
    const QSizeF logical(size.width_inches() * kLayoutDpi, size.height_inches() * kLayoutDpi);
    options.font_pt = size.font_pt;
    options.legend = true;
    options.columns = static_cast<int>(std::ceil(logical.width()));

    TrajectoryChart builder;
    QChartView view(builder.chart());  // owns the chart; lays it out in a scene
    view.setAttribute(Qt::WA_DontShowOnScreen);
    view.setRenderHint(QPainter::Antialiasing);
    view.setFrameShape(QFrame::NoFrame);
    view.setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    view.setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    view.resize(logical.toSize());
    builder.chart()->resize(logical);
    builder.update(snapshot, options);
    view.show();
    QApplication::processEvents();
    builder.chart()->resize(logical);
    QApplication::processEvents();
    const QRectF source(QPointF(0, 0), logical);

    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    switch (format) {
    case FigureFormat::Png: {
        const QSize pixels(static_cast<int>(std::lround(size.width_inches() * size.png_dpi)),
                           static_cast<int>(std::lround(size.height_inches() * size.png_dpi)));
        QImage image(pixels, QImage::Format_ARGB32);
        image.setDotsPerMeterX(static_cast<int>(std::lround(size.png_dpi / 0.0254)));
        image.setDotsPerMeterY(static_cast<int>(std::lround(size.png_dpi / 0.0254)));
        image.fill(Qt::white);
        {
            QPainter painter(&image);
            painter.setRenderHint(QPainter::Antialiasing);
            view.scene()->render(&painter, QRectF(QPointF(0, 0), QSizeF(pixels)), source);
        }
        if (!image.save(&buffer, "PNG")) throw Error("figure export " + path.string() + ": PNG encoding failed");
        break;
    }
    case FigureFormat::Svg: {
        QSvgGenerator svg;
        svg.setOutputDevice(&buffer);
        svg.setResolution(static_cast<int>(kLayoutDpi));
        svg.setSize(logical.toSize());
        svg.setViewBox(source);
        svg.setTitle(QStringLiteral("tandem: %1").arg(metric_label(options.metric)));
        svg.setDescription(QString::fromStdString(snapshot.experiment));
        QPainter painter(&svg);
        view.scene()->render(&painter, source, source);
        painter.end();
        break;
    }
    case FigureFormat::Pdf: {
        QPdfWriter pdf(&buffer);
        pdf.setPageSize(QPageSize(QSizeF(size.width_inches() * 25.4, size.height_inches() * 25.4), QPageSize::Millimeter));
        pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
        pdf.setResolution(1200);
        pdf.setTitle(QStringLiteral("tandem: %1").arg(metric_label(options.metric)));
        pdf.setCreator(QStringLiteral("tandem-workbench"));
        QPainter painter(&pdf);
        const QRectF target(QPointF(0, 0), QSizeF(size.width_inches() * 1200, size.height_inches() * 1200));
        view.scene()->render(&painter, target, source);
        painter.end();
        break;
    }
    }
    buffer.close();
    write_file_atomic(path, std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size())));
}

std::optional<TableFormat> table_format_for(const QString& path) {
    const auto suffix = lowercase_suffix(path);
    if (suffix == "tex") return TableFormat::Latex;
    if (suffix == "csv") return TableFormat::Csv;
    if (suffix == "md") return TableFormat::Markdown;
    return std::nullopt;
}

std::string format_table(const StringTable& table, TableFormat format) {
    // experiments/' renderers: the same text `tandem report --format tex|csv|md` prints.
    switch (format) {
    case TableFormat::Latex: return experiments::render_table(table, experiments::ReportFormat::Latex);
    case TableFormat::Csv: return experiments::render_table(table, experiments::ReportFormat::Csv);
    case TableFormat::Markdown: return experiments::render_table(table, experiments::ReportFormat::Markdown);
    }
    return {};
}

void export_table(const StringTable& table, TableFormat format, const std::filesystem::path& path) {
    write_file_atomic(path, format_table(table, format));
}

std::string curves_csv(const RunSnapshot& snapshot, const std::optional<std::pair<double, double>>& x_range) {
    std::ostringstream out;
    out.precision(17);
    out << "leg,metric,update,value\n";
    const std::pair<Metric, const char*> metrics[] = {{Metric::HeldoutLoss, "heldout_loss"},
                                                      {Metric::GradNorm, "grad_norm"},
                                                      {Metric::TrainLoss, "train_loss"}};
    for (const auto& leg : snapshot.legs) {
        for (const auto& [metric, name] : metrics) {
            for (const auto& p : leg.series(metric)) {
                if (x_range && (p.update < x_range->first || p.update > x_range->second)) continue;
                out << experiments::csv_escape(leg.leg) << "," << name << "," << p.update << "," << p.value << "\n";
            }
        }
    }
    return out.str();
}

}  // namespace tandem::views
