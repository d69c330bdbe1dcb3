#include "tandem/views/trajectory_view.h"

#include "labelled.h"

#include "tandem/compare/comparison.h"

#include "tandem/views/axis_ticks.h"
#include "tandem/views/curve_points.h"

#include <QChart>
#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QGraphicsLayout>
#include <QKeyEvent>
#include <QResizeEvent>
#include <QLabel>
#include <QListWidget>
#include <QPainter>
#include <QPixmap>
#include <QMouseEvent>
#include <QPushButton>
#include <QScrollBar>
#include <QScrollArea>
#include <QSlider>
#include <QSplitter>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>
#include <QWheelEvent>

#include <algorithm>

#include <cmath>
#include <functional>

#include <nlohmann/json.hpp>

#include "tandem/compare/metrics.h"
#include "tandem/compare/run_overview.h"

namespace tandem::views {

// A QChartView that reports zoom/pan/hover in update units instead of acting alone, so the owner
// can apply the same x range to every panel.
class ChartPanel : public QChartView {
public:
    ChartPanel(QChart* chart, QWidget* parent) : QChartView(chart, parent) {
        setRenderHint(QPainter::Antialiasing);
        setRubberBand(QChartView::HorizontalRubberBand);
        setMouseTracking(true);
        setFocusPolicy(Qt::StrongFocus);
        setMinimumHeight(200);
    }
    std::function<void(double, double, bool)> on_zoom;  // lo, hi, whether it is a pan (same width)
    std::function<void(double)> on_hover;
    std::function<void()> on_reset;
    std::function<void()> on_leave;

    std::function<std::optional<std::pair<double, double>>()> zoomed;  // the view's range, ahead of the next redraw

protected:
    std::pair<double, double> current() const {
        if (zoomed)
            if (auto r = zoomed()) return *r;
        auto* axis = static_cast<QValueAxis*>(chart()->axes(Qt::Horizontal).value(0));
        return {axis->min(), axis->max()};
    }
    double update_at(const QPoint& pos) const { return chart()->mapToValue(chart()->mapFromScene(mapToScene(pos))).x(); }

