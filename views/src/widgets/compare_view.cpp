#include "tandem/views/compare_view.h"

#include "labelled.h"

#include "tandem/compare/compare_runs.h"
#include "tandem/compare/report.h"
#include "tandem/views/run_source.h"
#include "tandem/views/tables_view.h"
#include "tandem/views/trajectory_view.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTabWidget>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace tandem::views {

namespace ex = tandem::experiments;

struct CompareView::Followed {
    QString path;          // as added (folder or file, cleaned)
    std::string run_file;  // the run.h5 the deltas name
    std::string run_id;
    RunFollower* follower = nullptr;
    QTreeWidgetItem* item = nullptr;
    std::vector<std::string> legs;
};

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QHBoxLayout(this);
    auto* splitter = new QSplitter(Qt::Horizontal, this);
    splitter->setChildrenCollapsible(false);

    auto* left = new QWidget(splitter);
    auto* left_layout = new QVBoxLayout(left);
    left_layout->setContentsMargins(0, 0, 0, 0);
    tree_ = new QTreeWidget(left);
    tree_->setObjectName(QStringLiteral("compare_runs"));
    tree_->setHeaderLabels({tr("Run / leg"), tr("Named in the legend")});
    tree_->setColumnCount(2);
    tree_->header()->moveSection(1, 0);  // what the legend says first, the run id beside it
    tree_->setMinimumWidth(220);
    left_layout->addWidget(tree_, 1);
    auto* buttons = new QHBoxLayout;
    auto* add = new QPushButton(tr("&Add run…"), left);
    auto* remove = new QPushButton(tr("Re&move"), left);
    buttons->addWidget(add);
    buttons->addWidget(remove);
    left_layout->addLayout(buttons);
    status_ = new QLabel(left);
    status_->setWordWrap(true);
    left_layout->addWidget(status_);
    splitter->addWidget(left);

    tabs_ = new QTabWidget(splitter);
    overlay_ = new TrajectoryView(tabs_);
    overlay_->setObjectName(QStringLiteral("overlay"));
    tabs_->addTab(overlay_, tr("Overlay"));
    auto* diff_page = new QWidget(tabs_);
    auto* diff_layout = new QVBoxLayout(diff_page);
    auto* choose = new QHBoxLayout;
    a_box_ = new QComboBox(diff_page);
    b_box_ = new QComboBox(diff_page);
    a_box_->setObjectName(QStringLiteral("diff_a"));
    b_box_->setObjectName(QStringLiteral("diff_b"));
    a_box_->setMinimumContentsLength(28);
    b_box_->setMinimumContentsLength(28);
    add_labelled(choose, tr("Leg &a:"), a_box_);
    add_labelled(choose, tr("Leg &b:"), b_box_);
    auto* run_diff = new QPushButton(tr("&Compare"), diff_page);
    choose->addWidget(run_diff);
    choose->addStretch(1);
    diff_layout->addLayout(choose);
    diff_ = new TablesView(diff_page);
    diff_->setObjectName(QStringLiteral("diff_tables"));
    diff_layout->addWidget(diff_, 1);
    tabs_->addTab(diff_page, tr("Diff runs"));
    splitter->addWidget(tabs_);
    splitter->setStretchFactor(1, 1);
    splitter->setSizes({320, 1000});
    layout->addWidget(splitter);

    connect(add, &QPushButton::clicked, this, [this] {
        const auto path = QFileDialog::getExistingDirectory(this, tr("Add a run folder"));
        if (!path.isEmpty()) add_run(path);
    });
    connect(remove, &QPushButton::clicked, this, [this] {
        auto* item = tree_->currentItem();
        if (!item) return;
        if (item->parent()) item = item->parent();
        remove_run(item->data(0, Qt::UserRole).toString());
    });
    connect(tree_, &QTreeWidget::itemChanged, this, [this](QTreeWidgetItem*, int) {
        if (!syncing_) sync_shown_legs();
    });
    connect(run_diff, &QPushButton::clicked, this, [this] { compare(a_box_->currentText(), b_box_->currentText()); });
}

CompareView::~CompareView() = default;

QString CompareView::status_text() const { return status_->text(); }

