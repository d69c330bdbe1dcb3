#pragma once
// A table exactly as experiments/ formatted it for `tandem report` (header + rows of cells), and the
// item model the Tables view shows it with. The views never recompute a cell.
#include "tandem/compare/report.h"

#include <QAbstractTableModel>
#include <QString>
#include <QStringList>

#include <string>
#include <vector>

namespace tandem::views {

// experiments' report table (id, title, columns, rows, notes): the Tables page shows these as-is.
using StringTable = tandem::experiments::Table;

class StringTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    explicit StringTableModel(QObject* parent = nullptr);
    void set_table(StringTable table);
    const StringTable& table() const { return table_; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    StringTable table_;
};

}  // namespace tandem::views
