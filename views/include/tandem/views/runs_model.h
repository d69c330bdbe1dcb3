#pragma once
// The runs browser's item model: one row per leg of every catalogued run (Qt Core only, no
// widgets). Sorting and filtering go through a QSortFilterProxyModel on top (RunsFilterProxy).
#include "tandem/views/run_snapshot.h"

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>

#include <vector>

namespace tandem::views {

class RunsModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Run, Experiment, Leg, Status, Device, Progress, FinalLoss, TokensPerSecond, PeakMemory, Started, Tags, Note, Faults, Path, ColumnCount };
    // Extra roles: the sort key (numbers sort as numbers, missing values last) and the run path.
    enum Role { SortRole = Qt::UserRole + 1, RunPathRole, RunIdRole, RunFileRole };

    explicit RunsModel(QObject* parent = nullptr);

    // Replaces every row (a fresh catalog read). Keeps the model valid for attached views.
    void set_rows(std::vector<CatalogLegRow> rows);
    const std::vector<CatalogLegRow>& rows() const { return rows_; }
    // Removes every row of the run (after the catalog deleted it).
    void remove_run(const std::string& run_id);

    // Tags (comma-separated) and Note are editable: an edit is announced, the catalog is written by
    // the browser, and the rows of that run are updated.
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    void set_annotation(const std::string& run_id, const std::vector<std::string>& tags, const std::string& note);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

Q_SIGNALS:
    void annotation_edited(const QString& run_id, const QStringList& tags, const QString& note);

private:
    std::vector<CatalogLegRow> rows_;
};

// Filter: a case-insensitive text that must occur in the run, experiment, leg, status, device,
// tags or note column; sorting by RunsModel::SortRole.
class RunsFilterProxy : public QSortFilterProxyModel {
    Q_OBJECT
public:
    explicit RunsFilterProxy(QObject* parent = nullptr);
    void set_filter_text(const QString& text);

protected:
    bool filterAcceptsRow(int source_row, const QModelIndex& source_parent) const override;
    bool lessThan(const QModelIndex& left, const QModelIndex& right) const override;

private:
    QString text_;
};

}  // namespace tandem::views
