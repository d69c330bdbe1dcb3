#include "tandem/views/runs_browser.h"

#include "tandem/views/run_source.h"

#include <QHBoxLayout>
#include <QInputDialog>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QMenu>
#include <QSettings>
#include <QTreeView>
#include <QVBoxLayout>

#include <algorithm>
#include <functional>

namespace tandem::views {

RunsBrowser::RunsBrowser(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    auto* bar = new QHBoxLayout;
    filter_ = new QLineEdit(this);
    filter_->setObjectName(QStringLiteral("filter"));
    filter_->setPlaceholderText(tr("Filter by run, experiment, leg, status, device, tag or note"));
    filter_->setClearButtonEnabled(true);
    bar->addWidget(filter_, 1);
    auto* reload_button = new QPushButton(tr("Re&load"), this);
    auto* open_button = new QPushButton(tr("&Open selected"), this);
    auto* delete_button = new QPushButton(tr("&Delete run…"), this);
    auto* compare_button = new QPushButton(tr("&Compare selected"), this);
    compare_button->setObjectName(QStringLiteral("compare_selected"));
    compare_button->setToolTip(tr("Overlay the legs of the selected runs on the Compare page (Ctrl-click to select several)"));
    auto* compare_shown = new QPushButton(tr("Compare all s&hown"), this);
    compare_shown->setToolTip(tr("Every run the filter keeps, on the Compare page"));
    auto* annotate = new QPushButton(tr("&Tags && note…"), this);
    bar->addWidget(reload_button);
    bar->addWidget(open_button);
    bar->addWidget(compare_button);
    bar->addWidget(compare_shown);
    bar->addWidget(annotate);
    bar->addWidget(delete_button);
    layout->addLayout(bar);

    model_ = new RunsModel(this);
    {
        // The setting columns chosen last time (default: lr, rank, alpha, seed, max_updates, base).
        const auto keys = QSettings().value(QStringLiteral("runs/setting_columns")).toStringList();
        if (!keys.isEmpty()) {
            std::vector<tandem::experiments::SettingColumn> columns;
            for (const auto& k : keys) {
                const auto key = k.toStdString();
                columns.push_back({key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1), key});
            }
            model_->set_setting_columns(std::move(columns));
        }
    }
    proxy_ = new RunsFilterProxy(this);
    proxy_->setSourceModel(model_);
    table_ = new QTreeView(this);
    table_->setObjectName(QStringLiteral("runs"));
    table_->setModel(proxy_);
    table_->setSortingEnabled(true);
    table_->sortByColumn(RunsModel::Started, Qt::DescendingOrder);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
    table_->setEditTriggers(QAbstractItemView::EditKeyPressed | QAbstractItemView::AnyKeyPressed);
    table_->setAlternatingRowColors(true);
    table_->setUniformRowHeights(true);
    table_->setExpandsOnDoubleClick(false);  // double-click opens the run
    table_->header()->setStretchLastSection(true);
    table_->header()->setSectionsMovable(true);
    table_->header()->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(table_->header(), &QWidget::customContextMenuRequested, this, [this](const QPoint& at) {
        // Which experiment settings are columns: the defaults and every setting the runs differ in.
        QMenu menu(this);
        std::vector<std::string> keys;
        for (const auto& c : tandem::experiments::default_setting_columns()) keys.push_back(c.key);
        for (const auto& k : model_->differing_settings())
            if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
        for (const auto& key : keys) {
            auto* action = menu.addAction(QString::fromStdString(key));
            action->setCheckable(true);
            const auto& shown = model_->setting_columns();
            action->setChecked(std::any_of(shown.begin(), shown.end(), [&](const auto& c) { return c.key == key; }));
            connect(action, &QAction::toggled, this, [this, key](bool on) { set_setting_column(key, on); });
        }
        menu.exec(table_->header()->mapToGlobal(at));
    });
    layout->addWidget(table_, 1);
    status_ = new QLabel(this);
    layout->addWidget(status_);

