// The divergence page (tandem/views/divergence_view.h).
#include "tandem/views/divergence_view.h"

#include "tandem/views/divergence_model.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>

namespace tandem::views {

DivergenceView::DivergenceView(QWidget* parent) : QWidget(parent) {
    model_ = new DivergenceModel(this);
    updates_ = new QComboBox(this);
    summary_ = new QLabel(tr("Open a run recorded with \"observe\" to see where its legs diverge."), this);
    summary_->setWordWrap(true);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    view_ = new QTableView(this);
    view_->setModel(model_);
    view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    view_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    view_->setSelectionMode(QAbstractItemView::SingleSelection);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Update:"), this));
    top->addWidget(updates_);
    top->addStretch(1);
    auto* legend = new QLabel(tr("cell: difference / bound, largest over the update's micro-batches "
                                 "(white ≪ 1, yellow ≈ 1, orange–red > 1); ◆ the first point over its bound"),
                              this);
    legend->setWordWrap(true);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addWidget(summary_);
    layout->addWidget(view_, 1);
    layout->addWidget(legend);
    connect(updates_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (i >= 0) model_->set_update(updates_->itemData(i).toLongLong());
    });
}

void DivergenceView::load(const std::filesystem::path& run_file) {
    updates_->blockSignals(true);
    updates_->clear();
    try {
        model_->set_localisation(load_divergence(run_file));
        for (std::int64_t u : model_->localisation().updates) updates_->addItem(QString::number(u), QVariant::fromValue<qlonglong>(u));
        updates_->setCurrentIndex(updates_->findData(QVariant::fromValue<qlonglong>(model_->update())));
        summary_->setText(model_->summary());
    } catch (const std::exception& e) {
        model_->set_localisation({});
        summary_->setText(QString::fromUtf8(e.what()));
    }
    updates_->blockSignals(false);
}

QString DivergenceView::summary_text() const { return summary_->text(); }

}  // namespace tandem::views
