#pragma once
// The divergence page's data (docs/observables.md): one update's localisation as a
// layer x op grid — rows (pass, layer) in chain order, columns the ops in chain order, each cell the
// largest ratio (difference / bound) over the update's micro-batches, as experiments/ localise()
// computed it; the localised point (the first over its bound) is marked. Draws, computes nothing.
#include "tandem/compare/judge/localise.h"
#include "tandem/compare/observables.h"
#include "tandem/views/run_snapshot.h"

#include <QAbstractTableModel>
#include <QColor>
#include <QString>

#include <filesystem>
#include <optional>
#include <vector>

namespace tandem::views {

// Role of a cell's ratio (double; invalid where the op has no point in that row).
inline constexpr int kRatioRole = Qt::UserRole + 1;
// Role: true for the cell holding the localised point.
inline constexpr int kLocalisedRole = Qt::UserRole + 2;

// The colour of a ratio: white (far below the bound) to yellow (at it) on a log scale, then orange
// to red above it (1 to 10^4 and beyond).
QColor ratio_colour(double ratio);

class DivergenceModel : public QAbstractTableModel {
    Q_OBJECT
public:
    explicit DivergenceModel(QObject* parent = nullptr);
    // The localisation (all its updates) and the update to show (the localised point's update when
    // unset or not recorded, else the first).
    void set_localisation(experiments::Localisation l, std::optional<std::int64_t> update = {});
    void set_update(std::int64_t update);
    std::int64_t update() const { return update_; }
    const experiments::Localisation& localisation() const { return loc_; }
    QString summary() const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    struct Cell {
        double ratio = -1;  // < 0: no point
        bool localised = false;
        QString tip;
    };
    void rebuild();
    experiments::Localisation loc_;
    std::int64_t update_ = 0;
    std::vector<QString> rows_, cols_;
    std::vector<std::vector<Cell>> cells_;
};

// Reads a run's fingerprints and localises its pair (experiments::localise_run, not stored: the
// workbench only reads). Throws tandem::Error when the run holds none.
experiments::Localisation load_divergence(const std::filesystem::path& run_file);

// The divergence page's per-layer LoRA update-norm curves (docs/observables.md): one curve per (leg,
// layer), the values experiments::layer_update_norms computed from /legs/<leg>/adapter_norms, as
// recorded (no smoothing, nothing dropped). Named "<leg> · layer <l>".
struct UpdateNormCurve {
    QString name;
    std::string leg;
    std::int64_t layer = 0;
    Series series;  // x: update, y: |Delta W_layer|
};
std::vector<UpdateNormCurve> update_norm_curves(const std::vector<experiments::LayerUpdateNorms>& norms);
// Reads the run file (empty when no leg recorded adapter norms).
std::vector<UpdateNormCurve> load_update_norm_curves(const std::filesystem::path& run_file);

}  // namespace tandem::views
