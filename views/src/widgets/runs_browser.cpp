#include "tandem/views/runs_browser.h"

#include "tandem/views/run_source.h"

#include <QHBoxLayout>
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
    filter_->setPlaceholderText(tr("Filter by run, experiment, leg, status or device"));
    filter_->setClearButtonEnabled(true);
    bar->addWidget(filter_, 1);
    auto* reload_button = new QPushButton(tr("Re&load"), this);
    auto* open_button = new QPushButton(tr("&Open selected"), this);
    auto* delete_button = new QPushButton(tr("&Delete run…"), this);
    bar->addWidget(reload_button);
    bar->addWidget(open_button);
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
    table_->setSelectionMode(QAbstractItemView::SingleSelection);
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
