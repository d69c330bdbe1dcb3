#include "tandem/views/runs_model.h"

#include <nlohmann/json.hpp>

#include <QBrush>
#include <QColor>
#include <QFileInfo>
#include <QFont>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace tandem::views {

namespace ex = tandem::experiments;

namespace {

QString number_text(const std::optional<double>& v, int decimals) {
    if (!v || !std::isfinite(*v)) return QStringLiteral("—");
    return QString::number(*v, 'f', decimals);
}

QString memory_text(const std::optional<double>& bytes) {
    if (!bytes) return QStringLiteral("—");
    return QString::number(*bytes / (1024.0 * 1024.0), 'f', 1) + QStringLiteral(" MiB");
}

QVariant sort_key(const std::optional<double>& v) { return v ? QVariant(*v) : QVariant(); }

// A number sorts as a number, anything else as text, nothing last.
QVariant text_sort_key(const QString& text) {
    if (text.isEmpty()) return {};
    bool ok = false;
    const double v = text.toDouble(&ok);
    return ok ? QVariant(v) : QVariant(text);
}

QColor verdict_color(ex::VerdictClass kind) {
    switch (kind) {
    case ex::VerdictClass::Pass: return QColor(0, 122, 77);
    case ex::VerdictClass::Fail: return QColor(176, 0, 32);
    default: return QColor(85, 85, 85);
    }
}

QString tags_text(const std::vector<std::string>& tags) {
    QStringList out;
    for (const auto& t : tags) out << QString::fromStdString(t);
    return out.join(QStringLiteral(", "));
}

}  // namespace

RunsModel::RunsModel(QObject* parent) : QAbstractItemModel(parent), settings_(ex::default_setting_columns()) {}

void RunsModel::set_rows(std::vector<CatalogLegRow> rows) {
    beginResetModel();
    rows_ = std::move(rows);
    build();
    endResetModel();
}

void RunsModel::build() {
    nodes_.clear();
    top_.clear();
    std::map<std::string, int> runs, envelopes;
    auto add_top = [&](Node n) {
        n.row = static_cast<int>(top_.size());
        nodes_.push_back(std::move(n));
        top_.push_back(static_cast<int>(nodes_.size()) - 1);
        return static_cast<int>(nodes_.size()) - 1;
    };
    auto add_child = [&](int parent, Node n) {
        n.parent = parent;
        n.row = static_cast<int>(nodes_[static_cast<std::size_t>(parent)].children.size());
        nodes_.push_back(std::move(n));
        const int id = static_cast<int>(nodes_.size()) - 1;
        nodes_[static_cast<std::size_t>(parent)].children.push_back(id);
        return id;
    };
    for (std::size_t i = 0; i < rows_.size(); ++i) {
        const auto& r = rows_[i];
        auto run = runs.find(r.run_id);
        if (run == runs.end()) {
            Node n;
            n.kind = RunRow;
            n.first = i;
            int id;
            if (!r.envelope.empty()) {
                // Member runs of one seed envelope: folded under one row.
                auto e = envelopes.find(r.envelope);
                if (e == envelopes.end()) {
                    Node group;
                    group.kind = EnvelopeRow;
                    group.first = i;
                    group.envelope = r.envelope;
                    e = envelopes.emplace(r.envelope, add_top(std::move(group))).first;
                }
                id = add_child(e->second, std::move(n));
            } else {
                id = add_top(std::move(n));
            }
            run = runs.emplace(r.run_id, id).first;
        }
        if (r.leg.empty()) continue;  // a run without legs yet: its row alone
        Node leg;
        leg.kind = LegRow;
        leg.first = i;
        add_child(run->second, std::move(leg));
    }
}

void RunsModel::remove_run(const std::string& run_id) {
    std::vector<CatalogLegRow> kept;
    for (auto& r : rows_)
        if (r.run_id != run_id) kept.push_back(std::move(r));
    set_rows(std::move(kept));
}

void RunsModel::set_setting_columns(std::vector<ex::SettingColumn> columns) {
    beginResetModel();
    settings_ = std::move(columns);
    endResetModel();
}

std::vector<std::string> RunsModel::differing_settings() const {
    std::vector<nlohmann::json> specs;
    std::set<std::string> seen;
    for (const auto& r : rows_)
        if (r.spec && seen.insert(r.run_id).second) specs.push_back(*r.spec);
    return ex::differing_settings(specs);
}

