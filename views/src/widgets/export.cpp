#include "tandem/views/export.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/views/curve_points.h"

#include <QApplication>
#include <QBuffer>
#include <QChart>
#include <QCategoryAxis>
#include <QChartView>
#include <QFileInfo>
#include <QFontMetricsF>
#include <QGraphicsScene>
#include <QGraphicsSimpleTextItem>
#include <QLegend>
#include <QImage>
#include <QPageSize>
#include <QPainter>
#include <QPdfWriter>
#include <QRegularExpression>
#include <QSvgGenerator>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

namespace tandem::views {

namespace {

// The chart is laid out in logical pixels at this resolution; fonts are set in points, so the
// result has the requested physical font size once scaled onto the physical page.
constexpr double kLayoutDpi = 96.0;

// The format that `path`'s suffix (case-insensitive) names in `formats`; nullopt for any other.
template <class Format>
std::optional<Format> format_by_suffix(const QString& path, std::initializer_list<std::pair<const char*, Format>> formats) {
    const auto suffix = QFileInfo(path).suffix().toLower().toStdString();
    for (const auto& [name, format] : formats)
        if (suffix == name) return format;
    return std::nullopt;
}

// QPdfWriter writes the page box in whole points (QPageSize rounds): 17.8 cm came out 505 pt =
// 178.15 mm. The page is made a little larger (whole points, rounded up) and its /MediaBox then set
// to the exact size, anchored at the top-left where Qt's drawing starts; the xref offsets after the
// edit move with it, so the file stays valid (poppler, qpdf and every viewer read it as written).
std::string exact_pdf_page(std::string pdf, double width_pt, double height_pt) {
    const auto box = pdf.find("/MediaBox [");
    if (box == std::string::npos) return pdf;
    const auto open = box + 11, close = pdf.find(']', open);
    if (close == std::string::npos) return pdf;
    double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    if (std::sscanf(pdf.substr(open, close - open).c_str(), "%lf %lf %lf %lf", &x0, &y0, &x1, &y1) != 4) return pdf;
    char text[160];
    // Qt draws from the top (y1) down: keep the top edge, raise the bottom one.
    std::snprintf(text, sizeof text, "0 %.6f %.6f %.6f", y1 - height_pt, width_pt, y1);
    const std::string replacement = text;
    const long delta = static_cast<long>(replacement.size()) - static_cast<long>(close - open);
    pdf.replace(open, close - open, replacement);
    auto shift = [&](std::size_t at, std::size_t digits) {
        const long offset = std::stol(pdf.substr(at, digits));
        if (offset <= static_cast<long>(box)) return;
        std::snprintf(text, sizeof text, "%0*ld", static_cast<int>(digits), offset + delta);
        pdf.replace(at, digits, text);
    };
    const auto xref = pdf.rfind("\nxref\n");
    if (xref != std::string::npos) {
        std::size_t at = pdf.find('\n', xref + 6) + 1;  // after "0 N"
        while (at + 20 <= pdf.size() && std::isdigit(static_cast<unsigned char>(pdf[at])) && pdf[at + 10] == ' ') {
            shift(at, 10);
            at = pdf.find('\n', at) + 1;
        }
    }
    const auto start = pdf.rfind("startxref\n");
    if (start != std::string::npos) {
        const auto digits_at = start + 10;
        std::size_t digits = 0;
        while (std::isdigit(static_cast<unsigned char>(pdf[digits_at + digits]))) ++digits;
        const long offset = std::stol(pdf.substr(digits_at, digits));
        pdf.replace(digits_at, digits, std::to_string(offset + delta));
    }
    return pdf;
}

}  // namespace

QString export_file_name(const QString& run_id, const QString& what, const QString& suffix) {
    QString name = (run_id.isEmpty() ? QStringLiteral("figure") : run_id) + QLatin1Char('-') + what;
    name.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_.+-]+")), QStringLiteral("-"));
    return name + QLatin1Char('.') + suffix;
}

