#include "tandem/views/string_table.h"

namespace tandem::views {

StringTableModel::StringTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void StringTableModel::set_table(StringTable table) {
    beginResetModel();
    table_ = std::move(table);
    endResetModel();
}

int StringTableModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(table_.rows.size());
}

int StringTableModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(table_.columns.size());
}

QVariant StringTableModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const auto& row = table_.rows[static_cast<std::size_t>(index.row())];
    const auto column = static_cast<std::size_t>(index.column());
    if (role == Qt::TextAlignmentRole) {
        // Numbers right-aligned, text (legs, series, status) left-aligned.
        const QString cell = column < row.size() ? QString::fromStdString(row[column]) : QString();
        bool number = false;
        cell.section(QLatin1Char(' '), 0, 0).remove(QLatin1Char('%')).toDouble(&number);
        return QVariant::fromValue((number ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignVCenter);
    }
    if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
    return column < row.size() ? QString::fromStdString(row[column]) : QString();
}

QVariant StringTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (role != Qt::DisplayRole) return {};
    if (orientation == Qt::Vertical) return section + 1;
    if (section < 0 || section >= static_cast<int>(table_.columns.size())) return {};
    return QString::fromStdString(table_.columns[static_cast<std::size_t>(section)]);
}

}  // namespace tandem::views
