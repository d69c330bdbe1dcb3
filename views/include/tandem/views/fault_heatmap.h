#pragma once
// The fault matrix of a `tandem faults` run as a heatmap (docs/faults.md): one row per injected fault,
// one column per level (L1, L2, L3, L4, gate); a cell holds the first update at which the level caught
// the fault, darker = earlier, blank = not caught; a red frame marks a level docs/faults.md expects
// that did not fire. Drawn from experiments' FaultMatrix (run.h5 /faults) — the views compute nothing.
#include "tandem/spec/fault_matrix.h"
#include "tandem/views/export.h"

#include <QWidget>

#include <filesystem>
#include <optional>

namespace tandem::views {

// The matrix of a run file, or nullopt when it is not a faults run. Throws tandem::Error for a file
// that cannot be read.
std::optional<experiments::FaultMatrix> load_fault_matrix(const std::filesystem::path& run_file);

// Draws the heatmap into `page` (a device rectangle) as if it were `logical` 96-dpi pixels large,
// with text at `font_pt` points.
void paint_fault_heatmap(QPainter& painter, const QRectF& page, const QSizeF& logical, const experiments::FaultMatrix& m,
                         int font_pt);

// PNG, SVG or PDF through the figure writer every export uses (write_painted_figure).
void export_fault_heatmap(const experiments::FaultMatrix& m, const FigureSize& size, FigureFormat format,
                          const std::filesystem::path& path);

// The workbench's Faults page: the heatmap of the open run, or a line saying the run has none.
class FaultHeatmapView : public QWidget {
    Q_OBJECT
public:
    explicit FaultHeatmapView(QWidget* parent = nullptr);
    void set_matrix(std::optional<experiments::FaultMatrix> m, const QString& note = {});
    const std::optional<experiments::FaultMatrix>& matrix() const { return matrix_; }
    QString note() const { return note_; }

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    std::optional<experiments::FaultMatrix> matrix_;
    QString note_;
};

}  // namespace tandem::views