std::optional<FigureFormat> figure_format_for(const QString& path) {
    return format_by_suffix<FigureFormat>(path, {{"png", FigureFormat::Png}, {"svg", FigureFormat::Svg}, {"pdf", FigureFormat::Pdf}});
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
        // QSvgGenerator writes width/height as size / resolution in mm from an integer size: at
        // 254 dpi one unit is 0.1 mm, so the page is exact to 0.1 mm (at 96 dpi 8.5 cm became 84.93 mm).
        constexpr int kSvgDpi = 254;
        svg.setResolution(kSvgDpi);
        svg.setSize(QSize(static_cast<int>(std::lround(size.width_inches() * kSvgDpi)), static_cast<int>(std::lround(size.height_inches() * kSvgDpi))));
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
        pdf.setPageSize(QPageSize(QSizeF(std::ceil(size.width_inches() * 72), std::ceil(size.height_inches() * 72)), QPageSize::Point));
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
    std::string file(bytes.constData(), static_cast<std::size_t>(bytes.size()));
    if (format == FigureFormat::Pdf) file = exact_pdf_page(std::move(file), size.width_inches() * 72, size.height_inches() * 72);
    write_file_atomic(path, file);
}

const std::vector<FigurePresetInfo>& figure_presets() {
    static const std::vector<FigurePresetInfo> presets{
        {FigurePreset::SingleColumn, "single column (8.5 cm)", "single-column"},
        {FigurePreset::DoubleColumn, "double column (17.8 cm)", "double-column"},
        {FigurePreset::Slide, "slide (16:9)", "slide"},
    };
    return presets;
}

FigureSize preset_size(FigurePreset preset, int panels) {
    FigureSize s;
    s.unit = LengthUnit::Centimetres;
    s.font_family = QStringLiteral("DejaVu Serif");
    const int n = std::max(1, panels);
    switch (preset) {
    case FigurePreset::SingleColumn:
        // About 4 cm of plot per panel plus the legend and the shared x axis.
        s.width = kJournalColumnCm;
        s.height = n == 1 ? 6.5 : 2.5 + 3.6 * n;
        s.font_pt = 8;
        break;
    case FigurePreset::DoubleColumn:
        s.width = kJournalTwoColumnsCm;
        s.height = n == 1 ? 8.0 : 2.5 + 3.8 * n;
        s.font_pt = 8;
        break;
    case FigurePreset::Slide:
        s.width = 33.867;  // 13.333 in x 7.5 in
        s.height = 19.05;
        s.font_pt = 14;
        break;
    }
    return s;
}

namespace {
FigureLayout g_last_layout;
}  // namespace

const FigureLayout& last_figure_layout() { return g_last_layout; }

void export_figure(const RunSnapshot& snapshot, ChartOptions options, const FigureSize& size,
                   FigureFormat format, const std::filesystem::path& path) {
    export_figure_panels({{run_curves(snapshot, options), options}}, size, format, path,
                         QStringLiteral("tandem: %1%2").arg(QString::fromLatin1(metric_label(options.metric)),
                                                           options.residual ? QStringLiteral(" residual") : QString()));
}

