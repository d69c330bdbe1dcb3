#pragma once
// The figure export dialog: which panel — or several panels stacked in one figure — file name
// (PNG, SVG or PDF by suffix), size in centimetres or inches or a preset (single column 8.5 cm,
// double column 17.8 cm, 16:9 slide: size and font for the number of panels chosen), font family
// and size, PNG resolution. Remembers its last values in QSettings, but not the file: the name is
// made from the run and the chart, in the last folder, and Save asks before replacing any file.
#include "tandem/views/export.h"

#include <QDialog>

#include <functional>
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
    // The run the figure is of: the file name offered is "<run>-<chart>.<suffix>".
    void set_run_id(const QString& run_id);
    // Applies a preset (size and font for the panels chosen now).
    void apply_preset(FigurePreset preset);
    void set_path(const QString& path);
    // Asked before an existing file is replaced (default: a question box); tests answer it.
    std::function<bool(const QString& path)> confirm_overwrite;
    void accept() override;

private:
    void suggest_path();
    QString run_id_;
    bool path_edited_ = false;  // the user typed or browsed a name: keep it
    bool applying_preset_ = false;
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
