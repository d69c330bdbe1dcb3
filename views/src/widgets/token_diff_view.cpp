#include "tandem/views/token_diff_view.h"

#include "labelled.h"

#include <QComboBox>
#include <QLineEdit>
#include <QListView>
#include <QSortFilterProxyModel>
#include <QStandardItemModel>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollBar>
#include <QSplitter>
#include <QTextCursor>
#include <QTextEdit>
#include <QVBoxLayout>

namespace tandem::views {

namespace {

// Whitespace made visible so token boundaries inside runs of spaces and newlines can be seen.
QString visible_piece(const std::string& piece) {
    QString text = QString::fromUtf8(piece.data(), static_cast<qsizetype>(piece.size()));
    text.replace(QLatin1Char('\n'), QStringLiteral("\u21b5\n"));
    text.replace(QLatin1Char('\t'), QStringLiteral("\u2192"));
    return text;
}

QTextCharFormat marker_format(const QColor& color) {
    QTextCharFormat f;
    f.setForeground(color);
    f.setFontWeight(QFont::Bold);
    return f;
}

}  // namespace

TokenDiffView::TokenDiffView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QHBoxLayout(this);
    // Left: the record picker (search + list with a preview of each record's text).
    auto* picker = new QWidget(this);
    auto* picker_layout = new QVBoxLayout(picker);
    picker_layout->setContentsMargins(0, 0, 0, 0);
    search_ = new QLineEdit(picker);
    search_->setObjectName(QStringLiteral("record_search"));
    search_->setPlaceholderText(tr("Search id or text"));
    search_->setClearButtonEnabled(true);
    add_labelled(picker_layout, tr("&Record:"), search_);
    record_model_ = new QStandardItemModel(this);
    record_filter_ = new QSortFilterProxyModel(this);
    record_filter_->setSourceModel(record_model_);
    record_filter_->setFilterCaseSensitivity(Qt::CaseInsensitive);
    record_filter_->setFilterRole(Qt::UserRole + 1);  // id + full text
    record_list_ = new QListView(picker);
    record_list_->setObjectName(QStringLiteral("record"));
    record_list_->setModel(record_filter_);
    record_list_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    record_list_->setSelectionMode(QAbstractItemView::SingleSelection);
    record_list_->setWordWrap(true);
    record_list_->setUniformItemSizes(false);
    picker_layout->addWidget(record_list_, 1);
    picker->setMinimumWidth(220);
    picker->setMaximumWidth(340);
    layout->addWidget(picker);

    auto* main = new QWidget(this);
    auto* main_layout = new QVBoxLayout(main);
    main_layout->setContentsMargins(0, 0, 0, 0);
    auto* bar = new QHBoxLayout;
    a_box_ = new QComboBox(main);
    b_box_ = new QComboBox(main);
    add_labelled(bar, tr("&Left:"), a_box_);
    add_labelled(bar, tr("Ri&ght:"), b_box_);
    bar->addStretch(1);
    main_layout->addLayout(bar);
    summary_ = new QLabel(main);
    summary_->setObjectName(QStringLiteral("summary"));
    summary_->setTextFormat(Qt::RichText);
    summary_->setWordWrap(true);
    main_layout->addWidget(summary_);
    auto* legend = new QLabel(tr("Token boundaries alternate shading; <span style='background:#d8f0d8'>supervised</span> tokens "
                                 "are green; <b style='color:#0072b2'>▶</b> marks the supervision boundary, "
                                 "<b style='color:#d55e00'>✂</b> the truncation point, "
                                 "<span style='background:#ff9090'>red</span> every mismatching token. Hover a token for its id."),
                              main);
    legend->setWordWrap(true);
    main_layout->addWidget(legend);

