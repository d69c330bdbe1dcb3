#include "tandem/views/trajectory_view.h"

#include "tandem/views/curve_points.h"

#include <QChart>
#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPushButton>
#include <QSlider>
#include <QSplitter>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>
#include <QWheelEvent>

#include <cmath>

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
        setMinimumHeight(160);
    }
    std::function<void(double, double)> on_zoom;
    std::function<void(double)> on_hover;
    std::function<void()> on_reset;

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
    auto* bar = new QHBoxLayout;
    log_box_ = new QCheckBox(tr("&Log y"), this);
    log_box_->setObjectName(QStringLiteral("logY"));
    bar->addWidget(log_box_);
    bar->addWidget(new QLabel(tr("Smoothing:"), this));
    smoothing_slider_ = new QSlider(Qt::Horizontal, this);
    smoothing_slider_->setObjectName(QStringLiteral("smoothing"));
    smoothing_slider_->setRange(0, 99);
    smoothing_slider_->setToolTip(tr("Display smoothing (exponential moving average); the raw curve stays visible"));
    smoothing_slider_->setMaximumWidth(160);
    bar->addWidget(smoothing_slider_);
    bar->addWidget(new QLabel(tr("Residual of:"), this));
    residual_metric_ = new QComboBox(this);
    residual_metric_->addItem(tr("held-out loss"), static_cast<int>(Metric::HeldoutLoss));
    residual_metric_->addItem(tr("training loss"), static_cast<int>(Metric::TrainLoss));
    residual_metric_->addItem(tr("grad norm"), static_cast<int>(Metric::GradNorm));
    residual_metric_->setObjectName(QStringLiteral("residual_metric"));
    residual_metric_->setToolTip(tr("Residual panel: leg − reference in percent of |reference|, as experiments/ computed it"));
    bar->addWidget(residual_metric_);
    auto* reset = new QPushButton(tr("&Fit all"), this);
    reset->setToolTip(tr("Show every update (Home, double-click or middle-click in a chart)"));
    bar->addWidget(reset);
    bar->addStretch(1);
    layout->addLayout(bar);

    auto* splitter = new QSplitter(Qt::Vertical, this);
    for (std::size_t i = 0; i < 3; ++i) {
        auto chart = std::make_unique<TrajectoryChart>();
        auto* panel = new ChartPanel(chart->chart(), splitter);
        panel->setObjectName(QStringLiteral("panel%1").arg(i));
        panel->on_zoom = [this](double lo, double hi) { on_panel_zoom(lo, hi); };
        panel->on_hover = [this](double u) { on_hover(u); };
        panel->on_reset = [this] { set_x_range(std::nullopt); };
        splitter->addWidget(panel);
        panels_.push_back(panel);
        charts_.push_back(std::move(chart));
    }
    layout->addWidget(splitter, 1);
    hover_label_ = new QLabel(this);
    hover_label_->setObjectName(QStringLiteral("hover"));
    hover_label_->setTextFormat(Qt::RichText);
    hover_label_->setMinimumHeight(hover_label_->fontMetrics().height() * 3);
    layout->addWidget(hover_label_);

    redraw_timer_ = new QTimer(this);
    redraw_timer_->setSingleShot(true);
    redraw_timer_->setInterval(40);
    connect(redraw_timer_, &QTimer::timeout, this, &TrajectoryView::redraw_now);
    connect(log_box_, &QCheckBox::toggled, this, &TrajectoryView::set_log_y);
    connect(smoothing_slider_, &QSlider::valueChanged, this, [this](int v) { set_smoothing(v / 100.0); });
    connect(residual_metric_, &QComboBox::currentIndexChanged, this, [this] { schedule_redraw(); });
    connect(reset, &QPushButton::clicked, this, [this] { set_x_range(std::nullopt); });
}

TrajectoryView::~TrajectoryView() = default;

ChartOptions TrajectoryView::panel_options(int panel) const {
    ChartOptions o;
    o.log_y = log_y_;
    o.smoothing = smoothing_;
    o.x_range = x_range_;
    o.columns = std::max(50, panels_.at(static_cast<std::size_t>(panel))->width());
    switch (panel) {
    case 0: o.metric = Metric::HeldoutLoss; break;
    case 1: o.metric = Metric::GradNorm; break;
    default:
        o.metric = static_cast<Metric>(residual_metric_->currentData().toInt());
        o.residual = true;
        o.smoothing = 0;
    }
    return o;
}

