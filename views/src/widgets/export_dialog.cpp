#include "tandem/views/export_dialog.h"

#include "labelled.h"

#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFontComboBox>
#include <QListWidget>
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
    panel_->addItem(tr("several panels (tick below)"));
    // The chart goes with the remembered file: Save must not write another chart over residual.svg.
    const int remembered = settings.value(QStringLiteral("export/figure_chart"), -1).toInt();
    panel_->setCurrentIndex(remembered >= 0 && remembered <= panels.size() ? remembered : current_panel);
    form->addRow(tr("&Chart:"), panel_);
    several_ = new QListWidget(this);
    several_->setObjectName(QStringLiteral("panels"));
    const auto ticked = settings.value(QStringLiteral("export/figure_panels"), QVariantList{0, panels.size() - 1, 2}).toList();
    for (int i = 0; i < panels.size(); ++i) {
        auto* item = new QListWidgetItem(panels[i], several_);
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        item->setCheckState(ticked.contains(i) ? Qt::Checked : Qt::Unchecked);
    }
    several_->setMaximumHeight(several_->sizeHintForRow(0) * (panels.size() + 1));
    form->addRow(tr("&Panels:"), several_);
    several_->setEnabled(panel_->currentIndex() == panels.size());
    auto* path_row = new QHBoxLayout;
    // Not the last file: Save must never write another chart over residual.svg without asking. The
    // name is made from the run and the chart (suggest_path), in the last export's folder.
    path_ = new QLineEdit(this);
    path_->setObjectName(QStringLiteral("path"));
    auto* browse = new QPushButton(tr("&Browse…"), this);
    path_row->addWidget(path_, 1);
    path_row->addWidget(browse);
    // A row whose field is a layout gets no buddy from QFormLayout: without one, "&" shows literally.
    form->addRow(buddy_label(tr("&File (.pdf, .svg, .png):"), path_), path_row);
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
    preset_ = new QComboBox(this);
    preset_->setObjectName(QStringLiteral("preset"));
    preset_->addItem(tr("custom"), -1);
    for (const auto& p : figure_presets()) preset_->addItem(QString::fromLatin1(p.name), static_cast<int>(p.preset));
    preset_->setToolTip(tr("Size and font for a journal column, two columns or a 16:9 slide, for the panels chosen"));
    form->addRow(tr("Pres&et:"), preset_);
    auto* size_row = new QHBoxLayout;
    size_row->addWidget(width_);
    size_row->addWidget(new QLabel(QStringLiteral("×"), this));
    size_row->addWidget(height_);
    size_row->addWidget(unit_);
    form->addRow(buddy_label(tr("&Size:"), width_), size_row);
    font_ = new QSpinBox(this);
    font_->setRange(4, 48);
    font_->setSuffix(tr(" pt"));
    font_->setValue(settings.value(QStringLiteral("export/font_pt"), 8).toInt());
    form->addRow(tr("&Font size:"), font_);
    family_ = new QFontComboBox(this);
    family_->setObjectName(QStringLiteral("family"));
    family_->setCurrentFont(QFont(settings.value(QStringLiteral("export/font_family"), QStringLiteral("DejaVu Serif")).toString()));
    family_->setToolTip(tr("The paper's font family, so figure labels match its text and tables"));
    form->addRow(tr("Font famil&y:"), family_);
    dpi_ = new QSpinBox(this);
    dpi_->setRange(50, 1200);
    dpi_->setSuffix(tr(" dpi"));
    dpi_->setValue(settings.value(QStringLiteral("export/dpi"), 300).toInt());
    form->addRow(tr("PNG &resolution:"), dpi_);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel, this);
    form->addRow(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &FigureExportDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &FigureExportDialog::reject);
    connect(panel_, &QComboBox::currentIndexChanged, this, [this](int index) {
        several_->setEnabled(index == several_->count());
        if (preset_->currentData().toInt() >= 0) apply_preset(static_cast<FigurePreset>(preset_->currentData().toInt()));
        suggest_path();
    });
    connect(several_, &QListWidget::itemChanged, this, [this] {
        if (preset_->currentData().toInt() >= 0) apply_preset(static_cast<FigurePreset>(preset_->currentData().toInt()));
    });
    connect(preset_, &QComboBox::currentIndexChanged, this, [this](int) {
        if (preset_->currentData().toInt() >= 0) apply_preset(static_cast<FigurePreset>(preset_->currentData().toInt()));
    });
    connect(path_, &QLineEdit::textEdited, this, [this] { path_edited_ = true; });
    // A size or font typed by hand is no longer the preset's.
    for (auto* box : {width_, height_})
        connect(box, &QDoubleSpinBox::valueChanged, this, [this] {
            if (!applying_preset_) preset_->setCurrentIndex(0);
        });
    connect(font_, &QSpinBox::valueChanged, this, [this] {
        if (!applying_preset_) preset_->setCurrentIndex(0);
    });
    connect(browse, &QPushButton::clicked, this, [this] {
        // Save asks before replacing (accept()), so the file dialog does not ask a second time.
        const auto file = QFileDialog::getSaveFileName(this, tr("Export figure"), path_->text(), tr("PDF (*.pdf);;SVG (*.svg);;PNG (*.png)"),
                                                       nullptr, QFileDialog::DontConfirmOverwrite);
        if (!file.isEmpty()) set_path(file);
    });
    confirm_overwrite = [this](const QString& file) {
        return QMessageBox::question(this, windowTitle(), tr("%1 exists. Replace it?").arg(file), QMessageBox::Yes | QMessageBox::Cancel,
                                     QMessageBox::Cancel) == QMessageBox::Yes;
    };
    const int preset = settings.value(QStringLiteral("export/preset"), -1).toInt();
    if (const int i = preset_->findData(preset); i > 0) preset_->setCurrentIndex(i);
    suggest_path();
}

