#include "tandem/views/runs_model.h"

#include <algorithm>
#include <cmath>

namespace tandem::views {

namespace {

QString number_text(const std::optional<double>& v, int decimals) {
    if (!v || !std::isfinite(*v)) return QStringLiteral("—");
    return QString::number(*v, 'f', decimals);
}

QString memory_text(const std::optional<double>& bytes) {
    if (!bytes) return QStringLiteral("—");
    return QString::number(*bytes / (1024.0 * 1024.0), 'f', 1) + QStringLiteral(" MiB");
}

QVariant sort_key(const std::optional<double>& v) {
    return v ? QVariant(*v) : QVariant();
}

}  // namespace

RunsModel::RunsModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunsModel::set_rows(std::vector<CatalogLegRow> rows) {
    beginResetModel();
    rows_ = std::move(rows);
    endResetModel();
}

void RunsModel::remove_run(const std::string& run_id) {
    // Remove contiguous blocks from the back so earlier indices stay valid.
    for (int row = static_cast<int>(rows_.size()) - 1; row >= 0;) {
        if (rows_[static_cast<std::size_t>(row)].run_id != run_id) { --row; continue; }
        int first = row;
        while (first > 0 && rows_[static_cast<std::size_t>(first - 1)].run_id == run_id) --first;
        beginRemoveRows({}, first, row);
        rows_.erase(rows_.begin() + first, rows_.begin() + row + 1);
        endRemoveRows();
        row = first - 1;
    }
}

Qt::ItemFlags RunsModel::flags(const QModelIndex& index) const {
    auto f = QAbstractTableModel::flags(index);
    if (index.isValid() && (index.column() == Tags || index.column() == Note)) f |= Qt::ItemIsEditable;
    return f;
}

bool RunsModel::setData(const QModelIndex& index, const QVariant& value, int role) {
    if (role != Qt::EditRole || !index.isValid() || (index.column() != Tags && index.column() != Note)) return false;
    const auto& r = rows_[static_cast<std::size_t>(index.row())];
    QStringList tags;
    for (const auto& t : r.tags) tags << QString::fromStdString(t);
    QString note = QString::fromStdString(r.note);
    if (index.column() == Tags) {
        tags.clear();
        for (const auto& t : value.toString().split(QLatin1Char(','), Qt::SkipEmptyParts))
            if (!t.trimmed().isEmpty()) tags << t.trimmed();
    } else {
        note = value.toString();
    }
    Q_EMIT annotation_edited(QString::fromStdString(r.run_id), tags, note);
    return true;
}

void RunsModel::set_annotation(const std::string& run_id, const std::vector<std::string>& tags, const std::string& note) {
    for (std::size_t i = 0; i < rows_.size(); ++i) {
        if (rows_[i].run_id != run_id) continue;
        rows_[i].tags = tags;
        rows_[i].note = note;
        Q_EMIT dataChanged(index(static_cast<int>(i), Tags), index(static_cast<int>(i), Note));
    }
}

int RunsModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int RunsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RunsModel::data(const QModelIndex& index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const auto& r = rows_[static_cast<std::size_t>(index.row())];
    if (role == RunPathRole) return QString::fromStdString(r.run_path);
    if (role == RunIdRole) return QString::fromStdString(r.run_id);
    if (role == RunFileRole) return QString::fromStdString(r.run_file);
    if (role == Qt::TextAlignmentRole) {
        const bool numeric = index.column() == Progress || index.column() == FinalLoss || index.column() == TokensPerSecond || index.column() == PeakMemory;
        return QVariant::fromValue(numeric ? (Qt::AlignRight | Qt::AlignVCenter) : (Qt::AlignLeft | Qt::AlignVCenter));
    }
    if (role != Qt::DisplayRole && role != SortRole && role != Qt::ToolTipRole && role != Qt::EditRole) return {};
    const bool sort = role == SortRole;
    switch (static_cast<Column>(index.column())) {
    case Run: return QString::fromStdString(r.run_id);
    case Experiment: return QString::fromStdString(r.experiment);
    case Leg: return QString::fromStdString(r.leg);
    case Status: return QString::fromStdString(r.leg.empty() ? r.run_status : r.status);
    case Progress: {
        if (!r.updates_done) return sort ? QVariant() : QVariant(QStringLiteral("—"));
        if (sort) return QVariant(static_cast<double>(*r.updates_done));
        return r.updates_total ? QStringLiteral("%1 / %2").arg(*r.updates_done).arg(*r.updates_total)
                               : QString::number(*r.updates_done);
    }
    case Device: return QString::fromStdString(r.device);
    case FinalLoss: return sort ? sort_key(r.final_loss) : QVariant(number_text(r.final_loss, 6));
    case TokensPerSecond: return sort ? sort_key(r.tokens_per_s) : QVariant(number_text(r.tokens_per_s, 0));
    case PeakMemory: return sort ? sort_key(r.peak_memory_bytes) : QVariant(memory_text(r.peak_memory_bytes));
    case Started: return QString::fromStdString(r.started);
    case Tags: {
        QStringList tags;
        for (const auto& t : r.tags) tags << QString::fromStdString(t);
        return tags.join(QStringLiteral(", "));
    }
    case Note: return QString::fromStdString(r.note);
    case Faults: return r.faults.empty() ? QString() : QStringLiteral("FAULT INJECTED: %1").arg(QString::fromStdString(r.faults));
    case Path: return QString::fromStdString(r.run_path);
    case ColumnCount: break;
    }
    return {};
}

QVariant RunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    static const char* names[ColumnCount] = {"Run", "Experiment", "Leg", "Status", "Device", "Updates",
                                             "Final loss", "Tokens/s", "Peak memory", "Started", "Tags", "Note", "Faults", "Path"};
    if (section < 0 || section >= ColumnCount) return {};
    return QString::fromLatin1(names[section]);
}

RunsFilterProxy::RunsFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
    setSortRole(RunsModel::SortRole);
}

void RunsFilterProxy::set_filter_text(const QString& text) {
    // beginFilterChange/endFilterChange arrive in Qt 6.9; invalidateFilter is the 6.4 way.
    text_ = text.trimmed();
    invalidateFilter();
}

bool RunsFilterProxy::filterAcceptsRow(int source_row, const QModelIndex& source_parent) const {
    if (text_.isEmpty()) return true;
    for (int column : {RunsModel::Run, RunsModel::Experiment, RunsModel::Leg, RunsModel::Status, RunsModel::Device, RunsModel::Tags,
                       RunsModel::Note, RunsModel::Faults}) {
        const auto idx = sourceModel()->index(source_row, column, source_parent);
        if (idx.data(Qt::DisplayRole).toString().contains(text_, Qt::CaseInsensitive)) return true;
    }
    return false;
}

bool RunsFilterProxy::lessThan(const QModelIndex& left, const QModelIndex& right) const {
    const QVariant a = left.data(sortRole()), b = right.data(sortRole());
    // Missing values sort after every present value.
    if (!a.isValid() || !b.isValid()) return a.isValid() && !b.isValid();
    if (a.typeId() == QMetaType::Double && b.typeId() == QMetaType::Double) return a.toDouble() < b.toDouble();
    return QString::localeAwareCompare(a.toString(), b.toString()) < 0;
}

}  // namespace tandem::views