    void mouseReleaseEvent(QMouseEvent* event) override {
        if (event->button() == Qt::LeftButton && rubber_origin_) {
            const double a = update_at(*rubber_origin_), b = update_at(event->position().toPoint());
            rubber_origin_.reset();
            QChartView::mouseReleaseEvent(event);  // ends the rubber band drawing
            if (std::abs(b - a) > 0 && on_zoom) on_zoom(std::min(a, b), std::max(a, b), false);
            return;
        }
        if (event->button() == Qt::RightButton && panning_) {
            panning_ = false;
            return;
        }
        QChartView::mouseReleaseEvent(event);
    }
    void mousePressEvent(QMouseEvent* event) override {
        if (event->button() == Qt::LeftButton) {
            rubber_origin_ = event->position().toPoint();
            // Let QChartView draw the band but not zoom itself: we zoom every panel together.
            QChartView::mousePressEvent(event);
            return;
        }
        if (event->button() == Qt::RightButton) {
            panning_ = true;
            pan_last_ = event->position().toPoint();
            return;
        }
        if (event->button() == Qt::MiddleButton && on_reset) on_reset();
    }
    void mouseDoubleClickEvent(QMouseEvent*) override {
        if (on_reset) on_reset();
    }
    void mouseMoveEvent(QMouseEvent* event) override {
        if (panning_) {
            const double dx = update_at(pan_last_) - update_at(event->position().toPoint());
            pan_last_ = event->position().toPoint();
            auto [lo, hi] = current();
            if (on_zoom) on_zoom(lo + dx, hi + dx, true);
            return;
        }
        if (on_hover) on_hover(update_at(event->position().toPoint()));
        QChartView::mouseMoveEvent(event);
    }
    void leaveEvent(QEvent* event) override {
        if (on_leave) on_leave();
        QChartView::leaveEvent(event);
    }
    void wheelEvent(QWheelEvent* event) override {
        auto [lo, hi] = current();
        const double at = update_at(event->position().toPoint());
        const double factor = event->angleDelta().y() > 0 ? 0.8 : 1.25;
        if (on_zoom) on_zoom(at - (at - lo) * factor, at + (hi - at) * factor, false);
    }
    void keyPressEvent(QKeyEvent* event) override {
        auto [lo, hi] = current();
        const double step = (hi - lo) * 0.1;
        switch (event->key()) {
        case Qt::Key_Left: if (on_zoom) on_zoom(lo - step, hi - step, true); return;
        case Qt::Key_Right: if (on_zoom) on_zoom(lo + step, hi + step, true); return;
        case Qt::Key_Plus: case Qt::Key_Equal: if (on_zoom) on_zoom(lo + step, hi - step, false); return;
        case Qt::Key_Minus: if (on_zoom) on_zoom(lo - step, hi + step, false); return;
        case Qt::Key_Home: if (on_reset) on_reset(); return;
        default: QChartView::keyPressEvent(event);
        }
    }

private:
    std::optional<QPoint> rubber_origin_;
    bool panning_ = false;
    QPoint pan_last_;
};

TrajectoryView::TrajectoryView(QWidget* parent) : QWidget(parent) {
    auto* layout = new QVBoxLayout(this);
    verdict_label_ = new QLabel(this);
    verdict_label_->setObjectName(QStringLiteral("verdict"));
    verdict_label_->setTextFormat(Qt::RichText);
    verdict_label_->setWordWrap(true);
    verdict_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    verdict_label_->setVisible(false);
    layout->addWidget(verdict_label_);
    auto* bar = new QHBoxLayout;
    log_box_ = new QCheckBox(tr("&Log y"), this);
    log_box_->setObjectName(QStringLiteral("logY"));
    bar->addWidget(log_box_);
    smoothing_slider_ = new QSlider(Qt::Horizontal, this);
    smoothing_slider_->setObjectName(QStringLiteral("smoothing"));
    smoothing_slider_->setRange(0, 99);
    smoothing_slider_->setToolTip(tr("Display smoothing (TensorBoard's debiased exponential moving average) of the training "
                                     "series; the raw curve stays visible, faded"));
    smoothing_slider_->setMaximumWidth(140);
    add_labelled(bar, tr("S&moothing:"), smoothing_slider_);
    smoothing_value_ = new QLabel(this);
    smoothing_value_->setObjectName(QStringLiteral("smoothing_value"));
    smoothing_value_->setMinimumWidth(smoothing_value_->fontMetrics().horizontalAdvance(QStringLiteral("0.00 ")));
    bar->addWidget(smoothing_value_);
    smooth_all_box_ = new QCheckBox(tr("also &evaluations"), this);
    smooth_all_box_->setObjectName(QStringLiteral("smooth_all"));
    smooth_all_box_->setToolTip(tr("Smooth the held-out CE and learning rate too (by default only the per-update training series)"));
    bar->addWidget(smooth_all_box_);
    x_axis_box_ = new QComboBox(this);
    x_axis_box_->setObjectName(QStringLiteral("x_axis"));
    for (const auto& x : experiments::x_axis_table()) x_axis_box_->addItem(QString::fromLatin1(x.label), static_cast<int>(x.axis));
    x_axis_box_->setToolTip(tr("What the x axis counts: updates, supervised tokens seen, or training wall time"));
    add_labelled(bar, tr("&x:"), x_axis_box_);
    residual_metric_ = new QComboBox(this);
    for (const Metric m : {Metric::HeldoutCe, Metric::TrainLoss, Metric::GradNorm})
        residual_metric_->addItem(QString::fromLatin1(experiments::metric_info(m).label), static_cast<int>(m));
    residual_metric_->addItem(QString::fromLatin1(experiments::metric_info(Metric::HeldoutCe).label) + tr(", z (seed envelope)"), kZScores);
    residual_metric_->setObjectName(QStringLiteral("residual_metric"));
    residual_metric_->setToolTip(tr("Residual panel: leg − reference in percent of |reference|, as experiments/ computed it"));
    add_labelled(bar, tr("Resi&dual of:"), residual_metric_);
    auto* reset = new QPushButton(tr("&Fit all"), this);
    reset->setToolTip(tr("Show every update (Home, double-click or middle-click in a chart)"));
    bar->addWidget(reset);
    bar->addStretch(1);
    layout->addLayout(bar);
    // Which panels are shown: every metric the run file records has one.
    auto* show_bar = new QHBoxLayout;
    show_bar->addWidget(new QLabel(tr("Show:"), this));
    for (int p = 0; p < panel_count(); ++p) {
        auto* box = new QCheckBox(panel_name(p), this);
        box->setObjectName(QStringLiteral("show_panel%1").arg(p));
        const auto metric = panel_metric(p);
        box->setChecked(!metric || experiments::metric_info(*metric).shown);  // the residual panel is shown
        show_bar->addWidget(box);
        panel_boxes_.push_back(box);
    }
    show_bar->addStretch(1);
    layout->addLayout(show_bar);

    // The panels keep a readable height (labels never elide, charts never collapse); with many
    // panels shown, the page scrolls instead.
    auto* scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    auto* splitter = new QSplitter(Qt::Vertical, scroll);
    splitter->setChildrenCollapsible(false);
    for (int i = 0; i < panel_count(); ++i) {
        auto chart = std::make_unique<TrajectoryChart>();
        auto* panel = new ChartPanel(chart->chart(), splitter);
        panel->setObjectName(QStringLiteral("panel%1").arg(i));
        panel->on_zoom = [this](double lo, double hi, bool pan) { on_panel_zoom(lo, hi, pan); };
        panel->on_hover = [this, i](double x) { hover_at(x, i); };
        panel->on_reset = [this] { set_x_range(std::nullopt); };
        panel->on_leave = [this] { clear_hover(); };
        panel->zoomed = [this] { return chosen_.x_range ? chosen_.x_range : data_x_range(); };
        splitter->addWidget(panel);
        panel->setVisible(panel_boxes_[static_cast<std::size_t>(i)]->isChecked());
        panels_.push_back(panel);
        charts_.push_back(std::move(chart));
    }
    scroll->setWidget(splitter);
    // The legend beside the panels: every curve once, a stretch of its line, click to hide/show.
    legend_ = new QListWidget(this);
    legend_->setObjectName(QStringLiteral("legend"));
    legend_->setToolTip(tr("Click a curve's name to hide or show it on every panel"));
    legend_->setTextElideMode(Qt::ElideNone);
    legend_->setWordWrap(true);
    legend_->setSelectionMode(QAbstractItemView::NoSelection);
    legend_->setFocusPolicy(Qt::NoFocus);
    legend_->setIconSize(QSize(34, 12));
    legend_->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Expanding);
    auto* charts_row = new QHBoxLayout;
    charts_row->addWidget(scroll, 1);
    charts_row->addWidget(legend_);
    layout->addLayout(charts_row, 1);
    hover_label_ = new QLabel(this);
    hover_label_->setObjectName(QStringLiteral("hover"));
    hover_label_->setTextFormat(Qt::RichText);
    hover_label_->setWordWrap(true);
    hover_label_->setMinimumHeight(hover_label_->fontMetrics().height() * 3);
    layout->addWidget(hover_label_);