void CompareView::show_diff_tab() { tabs_->setCurrentIndex(1); }

bool CompareView::add_run(const QString& path) {
    const QString clean = QDir::cleanPath(QFileInfo(path).absoluteFilePath());
    for (const auto& r : runs_)
        if (r->path == clean) return true;
    if (auto problem = run_path_problem(clean.toStdString())) {
        status_->setText(tr("Cannot add %1").arg(QString::fromStdString(*problem)));
        return false;
    }
    auto run = std::make_unique<Followed>();
    run->path = clean;
    run->run_file = resolve_run_file(clean.toStdString()).string();
    run->follower = new RunFollower(this);
    run->item = new QTreeWidgetItem(tree_, {QFileInfo(clean).fileName() == QStringLiteral("run.h5") ? QFileInfo(clean).dir().dirName()
                                                                                                     : QFileInfo(clean).fileName()});
    run->item->setData(0, Qt::UserRole, clean);
    run->item->setFlags(run->item->flags() | Qt::ItemIsUserCheckable | Qt::ItemIsAutoTristate);
    run->item->setCheckState(0, Qt::Checked);
    Followed* raw = run.get();
    connect(run->follower, &RunFollower::delta_ready, this, [this, raw](std::shared_ptr<const RunDelta> d) { on_delta(raw, std::move(d)); });
    connect(run->follower, &RunFollower::load_failed, this, [this](const QString& m) { status_->setText(m); });
    run->follower->follow(clean);
    runs_.push_back(std::move(run));
    status_->setText(tr("%n run(s)", nullptr, static_cast<int>(runs_.size())));
    return true;
}

void CompareView::set_runs(const QStringList& paths) {
    while (!runs_.empty()) remove_run(runs_.back()->path);
    for (const auto& p : paths) add_run(p);
}

void CompareView::remove_run(const QString& path) {
    auto it = std::find_if(runs_.begin(), runs_.end(), [&](const auto& r) { return r->path == path; });
    if (it == runs_.end()) return;
    (*it)->follower->stop();
    (*it)->follower->deleteLater();
    delete (*it)->item;
    overlay_->remove_run((*it)->run_file);
    runs_.erase(it);
    refresh_labels();
    refresh_choices();
    sync_shown_legs();
}

void CompareView::on_delta(Followed* run, std::shared_ptr<const RunDelta> delta) {
    run->run_file = delta->added.path;
    run->run_id = delta->added.run_id;
    {
        // New legs appear in the tree, ticked.
        const QSignalBlocker block(tree_);
        syncing_ = true;
        run->item->setText(0, QString::fromStdString(run->run_id));
        for (const auto& leg : delta->added.legs) {
            if (std::find(run->legs.begin(), run->legs.end(), leg.leg) != run->legs.end()) continue;
            run->legs.push_back(leg.leg);
            auto* child = new QTreeWidgetItem(run->item, {QString::fromStdString(leg.leg)});
            child->setFlags(child->flags() | Qt::ItemIsUserCheckable);
            child->setCheckState(0, Qt::Checked);
            child->setData(0, Qt::UserRole, QString::fromStdString(leg.leg));
        }
        run->item->setExpanded(true);
        syncing_ = false;
    }
    overlay_->apply_delta(*delta);
    refresh_labels();
    refresh_choices();
    sync_shown_legs();
    Q_EMIT runs_updated();
}

void CompareView::refresh_labels() {
    // What the overlay's legend calls each run (its tags, or the settings that differ).
    const QSignalBlocker block(tree_);
    for (const auto& r : runs_)
        if (!r->run_id.empty()) r->item->setText(1, overlay_->run_label(r->run_id));
    tree_->resizeColumnToContents(1);
    tree_->resizeColumnToContents(0);
}

void CompareView::set_leg_shown(const std::string& run_id, const std::string& leg, bool shown) {
    for (const auto& r : runs_) {
        if (r->run_id != run_id) continue;
        for (int i = 0; i < r->item->childCount(); ++i)
            if (r->item->child(i)->data(0, Qt::UserRole).toString().toStdString() == leg)
                r->item->child(i)->setCheckState(0, shown ? Qt::Checked : Qt::Unchecked);
    }
    sync_shown_legs();
}