void FigureExportDialog::set_run_id(const QString& run_id) {
    run_id_ = run_id;
    suggest_path();
}

void FigureExportDialog::set_path(const QString& path) {
    path_->setText(path);
    path_edited_ = true;
}

void FigureExportDialog::suggest_path() {
    if (path_edited_) return;
    QSettings settings;
    const QString folder = settings.value(QStringLiteral("export/figure_folder"), QDir::currentPath()).toString();
    const QString suffix = settings.value(QStringLiteral("export/figure_suffix"), QStringLiteral("pdf")).toString();
    path_->setText(QDir(folder).filePath(export_file_name(run_id_, panel() >= 0 ? panel_->currentText() : QStringLiteral("panels"), suffix)));
}

void FigureExportDialog::apply_preset(FigurePreset preset) {
    const FigureSize s = preset_size(preset, static_cast<int>(panels().size()));
    applying_preset_ = true;
    unit_->setCurrentIndex(0);
    width_->setValue(s.width);
    height_->setValue(s.height);
    font_->setValue(s.font_pt);
    applying_preset_ = false;
    if (const int i = preset_->findData(static_cast<int>(preset)); i >= 0 && preset_->currentIndex() != i) {
        const QSignalBlocker block(preset_);
        preset_->setCurrentIndex(i);
    }
}

int FigureExportDialog::panel() const { return panel_->currentIndex() == several_->count() ? -1 : panel_->currentIndex(); }

std::vector<int> FigureExportDialog::panels() const {
    if (panel() >= 0) return {panel()};
    // Top to bottom in the order ticked in the list (its order: the page's order, residual last
    // unless moved) — held-out CE, then the rest.
    std::vector<int> out;
    for (int i = 0; i < several_->count(); ++i)
        if (several_->item(i)->checkState() == Qt::Checked) out.push_back(i);
    return out;
}

void FigureExportDialog::choose_panels(const std::vector<int>& chosen) {
    panel_->setCurrentIndex(several_->count());
    for (int i = 0; i < several_->count(); ++i)
        several_->item(i)->setCheckState(std::find(chosen.begin(), chosen.end(), i) != chosen.end() ? Qt::Checked : Qt::Unchecked);
}
QString FigureExportDialog::path() const { return path_->text(); }

FigureSize FigureExportDialog::size() const {
    FigureSize s;
    s.width = width_->value();
    s.height = height_->value();
    s.unit = unit_->currentIndex() == 1 ? LengthUnit::Inches : LengthUnit::Centimetres;
    s.font_pt = font_->value();
    s.font_family = family_->currentFont().family();
    s.png_dpi = dpi_->value();
    return s;
}

void FigureExportDialog::accept() {
    if (panels().empty()) {
        QMessageBox::warning(this, windowTitle(), tr("Tick at least one panel."));
        return;
    }
    if (!figure_format_for(path_->text())) {
        QMessageBox::warning(this, windowTitle(), tr("The file name must end in .pdf, .svg or .png."));
        return;
    }
    if (QFileInfo::exists(path_->text()) && !(confirm_overwrite && confirm_overwrite(path_->text()))) return;
    QSettings settings;
    settings.setValue(QStringLiteral("export/figure_folder"), QFileInfo(path_->text()).absolutePath());
    settings.setValue(QStringLiteral("export/figure_suffix"), QFileInfo(path_->text()).suffix().toLower());
    settings.setValue(QStringLiteral("export/preset"), preset_->currentData().toInt());
    settings.setValue(QStringLiteral("export/figure_chart"), panel_->currentIndex());
    QVariantList ticked;
    for (int i : panels()) ticked << i;
    if (panel() < 0) settings.setValue(QStringLiteral("export/figure_panels"), ticked);
    settings.setValue(QStringLiteral("export/font_family"), family_->currentFont().family());
    settings.setValue(QStringLiteral("export/width"), width_->value());
    settings.setValue(QStringLiteral("export/height"), height_->value());
    settings.setValue(QStringLiteral("export/unit"), unit_->currentIndex());
    settings.setValue(QStringLiteral("export/font_pt"), font_->value());
    settings.setValue(QStringLiteral("export/dpi"), dpi_->value());
    QDialog::accept();
}

}  // namespace tandem::views
