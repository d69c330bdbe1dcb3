#pragma once
// The token diff page: choose a record (searchable list with a preview of its text) and two sides
// (two legs' L3 records, or two chat templates rendered by tandem's tokenizer); both render side by
// side with token boundaries, ids on hover, the supervision boundary and the truncation point
// marked; every mismatching token is red, the first one is scrolled to. Both panes keep a
// scrollbar and scroll together, so their lines wrap alike and stay side by side.
#include "tandem/views/token_sides.h"

#include <QWidget>

#include <functional>
#include <memory>
#include <vector>

QT_BEGIN_NAMESPACE
class QComboBox;
class QLabel;
class QLineEdit;
class QListView;
class QSortFilterProxyModel;
class QStandardItemModel;
class QTextEdit;
QT_END_NAMESPACE

namespace tandem::views {

// A source of sides for one record index (a leg's L3 record or a template rendering).
struct SideSource {
    std::string label;
    std::function<std::optional<TokenSide>(std::int64_t record_index)> make;
};

class TokenDiffView : public QWidget {
    Q_OBJECT
public:
    explicit TokenDiffView(QWidget* parent = nullptr);

    // `records`: (index, id) of the records that can be chosen; `sources`: the sides on offer;
    // `previews`: each record's text (shown next to its id and searched), may be empty.
    void set_sources(std::vector<std::pair<std::int64_t, std::string>> records, std::vector<SideSource> sources,
                     std::vector<std::string> previews = {});
    void select(int record_row, int side_a, int side_b);

    // For tests and screenshots.
    const data::TokenDiff& current_diff() const { return diff_; }
    QTextEdit* side_view(int side) const { return side == 0 ? left_ : right_; }
    QString summary_text() const;
    int source_count() const { return static_cast<int>(sources_.size()); }
    // Token positions drawn as mismatches on a side (0 left, 1 right).
    const std::vector<std::size_t>& marked_tokens(int side) const { return marked_[side == 0 ? 0 : 1]; }
    // The record list as filtered by the search box.
    int visible_record_count() const;
    QString record_preview(int visible_row) const;

private:
    void refresh();
    int current_record() const;
    void render(QTextEdit* view, const TokenSide& side, std::vector<std::size_t>& marked);

    std::vector<std::pair<std::int64_t, std::string>> records_;
    std::vector<SideSource> sources_;
    data::TokenDiff diff_;
    std::vector<std::size_t> marked_[2];
    QLineEdit* search_ = nullptr;
    QListView* record_list_ = nullptr;
    QStandardItemModel* record_model_ = nullptr;
    QSortFilterProxyModel* record_filter_ = nullptr;
    QComboBox* a_box_ = nullptr;
    QComboBox* b_box_ = nullptr;
    QLabel* summary_ = nullptr;
    QLabel* a_label_ = nullptr;
    QLabel* b_label_ = nullptr;
    QTextEdit* left_ = nullptr;
    QTextEdit* right_ = nullptr;
};

}  // namespace tandem::views
