#pragma once
// Exports of what the workbench shows: a trajectory chart as PNG, SVG or PDF at a physical size
// (vector for SVG and PDF) with a legend; a table as LaTeX (booktabs), CSV or Markdown; the legs'
// curves as CSV (all of them, or the visible range only). Every file is written atomically.
#include "tandem/views/run_snapshot.h"
#include "tandem/views/string_table.h"
#include "tandem/views/trajectory_chart.h"

#include <QString>

#include <filesystem>
#include <optional>
#include <utility>

namespace tandem::views {

enum class FigureFormat { Png, Svg, Pdf };
enum class LengthUnit { Centimetres, Inches };

struct FigureSize {
    double width = 16;
    double height = 10;
    LengthUnit unit = LengthUnit::Centimetres;
    int font_pt = 9;
    int png_dpi = 300;  // PNG only: pixels = inches * dpi
    double width_inches() const { return unit == LengthUnit::Inches ? width : width / 2.54; }
    double height_inches() const { return unit == LengthUnit::Inches ? height : height / 2.54; }
};

// PNG/SVG/PDF from the file suffix (case-insensitive); nullopt for anything else.
std::optional<FigureFormat> figure_format_for(const QString& path);

// Builds the chart afresh at `size` and writes it to `path`. Throws tandem::Error naming the file.
void export_figure(const RunSnapshot& snapshot, ChartOptions options, const FigureSize& size,
                   FigureFormat format, const std::filesystem::path& path);

enum class TableFormat { Latex, Csv, Markdown };
std::optional<TableFormat> table_format_for(const QString& path);  // .tex, .csv, .md
std::string format_table(const StringTable& table, TableFormat format);
void export_table(const StringTable& table, TableFormat format, const std::filesystem::path& path);

// Long format, one line per point: leg,metric,update,value. With `x_range`, only the points whose
// update lies inside it (the visible range).
std::string curves_csv(const RunSnapshot& snapshot, const std::optional<std::pair<double, double>>& x_range);

}  // namespace tandem::views
