#include "tandem/views/tables_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>

namespace tandem::views {

TablesView::TablesView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    auto* bar = new QHBoxLayout;
    chooser_ = new QComboBox(this);
    chooser_->setObjectName(QStringLiteral("table"));
    chooser_->setMinimumContentsLength(24);
    bar->addWidget(new QLabel(tr("Table:"), this));
    bar->addWidget(chooser_);
    bar->addStretch(1);
    layout->addLayout(bar);
    model_ = new StringTableModel(this);
    view_ = new QTableView(this);
    view_->setModel(model_);
    view_->setAlternatingRowColors(true);
    view_->horizontalHeader()->setStretchLastSection(true);
    layout->addWidget(view_, 1);
    // The table's own notes, as `tandem report` prints them under it.
    notes_ = new QLabel(this);
    notes_->setObjectName(QStringLiteral("notes"));
    notes_->setWordWrap(true);
    notes_->setTextFormat(Qt::PlainText);
    notes_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(notes_);
    note_ = new QLabel(this);
    note_->setWordWrap(true);
    layout->addWidget(note_);
    connect(chooser_, &QComboBox::currentIndexChanged, this, &TablesView::set_current_index);
}

void TablesView::set_tables(std::vector<StringTable> tables, const QString& note) {
    tables_ = std::move(tables);
    {
        const QSignalBlocker block(chooser_);
        chooser_->clear();
        for (const auto& t : tables_) chooser_->addItem(QString::fromStdString(t.title));
    }
    note_->setText(note);
    set_current_index(tables_.empty() ? -1 : 0);
}

QString TablesView::notes_text() const { return notes_->text(); }

int TablesView::current_index() const { return chooser_->currentIndex(); }

void TablesView::set_current_index(int index) {
    if (index < 0 || index >= static_cast<int>(tables_.size())) {
        model_->set_table({});
        notes_->clear();
        return;
    }
    if (chooser_->currentIndex() != index) {
        const QSignalBlocker block(chooser_);
        chooser_->setCurrentIndex(index);
    }
    model_->set_table(tables_[static_cast<std::size_t>(index)]);
    QStringList notes;
    for (const auto& n : tables_[static_cast<std::size_t>(index)].notes) notes << QStringLiteral("* ") + QString::fromStdString(n);
    notes_->setText(notes.join(QLatin1Char('\n')));
    view_->resizeColumnsToContents();
}

}  // namespace tandem::views
