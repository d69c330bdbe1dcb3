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

// The file name an export offers: "<run id>-<what>.<suffix>" with anything but [A-Za-z0-9_.+-] as
// '-' ("figure-…" without a run), so the name says which run and chart or table it holds.
QString export_file_name(const QString& run_id, const QString& what, const QString& suffix);

// PNG/SVG/PDF from the file suffix (case-insensitive); nullopt for anything else.
std::optional<FigureFormat> figure_format_for(const QString& path);

// Journal widths (the dialog's presets): one column and two columns of a typical two-column journal.
inline constexpr double kJournalColumnCm = 8.5;
inline constexpr double kJournalTwoColumnsCm = 17.8;

// Figure presets: a journal's single column (8.5 cm) and double column (17.8 cm) at a height that
// grows with the number of panels, and a 16:9 slide (33.87 × 19.05 cm, PowerPoint's widescreen page)
// whose panels share its height. Fonts: 8 pt in print (LaTeX's \footnotesize of a 10 pt article, the
// tables' size), 14 pt on a slide — never under 6 pt.
enum class FigurePreset { SingleColumn, DoubleColumn, Slide };
struct FigurePresetInfo {
    FigurePreset preset;
    const char* name;        // "single column (8.5 cm)"
    const char* key;         // "single-column" (settings, command line)
};
const std::vector<FigurePresetInfo>& figure_presets();
FigureSize preset_size(FigurePreset preset, int panels);

// Builds the chart afresh at `size` and writes it to `path`. Throws tandem::Error naming the file.
void export_figure(const RunSnapshot& snapshot, ChartOptions options, const FigureSize& size,
                   FigureFormat format, const std::filesystem::path& path);

// One panel of a multi-panel figure: its curves (pointing into data that outlives the call) and options.
struct PanelFigure {
    std::vector<Curve> curves;
    ChartOptions options;
};
// Several panels stacked in one figure of exactly `size`, in one file: PDF (fonts embedded, curves as
// paths), SVG or PNG. The panels share one x axis: their plot areas have the same left and right
// edges, one set of ticks, the tick labels and title under the bottom panel only. One legend above
// the panels (outside the data) names every curve once with a stretch of its line. Titles are the
// metric table's names with units in brackets, shortened by its short names where the long ones do
// not fit; no text leaves the page or overlaps another.
void export_figure_panels(const std::vector<PanelFigure>& panels, const FigureSize& size, FigureFormat format,
                          const std::filesystem::path& path, const QString& title = {});

// Where the last figure put things, in millimetres from the page's top-left corner (tests, docs).
struct FigureLayout {
    double page_width_mm = 0, page_height_mm = 0;
    std::vector<QRectF> plot_areas;  // one per panel
    QRectF legend;                   // empty without a legend
};
const FigureLayout& last_figure_layout();

// Writes what `paint` draws (onto a page rectangle in the device's units) as PNG, SVG or PDF at
// `size`: the one writer every figure export goes through (atomic; throws tandem::Error naming the file).
void write_painted_figure(const std::function<void(QPainter&, const QRectF&)>& paint, const FigureSize& size,
                          FigureFormat format, const std::filesystem::path& path, const QString& title);

enum class TableFormat { Latex, Csv, Markdown };
std::optional<TableFormat> table_format_for(const QString& path);  // .tex, .csv, .md
std::string format_table(const StringTable& table, TableFormat format);
void export_table(const StringTable& table, TableFormat format, const std::filesystem::path& path);

// One line per (run, leg, update): run,leg,update,tokens_seen,wall_time [s], then every metric of the
// metric table under its run.h5 name with its unit in brackets ("heldout_ce [nats]"), plain numbers
// at full precision, empty where the leg has no value at that update. With `x_range`, only the
// updates whose x (on `x_axis`) lies inside it (the visible range).
std::string curves_csv(const std::vector<RunSnapshot>& runs, const std::optional<std::pair<double, double>>& x_range,
                       XAxis x_axis = XAxis::Update);
inline std::string curves_csv(const RunSnapshot& run, const std::optional<std::pair<double, double>>& x_range,
                              XAxis x_axis = XAxis::Update) {
    return curves_csv(std::vector<RunSnapshot>{run}, x_range, x_axis);
}

}  // namespace tandem::views