void CompareView::sync_shown_legs() {
    std::set<RunLeg> shown;
    bool all = true;
    for (const auto& r : runs_)
        for (int i = 0; i < r->item->childCount(); ++i) {
            auto* child = r->item->child(i);
            if (child->checkState(0) == Qt::Checked) shown.insert({r->run_id, child->data(0, Qt::UserRole).toString().toStdString()});
            else all = false;
        }
    // Nothing ticked draws nothing: an impossible leg keeps the filter non-empty.
    if (!all && shown.empty()) shown.insert({"", ""});
    overlay_->set_shown_legs(all ? std::set<RunLeg>{} : shown);
}

void CompareView::refresh_choices() {
    const QString a = a_box_->currentText(), b = b_box_->currentText();
    const QSignalBlocker block_a(a_box_), block_b(b_box_);
    a_box_->clear();
    b_box_->clear();
    const auto choices = diff_choices();
    a_box_->addItems(choices);
    b_box_->addItems(choices);
    a_box_->setCurrentIndex(std::max(0, static_cast<int>(choices.indexOf(a))));
    const int b_index = choices.indexOf(b);
    // By default the same leg of the next run (what "compare two runs" usually means).
    b_box_->setCurrentIndex(b_index >= 0 ? b_index : std::min(static_cast<int>(choices.size()) - 1, 1));
    if (b_index < 0 && runs_.size() > 1 && !runs_[0]->legs.empty()) {
        const auto same = choices.indexOf(QString::fromStdString(runs_[1]->run_id + ":" + runs_[0]->legs.front()));
        if (same >= 0) b_box_->setCurrentIndex(same);
    }
}

QStringList CompareView::diff_choices() const {
    QStringList out;
    for (const auto& r : runs_)
        for (const auto& leg : r->legs) out << QString::fromStdString(r->run_id + ":" + leg);
    return out;
}

QString CompareView::run_file_of(const std::string& run_id) const {
    for (const auto& r : runs_)
        if (r->run_id == run_id) return QString::fromStdString(r->run_file);
    return {};
}

bool CompareView::compare(const QString& a, const QString& b) {
    // "run id:leg" -> "run file:leg" for experiments' parse_run_leg.
    auto ref = [this](const QString& choice) -> std::optional<ex::RunLegRef> {
        const int colon = choice.lastIndexOf(QLatin1Char(':'));
        if (colon <= 0) return std::nullopt;
        const QString file = run_file_of(choice.left(colon).toStdString());
        if (file.isEmpty()) return std::nullopt;
        return ex::RunLegRef{file.toStdString(), choice.mid(colon + 1).toStdString()};
    };
    const auto ra = ref(a), rb = ref(b);
    if (!ra || !rb) {
        status_->setText(tr("Choose two legs (run:leg) of the runs on this page."));
        return false;
    }
    {
        // The combo boxes show the pair the tables are of.
        const QSignalBlocker block_a(a_box_), block_b(b_box_);
        if (const int i = a_box_->findText(a); i >= 0) a_box_->setCurrentIndex(i);
        if (const int i = b_box_->findText(b); i >= 0) b_box_->setCurrentIndex(i);
    }
    try {
        // Every number comes from experiments/ (the same call `tandem compare` makes).
        const auto result = ex::compare_run_legs(*ra, *rb);
        diff_->set_tables(ex::runs_comparison_tables(result),
                          tr("%1 vs %2 — the tables of `tandem compare %3:%4 %5:%6`; %7")
                              .arg(QString::fromStdString(result.label_a), QString::fromStdString(result.label_b),
                                   QString::fromStdString(ra->run.string()), QString::fromStdString(ra->leg),
                                   QString::fromStdString(rb->run.string()), QString::fromStdString(rb->leg),
                                   QString::fromStdString(result.comparison.verdict())));
        status_->clear();
        return true;
    } catch (const std::exception& e) {
        status_->setText(QString::fromUtf8(e.what()));
        return false;
    }
}

const std::vector<StringTable>& CompareView::diff_tables() const { return diff_->tables(); }

}  // namespace tandem::views