    redraw_timer_ = new QTimer(this);
    redraw_timer_->setSingleShot(true);
    redraw_timer_->setInterval(40);
    connect(redraw_timer_, &QTimer::timeout, this, &TrajectoryView::redraw_now);
    connect(log_box_, &QCheckBox::toggled, this, &TrajectoryView::set_log_y);
    connect(smoothing_slider_, &QSlider::valueChanged, this, [this](int v) { set_smoothing(v / 100.0); });
    connect(smooth_all_box_, &QCheckBox::toggled, this, &TrajectoryView::set_smooth_all);
    connect(x_axis_box_, &QComboBox::currentIndexChanged, this,
            [this] { set_x_axis(static_cast<XAxis>(x_axis_box_->currentData().toInt())); });
    connect(legend_, &QListWidget::itemClicked, this, [this](QListWidgetItem* item) {
        const QString name = item->data(Qt::UserRole).toString();
        set_curve_hidden(name, !chosen_.hidden.count(name));
    });
    smoothing_value_->setText(smoothing_text());
    connect(residual_metric_, &QComboBox::currentIndexChanged, this, [this] {
        if (hovered_) hover_at(*hovered_);
        schedule_redraw();
    });
    connect(reset, &QPushButton::clicked, this, [this] { set_x_range(std::nullopt); });
    for (int p = 0; p < panel_count(); ++p)
        connect(panel_boxes_[static_cast<std::size_t>(p)], &QCheckBox::toggled, this, [this, p](bool on) { set_panel_visible(p, on); });
}

TrajectoryView::~TrajectoryView() = default;

// The metric panels are the metric table's rows, in its order; the residual panel comes last.
int TrajectoryView::panel_count() { return residual_panel() + 1; }

int TrajectoryView::residual_panel() { return static_cast<int>(experiments::metric_table().size()); }

int TrajectoryView::metric_panel(Metric metric) {
    const auto& table = experiments::metric_table();
    const auto row = std::find_if(table.begin(), table.end(), [&](const experiments::MetricInfo& m) { return m.metric == metric; });
    return static_cast<int>(row - table.begin());
}

std::optional<Metric> TrajectoryView::panel_metric(int panel) {
    const auto& table = experiments::metric_table();
    if (panel < 0 || static_cast<std::size_t>(panel) >= table.size()) return std::nullopt;
    return table[static_cast<std::size_t>(panel)].metric;
}

