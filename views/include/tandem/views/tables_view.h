#pragma once
// The tables page: the report's tables (L1–L4 summary, timing and memory, probes) exactly as
// experiments/ formatted them for `tandem report`, each exportable as LaTeX, CSV or Markdown.
#include "tandem/views/string_table.h"

#include <QWidget>

#include <vector>

QT_BEGIN_NAMESPACE
class QComboBox;
class QLabel;
class QTableView;
QT_END_NAMESPACE

namespace tandem::views {

class TablesView : public QWidget {
    Q_OBJECT
public:
    explicit TablesView(QWidget* parent = nullptr);
    void set_tables(std::vector<StringTable> tables, const QString& note = {});
    const std::vector<StringTable>& tables() const { return tables_; }
    int current_index() const;
    void set_current_index(int index);
    StringTableModel* model() const { return model_; }
    // The footnotes under the current table (what "pass" means, "differences are a - b", ...).
    QString notes_text() const;

private:
    std::vector<StringTable> tables_;
    QComboBox* chooser_ = nullptr;
    QLabel* note_ = nullptr;
    QLabel* notes_ = nullptr;
    StringTableModel* model_ = nullptr;
    QTableView* view_ = nullptr;
};

}  // namespace tandem::views