    auto* splitter = new QSplitter(Qt::Horizontal, main);
    splitter->setChildrenCollapsible(false);
    for (auto** view : {&left_, &right_}) {
        auto* pane = new QWidget(splitter);
        auto* pane_layout = new QVBoxLayout(pane);
        pane_layout->setContentsMargins(0, 0, 0, 0);
        auto* label = new QLabel(pane);
        (view == &left_ ? a_label_ : b_label_) = label;
        pane_layout->addWidget(label);
        *view = new QTextEdit(pane);
        (*view)->setReadOnly(true);
        (*view)->setLineWrapMode(QTextEdit::WidgetWidth);
        // Always a scrollbar on both: equal text widths, so both sides wrap at the same column.
        (*view)->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOn);
        QFont mono(QStringLiteral("monospace"));
        mono.setStyleHint(QFont::Monospace);
        (*view)->document()->setDefaultFont(mono);
        pane_layout->addWidget(*view, 1);
        splitter->addWidget(pane);
    }
    splitter->setSizes({1, 1});
    main_layout->addWidget(splitter, 1);
    layout->addWidget(main, 1);

    connect(search_, &QLineEdit::textChanged, record_filter_, &QSortFilterProxyModel::setFilterFixedString);
    connect(record_list_->selectionModel(), &QItemSelectionModel::currentChanged, this, &TokenDiffView::refresh);
    connect(a_box_, &QComboBox::currentIndexChanged, this, &TokenDiffView::refresh);
    connect(b_box_, &QComboBox::currentIndexChanged, this, &TokenDiffView::refresh);
    // Scroll the two sides together, both ways.
    connect(left_->verticalScrollBar(), &QScrollBar::valueChanged, right_->verticalScrollBar(), &QScrollBar::setValue);
    connect(right_->verticalScrollBar(), &QScrollBar::valueChanged, left_->verticalScrollBar(), &QScrollBar::setValue);
}

void TokenDiffView::set_sources(std::vector<std::pair<std::int64_t, std::string>> records, std::vector<SideSource> sources,
                                std::vector<std::string> previews) {
    records_ = std::move(records);
    sources_ = std::move(sources);
    const QSignalBlocker block_a(a_box_), block_b(b_box_), block_list(record_list_->selectionModel());
    record_model_->clear();
    for (std::size_t i = 0; i < records_.size(); ++i) {
        const auto& [index, id] = records_[i];
        QString preview = i < previews.size() ? QString::fromStdString(previews[i]).simplified() : QString();
        auto* item = new QStandardItem(QStringLiteral("#%1  %2").arg(index).arg(QString::fromStdString(id)) +
                                       (preview.isEmpty() ? QString() : QStringLiteral("\n") + preview.left(90)));
        item->setData(static_cast<int>(i), Qt::UserRole);
        item->setData(QString::fromStdString(id) + QLatin1Char(' ') + preview, Qt::UserRole + 1);
        item->setData(preview, Qt::UserRole + 2);
        item->setToolTip(preview.left(600));
        record_model_->appendRow(item);
    }
    if (record_filter_->rowCount() > 0) record_list_->setCurrentIndex(record_filter_->index(0, 0));
    a_box_->clear();
    b_box_->clear();
    for (const auto& s : sources_) {
        a_box_->addItem(QString::fromStdString(s.label));
        b_box_->addItem(QString::fromStdString(s.label));
    }
    if (sources_.size() > 1) b_box_->setCurrentIndex(1);
    refresh();
}

int TokenDiffView::visible_record_count() const { return record_filter_->rowCount(); }

QString TokenDiffView::record_preview(int visible_row) const {
    return record_filter_->index(visible_row, 0).data(Qt::UserRole + 2).toString();
}

int TokenDiffView::current_record() const {
    const auto index = record_list_->currentIndex();
    return index.isValid() ? index.data(Qt::UserRole).toInt() : -1;
}

void TokenDiffView::select(int record_row, int side_a, int side_b) {
    const QSignalBlocker block_a(a_box_), block_b(b_box_), block_list(record_list_->selectionModel());
    search_->clear();
    record_list_->setCurrentIndex(record_filter_->mapFromSource(record_model_->index(record_row, 0)));
    a_box_->setCurrentIndex(side_a);
    b_box_->setCurrentIndex(side_b);
    refresh();
}

QString TokenDiffView::summary_text() const { return summary_->text(); }

