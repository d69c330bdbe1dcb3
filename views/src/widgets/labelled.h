#pragma once
// A field's label on the workbench's tool rows and forms: its mnemonic (&x) focuses the field, and
// without a buddy the "&" would show literally.
#include <QBoxLayout>
#include <QLabel>
#include <QString>
#include <QWidget>

namespace tandem::views {

// A label `text` (beside `buddy`, in the same parent) whose mnemonic focuses `buddy`.
inline QLabel* buddy_label(const QString& text, QWidget* buddy) {
    auto* label = new QLabel(text, buddy->parentWidget());
    label->setBuddy(buddy);
    return label;
}

// `field` after its buddy label `text`, both added to `row`.
inline void add_labelled(QBoxLayout* row, const QString& text, QWidget* field) {
    row->addWidget(buddy_label(text, field));
    row->addWidget(field);
}

}  // namespace tandem::views