    connect(filter_, &QLineEdit::textChanged, proxy_, &RunsFilterProxy::set_filter_text);
    connect(reload_button, &QPushButton::clicked, this, &RunsBrowser::reload);
    connect(open_button, &QPushButton::clicked, this, [this] {
        if (auto f = selected_run_file(); !f.isEmpty()) Q_EMIT open_run_requested(f);
    });
    connect(delete_button, &QPushButton::clicked, this, [this] { delete_selected(true); });
    connect(compare_button, &QPushButton::clicked, this, [this] {
        if (auto files = selected_run_files(); !files.isEmpty()) Q_EMIT compare_requested(files);
    });
    connect(compare_shown, &QPushButton::clicked, this, [this] {
        if (auto files = shown_run_files(); !files.isEmpty()) Q_EMIT compare_requested(files);
    });
    connect(model_, &RunsModel::annotation_edited, this, [this](const QString& id, const QStringList& tags, const QString& note) {
        set_annotation(id, tags, note);
    });
    connect(annotate, &QPushButton::clicked, this, [this] {
        const auto id = selected_run_id();
        if (id.isEmpty()) return;
        const auto rows = table_->selectionModel()->selectedRows();
        const QString tags = rows.first().siblingAtColumn(RunsModel::Tags).data().toString();
        const QString note = rows.first().siblingAtColumn(RunsModel::Note).data().toString();
        bool ok = false;
        const QString new_tags = QInputDialog::getText(this, tr("Tags of %1").arg(id), tr("Tags (comma-separated):"), QLineEdit::Normal, tags, &ok);
        if (!ok) return;
        const QString new_note = QInputDialog::getMultiLineText(this, tr("Note on %1").arg(id), tr("Note:"), note, &ok);
        if (!ok) return;
        QStringList list;
        for (const auto& t : new_tags.split(QLatin1Char(','), Qt::SkipEmptyParts)) list << t.trimmed();
        set_annotation(id, list, new_note);
    });
    connect(table_, &QTreeView::activated, this, [this](const QModelIndex&) {
        if (auto f = selected_run_file(); !f.isEmpty()) Q_EMIT open_run_requested(f);
    });
}

void RunsBrowser::set_catalog(const QString& path) {
    catalog_ = path;
    reload();
}

void RunsBrowser::reload() {
    if (catalog_.isEmpty()) {
        model_->set_rows({});
        status_->setText(tr("No catalog open (File ▸ Open catalog…)."));
        return;
    }
    try {
        model_->set_rows(load_catalog_rows(catalog_.toStdString()));
        status_->setText(tr("Catalog %1: %2 runs, %3 legs").arg(catalog_).arg(model_->run_count()).arg(model_->leg_count()));
    } catch (const std::exception& e) {
        model_->set_rows({});
        status_->setText(QString::fromUtf8(e.what()));
    }
    // Runs open (their legs shown), envelopes folded (their members measure the spread).
    for (int r = 0; r < proxy_->rowCount(); ++r) {
        const auto index = proxy_->index(r, 0);
        table_->setExpanded(index, index.data(RunsModel::KindRole).toInt() == RunsModel::RunRow);
    }
    place_setting_columns();
    for (int c = 0; c < proxy_->columnCount(); ++c) table_->resizeColumnToContents(c);
}

void RunsBrowser::place_setting_columns() {
    // The settings read next to the verdict and experiment, before the per-leg numbers.
    auto* header = table_->header();
    int at = header->visualIndex(RunsModel::Experiment) + 1;
    for (int c = RunsModel::ColumnCount; c < model_->columnCount(); ++c) header->moveSection(header->visualIndex(c), at++);
}

void RunsBrowser::set_setting_column(const std::string& key, bool shown) {
    auto columns = model_->setting_columns();
    columns.erase(std::remove_if(columns.begin(), columns.end(), [&](const auto& c) { return c.key == key; }), columns.end());
    if (shown) {
        std::string name = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
        for (const auto& d : tandem::experiments::default_setting_columns())
            if (d.key == key) name = d.name;
        columns.push_back({name, key});
    }
    QStringList keys;
    for (const auto& c : columns) keys << QString::fromStdString(c.key);
    QSettings().setValue(QStringLiteral("runs/setting_columns"), keys);
    model_->set_setting_columns(std::move(columns));
    reload();
}

std::map<std::string, std::vector<std::string>> RunsBrowser::run_tags() const {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& r : model_->rows()) out[r.run_id] = r.tags;
    return out;
}

