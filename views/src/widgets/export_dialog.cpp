#include "tandem/views/export_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>

namespace tandem::views {

FigureExportDialog::FigureExportDialog(const QStringList& panels, int current_panel, QWidget* parent) : QDialog(parent) {
    setWindowTitle(tr("Export figure"));
    QSettings settings;
    auto* form = new QFormLayout(this);
    panel_ = new QComboBox(this);
    panel_->setObjectName(QStringLiteral("chart"));
    panel_->addItems(panels);
    // The chart goes with the remembered file: Save must not write another chart over residual.svg.
    const int remembered = settings.value(QStringLiteral("export/figure_chart"), -1).toInt();
    panel_->setCurrentIndex(remembered >= 0 && remembered < panels.size() ? remembered : current_panel);
    form->addRow(tr("&Chart:"), panel_);
    auto* path_row = new QHBoxLayout;
    path_ = new QLineEdit(settings.value(QStringLiteral("export/figure_path"), QStringLiteral("figure.pdf")).toString(), this);
    path_->setObjectName(QStringLiteral("path"));
    auto* browse = new QPushButton(tr("&Browse…"), this);
    path_row->addWidget(path_, 1);
    path_row->addWidget(browse);
    // A row whose field is a layout gets no buddy from QFormLayout: without one, "&" shows literally.
    auto labelled = [this](const QString& text, QWidget* buddy) {
        auto* label = new QLabel(text, this);
        label->setBuddy(buddy);
        return label;
    };
    form->addRow(labelled(tr("&File (.pdf, .svg, .png):"), path_), path_row);
    width_ = new QDoubleSpinBox(this);
    height_ = new QDoubleSpinBox(this);
    for (auto* box : {width_, height_}) {
        box->setRange(1, 200);
        box->setDecimals(2);
    }
    width_->setValue(settings.value(QStringLiteral("export/width"), 16.0).toDouble());
    height_->setValue(settings.value(QStringLiteral("export/height"), 10.0).toDouble());
    unit_ = new QComboBox(this);
    unit_->addItem(tr("cm"));
    unit_->addItem(tr("inches"));
    unit_->setCurrentIndex(settings.value(QStringLiteral("export/unit"), 0).toInt());
    auto* size_row = new QHBoxLayout;
    size_row->addWidget(width_);
    size_row->addWidget(new QLabel(QStringLiteral("×"), this));
    size_row->addWidget(height_);
    size_row->addWidget(unit_);
    form->addRow(labelled(tr("&Size:"), width_), size_row);
    font_ = new QSpinBox(this);
    font_->setRange(4, 48);
    font_->setSuffix(tr(" pt"));
    font_->setValue(settings.value(QStringLiteral("export/font_pt"), 9).toInt());
    form->addRow(tr("&Font size:"), font_);
    dpi_ = new QSpinBox(this);
    dpi_->setRange(50, 1200);
    dpi_->setSuffix(tr(" dpi"));
    dpi_->setValue(settings.value(QStringLiteral("export/dpi"), 300).toInt());
    form->addRow(tr("PNG &resolution:"), dpi_);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel, this);
    form->addRow(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &FigureExportDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &FigureExportDialog::reject);
    connect(browse, &QPushButton::clicked, this, [this] {
        const auto file = QFileDialog::getSaveFileName(this, tr("Export figure"), path_->text(),
                                                       tr("PDF (*.pdf);;SVG (*.svg);;PNG (*.png)"));
        if (!file.isEmpty()) path_->setText(file);
    });
}

int FigureExportDialog::panel() const { return panel_->currentIndex(); }
QString FigureExportDialog::path() const { return path_->text(); }

FigureSize FigureExportDialog::size() const {
    FigureSize s;
    s.width = width_->value();
    s.height = height_->value();
    s.unit = unit_->currentIndex() == 1 ? LengthUnit::Inches : LengthUnit::Centimetres;
    s.font_pt = font_->value();
    s.png_dpi = dpi_->value();
    return s;
}

void FigureExportDialog::accept() {
    if (!figure_format_for(path_->text())) {
        QMessageBox::warning(this, windowTitle(), tr("The file name must end in .pdf, .svg or .png."));
        return;
    }
    QSettings settings;
    settings.setValue(QStringLiteral("export/figure_path"), path_->text());
    settings.setValue(QStringLiteral("export/figure_chart"), panel_->currentIndex());
    settings.setValue(QStringLiteral("export/width"), width_->value());
    settings.setValue(QStringLiteral("export/height"), height_->value());
    settings.setValue(QStringLiteral("export/unit"), unit_->currentIndex());
    settings.setValue(QStringLiteral("export/font_pt"), font_->value());
    settings.setValue(QStringLiteral("export/dpi"), dpi_->value());
    QDialog::accept();
}

}  // namespace tandem::views