QString TrajectoryView::panel_name(int panel) {
    const auto metric = panel_metric(panel);
    return metric ? QString::fromLatin1(metric_label(*metric)) : tr("residual");
}

std::vector<int> TrajectoryView::figure_panels() { return {metric_panel(Metric::HeldoutCe), residual_panel(), metric_panel(Metric::GradNorm)}; }

const RunSnapshot& TrajectoryView::snapshot() const {
    static const RunSnapshot empty;
    return runs_.empty() ? empty : runs_.front();
}

QColor TrajectoryView::run_color(const std::string& run_id) {
    auto it = run_colors_.find(run_id);
    if (it == run_colors_.end()) it = run_colors_.emplace(run_id, run_colors_.size()).first;
    return leg_color(it->second);
}

void TrajectoryView::set_run_tags(std::map<std::string, std::vector<std::string>> tags) {
    run_tags_ = std::move(tags);
    refresh_labels();
    schedule_redraw();
}

QString TrajectoryView::run_label(const std::string& run_id) const {
    auto it = run_labels_.find(run_id);
    return it == run_labels_.end() ? QString::fromStdString(run_id) : it->second;
}

void TrajectoryView::refresh_labels() {
    // experiments' run_labels: the run's own tags, else what differs between the runs' specs.
    std::vector<std::string> ids;
    std::vector<nlohmann::json> specs;
    std::vector<std::vector<std::string>> tags;
    for (const auto& r : runs_) {
        ids.push_back(r.run_id);
        nlohmann::json spec;
        try {
            if (!r.spec_json.empty()) spec = nlohmann::json::parse(r.spec_json);
        } catch (const std::exception&) {
            spec = nullptr;  // an unreadable spec names the run by its id
        }
        specs.push_back(std::move(spec));
        auto t = run_tags_.find(r.run_id);
        tags.push_back(t == run_tags_.end() ? std::vector<std::string>{} : t->second);
    }
    const auto labels = experiments::run_labels(ids, specs, tags);
    run_labels_.clear();
    for (std::size_t i = 0; i < ids.size(); ++i) run_labels_[ids[i]] = QString::fromStdString(labels[i]);
}

QString TrajectoryView::curve_name(std::size_t run, const std::string& leg) const {
    if (!multi_run()) return QString::fromStdString(leg);
    return run_label(runs_[run].run_id) + QStringLiteral(" · ") + QString::fromStdString(leg);
}

bool TrajectoryView::shown(std::size_t run, const std::string& leg) const {
    return shown_legs_.empty() || shown_legs_.count({runs_[run].run_id, leg}) > 0;
}

ChartOptions TrajectoryView::panel_options(int panel) const {
    ChartOptions o = chosen_;
    o.legend = false;  // the page's own legend, beside the panels
    const auto* view = panels_.at(static_cast<std::size_t>(panel));
    o.columns = std::max(50, view->width());
    o.rows = std::max(60, view->height());
    if (panel == residual_panel()) {
        const int choice = residual_metric_->currentData().toInt();
        o.z = choice == kZScores;
        o.metric = o.z ? Metric::HeldoutCe : static_cast<Metric>(choice);
        if (o.z && !runs_.empty()) o.z_title = z_chart_title(runs_.front());
        o.residual = true;
        o.smoothing = 0;
    } else {
        o.metric = *panel_metric(panel);
    }
    return o;
}