QModelIndex RunsModel::run_index(const std::string& run_id, int column) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i].kind == RunRow && rows_[nodes_[i].first].run_id == run_id)
            return createIndex(nodes_[i].row, column, static_cast<quintptr>(i + 1));
    return {};
}

int RunsModel::run_count() const {
    return static_cast<int>(std::count_if(nodes_.begin(), nodes_.end(), [](const Node& n) { return n.kind == RunRow; }));
}

const RunsModel::Node* RunsModel::node(const QModelIndex& index) const {
    if (!index.isValid() || index.internalId() == 0 || index.internalId() > nodes_.size()) return nullptr;
    return &nodes_[index.internalId() - 1];
}

QModelIndex RunsModel::index(int row, int column, const QModelIndex& parent) const {
    if (row < 0 || column < 0 || column >= columnCount()) return {};
    if (!parent.isValid()) {
        if (row >= static_cast<int>(top_.size())) return {};
        return createIndex(row, column, static_cast<quintptr>(top_[static_cast<std::size_t>(row)] + 1));
    }
    const Node* p = node(parent);
    if (!p || parent.column() != 0 || row >= static_cast<int>(p->children.size())) return {};
    return createIndex(row, column, static_cast<quintptr>(p->children[static_cast<std::size_t>(row)] + 1));
}

QModelIndex RunsModel::parent(const QModelIndex& child) const {
    const Node* n = node(child);
    if (!n || n->parent < 0) return {};
    return createIndex(nodes_[static_cast<std::size_t>(n->parent)].row, 0, static_cast<quintptr>(n->parent + 1));
}

int RunsModel::rowCount(const QModelIndex& parent) const {
    if (!parent.isValid()) return static_cast<int>(top_.size());
    if (parent.column() != 0) return 0;
    const Node* n = node(parent);
    return n ? static_cast<int>(n->children.size()) : 0;
}

int RunsModel::columnCount(const QModelIndex&) const { return ColumnCount + static_cast<int>(settings_.size()); }

Qt::ItemFlags RunsModel::flags(const QModelIndex& index) const {
    auto f = QAbstractItemModel::flags(index);
    const Node* n = node(index);
    if (n && n->kind != EnvelopeRow && (index.column() == Tags || index.column() == Note)) f |= Qt::ItemIsEditable;
    return f;
}

bool RunsModel::setData(const QModelIndex& index, const QVariant& value, int role) {
    const Node* n = node(index);
    if (role != Qt::EditRole || !n || n->kind == EnvelopeRow || (index.column() != Tags && index.column() != Note)) return false;
    const auto& r = rows_[n->first];
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
    for (auto& r : rows_)
        if (r.run_id == run_id) {
            r.tags = tags;
            r.note = note;
        }
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i].kind == EnvelopeRow || rows_[nodes_[i].first].run_id != run_id) continue;
        const auto id = static_cast<quintptr>(i + 1);
        Q_EMIT dataChanged(createIndex(nodes_[i].row, Tags, id), createIndex(nodes_[i].row, Note, id));
    }
}

QVariant RunsModel::data(const QModelIndex& index, int role) const {
    const Node* n = node(index);
    if (!n) return {};
    const auto& r = rows_[n->first];
    if (role == KindRole) return static_cast<int>(n->kind);
    if (role == RunPathRole) return n->kind == EnvelopeRow ? QString::fromStdString(n->envelope) : QString::fromStdString(r.run_path);
    if (role == RunIdRole) return n->kind == EnvelopeRow ? QString() : QString::fromStdString(r.run_id);
    if (role == RunFileRole) return n->kind == EnvelopeRow ? QString() : QString::fromStdString(r.run_file);
    if (role == Qt::TextAlignmentRole) {
        const int c = index.column();
        const bool numeric = c == Progress || c == FinalLoss || c == TokensPerSecond || c == PeakMemory || c >= ColumnCount;
        return QVariant::fromValue(numeric ? (Qt::AlignRight | Qt::AlignVCenter) : (Qt::AlignLeft | Qt::AlignVCenter));
    }
    switch (n->kind) {
    case EnvelopeRow: return envelope_data(*n, index.column(), role);
    case RunRow: return run_data(*n, index.column(), role);
    case LegRow: return leg_data(r, index.column(), role);
    }
    return {};
}