void TokenDiffView::refresh() {
    left_->clear();
    right_->clear();
    diff_ = {};
    marked_[0].clear();
    marked_[1].clear();
    const int r = current_record(), a = a_box_->currentIndex(), b = b_box_->currentIndex();
    if (r < 0 || a < 0 || b < 0 || r >= static_cast<int>(records_.size())) {
        summary_->setText(records_.empty() ? tr("No L3 token records in this run.") : tr("Choose a record."));
        return;
    }
    const auto index = records_[static_cast<std::size_t>(r)].first;
    std::optional<TokenSide> left, right;
    QString error;
    try {
        left = sources_[static_cast<std::size_t>(a)].make(index);
        right = sources_[static_cast<std::size_t>(b)].make(index);
    } catch (const std::exception& e) {
        error = QString::fromUtf8(e.what());
    }
    if (!left || !right) {
        summary_->setText(error.isEmpty() ? tr("Record #%1 is missing on one side.").arg(index) : error.toHtmlEscaped());
        return;
    }
    diff_ = diff_sides(*left, *right);
    a_label_->setText(QStringLiteral("<b>%1</b>: %2 tokens").arg(QString::fromStdString(left->label).toHtmlEscaped()).arg(left->ids.size()));
    b_label_->setText(QStringLiteral("<b>%1</b>: %2 tokens").arg(QString::fromStdString(right->label).toHtmlEscaped()).arg(right->ids.size()));
    if (diff_.identical) {
        summary_->setText(tr("<b style='color:#009e73'>Identical</b>: %1 tokens, boundary %2, %3 supervised.")
                              .arg(diff_.length_a).arg(left->boundary).arg(left->supervised_end - left->boundary));
    } else {
        summary_->setText(tr("<b style='color:#d55e00'>First mismatch at token %1</b> (%2); %3 equal tokens before it; "
                             "%4 id mismatches (all marked red); lengths %5 / %6; boundaries %7 / %8.")
                              .arg(*diff_.first_mismatch)
                              .arg(QString::fromStdString(diff_.what))
                              .arg(diff_.common_prefix)
                              .arg(diff_.id_mismatches)
                              .arg(diff_.length_a)
                              .arg(diff_.length_b)
                              .arg(left->boundary)
                              .arg(right->boundary));
    }
    render(left_, *left, marked_[0]);
    render(right_, *right, marked_[1]);
}

void TokenDiffView::render(QTextEdit* view, const TokenSide& side, std::vector<std::size_t>& marked) {
    QTextCursor cursor(view->document());
    int first_position = -1;
    const auto& mismatches = diff_.mismatch_positions;  // data/'s diff_tokens: every differing position
    std::size_t next = 0;
    for (std::size_t i = 0; i < side.ids.size(); ++i) {
        if (side.boundary >= 0 && static_cast<std::int64_t>(i) == side.boundary) {
            auto f = marker_format(QColor(0, 114, 178));
            f.setToolTip(tr("supervision boundary: token %1").arg(i));
            cursor.insertText(QStringLiteral("\u25b6"), f);
        }
        QTextCharFormat f;
        const bool sup = side.supervised(i);
        QColor background = sup ? ((i % 2) ? QColor(0xc4, 0xe8, 0xc4) : QColor(0xd8, 0xf0, 0xd8))
                                : ((i % 2) ? QColor(0xe4, 0xe4, 0xe4) : QColor(0xf6, 0xf6, 0xf6));
        while (next < mismatches.size() && mismatches[next] < i) ++next;
        const bool mismatch = (next < mismatches.size() && mismatches[next] == i) ||
                              (diff_.first_mismatch && diff_.what == "length" && i >= *diff_.first_mismatch);
        if (mismatch) {
            background = QColor(0xff, 0x90, 0x90);
            f.setFontWeight(QFont::Bold);
            marked.push_back(i);
            if (diff_.first_mismatch && i == *diff_.first_mismatch) first_position = cursor.position();
        }
        f.setBackground(background);
        f.setToolTip(tr("token %1 · id %2%3%4").arg(i).arg(side.ids[i]).arg(sup ? tr(" · supervised") : QString(),
                                                                            mismatch ? tr(" · differs") : QString()));
        cursor.insertText(visible_piece(side.pieces[i]), f);
    }
    if (side.truncated_at) {
        auto f = marker_format(QColor(213, 94, 0));
        f.setToolTip(tr("truncated at %1 of %2 tokens").arg(*side.truncated_at).arg(side.full_length));
        cursor.insertText(QStringLiteral("\u2702 truncated (%1 of %2 tokens)").arg(*side.truncated_at).arg(side.full_length), f);
    }
    if (diff_.first_mismatch && *diff_.first_mismatch >= side.ids.size()) {
        auto f = marker_format(QColor(213, 94, 0));
        f.setBackground(QColor(0xff, 0x90, 0x90));
        first_position = cursor.position();
        cursor.insertText(tr("[ends here]"), f);
    }
    if (first_position >= 0) {
        QTextCursor at(view->document());
        at.setPosition(first_position);
        view->setTextCursor(at);
        view->ensureCursorVisible();
    }
}

}  // namespace tandem::views