std::vector<Curve> TrajectoryView::panel_curves(int panel) const {
    const auto options = panel_options(panel);
    if (!multi_run()) {
        if (runs_.empty()) return {};
        auto curves = run_curves(runs_.front(), options);
        if (!shown_legs_.empty())
            curves.erase(std::remove_if(curves.begin(), curves.end(), [&](const Curve& c) {
                             if (options.residual || c.markers) return false;
                             const std::string name = c.name.toStdString();
                             for (const char* keep : {envelope_min_name, envelope_max_name, envelope_lo_name, envelope_hi_name})
                                 if (name == keep) return false;
                             return !shown(0, name);
                         }),
                         curves.end());
        return curves;
    }
    // Several runs: colour per run, line style per leg (in the run's leg order).
    static const Qt::PenStyle styles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine, Qt::DashDotDotLine};
    const bool smooth = options.smooth_all || experiments::metric_info(options.metric).smoothed;
    std::vector<Curve> curves;
    auto* self = const_cast<TrajectoryView*>(this);  // run_color assigns a colour on first sight
    for (std::size_t r = 0; r < runs_.size(); ++r) {
        const auto& run = runs_[r];
        const QColor color = self->run_color(run.run_id);
        const QString label = run_label(run.run_id);
        auto clock_of = [&](const std::string& leg) -> const Series* {
            for (const auto& l : run.legs)
                if (l.leg == leg) return l.clock(options.x_axis);
            return nullptr;
        };
        if (options.residual && options.z) {
            for (const auto& z : run.z_scores)
                if (shown(r, z.leg))
                    curves.push_back(on_clock({label + QStringLiteral(": ") + QString::fromStdString(z.leg), color, Qt::SolidLine, 1.6, &z.z}, clock_of(z.leg)));
            continue;
        }
        if (options.residual) {
            for (const auto& res : run.residuals) {
                if (res.metric != options.metric || !shown(r, res.leg)) continue;
                curves.push_back(on_clock({label + QStringLiteral(": ") + QString::fromStdString(residual_name(res)), color, Qt::SolidLine, 1.6, &res.percent},
                                          clock_of(res.leg)));
            }
            continue;
        }
        for (std::size_t l = 0; l < run.legs.size(); ++l) {
            if (!shown(r, run.legs[l].leg)) continue;
            Curve c{curve_name(r, run.legs[l].leg), color, styles[l % 5], l == 0 ? 2.2 : 1.6, &run.legs[l].series(options.metric)};
            c.smooth = smooth;
            curves.push_back(on_clock(std::move(c), run.legs[l].clock(options.x_axis)));
        }
    }
    return curves;
}

const TrajectoryChart& TrajectoryView::panel_chart(int panel) const { return *charts_.at(static_cast<std::size_t>(panel)); }
QChartView* TrajectoryView::panel_view(int panel) const { return panels_.at(static_cast<std::size_t>(panel)); }
QString TrajectoryView::hover_text() const { return hover_label_->text(); }

void TrajectoryView::set_residual_metric(Metric metric) {
    const int index = residual_metric_->findData(static_cast<int>(metric));
    if (index >= 0) residual_metric_->setCurrentIndex(index);  // the combo box schedules the redraw
}

Metric TrajectoryView::residual_metric() const {
    const int choice = residual_metric_->currentData().toInt();
    return choice == kZScores ? Metric::HeldoutCe : static_cast<Metric>(choice);
}

void TrajectoryView::set_residual_z(bool on) {
    if (on) residual_metric_->setCurrentIndex(residual_metric_->findData(kZScores));
    else if (residual_z()) residual_metric_->setCurrentIndex(residual_metric_->findData(static_cast<int>(Metric::HeldoutCe)));
}

bool TrajectoryView::residual_z() const { return residual_metric_->currentData().toInt() == kZScores; }

QString TrajectoryView::verdict_text() const { return verdict_label_->text(); }

void TrajectoryView::update_verdict() {
    // One run: its verdict at the top (experiments' Comparison::verdict once every leg has ended),
    // coloured by experiments' verdict_word.
    if (runs_.size() != 1) {
        verdict_label_->setVisible(false);
        return;
    }
    const std::string& v = runs_.front().verdict;
    const auto word = experiments::verdict_word(v);
    const QString color = word.kind == experiments::VerdictClass::Pass   ? QStringLiteral("#007a4d")
                          : word.kind == experiments::VerdictClass::Fail ? QStringLiteral("#b00020")
                                                                         : QStringLiteral("#555555");
    verdict_label_->setText(QStringLiteral("<b>Verdict:</b> <span style='color:%1'>%2</span>")
                                .arg(color, v.empty() ? tr("no verdict yet (a leg is still running)")
                                                      : QString::fromStdString(v).toHtmlEscaped()));
    verdict_label_->setVisible(true);
}

void TrajectoryView::set_panel_visible(int panel, bool visible) {
    auto* box = panel_boxes_.at(static_cast<std::size_t>(panel));
    if (box->isChecked() != visible) box->setChecked(visible);  // comes back here through toggled
    panels_.at(static_cast<std::size_t>(panel))->setVisible(visible);
    schedule_redraw();
}

bool TrajectoryView::panel_visible(int panel) const { return panel_boxes_.at(static_cast<std::size_t>(panel))->isChecked(); }

void TrajectoryView::new_run_shown() {
    // Another run's updates are not this one's: the zoom and the hover start afresh.
    chosen_.x_range.reset();
    clear_hover();
}

void TrajectoryView::set_snapshot(RunSnapshot snapshot) {
    const bool same_run = runs_.size() == 1 && runs_.front().run_id == snapshot.run_id && runs_.front().path == snapshot.path;
    runs_.clear();
    if (!snapshot.path.empty() || !snapshot.legs.empty()) runs_.push_back(std::move(snapshot));
    refresh_labels();
    if (!same_run) new_run_shown();
    else if (hovered_) hover_at(*hovered_, hovered_panel_);
    schedule_redraw();
}

