// The divergence page's grid (tandem/views/divergence_model.h).
#include "tandem/views/divergence_model.h"

#include "tandem/studies/localise_run.h"

#include <QFont>

#include <algorithm>
#include <cmath>
#include <map>

namespace tandem::views {

QColor ratio_colour(double ratio) {
    if (!(ratio >= 0)) return QColor(200, 0, 0);  // NaN: not finite, as the localisation counts it
    if (ratio <= 1) {
        // 1e-6 .. 1: white -> yellow
        const double t = std::clamp((std::log10(std::max(ratio, 1e-12)) + 6.0) / 6.0, 0.0, 1.0);
        return QColor(255, 255, int(std::lround(255 - t * 200)));
    }
    // 1 .. 1e4: orange -> red
    const double t = std::clamp(std::log10(ratio) / 4.0, 0.0, 1.0);
    return QColor(255, int(std::lround(160 - t * 160)), 0);
}

DivergenceModel::DivergenceModel(QObject* parent) : QAbstractTableModel(parent) {}

void DivergenceModel::set_localisation(experiments::Localisation l, std::optional<std::int64_t> update) {
    loc_ = std::move(l);
    std::int64_t u = loc_.updates.empty() ? 0 : loc_.updates.front();
    if (loc_.first) u = loc_.points[*loc_.first].update;
    if (update && std::find(loc_.updates.begin(), loc_.updates.end(), *update) != loc_.updates.end()) u = *update;
    update_ = u;
    rebuild();
}

void DivergenceModel::set_update(std::int64_t update) {
    update_ = update;
    rebuild();
}

QString DivergenceModel::summary() const { return QString::fromStdString(loc_.summary()); }

void DivergenceModel::rebuild() {
    beginResetModel();
    rows_.clear();
    cols_.clear();
    cells_.clear();
    std::map<std::pair<std::string, std::int64_t>, size_t> row_of;
    std::map<std::string, size_t> col_of;
    for (size_t i = 0; i < loc_.points.size(); ++i) {
        const auto& p = loc_.points[i];
        if (p.update != update_) continue;
        auto [r, new_row] = row_of.try_emplace({p.pass, p.layer}, rows_.size());
        if (new_row) {
            rows_.push_back(QString::fromStdString(p.pass) + QStringLiteral(" · ") +
                            (p.layer < 0 ? QStringLiteral("outside layers") : QStringLiteral("layer %1").arg(p.layer)));
            cells_.emplace_back();
        }
        auto [c, new_col] = col_of.try_emplace(p.op, cols_.size());
        if (new_col) cols_.push_back(QString::fromStdString(p.op));
        auto& row = cells_[r->second];
        if (row.size() < cols_.size()) row.resize(cols_.size());
        Cell& cell = row[c->second];
        const bool first = loc_.first && *loc_.first == i;
        if (cell.ratio < 0 || !(p.ratio <= cell.ratio) || first) {
            cell.ratio = std::isnan(p.ratio) ? NAN : std::max(cell.ratio, p.ratio);
            cell.tip = QStringLiteral("%1 %2, layer %3, micro-batch %4\nrel diff %5, norm rel diff %6\nbound %7, ratio %8")
                           .arg(QString::fromStdString(p.op), QString::fromStdString(p.pass))
                           .arg(p.layer)
                           .arg(p.micro_batch)
                           .arg(p.rel_diff, 0, 'e', 3)
                           .arg(p.norm_rel_diff, 0, 'e', 3)
                           .arg(p.bound, 0, 'e', 3)
                           .arg(p.ratio, 0, 'g', 3);
        }
        cell.localised = cell.localised || first;
    }
    for (auto& row : cells_) row.resize(cols_.size());
    endResetModel();
}

int DivergenceModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(rows_.size()); }
int DivergenceModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(cols_.size()); }

QVariant DivergenceModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= int(rows_.size()) || index.column() >= int(cols_.size())) return {};
    const Cell& c = cells_[size_t(index.row())][size_t(index.column())];
    const bool has = !(c.ratio < 0);
    switch (role) {
        case Qt::DisplayRole:
            if (!has) return {};
            return (c.localised ? QStringLiteral("◆ ") : QString()) + QString::number(c.ratio, 'g', 2);
        case Qt::BackgroundRole:
            return has ? QVariant(ratio_colour(c.ratio)) : QVariant();
        case Qt::ToolTipRole:
            return has ? QVariant(c.tip) : QVariant();
        case Qt::FontRole:
            if (c.localised) {
                QFont f;
                f.setBold(true);
                return f;
            }
            return {};
        case kRatioRole:
            return has ? QVariant(c.ratio) : QVariant();
        case kLocalisedRole:
            return c.localised;
        default:
            return {};
    }
}

QVariant DivergenceModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (role != Qt::DisplayRole) return {};
    if (orientation == Qt::Horizontal) return section < int(cols_.size()) ? QVariant(cols_[size_t(section)]) : QVariant();
    return section < int(rows_.size()) ? QVariant(rows_[size_t(section)]) : QVariant();
}

std::vector<UpdateNormCurve> update_norm_curves(const std::vector<experiments::LayerUpdateNorms>& norms) {
    std::vector<UpdateNormCurve> out;
    for (const auto& n : norms) {
        UpdateNormCurve c;
        c.name = QString::fromStdString(n.leg) + QStringLiteral(" · layer %1").arg(n.layer);
        c.leg = n.leg;
        c.layer = n.layer;
        for (size_t i = 0; i < n.updates.size() && i < n.norms.size(); ++i) c.series.push_back({double(n.updates[i]), n.norms[i]});
        out.push_back(std::move(c));
    }
    return out;
}

std::vector<UpdateNormCurve> load_update_norm_curves(const std::filesystem::path& run_file) {
    return update_norm_curves(experiments::layer_update_norms(experiments::RunFileReader(run_file)));
}

experiments::Localisation load_divergence(const std::filesystem::path& run_file) {
    return experiments::localise_run(run_file, std::nullopt, std::nullopt, false);
}

}  // namespace tandem::views
