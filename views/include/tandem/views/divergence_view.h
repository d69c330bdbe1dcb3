#pragma once
// The divergence page (issue 16): the layer x op heat map of one update's localisation (ratio =
// difference / bound per point, docs/observables.md), the localised point marked, an update chooser
// and the localisation's one-line summary.
#include <QWidget>

#include <filesystem>

QT_BEGIN_NAMESPACE
class QComboBox;
class QLabel;
class QTableView;
QT_END_NAMESPACE

namespace tandem::views {

class DivergenceModel;

class DivergenceView : public QWidget {
    Q_OBJECT
public:
    explicit DivergenceView(QWidget* parent = nullptr);
    // Loads the run's fingerprints; without any, says so (and how to record them).
    void load(const std::filesystem::path& run_file);
    DivergenceModel* model() const { return model_; }
    QString summary_text() const;

private:
    DivergenceModel* model_ = nullptr;
    QComboBox* updates_ = nullptr;
    QLabel* summary_ = nullptr;
    QTableView* view_ = nullptr;
};

}  // namespace tandem::views
