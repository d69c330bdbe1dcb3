// The divergence page (tandem/views/divergence_view.h).
#include "tandem/views/divergence_view.h"

#include "tandem/views/divergence_model.h"
#include "tandem/views/trajectory_chart.h"

#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>

namespace tandem::views {

DivergenceView::DivergenceView(QWidget* parent) : QWidget(parent) {
    model_ = new DivergenceModel(this);
    updates_ = new QComboBox(this);
    summary_ = new QLabel(tr("Open a run recorded with \"observe\" to see where its legs diverge."), this);
    summary_->setWordWrap(true);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    view_ = new QTableView(this);
    view_->setModel(model_);
    view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    view_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    view_->setSelectionMode(QAbstractItemView::SingleSelection);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Update:"), this));
    top->addWidget(updates_);
    top->addStretch(1);
    auto* legend = new QLabel(tr("cell: difference / bound, largest over the update's micro-batches "
                                 "(white ≪ 1, yellow ≈ 1, orange–red > 1); ◆ the first point over its bound"),
                              this);
    legend->setWordWrap(true);
    // The per-layer update-norm curves (docs/observables.md) under the heat map, the split adjustable.
    norm_chart_ = std::make_unique<TrajectoryChart>();
    norm_view_ = new QChartView(norm_chart_->chart(), this);
    norm_view_->setRenderHint(QPainter::Antialiasing);
    norm_view_->setMinimumHeight(160);
    norm_note_ = new QLabel(this);
    norm_note_->setWordWrap(true);
    auto* grid = new QWidget(this);
    auto* grid_layout = new QVBoxLayout(grid);
    grid_layout->setContentsMargins(0, 0, 0, 0);
    grid_layout->addWidget(view_, 1);
    grid_layout->addWidget(legend);
    // Layers often have nearly equal norms (AdamW moves every element by about lr): a chooser shows one
    // layer's legs alone; with all layers, earlier layers are drawn wider under the later ones.
    norm_layers_ = new QComboBox(this);
    norm_layers_->addItem(tr("all"), QVariant::fromValue<qlonglong>(-1));
    auto* norms_top = new QHBoxLayout;
    norms_top->addWidget(new QLabel(tr("Update norms, layers:"), this));
    norms_top->addWidget(norm_layers_);
    norms_top->addStretch(1);
    auto* norms = new QWidget(this);
    auto* norms_layout = new QVBoxLayout(norms);
    norms_layout->setContentsMargins(0, 0, 0, 0);
    norms_layout->addLayout(norms_top);
    norms_layout->addWidget(norm_view_, 1);
    norms_layout->addWidget(norm_note_);
    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(grid);
    split->addWidget(norms);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addWidget(summary_);
    layout->addWidget(split, 1);
    draw_norms();
    connect(norm_layers_, &QComboBox::currentIndexChanged, this, [this](int) { draw_norms(); });
    connect(updates_, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (i >= 0) model_->set_update(updates_->itemData(i).toLongLong());
    });
}

void DivergenceView::load(const std::filesystem::path& run_file) {
    updates_->blockSignals(true);
    updates_->clear();
    try {
        model_->set_localisation(load_divergence(run_file));
        for (std::int64_t u : model_->localisation().updates) updates_->addItem(QString::number(u), QVariant::fromValue<qlonglong>(u));
        updates_->setCurrentIndex(updates_->findData(QVariant::fromValue<qlonglong>(model_->update())));
        summary_->setText(model_->summary());
    } catch (const std::exception& e) {
        model_->set_localisation({});
        summary_->setText(QString::fromUtf8(e.what()));
    }
    updates_->blockSignals(false);
    // The update norms are recorded at every evaluation, with or without fingerprints.
    try {
        norm_curves_ = load_update_norm_curves(run_file);
        norm_note_->setText(norm_curves_.empty()
                                ? tr("No leg recorded adapter norms (the observables event of each evaluation).")
                                : tr("‖ΔW‖ = ‖B·A‖·scaling per layer (all adapted projections), at every evaluation, as "
                                     "each leg recorded it; colour: layer, line: leg (the first solid and wide, the "
                                     "others dashed on top; earlier layers wider under later ones), so coinciding "
                                     "curves still show every leg and layer."));
    } catch (const std::exception& e) {
        norm_curves_.clear();
        norm_note_->setText(QString::fromUtf8(e.what()));
    }
    norm_layers_->blockSignals(true);
    norm_layers_->clear();
    norm_layers_->addItem(tr("all"), QVariant::fromValue<qlonglong>(-1));
    std::vector<std::int64_t> layers;
    for (const auto& c : norm_curves_)
        if (std::find(layers.begin(), layers.end(), c.layer) == layers.end()) layers.push_back(c.layer);
    for (std::int64_t l : layers) norm_layers_->addItem(QString::number(l), QVariant::fromValue<qlonglong>(l));
    norm_layers_->blockSignals(false);
    draw_norms();
}

void DivergenceView::show_norm_layer(std::optional<std::int64_t> layer) {
    const int i = norm_layers_->findData(QVariant::fromValue<qlonglong>(layer ? *layer : -1));
    if (i >= 0) norm_layers_->setCurrentIndex(i);  // redraws
}

void DivergenceView::draw_norms() {
    const qlonglong only = norm_layers_->currentIndex() >= 0 ? norm_layers_->currentData().toLongLong() : -1;
    std::vector<std::string> legs;
    std::vector<std::int64_t> layers;
    for (const auto& c : norm_curves_) {
        if (std::find(legs.begin(), legs.end(), c.leg) == legs.end()) legs.push_back(c.leg);
        if (std::find(layers.begin(), layers.end(), c.layer) == layers.end()) layers.push_back(c.layer);
    }
    std::vector<Curve> curves;
    for (const auto& c : norm_curves_) {
        if (only >= 0 && c.layer != only) continue;
        const size_t leg = size_t(std::find(legs.begin(), legs.end(), c.leg) - legs.begin());
        const size_t layer = size_t(std::find(layers.begin(), layers.end(), c.layer) - layers.begin());
        Curve k;
        k.name = c.name;
        k.color = leg_color(layer);
        k.style = leg == 0 ? Qt::SolidLine : Qt::DashLine;
        // the first leg solid and wide, earlier layers wider (up to 4 steps) so a later layer drawn
        // on top of an equal one leaves its edges visible; the other legs dashed and thin on top
        const double under = only >= 0 ? 0.0 : double(std::min<size_t>(layers.size() - 1 - layer, 4));
        k.width = leg == 0 ? 2.4 + 1.6 * under : 1.4 + 1.0 * under;
        k.series = &c.series;
        curves.push_back(k);
    }
    ChartOptions o;
    o.y_title = QStringLiteral("‖ΔW‖ per layer");
    o.envelope = false;
    o.columns = std::max(200, norm_view_->width());
    o.rows = std::max(120, norm_view_->height());
    norm_chart_->update(curves, o);
    norm_chart_->chart()->setTitle(curves.empty() ? QString() : tr("LoRA update norm per layer, legs overlaid"));
}

QString DivergenceView::norm_note_text() const { return norm_note_->text(); }

DivergenceView::~DivergenceView() = default;

QString DivergenceView::summary_text() const { return summary_->text(); }

}  // namespace tandem::views