void TrajectoryView::apply_delta(const IncrementalRunReader::Delta& delta) {
    auto it = std::find_if(runs_.begin(), runs_.end(), [&](const RunSnapshot& r) { return r.path == delta.added.path; });
    if (it == runs_.end()) {
        if (!delta.reset) return;  // rows of a run this view does not show
        runs_.push_back(delta.added);
        new_run_shown();
        refresh_labels();
    } else {
        if (delta.reset && it->run_id != delta.added.run_id) new_run_shown();
        tandem::views::apply_delta(*it, delta);
        if (delta.reset) refresh_labels();
    }
    if (hovered_) hover_at(*hovered_, hovered_panel_);  // the read-out shows the new values, never stale ones
    schedule_redraw();
}

void TrajectoryView::set_runs(std::vector<RunSnapshot> runs) {
    runs_ = std::move(runs);
    for (const auto& r : runs_) run_color(r.run_id);
    refresh_labels();
    new_run_shown();
    schedule_redraw();
}

void TrajectoryView::remove_run(const std::string& run_file) {
    runs_.erase(std::remove_if(runs_.begin(), runs_.end(), [&](const RunSnapshot& r) { return r.path == run_file; }), runs_.end());
    refresh_labels();
    new_run_shown();
    schedule_redraw();
}

void TrajectoryView::set_shown_legs(std::set<RunLeg> legs) {
    shown_legs_ = std::move(legs);
    if (hovered_) hover_at(*hovered_, hovered_panel_);
    schedule_redraw();
}

void TrajectoryView::schedule_redraw() {
    if (!redraw_timer_->isActive()) redraw_timer_->start();
}

std::optional<std::pair<double, double>> TrajectoryView::data_x_range() const {
    std::optional<std::pair<double, double>> all;
    for (int p = 0; p < panel_count(); ++p) {
        if (p == residual_panel()) continue;
        if (auto r = TrajectoryChart::full_x_range(panel_curves(p)))
            all = all ? std::make_pair(std::min(all->first, r->first), std::max(all->second, r->second)) : *r;
    }
    return all;
}

void TrajectoryView::rebuild_legend() {
    // Every curve of the shown panels once, in panel order; rebuilt only when the list changes.
    std::vector<Curve> entries;
    QStringList names;
    for (int p = 0; p < panel_count(); ++p) {
        if (!panel_visible(p)) continue;
        for (const auto& c : panel_curves(p)) {
            if (names.contains(c.name)) continue;
            names << c.name;
            entries.push_back(c);
        }
    }
    QStringList key = names;
    for (const auto& n : chosen_.hidden) key << QStringLiteral("\x01") + n;
    if (key == legend_names_) return;
    legend_names_ = key;
    legend_->clear();
    const QSize icon = legend_->iconSize();
    const QColor dim(170, 170, 170);
    int widest = 0;
    for (const auto& c : entries) {
        const bool hidden = chosen_.hidden.count(c.name) > 0;
        QPixmap sample(icon * devicePixelRatioF());
        sample.setDevicePixelRatio(devicePixelRatioF());
        sample.fill(Qt::transparent);
        {
            QPainter painter(&sample);
            painter.setRenderHint(QPainter::Antialiasing);
            Curve shown = c;
            if (hidden) shown.color = dim;
            paint_legend_sample(painter, QRectF(1, 1, icon.width() - 2, icon.height() - 2), shown);
        }
        auto* item = new QListWidgetItem(QIcon(sample), c.name, legend_);
        item->setData(Qt::UserRole, c.name);
        item->setToolTip(hidden ? tr("%1 (hidden: click to show)").arg(c.name) : tr("%1 (click to hide)").arg(c.name));
        if (hidden) item->setForeground(dim);
        widest = std::max(widest, legend_->fontMetrics().horizontalAdvance(c.name));
    }
    // As wide as the longest name (never elided), up to 40 % of the page; wider names wrap.
    legend_width_ = widest + icon.width() + 4 * legend_->spacing() + 28 + legend_->verticalScrollBar()->sizeHint().width();
    fit_legend_width();
    legend_->setVisible(!entries.empty());
}

void TrajectoryView::fit_legend_width() {
    legend_->setFixedWidth(std::clamp(legend_width_, 120, std::max(240, width() * 2 / 5)));
}

void TrajectoryView::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    fit_legend_width();
}

