#include "tandem/views/export.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"

#include <QApplication>
#include <QBuffer>
#include <QChart>
#include <QChartView>
#include <QLegend>
#include <QFileInfo>
#include <QImage>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QSvgGenerator>

#include <cmath>
#include <functional>
#include <memory>
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

void write_painted_figure(const std::function<void(QPainter&, const QRectF&)>& paint, const FigureSize& size,
                          FigureFormat format, const std::filesystem::path& path, const QString& title) {
    if (!(size.width > 0 && size.height > 0)) throw Error("figure export " + path.string() + ": size must be positive");
    const QSizeF logical(size.width_inches() * kLayoutDpi, size.height_inches() * kLayoutDpi);
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
            paint(painter, QRectF(QPointF(0, 0), QSizeF(pixels)));
        }
        if (!image.save(&buffer, "PNG")) throw Error("figure export " + path.string() + ": PNG encoding failed");
        break;
    }
    case FigureFormat::Svg: {
        QSvgGenerator svg;
        svg.setOutputDevice(&buffer);
        svg.setResolution(static_cast<int>(kLayoutDpi));
        svg.setSize(logical.toSize());
        svg.setViewBox(QRectF(QPointF(0, 0), logical));
        svg.setTitle(title);
        svg.setDescription(QStringLiteral("tandem-workbench figure"));
        QPainter painter(&svg);
        paint(painter, QRectF(QPointF(0, 0), logical));
        painter.end();
        break;
    }
    case FigureFormat::Pdf: {
        // QPdfWriter embeds the fonts it uses (TrueType subsets): the figure prints as it looks.
        QPdfWriter pdf(&buffer);
        pdf.setPageSize(QPageSize(QSizeF(size.width_inches() * 25.4, size.height_inches() * 25.4), QPageSize::Millimeter));
        pdf.setPageMargins(QMarginsF(0, 0, 0, 0));
        pdf.setResolution(1200);
        pdf.setTitle(title);
        pdf.setCreator(QStringLiteral("tandem-workbench"));
        QPainter painter(&pdf);
        paint(painter, QRectF(QPointF(0, 0), QSizeF(size.width_inches() * 1200, size.height_inches() * 1200)));
        painter.end();
        break;
    }
    }
    buffer.close();
    write_file_atomic(path, std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size())));
}

void export_figure(const RunSnapshot& snapshot, ChartOptions options, const FigureSize& size,
                   FigureFormat format, const std::filesystem::path& path) {
    export_figure_panels({{run_curves(snapshot, options), options}}, size, format, path,
                         QStringLiteral("tandem: %1%2").arg(QString::fromLatin1(metric_label(options.metric)),
                                                           options.residual ? QStringLiteral(" residual") : QString()));
}

void export_figure_panels(const std::vector<PanelFigure>& panels, const FigureSize& size, FigureFormat format,
                          const std::filesystem::path& path, const QString& title) {
    if (!(size.width > 0 && size.height > 0)) throw Error("figure export " + path.string() + ": size must be positive");
    if (panels.empty()) throw Error("figure export " + path.string() + ": no panel chosen");
    const QSizeF logical(size.width_inches() * kLayoutDpi, size.height_inches() * kLayoutDpi);
    const double panel_height = logical.height() / static_cast<double>(panels.size());

    // One chart per panel, laid out in its own scene at its share of the page.
    std::vector<std::unique_ptr<TrajectoryChart>> builders;
    std::vector<std::unique_ptr<QChartView>> views;
    for (std::size_t i = 0; i < panels.size(); ++i) {
        auto options = panels[i].options;
        options.font_pt = size.font_pt;
        options.font_family = size.font_family;
        options.columns = static_cast<int>(std::ceil(logical.width()));
        options.rows = static_cast<int>(panel_height);
        options.compact = true;
        options.x_title = i + 1 == panels.size();  // one shared update axis: titled once, at the bottom
        // A legend where it says something new: a panel with a curve name no panel above had
        // (the first panel, the residual pairs).
        bool news = false;
        for (const auto& c : panels[i].curves) {
            bool seen = false;
            for (std::size_t j = 0; j < i && !seen; ++j)
                for (const auto& above : panels[j].curves) seen = seen || above.name == c.name;
            news = news || !seen;
        }
        options.legend = news;
        auto builder = std::make_unique<TrajectoryChart>();
        auto view = std::make_unique<QChartView>(builder->chart());  // owns the chart
        view->setAttribute(Qt::WA_DontShowOnScreen);
        view->setRenderHint(QPainter::Antialiasing);
        view->setFrameShape(QFrame::NoFrame);
        view->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        view->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        const QSizeF panel_size(logical.width(), panel_height);
        view->resize(panel_size.toSize());
        builder->chart()->resize(panel_size);
        builder->update(panels[i].curves, options);
        view->show();
        builders.push_back(std::move(builder));
        views.push_back(std::move(view));
    }
    QApplication::processEvents();
    for (std::size_t i = 0; i < panels.size(); ++i) {
        builders[i]->chart()->resize(QSizeF(logical.width(), panel_height));
        auto options = panels[i].options;
        options.font_pt = size.font_pt;
        options.font_family = size.font_family;
        options.columns = static_cast<int>(std::ceil(logical.width()));
        options.rows = static_cast<int>(panel_height);
        options.compact = true;
        options.x_title = i + 1 == panels.size();
        options.legend = builders[i]->chart()->legend()->isVisible();
        builders[i]->update(panels[i].curves, options);  // ticks for the final plot size
    }
    QApplication::processEvents();
    // Every panel's scene onto one painter: panel i fills the i-th horizontal band of `page`.
    auto paint = [&](QPainter& painter, const QRectF& page) {
        const double band = page.height() / static_cast<double>(panels.size());
        for (std::size_t i = 0; i < panels.size(); ++i)
            views[i]->scene()->render(&painter, QRectF(page.left(), page.top() + band * static_cast<double>(i), page.width(), band),
                                      QRectF(QPointF(0, 0), QSizeF(logical.width(), panel_height)));
    };

    write_painted_figure(paint, size, format, path, title);
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
    const std::pair<Metric, const char*> metrics[] = {{Metric::HeldoutCe, "heldout_ce"},
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