namespace {

// The page a figure is laid out on: its size in layout pixels (kLayoutDpi), the font every label
// is set in (points, so the printed size is the requested one) and that font's line height.
struct FigurePage {
    QSizeF size;
    QFont font;
    QFontMetricsF fm;
    double line;
};

FigurePage figure_page(const FigureSize& size) {
    QFont font = QApplication::font();
    if (!size.font_family.isEmpty()) font.setFamily(size.font_family);
    font.setPointSizeF(size.font_pt);
    const QFontMetricsF fm(font);
    return {QSizeF(size.width_inches() * kLayoutDpi, size.height_inches() * kLayoutDpi), font, fm, fm.height()};
}

// What no figure can be made of: an empty page, no panel, a font under 1 pt.
void check_figure_request(const std::vector<PanelFigure>& panels, const FigureSize& size, const std::filesystem::path& path) {
    if (!(size.width > 0 && size.height > 0)) throw Error("figure export " + path.string() + ": size must be positive");
    if (panels.empty()) throw Error("figure export " + path.string() + ": no panel chosen");
    if (size.font_pt < 1) throw Error("figure export " + path.string() + ": the font size must be at least 1 pt");
}

// Every panel's curves with pens as heavy, relative to the text, as at 8 pt in print (a 14 pt
// slide gets 1.75x wider pens).
std::vector<std::vector<Curve>> figure_curves(const std::vector<PanelFigure>& panels, const FigureSize& size) {
    const double pen_scale = std::max(1.0, size.font_pt / 8.0);
    std::vector<std::vector<Curve>> curves(panels.size());
    for (std::size_t i = 0; i < panels.size(); ++i) {
        curves[i] = panels[i].curves;
        for (auto& c : curves[i]) c.width *= pen_scale;
    }
    return curves;
}

// The legend above the panels: every curve drawn once (by name, first occurrence), a stretch of
// its line then its name, in as many columns as the page's width holds.
struct FigureLegend {
    std::vector<Curve> entries;
    double sample_w = 0, gap = 0, column_gap = 0;
    double text_room = 0;  // the widest a name may be (longer ones are elided)
    double entry_w = 0;
    int columns = 0, rows = 0;
    double row_h = 0;
    double height = 0;  // of the band it takes at the top of the page
};

FigureLegend lay_out_legend(const std::vector<PanelFigure>& panels, const std::vector<std::vector<Curve>>& curves, const FigurePage& page) {
    FigureLegend legend;
    for (std::size_t i = 0; i < panels.size(); ++i)
        for (const auto& c : curves[i]) {
            const auto& p = panels[i];
            if (!c.series || p.options.hidden.count(c.name)) continue;
            if (std::none_of(legend.entries.begin(), legend.entries.end(), [&](const Curve& e) { return e.name == c.name; }))
                legend.entries.push_back(c);
        }
    const auto& fm = page.fm;
    legend.sample_w = 2.4 * fm.averageCharWidth() * 2, legend.gap = 0.8 * fm.averageCharWidth(), legend.column_gap = 2 * fm.averageCharWidth();
    double widest = 0;
    for (const auto& e : legend.entries) widest = std::max(widest, fm.horizontalAdvance(e.name));
    legend.text_room = page.size.width() - legend.sample_w - legend.gap;
    legend.entry_w = legend.sample_w + legend.gap + std::min(widest, legend.text_room);
    legend.columns = legend.entries.empty()
                         ? 0
                         : std::max(1, static_cast<int>((page.size.width() + legend.column_gap) / (legend.entry_w + legend.column_gap)));
    legend.rows = legend.entries.empty() ? 0 : static_cast<int>((legend.entries.size() + legend.columns - 1) / legend.columns);
    legend.row_h = 1.15 * page.line;
    legend.height = legend.rows == 0 ? 0 : legend.rows * legend.row_h + 0.35 * page.line;
    return legend;
}

// The panels' bands: they share what the legend leaves; the bottom one also holds the x tick
// labels and title. Room above and below each plot for the half of a y label that sticks out of
// it, and between panels so the labels of neighbours never touch.
struct PanelBands {
    std::size_t n = 0;
    double width = 0;
    double top = 0;   // below the legend
    double band = 0;  // each panel's height
    double axis_h = 0;
    double above = 0, below = 0;
    bool bottom(std::size_t i) const { return i + 1 == n; }
    QRectF rect(std::size_t i) const {
        return QRectF(0, top + band * static_cast<double>(i), width, band + (bottom(i) ? axis_h : 0));
    }
};

PanelBands panel_bands(std::size_t n, const FigurePage& page, double legend_h, const FigureSize& size, const std::filesystem::path& path) {
    PanelBands b;
    b.n = n;
    b.width = page.size.width();
    b.top = legend_h;
    b.axis_h = 2.4 * page.line;
    b.band = (page.size.height() - legend_h - b.axis_h) / static_cast<double>(n);
    if (b.band < 3 * page.line)
        throw Error("figure export " + path.string() + ": the page is too short for " + std::to_string(n) + " panels at " +
                    std::to_string(size.font_pt) + " pt");
    b.above = 0.6 * page.line, b.below = 0.6 * page.line;
    return b;
}

// One x range for every panel (the view's zoom, else every curve's), so the ticks are one set.
std::optional<std::pair<double, double>> shared_x_range(const std::vector<PanelFigure>& panels) {
    std::optional<std::pair<double, double>> shared_x;
    for (const auto& p : panels) {
        const auto r = p.options.x_range ? p.options.x_range : TrajectoryChart::full_x_range(p.curves);
        if (r) shared_x = shared_x ? std::make_pair(std::min(shared_x->first, r->first), std::max(shared_x->second, r->second)) : *r;
    }
    return shared_x;
}

// The panels as laid out charts, each in an off-screen view of its band's size (the view owns the
// chart; the builder draws into it).
struct FigurePanels {
    const std::vector<PanelFigure>& panels;
    const std::vector<std::vector<Curve>>& curves;
    const FigureSize& size;
    const FigurePage& page;
    const PanelBands& bands;
    std::optional<std::pair<double, double>> shared_x;
    std::vector<std::unique_ptr<TrajectoryChart>> builders;
    std::vector<std::unique_ptr<QChartView>> views;

