#pragma once
// The figure export dialog: which panel, file name (PNG, SVG or PDF by suffix), size in centimetres
// or inches, font size and PNG resolution. Remembers its last values in QSettings.
#include "tandem/views/export.h"

#include <QDialog>

QT_BEGIN_NAMESPACE
class QComboBox;
class QDoubleSpinBox;
class QLineEdit;
class QSpinBox;
QT_END_NAMESPACE

namespace tandem::views {

class FigureExportDialog : public QDialog {
    Q_OBJECT
public:
    FigureExportDialog(const QStringList& panels, int current_panel, QWidget* parent = nullptr);
    int panel() const;
    QString path() const;
    FigureSize size() const;
    void accept() override;

private:
    QComboBox* panel_ = nullptr;
    QLineEdit* path_ = nullptr;
    QDoubleSpinBox* width_ = nullptr;
    QDoubleSpinBox* height_ = nullptr;
    QComboBox* unit_ = nullptr;
    QSpinBox* font_ = nullptr;
    QSpinBox* dpi_ = nullptr;
};

}  // namespace tandem::views