QString RunsBrowser::selected_run_file() const {
    const auto rows = table_->selectionModel() ? table_->selectionModel()->selectedRows() : QModelIndexList{};
    if (rows.isEmpty()) return {};
    auto file = rows.first().data(RunsModel::RunFileRole).toString();
    return file.isEmpty() ? rows.first().data(RunsModel::RunPathRole).toString() : file;
}

QString RunsBrowser::selected_run_id() const {
    const auto rows = table_->selectionModel() ? table_->selectionModel()->selectedRows() : QModelIndexList{};
    return rows.isEmpty() ? QString() : rows.first().data(RunsModel::RunIdRole).toString();
}

QStringList RunsBrowser::selected_run_files() const {
    QStringList out;
    if (!table_->selectionModel()) return out;
    auto rows = table_->selectionModel()->selectedRows();
    std::sort(rows.begin(), rows.end(), [](const QModelIndex& a, const QModelIndex& b) { return a.row() < b.row(); });
    auto add = [&](const QModelIndex& row) {
        auto file = row.data(RunsModel::RunFileRole).toString();
        if (file.isEmpty()) file = row.data(RunsModel::RunPathRole).toString();
        if (!file.isEmpty() && !out.contains(file)) out << file;
    };
    for (const auto& row : rows) {
        if (row.data(RunsModel::KindRole).toInt() == RunsModel::EnvelopeRow) {
            // An envelope row stands for its member runs.
            for (int c = 0; c < proxy_->rowCount(row); ++c) add(proxy_->index(c, 0, row));
            continue;
        }
        add(row);
    }
    return out;
}

QStringList RunsBrowser::shown_run_files() const {
    // Every run the filter keeps, envelope members included, in the tree's order.
    QStringList out;
    std::function<void(const QModelIndex&)> walk = [&](const QModelIndex& parent) {
        for (int r = 0; r < proxy_->rowCount(parent); ++r) {
            const auto index = proxy_->index(r, 0, parent);
            const int kind = index.data(RunsModel::KindRole).toInt();
            if (kind == RunsModel::EnvelopeRow) {
                walk(index);
                continue;
            }
            auto file = index.data(RunsModel::RunFileRole).toString();
            if (file.isEmpty()) file = index.data(RunsModel::RunPathRole).toString();
            if (!file.isEmpty() && !out.contains(file)) out << file;
        }
    };
    walk({});
    return out;
}

QString RunsBrowser::status_text() const { return status_->text(); }

void RunsBrowser::set_filter_text(const QString& text) { filter_->setText(text); }

bool RunsBrowser::set_annotation(const QString& run_id, const QStringList& tags, const QString& note) {
    if (catalog_.isEmpty()) return false;
    std::vector<std::string> list;
    for (const auto& t : tags) list.push_back(t.toStdString());
    try {
        set_catalog_annotation(catalog_.toStdString(), run_id.toStdString(), list, note.toStdString());
        // Show what the catalog now holds (normalised tags).
        for (const auto& row : load_catalog_rows(catalog_.toStdString()))
            if (row.run_id == run_id.toStdString()) {
                model_->set_annotation(row.run_id, row.tags, row.note);
                break;
            }
        status_->setText(tr("Saved the tags and note of %1.").arg(run_id));
        return true;
    } catch (const std::exception& e) {
        status_->setText(QString::fromUtf8(e.what()));
        return false;
    }
}

void RunsBrowser::delete_selected(bool confirm) {
    const auto run_id = selected_run_id();
    if (run_id.isEmpty() || catalog_.isEmpty()) return;
    if (confirm &&
        QMessageBox::question(this, tr("Delete run"),
                              tr("Delete run %1 and its legs from the catalog?\n\nThe run folder on disk is kept.").arg(run_id),
                              QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel) != QMessageBox::Yes)
        return;
    try {
        delete_catalog_run(catalog_.toStdString(), run_id.toStdString());
        model_->remove_run(run_id.toStdString());
        status_->setText(tr("Deleted %1 from the catalog.").arg(run_id));
    } catch (const std::exception& e) {
        QMessageBox::warning(this, tr("Delete run"), QString::fromUtf8(e.what()));
    }
}

}  // namespace tandem::views