QVariant RunsModel::envelope_data(const Node& n, int column, int role) const {
    if (role == Qt::FontRole) {
        QFont f;
        f.setItalic(true);
        return f;
    }
    if (role == Qt::ToolTipRole && column == Run)
        return tr("The member runs of the seed envelope in %1 (tandem envelope): they measure the spread, they are not checked")
            .arg(QString::fromStdString(n.envelope));
    if (role != Qt::DisplayRole && role != SortRole) return {};
    std::string newest;
    for (int child : n.children) newest = std::max(newest, rows_[nodes_[static_cast<std::size_t>(child)].first].started);
    switch (column) {
    case Run: return tr("seed envelope %1 (%n member runs)", nullptr, static_cast<int>(n.children.size()))
                  .arg(QFileInfo(QString::fromStdString(n.envelope)).fileName());
    case Experiment: return QString::fromStdString(rows_[n.first].experiment);
    case Started: return QString::fromStdString(newest);
    case Path: return QString::fromStdString(n.envelope);
    default: return role == SortRole ? QVariant() : QVariant(QString());
    }
}

QVariant RunsModel::run_data(const Node& n, int column, int role) const {
    const auto& r = rows_[n.first];
    const auto verdict = ex::verdict_word(r.verdict);
    if (role == Qt::ForegroundRole && column == Verdict) return QBrush(verdict_color(verdict.kind));
    if (role == Qt::FontRole) {
        QFont f;
        if (column == Verdict) f.setBold(true);
        if (!r.envelope.empty()) f.setItalic(true);  // an envelope member: measured, not checked
        return f;
    }
    if (role == Qt::ToolTipRole) {
        if (column == Verdict) return QString::fromStdString(r.verdict.empty() ? "no verdict yet" : r.verdict);
        if (!r.envelope.empty() && column == Run) return tr("member of the seed envelope in %1").arg(QString::fromStdString(r.envelope));
    }
    if (role != Qt::DisplayRole && role != SortRole && role != Qt::ToolTipRole && role != Qt::EditRole) return {};
    const bool sort = role == SortRole;
    if (column >= ColumnCount) {
        const auto& setting = settings_[static_cast<std::size_t>(column - ColumnCount)];
        const QString text = r.spec ? QString::fromStdString(ex::setting_text(*r.spec, setting.key)) : QString();
        return sort ? text_sort_key(text) : QVariant(text);
    }
    switch (static_cast<Column>(column)) {
    case Run: return QString::fromStdString(r.run_id);
    case Verdict: return verdict.word.empty() ? (sort ? QVariant() : QVariant(QStringLiteral("—"))) : QVariant(QString::fromStdString(verdict.word));
    case Experiment: return QString::fromStdString(r.experiment);
    case Status: return QString::fromStdString(r.run_status);
    case Device: {
        QStringList devices;
        for (int child : n.children) {
            const auto d = QString::fromStdString(rows_[nodes_[static_cast<std::size_t>(child)].first].device);
            if (!d.isEmpty() && !devices.contains(d)) devices << d;
        }
        return devices.join(QStringLiteral(", "));
    }
    case Started: return QString::fromStdString(r.started);
    case Tags: return tags_text(r.tags);
    case Note: return QString::fromStdString(r.note);
    case Faults: {
        QStringList faults;
        for (int child : n.children) {
            const auto& leg = rows_[nodes_[static_cast<std::size_t>(child)].first];
            if (!leg.faults.empty()) faults << QString::fromStdString(leg.leg + ": " + leg.faults);
        }
        return faults.isEmpty() ? QString() : QStringLiteral("FAULT INJECTED: %1").arg(faults.join(QStringLiteral("; ")));
    }
    case Path: return QString::fromStdString(r.run_path);
    default: return sort ? QVariant() : QVariant(QString());  // per-leg numbers are on the legs' rows
    }
}