    // Panel i's chart options for a plot of plot_h x plot_w: the figure's fonts, one shared x axis
    // labelled once at the bottom, no legend of its own.
    ChartOptions options_of(std::size_t i, double plot_h, double plot_w) const {
        auto options = panels[i].options;
        options.x_range = shared_x;
        options.font_pt = size.font_pt;
        options.font_family = page.font.family();
        options.columns = static_cast<int>(std::ceil(page.size.width()));
        options.rows = static_cast<int>(plot_h);
        options.plot_width = plot_w;
        options.compact = true;
        options.legend = false;                                    // the figure's own legend, above the panels
        options.x_title = options.x_labels = bands.bottom(i);  // one shared x axis: labelled once, at the bottom
        return options;
    }
    void build() {
        for (std::size_t i = 0; i < bands.n; ++i) {
            auto builder = std::make_unique<TrajectoryChart>();
            auto view = std::make_unique<QChartView>(builder->chart());  // owns the chart
            view->setAttribute(Qt::WA_DontShowOnScreen);
            view->setRenderHint(QPainter::Antialiasing);
            view->setFrameShape(QFrame::NoFrame);
            view->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
            view->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
            const QRectF r = bands.rect(i);
            view->resize(r.size().toSize());
            builder->chart()->resize(r.size());
            builder->chart()->setBackgroundVisible(false);
            builder->update(curves[i], options_of(i, r.height() - bands.above - bands.below - (bands.bottom(i) ? bands.axis_h : 0),
                                                  page.size.width() * 0.8));
            view->show();
            builders.push_back(std::move(builder));
            views.push_back(std::move(view));
        }
        QApplication::processEvents();
    }
    // One plot-area width for all: the widest y labels and title decide the left edge; on the right
    // half of the widest x label (centred on the last tick) stays on the page.
    void align_plot_areas() {
        const double line = page.line;
        double left = 0;
        for (const auto& b : builders) left = std::max(left, b->chart()->plotArea().left());
        double widest_x = 0;
        for (const auto& label : builders.back()->x_axis()->property("categoriesLabels").toStringList())
            widest_x = std::max(widest_x, page.fm.horizontalAdvance(label));
        const double right = page.size.width() - std::max(0.5 * widest_x + 0.3 * line, 0.4 * line);
        auto plot_of = [&](std::size_t i) {
            const QRectF r = bands.rect(i);
            const double bottom = bands.bottom(i) ? builders[i]->chart()->plotArea().bottom() : r.height() - bands.below;
            return QRectF(left + 0.25 * line, bands.above, right - left - 0.25 * line, bottom - bands.above);
        };
        // Twice: the ticks follow the final plot size, and the y labels they bring may widen the left edge.
        for (int pass = 0; pass < 2; ++pass) {
            for (std::size_t i = 0; i < bands.n; ++i) {
                const QRectF plot = plot_of(i);
                builders[i]->update(curves[i], options_of(i, plot.height(), plot.width()));
            }
            QApplication::processEvents();
            double needed = left;
            for (std::size_t i = 0; i < bands.n; ++i) {
                // The natural left edge Qt wants for these labels, measured before fixing the plot area.
                const auto* axis = builders[i]->y_axis();
                double label_w = 0;
                for (const auto& label : axis->property("categoriesLabels").toStringList())
                    label_w = std::max(label_w, page.fm.horizontalAdvance(label));
                needed = std::max(needed, label_w + 2.0 * line);
            }
            left = needed;
            for (std::size_t i = 0; i < bands.n; ++i) builders[i]->chart()->setPlotArea(plot_of(i));
            QApplication::processEvents();
        }
    }
};

// The legend as a scene of its own, drawn like the panels (same fonts, same scaling); returns the
// box its entries take (empty without entries).
QRectF draw_legend(QGraphicsScene& scene, const FigureLegend& legend, const FigurePage& page) {
    QRectF legend_box;
    if (legend.rows == 0) return legend_box;
    const double line = page.line;
    const double used_w = legend.columns * legend.entry_w + (legend.columns - 1) * legend.column_gap;
    const double x0 = std::max(0.0, (page.size.width() - std::min(used_w, page.size.width())) / 2);
    for (std::size_t k = 0; k < legend.entries.size(); ++k) {
        const auto row = static_cast<double>(k / static_cast<std::size_t>(legend.columns));
        const auto col = static_cast<double>(k % static_cast<std::size_t>(legend.columns));
        const double x = x0 + col * (legend.entry_w + legend.column_gap), y = 0.2 * line + row * legend.row_h;
        const Curve& c = legend.entries[k];
        if (c.markers) {
            const double r = 0.3 * line;
            const QPointF m(x + legend.sample_w / 2, y + legend.row_h / 2);
            auto* t = scene.addPolygon(QPolygonF{{m.x(), m.y() - r}, {m.x() + r, m.y() + 0.8 * r}, {m.x() - r, m.y() + 0.8 * r}},
                                       Qt::NoPen, c.color);
            t->setZValue(1);
        } else {
            scene.addLine(QLineF(x, y + legend.row_h / 2, x + legend.sample_w, y + legend.row_h / 2), curve_pen(c));
        }
        auto* text = scene.addSimpleText(page.fm.elidedText(c.name, Qt::ElideRight, legend.text_room), page.font);
        text->setPos(x + legend.sample_w + legend.gap, y + (legend.row_h - line) / 2);
        legend_box |= QRectF(x, y, legend.entry_w, legend.row_h);
    }
    return legend_box;
}

// What was laid out, in millimetres from the page's top-left corner.
FigureLayout figure_layout(const FigureSize& size, const FigurePanels& panels, const QRectF& legend_box) {
    const double mm = 25.4 / kLayoutDpi;
    FigureLayout layout;
    layout.page_width_mm = size.width_inches() * 25.4;
    layout.page_height_mm = size.height_inches() * 25.4;
    for (std::size_t i = 0; i < panels.bands.n; ++i) {
        const QRectF p = panels.builders[i]->chart()->plotArea().translated(0, panels.bands.rect(i).top());
        layout.plot_areas.push_back(QRectF(p.left() * mm, p.top() * mm, p.width() * mm, p.height() * mm));
    }
    if (!legend_box.isEmpty()) layout.legend = QRectF(legend_box.left() * mm, legend_box.top() * mm, legend_box.width() * mm, legend_box.height() * mm);
    return layout;
}

}  // namespace

