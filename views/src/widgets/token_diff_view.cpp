#include "tandem/views/token_diff_view.h"

#include <QComboBox>
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
    auto* layout = new QVBoxLayout(this);
    auto* bar = new QHBoxLayout;
    record_box_ = new QComboBox(this);
    record_box_->setObjectName(QStringLiteral("record"));
    record_box_->setMinimumContentsLength(28);
    a_box_ = new QComboBox(this);
    b_box_ = new QComboBox(this);
    bar->addWidget(new QLabel(tr("&Record:"), this));
    static_cast<QLabel*>(bar->itemAt(0)->widget())->setBuddy(record_box_);
    bar->addWidget(record_box_);
    bar->addWidget(new QLabel(tr("Left:"), this));
    bar->addWidget(a_box_);
    bar->addWidget(new QLabel(tr("Right:"), this));
    bar->addWidget(b_box_);
    bar->addStretch(1);
    layout->addLayout(bar);
    summary_ = new QLabel(this);
    summary_->setObjectName(QStringLiteral("summary"));
    summary_->setTextFormat(Qt::RichText);
    summary_->setWordWrap(true);
    layout->addWidget(summary_);
    auto* legend = new QLabel(tr("Token boundaries alternate shading; <span style='background:#d8f0d8'>supervised</span> tokens "
                                 "are green; <b style='color:#0072b2'>▶</b> marks the supervision boundary, "
                                 "<b style='color:#d55e00'>✂</b> the truncation point, "
                                 "<span style='background:#ff9090'>red</span> the first mismatch. Hover a token for its id."),
                              this);
    legend->setWordWrap(true);
    layout->addWidget(legend);

    auto* splitter = new QSplitter(Qt::Horizontal, this);
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
        QFont mono(QStringLiteral("monospace"));
        mono.setStyleHint(QFont::Monospace);
        (*view)->document()->setDefaultFont(mono);
        pane_layout->addWidget(*view, 1);
        splitter->addWidget(pane);
    }
    layout->addWidget(splitter, 1);

    connect(record_box_, &QComboBox::currentIndexChanged, this, &TokenDiffView::refresh);
    connect(a_box_, &QComboBox::currentIndexChanged, this, &TokenDiffView::refresh);
    connect(b_box_, &QComboBox::currentIndexChanged, this, &TokenDiffView::refresh);
    // Scroll the two sides together.
    connect(left_->verticalScrollBar(), &QScrollBar::valueChanged, right_->verticalScrollBar(), &QScrollBar::setValue);
}

void TokenDiffView::set_sources(std::vector<std::pair<std::int64_t, std::string>> records, std::vector<SideSource> sources) {
    records_ = std::move(records);
    sources_ = std::move(sources);
    const QSignalBlocker block_r(record_box_), block_a(a_box_), block_b(b_box_);
    record_box_->clear();
    for (const auto& [index, id] : records_)
        record_box_->addItem(QStringLiteral("#%1  %2").arg(index).arg(QString::fromStdString(id)));
    a_box_->clear();
    b_box_->clear();
    for (const auto& s : sources_) {
        a_box_->addItem(QString::fromStdString(s.label));
        b_box_->addItem(QString::fromStdString(s.label));
    }
    if (sources_.size() > 1) b_box_->setCurrentIndex(1);
    refresh();
}

void TokenDiffView::select(int record_row, int side_a, int side_b) {
    const QSignalBlocker block_r(record_box_), block_a(a_box_), block_b(b_box_);
    record_box_->setCurrentIndex(record_row);
    a_box_->setCurrentIndex(side_a);
    b_box_->setCurrentIndex(side_b);
    refresh();
}

QString TokenDiffView::summary_text() const { return summary_->text(); }

void TokenDiffView::refresh() {
    left_->clear();
    right_->clear();
    diff_ = {};
    const int r = record_box_->currentIndex(), a = a_box_->currentIndex(), b = b_box_->currentIndex();
    if (r < 0 || a < 0 || b < 0 || r >= static_cast<int>(records_.size())) {
        summary_->setText(tr("No L3 token records in this run."));
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
                             "%4 id mismatches; lengths %5 / %6; boundaries %7 / %8.")
                              .arg(*diff_.first_mismatch)
                              .arg(QString::fromStdString(diff_.what))
                              .arg(diff_.common_prefix)
                              .arg(diff_.id_mismatches)
                              .arg(diff_.length_a)
                              .arg(diff_.length_b)
                              .arg(left->boundary)
                              .arg(right->boundary));
    }
    render(left_, *left, diff_.first_mismatch);
    render(right_, *right, diff_.first_mismatch);
}

void TokenDiffView::render(QTextEdit* view, const TokenSide& side, std::optional<std::size_t> mismatch) {
    QTextCursor cursor(view->document());
    int mismatch_position = -1;
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
        if (mismatch && i == *mismatch) {
            background = QColor(0xff, 0x90, 0x90);
            f.setFontWeight(QFont::Bold);
            mismatch_position = cursor.position();
        }
        f.setBackground(background);
        f.setToolTip(tr("token %1 · id %2%3").arg(i).arg(side.ids[i]).arg(sup ? tr(" · supervised") : QString()));
        cursor.insertText(visible_piece(side.pieces[i]), f);
    }
    if (side.truncated_at) {
        auto f = marker_format(QColor(213, 94, 0));
        f.setToolTip(tr("truncated at %1 of %2 tokens").arg(*side.truncated_at).arg(side.full_length));
        cursor.insertText(QStringLiteral("\u2702 truncated (%1 of %2 tokens)").arg(*side.truncated_at).arg(side.full_length), f);
    }
    if (mismatch && *mismatch >= side.ids.size()) {
        auto f = marker_format(QColor(213, 94, 0));
        f.setBackground(QColor(0xff, 0x90, 0x90));
        mismatch_position = cursor.position();
        cursor.insertText(tr("[ends here]"), f);
    }
    if (mismatch_position >= 0) {
        QTextCursor at(view->document());
        at.setPosition(mismatch_position);
        view->setTextCursor(at);
        view->ensureCursorVisible();
    }
}

}  // namespace tandem::views
