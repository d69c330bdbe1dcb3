#pragma once
// The divergence page (docs/observables.md): the layer x op heat map of one update's localisation (ratio =
// difference / bound per point, docs/observables.md), the localised point marked, an update chooser
// and the localisation's one-line summary; below it the per-layer LoRA update-norm curves of every leg
// overlaid (colour per layer, line style per leg), as experiments/ computed them.
#include "tandem/views/divergence_model.h"

#include <QWidget>

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

QT_BEGIN_NAMESPACE
class QComboBox;
class QLabel;
class QTableView;
class QChartView;
QT_END_NAMESPACE

namespace tandem::views {

class TrajectoryChart;

class DivergenceView : public QWidget {
    Q_OBJECT
public:
    explicit DivergenceView(QWidget* parent = nullptr);
    ~DivergenceView() override;
    // Loads the run's fingerprints; without any, says so (and how to record them).
    void load(const std::filesystem::path& run_file);
    DivergenceModel* model() const { return model_; }
    QString summary_text() const;
    // The update-norm curves on the page (what the chart draws) and the chart itself.
    const std::vector<UpdateNormCurve>& update_norm_curves() const { return norm_curves_; }
    const TrajectoryChart& norm_chart() const { return *norm_chart_; }
    QString norm_note_text() const;
    // Draws one layer's curves only (nullopt: every layer), as the page's layer chooser does.
    void show_norm_layer(std::optional<std::int64_t> layer);

private:
    DivergenceModel* model_ = nullptr;
    QComboBox* updates_ = nullptr;
    QLabel* summary_ = nullptr;
    QTableView* view_ = nullptr;
    std::vector<UpdateNormCurve> norm_curves_;
    std::unique_ptr<TrajectoryChart> norm_chart_;
    QChartView* norm_view_ = nullptr;
    QLabel* norm_note_ = nullptr;
    QComboBox* norm_layers_ = nullptr;
    void draw_norms();
};

}  // namespace tandem::views
