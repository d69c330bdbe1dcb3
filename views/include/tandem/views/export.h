#pragma once
// Exports of what the workbench shows: a trajectory chart as PNG, SVG or PDF at a physical size
// (vector for SVG and PDF) with a legend; a table as LaTeX (booktabs), CSV or Markdown; the legs'
// curves as CSV (all of them, or the visible range only). Every file is written atomically.
#include "tandem/views/run_snapshot.h"
#include "tandem/views/string_table.h"
#include "tandem/views/trajectory_chart.h"

#include <QRectF>
#include <QString>

#include <filesystem>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

QT_BEGIN_NAMESPACE
class QPainter;
QT_END_NAMESPACE

namespace tandem::views {

enum class FigureFormat { Png, Svg, Pdf };
enum class LengthUnit { Centimetres, Inches };

struct FigureSize {
    double width = 16;
    double height = 10;
    LengthUnit unit = LengthUnit::Centimetres;
    int font_pt = 8;            // 8 pt: LaTeX's \footnotesize in a 10 pt article, what the tables use
    QString font_family;        // empty: the application font; the paper's family to match its text
    int png_dpi = 300;  // PNG only: pixels = inches * dpi
    double width_inches() const { return unit == LengthUnit::Inches ? width : width / 2.54; }
    double height_inches() const { return unit == LengthUnit::Inches ? height : height / 2.54; }
};

// PNG/SVG/PDF from the file suffix (case-insensitive); nullopt for anything else.
std::optional<FigureFormat> figure_format_for(const QString& path);

// Journal widths (the dialog's presets): one column and two columns of a typical two-column journal.
inline constexpr double kJournalColumnCm = 8.5;
inline constexpr double kJournalTwoColumnsCm = 17.8;

// Builds the chart afresh at `size` and writes it to `path`. Throws tandem::Error naming the file.
void export_figure(const RunSnapshot& snapshot, ChartOptions options, const FigureSize& size,
                   FigureFormat format, const std::filesystem::path& path);

// One panel of a multi-panel figure: its curves (pointing into data that outlives the call) and options.
struct PanelFigure {
    std::vector<Curve> curves;
    ChartOptions options;
};
// Several panels stacked in one figure of `size` (each panel size.height / n high), sharing the
// update axis, in one file: PDF (fonts embedded, curves as paths), SVG or PNG. Panel i after the
// first shows its legend only when its curves differ from the panel above (the residual panel).
void export_figure_panels(const std::vector<PanelFigure>& panels, const FigureSize& size, FigureFormat format,
                          const std::filesystem::path& path, const QString& title = {});

// Writes what `paint` draws (onto a page rectangle in the device's units) as PNG, SVG or PDF at
// `size`: the one writer every figure export goes through (atomic; throws tandem::Error naming the file).
void write_painted_figure(const std::function<void(QPainter&, const QRectF&)>& paint, const FigureSize& size,
                          FigureFormat format, const std::filesystem::path& path, const QString& title);

enum class TableFormat { Latex, Csv, Markdown };
std::optional<TableFormat> table_format_for(const QString& path);  // .tex, .csv, .md
std::string format_table(const StringTable& table, TableFormat format);
void export_table(const StringTable& table, TableFormat format, const std::filesystem::path& path);

// Long format, one line per point: leg,metric,update,value. With `x_range`, only the points whose
// update lies inside it (the visible range).
std::string curves_csv(const RunSnapshot& snapshot, const std::optional<std::pair<double, double>>& x_range);

}  // namespace tandem::views
