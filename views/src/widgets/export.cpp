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

void export_figure_panels(const std::vector<PanelFigure>& panels, const FigureSize& size, FigureFormat format,
                          const std::filesystem::path& path, const QString& title) {
    if (!(size.width > 0 && size.height > 0)) throw Error("figure export " + path.string() + ": size must be positive");
    if (panels.empty()) throw Error("figure export " + path.string() + ": no panel chosen");
    if (size.font_pt < 1) throw Error("figure export " + path.string() + ": the font size must be at least 1 pt");
    const QSizeF page(size.width_inches() * kLayoutDpi, size.height_inches() * kLayoutDpi);
    QFont font = QApplication::font();
    if (!size.font_family.isEmpty()) font.setFamily(size.font_family);
    font.setPointSizeF(size.font_pt);
    const QFontMetricsF fm(font);
    const double line = fm.height();

    // Lines as heavy, relative to the text, as at 8 pt in print (a 14 pt slide gets 1.75x wider pens).
    const double pen_scale = std::max(1.0, size.font_pt / 8.0);
    std::vector<std::vector<Curve>> curves(panels.size());
    for (std::size_t i = 0; i < panels.size(); ++i) {
        curves[i] = panels[i].curves;
        for (auto& c : curves[i]) c.width *= pen_scale;
    }
    // The legend: every curve drawn once (by name, first occurrence), a stretch of its line then its
    // name, in as many columns as the page's width holds.
    std::vector<Curve> entries;
    for (std::size_t i = 0; i < panels.size(); ++i)
        for (const auto& c : curves[i]) {
            const auto& p = panels[i];
            if (!c.series || p.options.hidden.count(c.name)) continue;
            if (std::none_of(entries.begin(), entries.end(), [&](const Curve& e) { return e.name == c.name; })) entries.push_back(c);
        }
    const double sample_w = 2.4 * fm.averageCharWidth() * 2, gap = 0.8 * fm.averageCharWidth(), column_gap = 2 * fm.averageCharWidth();
    double widest = 0;
    for (const auto& e : entries) widest = std::max(widest, fm.horizontalAdvance(e.name));
    const double text_room = page.width() - sample_w - gap;
    const double entry_w = sample_w + gap + std::min(widest, text_room);
    const int columns = entries.empty() ? 0 : std::max(1, static_cast<int>((page.width() + column_gap) / (entry_w + column_gap)));
    const int legend_rows = entries.empty() ? 0 : static_cast<int>((entries.size() + columns - 1) / columns);
    const double row_h = 1.15 * line;
    const double legend_h = legend_rows == 0 ? 0 : legend_rows * row_h + 0.35 * line;

    // The panels share what is left; the bottom one also holds the x tick labels and title.
    const std::size_t n = panels.size();
    const double axis_h = 2.4 * line;
    const double band = (page.height() - legend_h - axis_h) / static_cast<double>(n);
    if (band < 3 * line) throw Error("figure export " + path.string() + ": the page is too short for " + std::to_string(n) + " panels at " +
                                     std::to_string(size.font_pt) + " pt");
    auto band_rect = [&](std::size_t i) {
        const double top = legend_h + band * static_cast<double>(i);
        return QRectF(0, top, page.width(), band + (i + 1 == n ? axis_h : 0));
    };
    // Room above and below each plot for the half of a y label that sticks out of it, and between
    // panels so the labels of neighbours never touch.
    const double above = 0.6 * line, below = 0.6 * line;

    // One x range for every panel (the view's zoom, else every curve's), so the ticks are one set.
    std::optional<std::pair<double, double>> shared_x;
    for (const auto& p : panels) {
        const auto r = p.options.x_range ? p.options.x_range : TrajectoryChart::full_x_range(p.curves);
        if (r) shared_x = shared_x ? std::make_pair(std::min(shared_x->first, r->first), std::max(shared_x->second, r->second)) : *r;
    }
    std::vector<std::unique_ptr<TrajectoryChart>> builders;
    std::vector<std::unique_ptr<QChartView>> views;
    auto options_of = [&](std::size_t i, double plot_h, double plot_w) {
        auto options = panels[i].options;
        options.x_range = shared_x;
        options.font_pt = size.font_pt;
        options.font_family = font.family();
        options.columns = static_cast<int>(std::ceil(page.width()));
        options.rows = static_cast<int>(plot_h);
        options.plot_width = plot_w;
        options.compact = true;
        options.legend = false;                      // the figure's own legend, above the panels
        options.x_title = options.x_labels = i + 1 == n;  // one shared x axis: labelled once, at the bottom
        return options;
    };
    for (std::size_t i = 0; i < n; ++i) {
        auto builder = std::make_unique<TrajectoryChart>();
        auto view = std::make_unique<QChartView>(builder->chart());  // owns the chart
        view->setAttribute(Qt::WA_DontShowOnScreen);
        view->setRenderHint(QPainter::Antialiasing);
        view->setFrameShape(QFrame::NoFrame);
        view->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        view->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        const QRectF r = band_rect(i);
        view->resize(r.size().toSize());
        builder->chart()->resize(r.size());
        builder->chart()->setBackgroundVisible(false);
        builder->update(curves[i], options_of(i, r.height() - above - below - (i + 1 == n ? axis_h : 0), page.width() * 0.8));
        view->show();
        builders.push_back(std::move(builder));
        views.push_back(std::move(view));
    }
    QApplication::processEvents();
    // One plot-area width for all: the widest y labels and title decide the left edge; on the right
    // half of the widest x label (centred on the last tick) stays on the page.
    double left = 0;
    for (const auto& b : builders) left = std::max(left, b->chart()->plotArea().left());
    double widest_x = 0;
    for (const auto& label : builders.back()->x_axis()->property("categoriesLabels").toStringList())
        widest_x = std::max(widest_x, fm.horizontalAdvance(label));
    const double right = page.width() - std::max(0.5 * widest_x + 0.3 * line, 0.4 * line);
    auto plot_of = [&](std::size_t i) {
        const QRectF r = band_rect(i);
        const double bottom = i + 1 == n ? builders[i]->chart()->plotArea().bottom() : r.height() - below;
        return QRectF(left + 0.25 * line, above, right - left - 0.25 * line, bottom - above);
    };
    // Twice: the ticks follow the final plot size, and the y labels they bring may widen the left edge.
    for (int pass = 0; pass < 2; ++pass) {
        for (std::size_t i = 0; i < n; ++i) {
            const QRectF plot = plot_of(i);
            builders[i]->update(curves[i], options_of(i, plot.height(), plot.width()));
        }
        QApplication::processEvents();
        double needed = left;
        for (std::size_t i = 0; i < n; ++i) {
            // The natural left edge Qt wants for these labels, measured before fixing the plot area.
            const auto* axis = builders[i]->y_axis();
            double label_w = 0;
            for (const auto& label : axis->property("categoriesLabels").toStringList()) label_w = std::max(label_w, fm.horizontalAdvance(label));
            needed = std::max(needed, label_w + 2.0 * line);
        }
        left = needed;
        for (std::size_t i = 0; i < n; ++i) builders[i]->chart()->setPlotArea(plot_of(i));
        QApplication::processEvents();
    }

    // The legend as a scene of its own, drawn like the panels (same fonts, same scaling).
    QGraphicsScene legend_scene(QRectF(0, 0, page.width(), std::max(legend_h, 1.0)));
    QRectF legend_box;
    if (legend_rows > 0) {
        const double used_w = columns * entry_w + (columns - 1) * column_gap;
        const double x0 = std::max(0.0, (page.width() - std::min(used_w, page.width())) / 2);
        for (std::size_t k = 0; k < entries.size(); ++k) {
            const auto row = static_cast<double>(k / static_cast<std::size_t>(columns));
            const auto col = static_cast<double>(k % static_cast<std::size_t>(columns));
            const double x = x0 + col * (entry_w + column_gap), y = 0.2 * line + row * row_h;
            const Curve& c = entries[k];
            if (c.markers) {
                const double r = 0.3 * line;
                const QPointF m(x + sample_w / 2, y + row_h / 2);
                auto* t = legend_scene.addPolygon(QPolygonF{{m.x(), m.y() - r}, {m.x() + r, m.y() + 0.8 * r}, {m.x() - r, m.y() + 0.8 * r}},
                                                  Qt::NoPen, c.color);
                t->setZValue(1);
            } else {
                legend_scene.addLine(QLineF(x, y + row_h / 2, x + sample_w, y + row_h / 2), curve_pen(c));
            }
            auto* text = legend_scene.addSimpleText(fm.elidedText(c.name, Qt::ElideRight, text_room), font);
            text->setPos(x + sample_w + gap, y + (row_h - line) / 2);
            legend_box |= QRectF(x, y, entry_w, row_h);
        }
    }

    // Every scene onto one painter: the legend band, then panel i in its band.
    auto paint = [&](QPainter& painter, const QRectF& target) {
        const double sx = target.width() / page.width(), sy = target.height() / page.height();
        auto to_target = [&](const QRectF& r) { return QRectF(target.left() + r.left() * sx, target.top() + r.top() * sy, r.width() * sx, r.height() * sy); };
        if (legend_rows > 0) legend_scene.render(&painter, to_target(QRectF(0, 0, page.width(), legend_h)), QRectF(0, 0, page.width(), legend_h));
        for (std::size_t i = 0; i < n; ++i) {
            const QRectF r = band_rect(i);
            views[i]->scene()->render(&painter, to_target(r), QRectF(QPointF(0, 0), r.size()));
        }
    };

    write_painted_figure(paint, size, format, path, title);

    // What was laid out, in millimetres.
    const double mm = 25.4 / kLayoutDpi;
    g_last_layout = {};
    g_last_layout.page_width_mm = size.width_inches() * 25.4;
    g_last_layout.page_height_mm = size.height_inches() * 25.4;
    for (std::size_t i = 0; i < n; ++i) {
        const QRectF p = builders[i]->chart()->plotArea().translated(0, band_rect(i).top());
        g_last_layout.plot_areas.push_back(QRectF(p.left() * mm, p.top() * mm, p.width() * mm, p.height() * mm));
    }
    if (!legend_box.isEmpty()) g_last_layout.legend = QRectF(legend_box.left() * mm, legend_box.top() * mm, legend_box.width() * mm, legend_box.height() * mm);
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
