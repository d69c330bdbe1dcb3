#pragma once
// The runs browser's item model (Qt Core only, no widgets): a tree of the catalogued runs, each run
// with its legs under it, and the member runs of a seed envelope folded under one envelope row.
// A run row shows the runner's verdict (its word, green when it passes, red when it does not) and
// chosen settings of its experiment as columns (lr, rank, alpha, seed, max_updates, base by
// default); a leg row its device, progress, final loss, throughput and peak memory. Sorting and
// filtering go through a QSortFilterProxyModel on top (RunsFilterProxy), which keeps a run's legs
// with it.
#include "tandem/compare/run_overview.h"
#include "tandem/views/run_snapshot.h"

#include <QAbstractItemModel>
#include <QSortFilterProxyModel>

#include <vector>

namespace tandem::views {

class RunsModel : public QAbstractItemModel {
    Q_OBJECT
public:
    // Fixed columns; column ColumnCount + i is setting_columns()[i].
    // (The settings columns are shown after Experiment: verdict, what was run, how it went.)
    enum Column { Run, Verdict, Experiment, Status, Progress, FinalLoss, TokensPerSecond, PeakMemory, Device, Implementation, Started,
                  Tags, Note, Faults, Path, ColumnCount };
    // Extra roles: the sort key (numbers sort as numbers, missing values last), the run's files and
    // what a row is.
    enum Role { SortRole = Qt::UserRole + 1, RunPathRole, RunIdRole, RunFileRole, KindRole };
    enum Kind { EnvelopeRow, RunRow, LegRow };

    explicit RunsModel(QObject* parent = nullptr);

    // Replaces every row (a fresh catalog read: one CatalogLegRow per leg, as load_catalog_rows gives).
    void set_rows(std::vector<CatalogLegRow> rows);
    const std::vector<CatalogLegRow>& rows() const { return rows_; }
    // Removes the run and its legs (after the catalog deleted it).
    void remove_run(const std::string& run_id);
    // The settings shown as columns after the fixed ones.
    void set_setting_columns(std::vector<experiments::SettingColumn> columns);
    const std::vector<experiments::SettingColumn>& setting_columns() const { return settings_; }
    // Every setting whose value differs between the catalogued runs (what the column menu offers).
    std::vector<std::string> differing_settings() const;
    // The run's row (invalid when absent).
    QModelIndex run_index(const std::string& run_id, int column = Run) const;
    int run_count() const;  // runs, envelope members included
    int leg_count() const { return static_cast<int>(rows_.size()); }

    // Tags (comma-separated) and Note are editable on run and leg rows: an edit is announced, the
    // catalog is written by the browser, and the run's rows are updated.
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    void set_annotation(const std::string& run_id, const std::vector<std::string>& tags, const std::string& note);

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

Q_SIGNALS:
    void annotation_edited(const QString& run_id, const QStringList& tags, const QString& note);

private:
    struct Node {
        Kind kind = RunRow;
        int parent = -1;         // node index, -1 at the top
        int row = 0;             // row under the parent
        std::size_t first = 0;   // rows_ index: the leg (leg row) or the run's first leg row (run row)
        std::vector<int> children;
        std::string envelope;    // envelope rows: the folder
    };
    void build();
    const Node* node(const QModelIndex& index) const;
    QVariant run_data(const Node& n, int column, int role) const;
    QVariant leg_data(const CatalogLegRow& r, int column, int role) const;
    QVariant envelope_data(const Node& n, int column, int role) const;

    std::vector<CatalogLegRow> rows_;
    std::vector<Node> nodes_;
    std::vector<int> top_;
    std::vector<experiments::SettingColumn> settings_;
};

// Filter: a case-insensitive text that must occur in the run, verdict, experiment, leg, status,
// device, tags, note, faults or a setting column; a run whose leg matches is kept with that leg, a
// matching run keeps every leg. Sorting by RunsModel::SortRole, within each level.
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