void TrajectoryView::align_plot_areas() {
    // One x axis on screen too: every shown panel's plot starts where the widest y labels need it.
    std::vector<std::pair<TrajectoryChart*, double>> natural;  // chart, its plot's left edge without extra margin
    double left = 0;
    for (std::size_t i = 0; i < charts_.size(); ++i) {
        if (!panel_visible(static_cast<int>(i))) continue;
        auto* chart = charts_[i]->chart();
        chart->layout()->activate();
        const double edge = chart->plotArea().left() - (chart->margins().left() - 4);
        natural.emplace_back(charts_[i].get(), edge);
        left = std::max(left, edge);
    }
    for (auto& [chart, edge] : natural) {
        QMargins m = chart->chart()->margins();
        const int want = 4 + static_cast<int>(std::lround(left - edge));
        if (m.left() != want) {
            m.setLeft(want);
            chart->chart()->setMargins(m);
        }
    }
}

void TrajectoryView::redraw_now() {
    redraw_timer_->stop();
    update_verdict();
    // Every panel shows the same x: the union of the ranges of every curve drawn.
    std::optional<std::pair<double, double>> all = chosen_.x_range ? chosen_.x_range : data_x_range();
    if (!chosen_.x_range && all && all->second > all->first) {
        // Fit-all while following: the right edge grows in steps of about 2 % of the span, so most
        // live batches leave the range, and the curves of the runs they did not touch, as they are.
        const double step = nice_step(all->second - all->first, 50, chosen_.x_axis != XAxis::WallTime);
        all->second = std::ceil(all->second / step - 1e-9) * step;
    }
    for (std::size_t i = 0; i < charts_.size(); ++i) {
        if (!panel_visible(static_cast<int>(i))) continue;  // hidden panels are drawn when shown
        auto options = panel_options(static_cast<int>(i));
        options.x_range = all;
        charts_[i]->update(panel_curves(static_cast<int>(i)), options);
        // Many points (several runs of long trajectories): antialiasing costs more than it shows.
        panels_[i]->setRenderHint(QPainter::Antialiasing, charts_[i]->drawn_point_total() < 20000);
    }
    align_plot_areas();
    rebuild_legend();
}

void TrajectoryView::set_log_y(bool on) {
    chosen_.log_y = on;
    if (log_box_->isChecked() != on) log_box_->setChecked(on);
    schedule_redraw();
}

QString TrajectoryView::smoothing_text() const {
    return chosen_.smoothing > 0 ? QString::number(chosen_.smoothing, 'f', 2) : tr("off");
}

void TrajectoryView::set_smoothing(double weight) {
    chosen_.smoothing = weight;
    const int v = static_cast<int>(std::lround(weight * 100));
    if (smoothing_slider_->value() != v) smoothing_slider_->setValue(v);
    smoothing_value_->setText(smoothing_text());
    schedule_redraw();
}

void TrajectoryView::set_smooth_all(bool on) {
    chosen_.smooth_all = on;
    if (smooth_all_box_->isChecked() != on) smooth_all_box_->setChecked(on);
    schedule_redraw();
}

void TrajectoryView::set_x_axis(XAxis axis) {
    const int index = x_axis_box_->findData(static_cast<int>(axis));
    if (x_axis_box_->currentIndex() != index) x_axis_box_->setCurrentIndex(index);  // comes back here
    if (axis == chosen_.x_axis) return;
    chosen_.x_axis = axis;
    new_run_shown();  // the zoom was in other units
    schedule_redraw();
}

void TrajectoryView::set_curve_hidden(const QString& name, bool hidden) {
    if (hidden) chosen_.hidden.insert(name);
    else chosen_.hidden.erase(name);
    if (hovered_) hover_at(*hovered_, hovered_panel_);
    schedule_redraw();
}

void TrajectoryView::set_x_range(std::optional<std::pair<double, double>> range) {
    chosen_.x_range = range;
    if (range) Q_EMIT x_range_changed(range->first, range->second);
    schedule_redraw();
}

void TrajectoryView::on_panel_zoom(double lo, double hi, bool pan) {
    if (!(hi > lo)) return;
    // Zoom and pan stay inside the data: a pan stops at its ends, a zoom out to all of it is "fit all".
    if (const auto data = data_x_range()) {
        const double width = hi - lo;
        if (width >= data->second - data->first || (lo <= data->first && hi >= data->second)) {
            set_x_range(std::nullopt);
            return;
        }
        // Past an end, the range moves back inside at the same width (a pan stops at the data's
        // end; a zoom out keeps growing on the other side).
        if (lo < data->first) hi += data->first - lo, lo = data->first;
        if (hi > data->second) lo -= hi - data->second, hi = data->second;
        lo = std::max(lo, data->first);
        if (!pan && lo <= data->first && hi >= data->second) {
            set_x_range(std::nullopt);
            return;
        }
    }
    set_x_range(std::make_pair(lo, hi));
}