const TrajectoryChart& TrajectoryView::panel_chart(int panel) const { return *charts_.at(static_cast<std::size_t>(panel)); }
QChartView* TrajectoryView::panel_view(int panel) const { return panels_.at(static_cast<std::size_t>(panel)); }
QString TrajectoryView::hover_text() const { return hover_label_->text(); }

void TrajectoryView::set_residual_metric(Metric metric) {
    const int index = residual_metric_->findData(static_cast<int>(metric));
    if (index >= 0) residual_metric_->setCurrentIndex(index);  // the combo box schedules the redraw
}

Metric TrajectoryView::residual_metric() const { return static_cast<Metric>(residual_metric_->currentData().toInt()); }

void TrajectoryView::set_snapshot(RunSnapshot snapshot) {
    snapshot_ = std::move(snapshot);
    schedule_redraw();
}

void TrajectoryView::schedule_redraw() {
    if (!redraw_timer_->isActive()) redraw_timer_->start();
}

void TrajectoryView::redraw_now() {
    redraw_timer_->stop();
    for (std::size_t i = 0; i < charts_.size(); ++i) {
        auto options = panel_options(static_cast<int>(i));
        if (!options.x_range) {
            // Every panel shows the same updates: the union of the loss and grad-norm ranges.
            std::optional<std::pair<double, double>> all;
            for (Metric m : {Metric::HeldoutLoss, Metric::GradNorm}) {
                ChartOptions probe;
                probe.metric = m;
                if (auto r = TrajectoryChart::full_x_range(snapshot_, probe))
                    all = all ? std::make_pair(std::min(all->first, r->first), std::max(all->second, r->second)) : *r;
            }
            options.x_range = all;
        }
        charts_[i]->update(snapshot_, options);
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

void TrajectoryView::on_hover(double update) {
    // Every leg's value at the recorded update nearest to the pointer, per metric.
    QString text;
    for (Metric metric : {Metric::HeldoutLoss, Metric::GradNorm}) {
        QStringList parts;
        double shown_update = update;
        for (std::size_t i = 0; i < snapshot_.legs.size(); ++i) {
            const auto& leg = snapshot_.legs[i];
            auto p = nearest_point(leg.series(metric), update);
            if (!p) continue;
            shown_update = p->update;
            parts << QStringLiteral("<span style='color:%1'>%2</span> %3")
                         .arg(leg_color(i).name(), QString::fromStdString(leg.leg).toHtmlEscaped(),
                              QString::number(p->value, 'g', 8));
        }
        if (parts.isEmpty()) continue;
        if (!text.isEmpty()) text += QStringLiteral("<br>");
        text += QStringLiteral("<b>%1</b> @ update %2: %3")
                    .arg(QString::fromLatin1(metric_label(metric)), QString::number(shown_update, 'f', 0), parts.join(QStringLiteral(" · ")));
    }
    // The residual panel's series (percent, leg − reference) at the paired update nearest the pointer.
    const Metric residual = residual_metric();
    QStringList parts;
    double shown_update = update;
    for (const auto& r : snapshot_.residuals) {
        if (r.metric != residual) continue;
        auto p = nearest_point(r.percent, update);
        if (!p) continue;
        shown_update = p->update;
        std::size_t color = 0;
        for (std::size_t i = 0; i < snapshot_.legs.size(); ++i)
            if (snapshot_.legs[i].leg == r.leg) color = i;
        parts << QStringLiteral("<span style='color:%1'>%2</span> %3%")
                     .arg(leg_color(color).name(), QString::fromStdString(residual_name(r)).toHtmlEscaped(),
                          QString::number(p->value, 'g', 6));
    }
    if (!parts.isEmpty()) {
        if (!text.isEmpty()) text += QStringLiteral("<br>");
        text += QStringLiteral("<b>%1, %2</b> @ update %3: %4")
                    .arg(QString::fromUtf8(residual_axis_title), QString::fromLatin1(metric_label(residual)),
                         QString::number(shown_update, 'f', 0), parts.join(QStringLiteral(" · ")));
    }
    hover_label_->setText(text);
}

}  // namespace tandem::views