QVariant RunsModel::leg_data(const CatalogLegRow& r, int column, int role) const {
    if (role != Qt::DisplayRole && role != SortRole && role != Qt::ToolTipRole && role != Qt::EditRole) return {};
    const bool sort = role == SortRole;
    switch (column) {
    case Run: return QString::fromStdString(r.leg);
    case Implementation: return QString::fromStdString(r.implementation);
    case Status: return QString::fromStdString(r.status);
    case Progress: {
        if (!r.updates_done) return sort ? QVariant() : QVariant(QStringLiteral("—"));
        if (sort) return QVariant(static_cast<double>(*r.updates_done));
        return r.updates_total ? QStringLiteral("%1 / %2").arg(*r.updates_done).arg(*r.updates_total) : QString::number(*r.updates_done);
    }
    case Device: return QString::fromStdString(r.device);
    case FinalLoss: return sort ? sort_key(r.final_loss) : QVariant(number_text(r.final_loss, 6));
    case TokensPerSecond: return sort ? sort_key(r.tokens_per_s) : QVariant(number_text(r.tokens_per_s, 0));
    case PeakMemory: return sort ? sort_key(r.peak_memory_bytes) : QVariant(memory_text(r.peak_memory_bytes));
    case Tags: return tags_text(r.tags);
    case Note: return QString::fromStdString(r.note);
    case Faults: return r.faults.empty() ? QString() : QStringLiteral("FAULT INJECTED: %1").arg(QString::fromStdString(r.faults));
    default: return sort ? QVariant() : QVariant(QString());
    }
}

QVariant RunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || (role != Qt::DisplayRole && role != Qt::ToolTipRole)) return {};
    if (section >= ColumnCount && section < columnCount()) {
        const auto& s = settings_[static_cast<std::size_t>(section - ColumnCount)];
        return role == Qt::ToolTipRole ? QString::fromStdString("experiment setting " + s.key) : QString::fromStdString(s.name);
    }
    static const char* names[ColumnCount] = {"Run / leg", "Verdict", "Experiment", "Status", "Updates", "Final loss", "Tokens/s",
                                             "Peak memory", "Device", "Implementation", "Started", "Tags", "Note", "Faults", "Path"};
    if (section < 0 || section >= ColumnCount) return {};
    return QString::fromLatin1(names[section]);
}

RunsFilterProxy::RunsFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
    setSortRole(RunsModel::SortRole);
    // A run stays when one of its legs matches; a matching run keeps its legs.
    setRecursiveFilteringEnabled(true);
    setAutoAcceptChildRows(true);
}

void RunsFilterProxy::set_filter_text(const QString& text) {
    // beginFilterChange/endFilterChange arrive in Qt 6.9; invalidateFilter is the 6.4 way.
    text_ = text.trimmed();
    invalidateFilter();
}

bool RunsFilterProxy::filterAcceptsRow(int source_row, const QModelIndex& source_parent) const {
    if (text_.isEmpty()) return true;
    const int columns = sourceModel()->columnCount();
    // A run row's device and fault cells gather its legs': there the legs match, one by one.
    const bool run_row = sourceModel()->index(source_row, 0, source_parent).data(RunsModel::KindRole).toInt() == RunsModel::RunRow;
    for (int column = 0; column < columns; ++column) {
        if (column == RunsModel::Progress || column == RunsModel::FinalLoss || column == RunsModel::TokensPerSecond ||
            column == RunsModel::PeakMemory || column == RunsModel::Started || column == RunsModel::Path)
            continue;
        if (run_row && (column == RunsModel::Device || column == RunsModel::Faults)) continue;
        const auto idx = sourceModel()->index(source_row, column, source_parent);
        if (idx.data(Qt::DisplayRole).toString().contains(text_, Qt::CaseInsensitive)) return true;
    }
    return false;
}

bool RunsFilterProxy::lessThan(const QModelIndex& left, const QModelIndex& right) const {
    const QVariant a = left.data(sortRole()), b = right.data(sortRole());
    // Missing values sort after every present value, in both orders (a descending sort asks
    // lessThan(later, earlier)).
    if (!a.isValid() || !b.isValid())
        return sortOrder() == Qt::AscendingOrder ? a.isValid() && !b.isValid() : !a.isValid() && b.isValid();
    if (a.typeId() == QMetaType::Double && b.typeId() == QMetaType::Double) return a.toDouble() < b.toDouble();
    if (a.typeId() == QMetaType::Double) return true;  // numbers before text
    if (b.typeId() == QMetaType::Double) return false;
    return QString::localeAwareCompare(a.toString(), b.toString()) < 0;
}

}  // namespace tandem::views
