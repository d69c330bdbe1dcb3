#pragma once
// The figure export dialog: which panel — or several panels stacked in one figure — file name
// (PNG, SVG or PDF by suffix), size in centimetres or inches (or a journal column width), font
// family and size, PNG resolution. Remembers its last values, the chosen chart with the file, in
// QSettings.
#include "tandem/views/export.h"

#include <QDialog>

#include <vector>

QT_BEGIN_NAMESPACE
class QComboBox;
class QDoubleSpinBox;
class QFontComboBox;
class QListWidget;
class QLineEdit;
class QSpinBox;
QT_END_NAMESPACE

namespace tandem::views {

class FigureExportDialog : public QDialog {
    Q_OBJECT
public:
    FigureExportDialog(const QStringList& panels, int current_panel, QWidget* parent = nullptr);
    int panel() const;                // the single chart, or -1 when "several panels" is chosen
    std::vector<int> panels() const;  // the panels of the figure, top to bottom (one when single)
    // Choose several panels (the multi-panel action opens the dialog this way).
    void choose_panels(const std::vector<int>& panels);
    QString path() const;
    FigureSize size() const;
    void accept() override;

private:
    QComboBox* panel_ = nullptr;
    QListWidget* several_ = nullptr;
    QComboBox* preset_ = nullptr;
    QFontComboBox* family_ = nullptr;
    QLineEdit* path_ = nullptr;
    QDoubleSpinBox* width_ = nullptr;
    QDoubleSpinBox* height_ = nullptr;
    QComboBox* unit_ = nullptr;
    QSpinBox* font_ = nullptr;
    QSpinBox* dpi_ = nullptr;
};

}  // namespace tandem::views
