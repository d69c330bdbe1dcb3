#pragma once
// The token diff page: choose a record and two sides (two legs' L3 records, or two chat templates
// rendered by tandem's tokenizer); both render side by side with token boundaries, ids on hover,
// the supervision boundary and the truncation point marked; the first mismatch is highlighted and
// scrolled to.
#include "tandem/views/token_sides.h"

#include <QWidget>

#include <functional>
#include <memory>
#include <vector>

QT_BEGIN_NAMESPACE
class QComboBox;
class QLabel;
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

    // `records`: (index, id) of the records that can be chosen; `sources`: the sides on offer.
    void set_sources(std::vector<std::pair<std::int64_t, std::string>> records, std::vector<SideSource> sources);
    void select(int record_row, int side_a, int side_b);

    // For tests and screenshots.
    const data::TokenDiff& current_diff() const { return diff_; }
    QTextEdit* side_view(int side) const { return side == 0 ? left_ : right_; }
    QString summary_text() const;
    int source_count() const { return static_cast<int>(sources_.size()); }

private:
    void refresh();
    void render(QTextEdit* view, const TokenSide& side, std::optional<std::size_t> mismatch);

    std::vector<std::pair<std::int64_t, std::string>> records_;
    std::vector<SideSource> sources_;
    data::TokenDiff diff_;
    QComboBox* record_box_ = nullptr;
    QComboBox* a_box_ = nullptr;
    QComboBox* b_box_ = nullptr;
    QLabel* summary_ = nullptr;
    QLabel* a_label_ = nullptr;
    QLabel* b_label_ = nullptr;
    QTextEdit* left_ = nullptr;
    QTextEdit* right_ = nullptr;
};

}  // namespace tandem::views
