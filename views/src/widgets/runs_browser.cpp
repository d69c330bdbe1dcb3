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
#include <QTableView>
#include <QVBoxLayout>

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
    proxy_ = new RunsFilterProxy(this);
    proxy_->setSourceModel(model_);
    table_ = new QTableView(this);
    table_->setObjectName(QStringLiteral("runs"));
    table_->setModel(proxy_);
    table_->setSortingEnabled(true);
    table_->sortByColumn(RunsModel::Started, Qt::DescendingOrder);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
    table_->setEditTriggers(QAbstractItemView::EditKeyPressed | QAbstractItemView::AnyKeyPressed);
    table_->setAlternatingRowColors(true);
    table_->verticalHeader()->hide();
    table_->horizontalHeader()->setStretchLastSection(true);
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
    connect(table_, &QTableView::activated, this, [this](const QModelIndex&) {
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
        status_->setText(tr("Catalog %1: %2 legs").arg(catalog_).arg(model_->rowCount()));
    } catch (const std::exception& e) {
        model_->set_rows({});
        status_->setText(QString::fromUtf8(e.what()));
    }
    table_->resizeColumnsToContents();
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
    for (const auto& row : rows) {
        auto file = row.data(RunsModel::RunFileRole).toString();
        if (file.isEmpty()) file = row.data(RunsModel::RunPathRole).toString();
        if (!file.isEmpty() && !out.contains(file)) out << file;
    }
    return out;
}

QStringList RunsBrowser::shown_run_files() const {
    QStringList out;
    for (int r = 0; r < proxy_->rowCount(); ++r) {
        const auto index = proxy_->index(r, 0);
        auto file = index.data(RunsModel::RunFileRole).toString();
        if (file.isEmpty()) file = index.data(RunsModel::RunPathRole).toString();
        if (!file.isEmpty() && !out.contains(file)) out << file;
    }
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
