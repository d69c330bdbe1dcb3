#pragma once
// The runs page: the catalog's runs in a sortable, filterable tree (legs under their run, the member
// runs of a seed envelope folded under it), with the verdict and chosen experiment settings as
// columns (right-click the header to choose them); open a run (double click, Enter, the menu, or a
// file dropped on the window) and delete one after confirmation.
// Several rows can be selected: "Compare selected" (or "Compare all shown", every run the filter
// keeps) sends their runs to the compare page. Tags and a note per run are edited in place
// (F2 on the Tags / Note cell, or "Tags & note…") and stored in the catalog; the filter searches them.
#include "tandem/views/runs_model.h"

#include <QWidget>

#include <map>
#include <string>
#include <vector>

QT_BEGIN_NAMESPACE
class QLabel;
class QLineEdit;
class QTreeView;
QT_END_NAMESPACE

namespace tandem::views {

class RunsBrowser : public QWidget {
    Q_OBJECT
public:
    explicit RunsBrowser(QWidget* parent = nullptr);

    // Reads the catalog again (a missing file shows an empty list and says so).
    void set_catalog(const QString& path);
    const QString& catalog() const { return catalog_; }
    void reload();

    RunsModel* model() const { return model_; }
    RunsFilterProxy* proxy() const { return proxy_; }
    QTreeView* table() const { return table_; }
    // Shows or hides the setting `key` ("optimizer.lr") as a column (remembered in QSettings).
    void set_setting_column(const std::string& key, bool shown);
    QString selected_run_file() const;
    QString selected_run_id() const;
    // The distinct runs of the selected rows / of every row the filter shows (run files, in table order).
    QStringList selected_run_files() const;
    QStringList shown_run_files() const;
    // Writes tags and a note for a run into the catalog and shows them; false (status says why) on error.
    bool set_annotation(const QString& run_id, const QStringList& tags, const QString& note);
    QString status_text() const;
    // Every catalogued run's tags, by run id (what names a run in the Compare page's legend).
    std::map<std::string, std::vector<std::string>> run_tags() const;
    void set_filter_text(const QString& text);

    // Asks for confirmation (unless `confirm` is false), then deletes the selected run's catalog rows.
    void delete_selected(bool confirm = true);

Q_SIGNALS:
    void open_run_requested(const QString& run_file);
    void compare_requested(const QStringList& run_files);

private:
    QString catalog_;
    RunsModel* model_ = nullptr;
    RunsFilterProxy* proxy_ = nullptr;
    QTreeView* table_ = nullptr;
    void place_setting_columns();
    QLineEdit* filter_ = nullptr;
    QLabel* status_ = nullptr;
};

}  // namespace tandem::views