void export_figure_panels(const std::vector<PanelFigure>& panels, const FigureSize& size, FigureFormat format,
                          const std::filesystem::path& path, const QString& title) {
    check_figure_request(panels, size, path);
    const FigurePage page = figure_page(size);
    const auto curves = figure_curves(panels, size);
    const FigureLegend legend = lay_out_legend(panels, curves, page);
    const PanelBands bands = panel_bands(panels.size(), page, legend.height, size, path);
    FigurePanels charts{panels, curves, size, page, bands, shared_x_range(panels), {}, {}};
    charts.build();
    charts.align_plot_areas();
    QGraphicsScene legend_scene(QRectF(0, 0, page.size.width(), std::max(legend.height, 1.0)));
    const QRectF legend_box = draw_legend(legend_scene, legend, page);

    // Every scene onto one painter: the legend band, then panel i in its band.
    const double legend_h = legend.height;
    auto paint = [&](QPainter& painter, const QRectF& target) {
        const double sx = target.width() / page.size.width(), sy = target.height() / page.size.height();
        auto to_target = [&](const QRectF& r) { return QRectF(target.left() + r.left() * sx, target.top() + r.top() * sy, r.width() * sx, r.height() * sy); };
        if (legend.rows > 0)
            legend_scene.render(&painter, to_target(QRectF(0, 0, page.size.width(), legend_h)), QRectF(0, 0, page.size.width(), legend_h));
        for (std::size_t i = 0; i < bands.n; ++i) {
            const QRectF r = bands.rect(i);
            charts.views[i]->scene()->render(&painter, to_target(r), QRectF(QPointF(0, 0), r.size()));
        }
    };
    write_painted_figure(paint, size, format, path, title);
    g_last_layout = figure_layout(size, charts, legend_box);
}