void TrajectoryView::clear_hover() {
    hovered_.reset();
    hovered_panel_ = -1;
    hover_label_->clear();
    for (auto& chart : charts_) chart->set_crosshair(std::nullopt);
}

QString TrajectoryView::hover_tooltip_text() const {
    if (hovered_panel_ < 0) return {};
    const auto* tip = charts_[static_cast<std::size_t>(hovered_panel_)]->crosshair_tip();
    return tip->isVisible() ? tip->toPlainText() : QString();
}

void TrajectoryView::hover_at(double update, int panel) {
    // One x per panel: the recorded x nearest to the pointer over every curve of the panel; every
    // curve is then read at exactly that x ("–" where it has no point there).
    hovered_ = update;
    hovered_panel_ = panel;
    const QString x_name = QString::fromLatin1(experiments::x_axis_info(chosen_.x_axis).label);
    QStringList lines;
    std::optional<double> cross;  // where the crosshair goes: the hovered panel's recorded x
    auto line_for = [&](int p, const QString& title, std::vector<Curve> curves, const QString& unit, int digits) {
        // Flag markers are listed on their own lines below, with their reason; hidden curves not at all.
        curves.erase(std::remove_if(curves.begin(), curves.end(), [&](const Curve& c) { return c.markers || chosen_.hidden.count(c.name); }),
                     curves.end());
        std::vector<const Series*> series;
        for (const auto& c : curves) series.push_back(c.series);
        const auto at = nearest_update(series, update);
        if (!at) return;
        QStringList parts, tip;
        for (const auto& c : curves) {
            const auto v = value_at(*c.series, *at);
            const QString value = v ? QString::number(*v, 'g', digits) + unit : QStringLiteral("–");
            parts << QStringLiteral("<span style='color:%1'>%2</span> %3").arg(c.color.name(), c.name.toHtmlEscaped(), value);
            tip << QStringLiteral("<span style='color:%1'>&#9473;</span> %2: <b>%3</b>").arg(c.color.name(), c.name.toHtmlEscaped(), value);
        }
        const QString at_text = chosen_.x_axis == XAxis::WallTime ? QString::number(*at, 'g', 6) : QString::number(*at, 'f', 0);
        lines << QStringLiteral("<b>%1</b> @ %2 %3: %4").arg(title, x_name, at_text, parts.join(QStringLiteral(" · ")));
        if (p == panel) {
            cross = *at;
            charts_[static_cast<std::size_t>(p)]->set_crosshair(*at, QStringLiteral("<b>%1 %2</b><br>%3").arg(x_name, at_text, tip.join(QStringLiteral("<br>"))));
        }
    };
    for (int p = 0; p < panel_count(); ++p) {
        if (!panel_visible(p)) continue;
        if (p == residual_panel() && residual_z()) {
            line_for(p, QStringLiteral("z in the seed envelope, held-out CE"), panel_curves(p), QString(), 4);
        } else if (p == residual_panel()) {
            const Metric m = residual_metric();
            line_for(p, QStringLiteral("residual (%), %1").arg(QString::fromLatin1(metric_label(m))), panel_curves(p), QStringLiteral("%"), 6);
        } else {
            line_for(p, panel_name(p), panel_curves(p), QString(), 8);
        }
    }
    // The crosshair on every other shown panel at the same x (no read-out there).
    for (int p = 0; p < panel_count(); ++p)
        if (p != panel) charts_[static_cast<std::size_t>(p)]->set_crosshair(cross ? cross : std::optional<double>(update));
    // The gate's flags at the hovered update, with their reason.
    if (runs_.size() == 1 && chosen_.x_axis == XAxis::Update) {
        const double span = chosen_.x_range ? chosen_.x_range->second - chosen_.x_range->first : 0.0;
        const double tolerance = std::max(0.5, span / 200.0);
        for (const auto& f : runs_.front().flags)
            if (std::fabs(f.update - update) <= tolerance)
                lines << QStringLiteral("<span style='color:#c81e1e'>&#9650;</span> <b>gate flag</b> %1 @ update %2 (%3, %4): %5")
                             .arg(QString::fromStdString(f.leg).toHtmlEscaped(), QString::number(f.update, 'f', 0),
                                  QString::fromStdString(f.kind), QString::fromStdString(f.action),
                                  QString::fromStdString(f.message).toHtmlEscaped());
    }
    hover_label_->setText(lines.join(QStringLiteral("<br>")));
}

}  // namespace tandem::views
