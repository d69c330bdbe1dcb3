#include "tandem/views/trajectory_view.h"

#include "tandem/compare/compare.h"

#include "tandem/views/axis_ticks.h"
#include "tandem/views/curve_points.h"

#include <QChart>
#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPushButton>
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
    std::function<void(double, double)> on_zoom;
    std::function<void(double)> on_hover;
    std::function<void()> on_reset;
    std::function<void()> on_leave;

protected:
    std::pair<double, double> current() const {
        auto* axis = static_cast<QValueAxis*>(chart()->axes(Qt::Horizontal).value(0));
        return {axis->min(), axis->max()};
    }
    double update_at(const QPoint& pos) const { return chart()->mapToValue(chart()->mapFromScene(mapToScene(pos))).x(); }

    void mouseReleaseEvent(QMouseEvent* event) override {
        if (event->button() == Qt::LeftButton && rubber_origin_) {
            const double a = update_at(*rubber_origin_), b = update_at(event->position().toPoint());
            rubber_origin_.reset();
            QChartView::mouseReleaseEvent(event);  // ends the rubber band drawing
            if (std::abs(b - a) > 0 && on_zoom) on_zoom(std::min(a, b), std::max(a, b));
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
            if (on_zoom) on_zoom(lo + dx, hi + dx);
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
        if (on_zoom) on_zoom(at - (at - lo) * factor, at + (hi - at) * factor);
    }
    void keyPressEvent(QKeyEvent* event) override {
        auto [lo, hi] = current();
        const double step = (hi - lo) * 0.1;
        switch (event->key()) {
        case Qt::Key_Left: if (on_zoom) on_zoom(lo - step, hi - step); return;
        case Qt::Key_Right: if (on_zoom) on_zoom(lo + step, hi + step); return;
        case Qt::Key_Plus: case Qt::Key_Equal: if (on_zoom) on_zoom(lo + step, hi - step); return;
        case Qt::Key_Minus: if (on_zoom) on_zoom(lo - step, hi + step); return;
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
    auto* smoothing_label = new QLabel(tr("S&moothing:"), this);
    bar->addWidget(smoothing_label);
    smoothing_slider_ = new QSlider(Qt::Horizontal, this);
    smoothing_label->setBuddy(smoothing_slider_);
    smoothing_slider_->setObjectName(QStringLiteral("smoothing"));
    smoothing_slider_->setRange(0, 99);
    smoothing_slider_->setToolTip(tr("Display smoothing (exponential moving average); the raw curve stays visible"));
    smoothing_slider_->setMaximumWidth(140);
    bar->addWidget(smoothing_slider_);
    auto* residual_label = new QLabel(tr("Resi&dual of:"), this);
    bar->addWidget(residual_label);
    residual_metric_ = new QComboBox(this);
    residual_label->setBuddy(residual_metric_);
    residual_metric_->addItem(tr("held-out CE"), static_cast<int>(Metric::HeldoutCe));
    residual_metric_->addItem(tr("training loss"), static_cast<int>(Metric::TrainLoss));
    residual_metric_->addItem(tr("grad norm"), static_cast<int>(Metric::GradNorm));
    residual_metric_->addItem(tr("held-out CE, z (seed envelope)"), kZScores);
    residual_metric_->setObjectName(QStringLiteral("residual_metric"));
    residual_metric_->setToolTip(tr("Residual panel: leg − reference in percent of |reference|, as experiments/ computed it"));
    bar->addWidget(residual_metric_);
    auto* reset = new QPushButton(tr("&Fit all"), this);
    reset->setToolTip(tr("Show every update (Home, double-click or middle-click in a chart)"));
    bar->addWidget(reset);
    bar->addStretch(1);
    layout->addLayout(bar);
    // Which panels are shown: every metric the run file records has one.
    auto* show_bar = new QHBoxLayout;
    show_bar->addWidget(new QLabel(tr("Show:"), this));
    for (int p = 0; p < PanelCount; ++p) {
        auto* box = new QCheckBox(panel_name(static_cast<Panel>(p)), this);
        box->setObjectName(QStringLiteral("show_panel%1").arg(p));
        box->setChecked(p != LearningRatePanel && p != ThroughputPanel);
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
    for (int i = 0; i < PanelCount; ++i) {
        auto chart = std::make_unique<TrajectoryChart>();
        auto* panel = new ChartPanel(chart->chart(), splitter);
        panel->setObjectName(QStringLiteral("panel%1").arg(i));
        panel->on_zoom = [this](double lo, double hi) { on_panel_zoom(lo, hi); };
        panel->on_hover = [this](double u) { hover_at(u); };
        panel->on_reset = [this] { set_x_range(std::nullopt); };
        panel->on_leave = [this] { clear_hover(); };
        splitter->addWidget(panel);
        panel->setVisible(panel_boxes_[static_cast<std::size_t>(i)]->isChecked());
        panels_.push_back(panel);
        charts_.push_back(std::move(chart));
    }
    scroll->setWidget(splitter);
    layout->addWidget(scroll, 1);
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
    connect(residual_metric_, &QComboBox::currentIndexChanged, this, [this] {
        if (hovered_) hover_at(*hovered_);
        schedule_redraw();
    });
    connect(reset, &QPushButton::clicked, this, [this] { set_x_range(std::nullopt); });
    for (int p = 0; p < PanelCount; ++p)
        connect(panel_boxes_[static_cast<std::size_t>(p)], &QCheckBox::toggled, this,
                [this, p](bool on) { set_panel_visible(static_cast<Panel>(p), on); });
}

TrajectoryView::~TrajectoryView() = default;

Metric TrajectoryView::panel_metric(Panel panel) {
    switch (panel) {
    case HeldoutPanel: return Metric::HeldoutCe;
    case TrainLossPanel: return Metric::TrainLoss;
    case GradNormPanel: return Metric::GradNorm;
    case LearningRatePanel: return Metric::LearningRate;
    case ThroughputPanel: return Metric::Throughput;
    default: return Metric::HeldoutCe;
    }
}

QString TrajectoryView::panel_name(Panel panel) {
    switch (panel) {
    case HeldoutPanel: return tr("held-out CE");
    case TrainLossPanel: return tr("training loss");
    case GradNormPanel: return tr("grad norm");
    case LearningRatePanel: return tr("learning rate");
    case ThroughputPanel: return tr("tokens/s");
    case ResidualPanel: return tr("residual");
    default: return {};
    }
}

const RunSnapshot& TrajectoryView::snapshot() const {
    static const RunSnapshot empty;
    return runs_.empty() ? empty : runs_.front();
}

QColor TrajectoryView::run_color(const std::string& run_id) {
    auto it = run_colors_.find(run_id);
    if (it == run_colors_.end()) it = run_colors_.emplace(run_id, run_colors_.size()).first;
    return leg_color(it->second);
}

QString TrajectoryView::curve_name(std::size_t run, const std::string& leg) const {
    if (!multi_run()) return QString::fromStdString(leg);
    return QString::fromStdString(runs_[run].run_id + "/" + leg);
}

bool TrajectoryView::shown(std::size_t run, const std::string& leg) const {
    return shown_legs_.empty() || shown_legs_.count({runs_[run].run_id, leg}) > 0;
}

ChartOptions TrajectoryView::panel_options(int panel) const {
    ChartOptions o;
    o.log_y = log_y_;
    o.smoothing = smoothing_;
    o.x_range = x_range_;
    const auto* view = panels_.at(static_cast<std::size_t>(panel));
    o.columns = std::max(50, view->width());
    o.rows = std::max(60, view->height());
    if (panel == ResidualPanel) {
        const int choice = residual_metric_->currentData().toInt();
        o.z = choice == kZScores;
        o.metric = o.z ? Metric::HeldoutCe : static_cast<Metric>(choice);
        if (o.z && !runs_.empty()) o.z_title = z_chart_title(runs_.front());
        o.residual = true;
        o.smoothing = 0;
    } else {
        o.metric = panel_metric(static_cast<Panel>(panel));
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
    std::vector<Curve> curves;
    auto* self = const_cast<TrajectoryView*>(this);  // run_color assigns a colour on first sight
    for (std::size_t r = 0; r < runs_.size(); ++r) {
        const auto& run = runs_[r];
        const QColor color = self->run_color(run.run_id);
        if (options.residual && options.z) {
            for (const auto& z : run.z_scores)
                if (shown(r, z.leg))
                    curves.push_back({QString::fromStdString(run.run_id + ": " + z.leg), color, Qt::SolidLine, 1.6, &z.z});
            continue;
        }
        if (options.residual) {
            for (const auto& res : run.residuals) {
                if (res.metric != options.metric || !shown(r, res.leg)) continue;
                curves.push_back({QString::fromStdString(run.run_id + ": " + residual_name(res)), color, Qt::SolidLine, 1.6, &res.percent});
            }
            continue;
        }
        for (std::size_t l = 0; l < run.legs.size(); ++l) {
            if (!shown(r, run.legs[l].leg)) continue;
            curves.push_back({curve_name(r, run.legs[l].leg), color, styles[l % 5], l == 0 ? 2.2 : 1.6,
                              &run.legs[l].series(options.metric)});
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
    // One run: its verdict at the top (experiments' Comparison::verdict once every leg has ended).
    if (runs_.size() != 1) {
        verdict_label_->setVisible(false);
        return;
    }
    const std::string& v = runs_.front().verdict;
    const bool passes = tandem::experiments::verdict_line_passes(v);  // the verdict's own words decide, not the view
    const QString color = v.empty() ? QStringLiteral("#555555") : passes ? QStringLiteral("#007a4d") : QStringLiteral("#b00020");
    verdict_label_->setText(QStringLiteral("<b>Verdict:</b> <span style='color:%1'>%2</span>")
                                .arg(color, v.empty() ? tr("no verdict yet (a leg is still running)")
                                                      : QString::fromStdString(v).toHtmlEscaped()));
    verdict_label_->setVisible(true);
}

void TrajectoryView::set_panel_visible(Panel panel, bool visible) {
    auto* box = panel_boxes_.at(static_cast<std::size_t>(panel));
    if (box->isChecked() != visible) box->setChecked(visible);  // comes back here through toggled
    panels_.at(static_cast<std::size_t>(panel))->setVisible(visible);
    schedule_redraw();
}

bool TrajectoryView::panel_visible(Panel panel) const { return panel_boxes_.at(static_cast<std::size_t>(panel))->isChecked(); }

void TrajectoryView::set_snapshot(RunSnapshot snapshot) {
    const bool same_run = runs_.size() == 1 && runs_.front().run_id == snapshot.run_id && runs_.front().path == snapshot.path;
    runs_.clear();
    if (!snapshot.path.empty() || !snapshot.legs.empty()) runs_.push_back(std::move(snapshot));
    if (!same_run) clear_hover();
    else if (hovered_) hover_at(*hovered_);
    schedule_redraw();
}

void TrajectoryView::apply_delta(const IncrementalRunReader::Delta& delta) {
    auto it = std::find_if(runs_.begin(), runs_.end(), [&](const RunSnapshot& r) { return r.path == delta.added.path; });
    if (it == runs_.end()) {
        if (!delta.reset) return;  // rows of a run this view does not show
        runs_.push_back(delta.added);
        if (runs_.size() == 1) clear_hover();
    } else {
        if (delta.reset && it->run_id != delta.added.run_id) clear_hover();
        tandem::views::apply_delta(*it, delta);
    }
    if (hovered_) hover_at(*hovered_);  // the read-out shows the new values, never stale ones
    schedule_redraw();
}

void TrajectoryView::set_runs(std::vector<RunSnapshot> runs) {
    runs_ = std::move(runs);
    for (const auto& r : runs_) run_color(r.run_id);
    clear_hover();
    schedule_redraw();
}

void TrajectoryView::remove_run(const std::string& run_file) {
    runs_.erase(std::remove_if(runs_.begin(), runs_.end(), [&](const RunSnapshot& r) { return r.path == run_file; }), runs_.end());
    clear_hover();
    schedule_redraw();
}

void TrajectoryView::set_shown_legs(std::set<RunLeg> legs) {
    shown_legs_ = std::move(legs);
    if (hovered_) hover_at(*hovered_);
    schedule_redraw();
}

void TrajectoryView::schedule_redraw() {
    if (!redraw_timer_->isActive()) redraw_timer_->start();
}

void TrajectoryView::redraw_now() {
    redraw_timer_->stop();
    update_verdict();
    // Every panel shows the same updates: the union of the ranges of every curve drawn.
    std::optional<std::pair<double, double>> all = x_range_;
    if (!all) {
        for (int p = 0; p < PanelCount; ++p) {
            if (p == ResidualPanel) continue;
            if (auto r = TrajectoryChart::full_x_range(panel_curves(p)))
                all = all ? std::make_pair(std::min(all->first, r->first), std::max(all->second, r->second)) : *r;
        }
    }
    if (!x_range_ && all && all->second > all->first) {
        // Fit-all while following: the right edge grows in steps of about 2 % of the span, so most
        // live batches leave the range, and the curves of the runs they did not touch, as they are.
        const double step = nice_step(all->second - all->first, 50, true);
        all->second = std::ceil(all->second / step - 1e-9) * step;
    }
    bool legend_shown = false;
    for (std::size_t i = 0; i < charts_.size(); ++i) {
        if (!panel_visible(static_cast<Panel>(i))) continue;  // hidden panels are drawn when shown
        auto options = panel_options(static_cast<int>(i));
        options.x_range = all;
        // Several runs: the long "run/leg" legend once (top panel) and on the residual panel, whose
        // curves are the pairs; the panels between keep their height for the curves.
        if (multi_run()) options.legend = i == ResidualPanel || !legend_shown;
        legend_shown = true;
        charts_[i]->update(panel_curves(static_cast<int>(i)), options);
        // Many points (several runs of long trajectories): antialiasing costs more than it shows.
        panels_[i]->setRenderHint(QPainter::Antialiasing, charts_[i]->drawn_point_total() < 20000);
    }
}

void TrajectoryView::set_log_y(bool on) {
    log_y_ = on;
    if (log_box_->isChecked() != on) log_box_->setChecked(on);
    schedule_redraw();
}

void TrajectoryView::set_smoothing(double weight) {
    smoothing_ = weight;
    const int v = static_cast<int>(std::lround(weight * 100));
    if (smoothing_slider_->value() != v) smoothing_slider_->setValue(v);
    schedule_redraw();
}

void TrajectoryView::set_x_range(std::optional<std::pair<double, double>> range) {
    x_range_ = range;
    if (range) Q_EMIT x_range_changed(range->first, range->second);
    schedule_redraw();
}

void TrajectoryView::on_panel_zoom(double lo, double hi) {
    if (!(hi > lo)) return;
    set_x_range(std::make_pair(lo, hi));
}

void TrajectoryView::clear_hover() {
    hovered_.reset();
    hover_label_->clear();
}

void TrajectoryView::hover_at(double update) {
    // One update per panel: the recorded update nearest to the pointer over every curve of the
    // panel; every curve is then read at exactly that update ("–" where it has no point there).
    hovered_ = update;
    QStringList lines;
    auto line_for = [&](const QString& title, std::vector<Curve> curves, const QString& unit, int digits) {
        // Flag markers are listed on their own lines below, with their reason.
        curves.erase(std::remove_if(curves.begin(), curves.end(), [](const Curve& c) { return c.markers; }), curves.end());
        std::vector<const Series*> series;
        for (const auto& c : curves) series.push_back(c.series);
        const auto at = nearest_update(series, update);
        if (!at) return;
        QStringList parts;
        for (const auto& c : curves) {
            const auto v = value_at(*c.series, *at);
            parts << QStringLiteral("<span style='color:%1'>%2</span> %3")
                         .arg(c.color.name(), c.name.toHtmlEscaped(), v ? QString::number(*v, 'g', digits) + unit : QStringLiteral("–"));
        }
        lines << QStringLiteral("<b>%1</b> @ update %2: %3").arg(title, QString::number(*at, 'f', 0), parts.join(QStringLiteral(" · ")));
    };
    for (int p = 0; p < PanelCount; ++p) {
        if (!panel_visible(static_cast<Panel>(p))) continue;
        if (p == ResidualPanel && residual_z()) {
            line_for(QStringLiteral("z in the seed envelope, held-out CE"), panel_curves(p), QString(), 4);
        } else if (p == ResidualPanel) {
            const Metric m = residual_metric();
            line_for(QStringLiteral("residual (%), %1").arg(QString::fromLatin1(metric_label(m))),
                     panel_curves(p), QStringLiteral("%"), 6);
        } else {
            line_for(QString::fromLatin1(metric_label(panel_metric(static_cast<Panel>(p)))), panel_curves(p), QString(), 8);
        }
    }
    // The gate's flags at the hovered update, with their reason.
    if (runs_.size() == 1) {
        const double span = x_range_ ? x_range_->second - x_range_->first : 0.0;
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