std::optional<TableFormat> table_format_for(const QString& path) {
    return format_by_suffix<TableFormat>(path, {{"tex", TableFormat::Latex}, {"csv", TableFormat::Csv}, {"md", TableFormat::Markdown}});
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

std::string curves_csv(const std::vector<RunSnapshot>& runs, const std::optional<std::pair<double, double>>& x_range, XAxis x_axis) {
    std::ostringstream out;
    out.precision(17);
    // Column names are identifiers like the series after them (run.h5 names), units in brackets.
    out << "run,leg,update,tokens_seen,wall_time [s]";
    for (const auto& m : experiments::metric_table()) {
        out << "," << m.series;
        if (*m.unit) out << " [" << m.unit << "]";
    }
    out << "\n";
    for (const auto& run : runs)
        for (const auto& leg : run.legs) {
            // Every update any of the leg's series or its clock has, in order.
            std::set<double> updates;
            for (const auto& m : experiments::metric_table())
                for (const auto& p : leg.series(m.metric)) updates.insert(p.update);
            for (double u : updates) {
                const auto tokens = value_at(leg.tokens_seen, u);
                const auto wall = value_at(leg.wall_time, u);
                if (x_range) {
                    const std::optional<double> x = x_axis == XAxis::Update ? std::optional<double>(u) : x_axis == XAxis::TokensSeen ? tokens : wall;
                    if (!x || *x < x_range->first || *x > x_range->second) continue;
                }
                out << experiments::csv_escape(run.run_id) << "," << experiments::csv_escape(leg.leg) << "," << u << ",";
                if (tokens) out << *tokens;
                out << ",";
                if (wall) out << *wall;
                for (const auto& m : experiments::metric_table()) {
                    out << ",";
                    if (auto v = value_at(leg.series(m.metric), u)) out << *v;
                }
                out << "\n";
            }
        }
    return out.str();
}

}  // namespace tandem::views
