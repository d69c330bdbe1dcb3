// What a TensorBoard / W&B user reaches for first, driven with QTest's mouse and key events on the
// widgets: the hover crosshair and its read-out, a click on a legend entry hiding that curve, the x
// axis counting updates, tokens seen or wall time, smoothing with its value shown and applied to the
// training series only, zoom kept inside the data, y fitted to the visible x with a floor, the zoom
// reset by another run; and twenty runs on the Compare page with unique, uncut legend names.
#include "views_test_support.h"

#include "tandem/views/compare_view.h"
#include "tandem/views/curve_points.h"
#include "tandem/views/run_source.h"
#include "tandem/views/trajectory_view.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QGraphicsLineItem>
#include <QGraphicsTextItem>
#include <QLabel>
#include <QListWidget>
#include <QSlider>
#include <QTemporaryDir>
#include <QValueAxis>
#include <QXYSeries>
#include <QtTest>

#include <cmath>
#include <set>

using namespace tandem::views;
using namespace tandem::views::test;

namespace {

std::vector<TestLeg> two_legs(double shift = 0, int steps = 40) {
    TestLeg engine{"engine", "engine", steps, 10, [shift](const std::string& m, int u) {
                       if (m == "loss") return 3.0 - 0.02 * u + 0.05 * std::sin(u) + shift;
                       if (m == "grad") return 2.0 + 0.3 * std::cos(0.5 * u) + shift;
                       if (m == "lr") return 1e-4;
                       return 3.1 - 0.01 * u + shift;
                   }};
    TestLeg reference = engine;
    reference.name = "reference";
    reference.implementation = "reference";
    reference.value = [shift](const std::string& m, int u) {
        if (m == "loss") return 3.0 - 0.02 * u + 0.05 * std::sin(u) + shift + 1e-6;
        if (m == "grad") return 2.0 + 0.3 * std::cos(0.5 * u) + shift + 1e-5;
        if (m == "lr") return 1e-4;
        return 3.1 - 0.01 * u + shift + 2e-6;
    };
    return {engine, reference};
}

RunSnapshot make_run(const QTemporaryDir& dir, const std::string& id, double shift = 0, int steps = 40,
                     const std::string& spec = R"({"name":"views-test","model":{"config":"tiny"}})") {
    const auto folder = std::filesystem::path(dir.path().toStdString()) / id;
    std::filesystem::create_directories(folder);
    write_test_run(folder / "run.h5", id, two_legs(shift, steps), spec);
    return load_run_snapshot(folder / "run.h5");
}

// A trajectory view on screen showing `run`, drawn.
void show_run(TrajectoryView& view, RunSnapshot run, int height = 900) {
    view.resize(1100, height);
    view.show();
    view.set_snapshot(std::move(run));
    view.redraw_now();
    QApplication::processEvents();
}

QXYSeries* series_named(QChartView* view, const QString& name) {
    for (auto* s : view->chart()->series())
        if (s->name() == name) return static_cast<QXYSeries*>(s);
    return nullptr;
}

// Where on the panel's viewport the point (x, y) of its chart is drawn.
QPoint viewport_point(QChartView* view, double x, double y) {
    const QPointF scene = view->chart()->mapToScene(view->chart()->mapToPosition(QPointF(x, y), view->chart()->series().value(0)));
    return view->mapFromScene(scene);
}

// A left-button rubber band on `view` from (x0, y) to (x1, y) of its chart: pressed, released.
void rubber_band(QChartView* view, double x0, double x1, double y) {
    QTest::mousePress(view->viewport(), Qt::LeftButton, {}, viewport_point(view, x0, y));
    QTest::mouseRelease(view->viewport(), Qt::LeftButton, {}, viewport_point(view, x1, y));
}

}  // namespace

class TestViewsInteraction : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { tandem::views::test::use_test_settings("test_views_interaction"); }

    void hover_draws_a_crosshair_and_lists_every_curve_at_that_x() {
        QTemporaryDir dir;
        TrajectoryView view;
        show_run(view, make_run(dir, "hover-run"), 1000);
        auto* panel = view.panel_view(TrajectoryView::metric_panel(Metric::GradNorm));
        const auto legs = two_legs();
        // The panels share one x axis on screen too: their plots start and end at the same x.
        const QRectF first = view.panel_view(TrajectoryView::metric_panel(Metric::HeldoutCe))->chart()->plotArea();
        for (int p : {int(TrajectoryView::metric_panel(Metric::TrainLoss)), int(TrajectoryView::metric_panel(Metric::GradNorm)), int(TrajectoryView::residual_panel())}) {
            const QRectF plot = view.panel_view(p)->chart()->plotArea();
            QVERIFY2(std::fabs(plot.left() - first.left()) <= 1 && std::fabs(plot.right() - first.right()) <= 1,
                     qPrintable(QStringLiteral("panel %1: %2..%3 vs %4..%5").arg(p).arg(plot.left()).arg(plot.right()).arg(first.left()).arg(first.right())));
        }
        // The pointer a little right of update 17: the read-out snaps to the recorded update 17.
        QTest::mouseMove(panel->viewport(), viewport_point(panel, 17.2, legs[0].value("grad", 17)));
        QApplication::processEvents();
        const QString tip = view.hover_tooltip_text();
        QVERIFY2(tip.contains(QStringLiteral("update 17")), qPrintable(tip));
        QVERIFY2(tip.contains(QStringLiteral("engine: ") + QString::number(legs[0].value("grad", 17), 'g', 8)), qPrintable(tip));
        QVERIFY2(tip.contains(QStringLiteral("reference: ") + QString::number(legs[1].value("grad", 17), 'g', 8)), qPrintable(tip));
        // The crosshair: on every shown panel, at update 17's x, across the plot; the read-out on the hovered one only.
        for (int p : {int(TrajectoryView::metric_panel(Metric::HeldoutCe)), int(TrajectoryView::metric_panel(Metric::TrainLoss)), int(TrajectoryView::metric_panel(Metric::GradNorm))}) {
            const auto& chart = view.panel_chart(p);
            QVERIFY2(chart.crosshair_line()->isVisible(), qPrintable(QString::number(p)));
            QCOMPARE(*chart.crosshair_x(), 17.0);
            const double x = chart.chart()->mapToPosition(QPointF(17, chart.y_range().first), chart.chart()->series().value(0)).x();
            QVERIFY(std::fabs(chart.crosshair_line()->line().x1() - x) < 0.5);
            QVERIFY(std::fabs(chart.crosshair_line()->line().y1() - chart.chart()->plotArea().top()) < 0.5);
            QVERIFY(std::fabs(chart.crosshair_line()->line().y2() - chart.chart()->plotArea().bottom()) < 0.5);
            QCOMPARE(chart.crosshair_tip()->isVisible(), p == TrajectoryView::metric_panel(Metric::GradNorm));
        }
        // The read-out stays inside the plot.
        const auto& grad = view.panel_chart(TrajectoryView::metric_panel(Metric::GradNorm));
        const QRectF tip_box = grad.crosshair_tip()->mapRectToParent(grad.crosshair_tip()->boundingRect());
        QVERIFY(grad.chart()->plotArea().adjusted(-1, -1, 1, 1).contains(tip_box));
        // Leaving the charts clears it.
        QEvent leave(QEvent::Leave);
        QApplication::sendEvent(panel, &leave);
        QVERIFY(!grad.crosshair_line()->isVisible());
        QCOMPARE(view.hover_tooltip_text(), QString());
    }

    void a_click_on_a_legend_entry_hides_that_curve_everywhere_and_y_refits() {
        QTemporaryDir dir;
        TrajectoryView view;
        // The reference sits 0.5 above the engine: hiding it must shrink the y range.
        auto run = make_run(dir, "legend-run");
        for (auto& p : run.legs[1].series(Metric::GradNorm)) p.value += 0.5;
        show_run(view, run);
        auto* legend = view.legend();
        QList<QListWidgetItem*> items = legend->findItems(QStringLiteral("reference"), Qt::MatchExactly);
        QCOMPARE(items.size(), 1);
        const auto before = view.panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).y_range();
        QTest::mouseClick(legend->viewport(), Qt::LeftButton, {}, legend->visualItemRect(items[0]).center());
        view.redraw_now();
        QApplication::processEvents();
        QVERIFY(view.hidden_curves().count(QStringLiteral("reference")));
        for (int p : {int(TrajectoryView::metric_panel(Metric::HeldoutCe)), int(TrajectoryView::metric_panel(Metric::TrainLoss)), int(TrajectoryView::metric_panel(Metric::GradNorm))})
            QVERIFY(!series_named(view.panel_view(p), QStringLiteral("reference"))->isVisible());
        QVERIFY(series_named(view.panel_view(TrajectoryView::metric_panel(Metric::GradNorm)), QStringLiteral("engine"))->isVisible());
        const auto after = view.panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).y_range();
        QVERIFY2(after.second < before.second - 0.3, qPrintable(QStringLiteral("%1 -> %2").arg(before.second).arg(after.second)));
        // Still listed (greyed) so it can come back; the hover read-out leaves it out.
        items = legend->findItems(QStringLiteral("reference"), Qt::MatchExactly);
        QCOMPARE(items.size(), 1);
        view.hover_at(10, TrajectoryView::metric_panel(Metric::GradNorm));
        QVERIFY(!view.hover_tooltip_text().contains(QStringLiteral("reference")));
        QTest::mouseClick(legend->viewport(), Qt::LeftButton, {}, legend->visualItemRect(items[0]).center());
        view.redraw_now();
        QVERIFY(view.hidden_curves().empty());
        QVERIFY(series_named(view.panel_view(TrajectoryView::metric_panel(Metric::GradNorm)), QStringLiteral("reference"))->isVisible());
        // Legend entries show each leg's line: solid engine, dashed reference.
        QCOMPARE(legend->findItems(QStringLiteral("engine"), Qt::MatchExactly).size(), 1);
    }

    void the_x_axis_counts_updates_tokens_seen_or_wall_time() {
        QTemporaryDir dir;
        TrajectoryView view;
        show_run(view, make_run(dir, "x-run"));
        auto* box = view.findChild<QComboBox*>(QStringLiteral("x_axis"));
        QVERIFY(box);
        const auto legs = two_legs();
        // Tokens seen before update u: the sum of the supervised tokens of updates 0..u-1.
        auto tokens_before = [&](int u) {
            double t = 0;
            for (int k = 0; k < u; ++k) t += double(legs[0].tokens(k));
            return t;
        };
        auto wall_before = [&](int u) {
            double t = 0;
            for (int k = 0; k < u; ++k) t += legs[0].wall(k);
            return t;
        };
        box->setFocus();
        QTest::keyClick(box, Qt::Key_Down);
        view.redraw_now();
        QCOMPARE(view.x_axis(), XAxis::TokensSeen);
        auto* loss = series_named(view.panel_view(TrajectoryView::metric_panel(Metric::TrainLoss)), QStringLiteral("engine"));
        QCOMPARE(loss->count(), 40);
        for (int u = 0; u < 40; ++u) {
            QCOMPARE(loss->at(u).x(), tokens_before(u));
            QCOMPARE(loss->at(u).y(), legs[0].value("loss", u));
        }
        auto* heldout = series_named(view.panel_view(TrajectoryView::metric_panel(Metric::HeldoutCe)), QStringLiteral("engine"));
        QCOMPARE(heldout->at(heldout->count() - 1).x(), tokens_before(40));  // the evaluation after the last update
        QCOMPARE(view.panel_chart(TrajectoryView::metric_panel(Metric::TrainLoss)).x_axis()->titleText(), QStringLiteral("tokens seen"));
        QTest::keyClick(box, Qt::Key_Down);
        view.redraw_now();
        QCOMPARE(view.x_axis(), XAxis::WallTime);
        loss = series_named(view.panel_view(TrajectoryView::metric_panel(Metric::TrainLoss)), QStringLiteral("engine"));
        for (int u = 0; u < 40; ++u) QVERIFY(std::fabs(loss->at(u).x() - wall_before(u)) < 1e-12);
        QCOMPARE(view.panel_chart(TrajectoryView::metric_panel(Metric::TrainLoss)).x_axis()->titleText(), QStringLiteral("wall time [s]"));
        view.hover_at(wall_before(20), TrajectoryView::metric_panel(Metric::TrainLoss));
        QVERIFY2(view.hover_tooltip_text().contains(QStringLiteral("wall time")), qPrintable(view.hover_tooltip_text()));
        QTest::keyClick(box, Qt::Key_Home);
        view.redraw_now();
        QCOMPARE(view.x_axis(), XAxis::Update);
        QCOMPARE(series_named(view.panel_view(TrajectoryView::metric_panel(Metric::TrainLoss)), QStringLiteral("engine"))->at(7).x(), 7.0);
    }

    void smoothing_shows_its_value_and_leaves_evaluations_alone() {
        QTemporaryDir dir;
        TrajectoryView view;
        show_run(view, make_run(dir, "smooth-run"));
        auto* slider = view.findChild<QSlider*>(QStringLiteral("smoothing"));
        auto* value = view.findChild<QLabel*>(QStringLiteral("smoothing_value"));
        QCOMPARE(value->text(), QStringLiteral("off"));
        slider->setFocus();
        for (int i = 0; i < 6; ++i) QTest::keyClick(slider, Qt::Key_PageUp);  // 6 pages of 10
        view.redraw_now();
        QCOMPARE(value->text(), QStringLiteral("0.60"));
        QCOMPARE(view.smoothing(), 0.6);
        // Training loss: the raw curve (faded) and the smoothed one; held-out CE (4 evaluations): raw only.
        QVERIFY(series_named(view.panel_view(TrajectoryView::metric_panel(Metric::TrainLoss)), QStringLiteral("engine (smoothed)")));
        QVERIFY(!series_named(view.panel_view(TrajectoryView::metric_panel(Metric::HeldoutCe)), QStringLiteral("engine (smoothed)")));
        const auto smoothed = series_named(view.panel_view(TrajectoryView::metric_panel(Metric::TrainLoss)), QStringLiteral("engine (smoothed)"));
        const auto expected = smoothed_for_display(view.snapshot().legs[0].series(Metric::TrainLoss), 0.6);
        for (int u = 0; u < 40; ++u) QCOMPARE(smoothed->at(u).y(), expected[std::size_t(u)].value);
        // Asked for: evaluations too.
        QTest::mouseClick(view.findChild<QCheckBox*>(QStringLiteral("smooth_all")), Qt::LeftButton);
        view.redraw_now();
        QVERIFY(series_named(view.panel_view(TrajectoryView::metric_panel(Metric::HeldoutCe)), QStringLiteral("engine (smoothed)")));
    }

    void zoom_stays_in_the_data_fits_y_with_a_floor_and_resets_on_another_run() {
        QTemporaryDir dir;
        TrajectoryView view;
        auto run = make_run(dir, "zoom-run");
        // Two nearly equal training losses at updates 20 and 21 (a 1e-9 step): zoomed onto them the
        // axis must not become float noise.
        run.legs[0].series(Metric::TrainLoss)[20].value = 2.5;
        run.legs[0].series(Metric::TrainLoss)[21].value = 2.5 + 1e-9;
        run.legs[1].series(Metric::TrainLoss)[20].value = 2.5;
        run.legs[1].series(Metric::TrainLoss)[21].value = 2.5 + 1e-9;
        show_run(view, run);
        auto* panel = view.panel_view(TrajectoryView::metric_panel(Metric::TrainLoss));
        // A rubber band from update 20.2 to 20.8 (mouse press, move, release on the chart).
        const double y = 2.5;
        QTest::mousePress(panel->viewport(), Qt::LeftButton, {}, viewport_point(panel, 20.2, y));
        QTest::mouseMove(panel->viewport(), viewport_point(panel, 20.8, y));
        QTest::mouseRelease(panel->viewport(), Qt::LeftButton, {}, viewport_point(panel, 20.8, y));
        view.redraw_now();
        QVERIFY(view.visible_x_range().has_value());
        QVERIFY(std::fabs(view.visible_x_range()->first - 20.2) < 0.1 && std::fabs(view.visible_x_range()->second - 20.8) < 0.1);
        // y: the visible points, but at least 1 % of the data's range (about 0.8 here).
        const auto [lo, hi] = view.panel_chart(TrajectoryView::metric_panel(Metric::TrainLoss)).y_range();
        double full_lo = 1e9, full_hi = -1e9;
        for (const auto& leg : view.snapshot().legs)
            for (const auto& p : leg.series(Metric::TrainLoss)) full_lo = std::min(full_lo, p.value), full_hi = std::max(full_hi, p.value);
        QVERIFY2(hi - lo >= 0.01 * (full_hi - full_lo), qPrintable(QStringLiteral("%1 .. %2").arg(lo, 0, 'g', 12).arg(hi, 0, 'g', 12)));
        QVERIFY(lo <= 2.5 && hi >= 2.5 + 1e-9);
        QVERIFY(view.panel_chart(TrajectoryView::metric_panel(Metric::TrainLoss)).y_ticks().size() >= 3);
        // Panning right (arrow key) stops at the last update: no curve runs off the plot.
        panel->setFocus();
        for (int i = 0; i < 200; ++i) QTest::keyClick(panel, Qt::Key_Right);
        view.redraw_now();
        const auto data = *view.data_x_range();
        QVERIFY(view.visible_x_range()->second <= data.second + 1e-9);
        QVERIFY(std::fabs((view.visible_x_range()->second - view.visible_x_range()->first) - 0.6) < 0.1);  // same width
        // Zooming out past the data is "fit all".
        for (int i = 0; i < 40; ++i) QTest::keyClick(panel, Qt::Key_Minus);  // faster than the 40 ms redraws
        view.redraw_now();
        QVERIFY(!view.visible_x_range());
        // A double-click shows every update again.
        rubber_band(panel, 10, 15, y);
        view.redraw_now();
        QVERIFY(view.visible_x_range().has_value());
        QTest::mouseDClick(panel->viewport(), Qt::LeftButton, {}, viewport_point(panel, 12, y));
        view.redraw_now();
        QVERIFY(!view.visible_x_range());
        // Zoomed in (a rubber band on updates 30..35), then another run (6 updates) opens: its whole
        // range is shown, not the old zoom.
        rubber_band(panel, 30, 35, y);
        view.redraw_now();
        QVERIFY(view.visible_x_range().has_value());
        view.set_snapshot(make_run(dir, "short-run", 0.0, 6));
        view.redraw_now();
        QVERIFY(!view.visible_x_range());
        auto* axis = view.panel_chart(TrajectoryView::metric_panel(Metric::TrainLoss)).x_axis();
        QVERIFY2(axis->min() <= 0 && axis->max() >= 5 && axis->max() < 10, qPrintable(QStringLiteral("%1 .. %2").arg(axis->min()).arg(axis->max())));
    }

    void twenty_runs_have_unique_uncut_legend_names_and_twelve_colours() {
        QTemporaryDir dir;
        // An lr sweep of 10 values at 2 seeds: the runs differ in lr and seed only.
        const double lrs[] = {1e-5, 2e-5, 5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3};
        CompareView compare;
        compare.resize(1400, 950);
        compare.show();
        std::vector<std::string> ids;
        for (int i = 0; i < 20; ++i) {
            char id[64];
            std::snprintf(id, sizeof id, "clinical-tiny-20261201-2040%02d", i);
            ids.push_back(id);
            char spec[256];
            std::snprintf(spec, sizeof spec, R"({"name":"clinical-tiny","seed":%d,"optimizer":{"name":"adamw","lr":%g},"lora":{"rank":16}})",
                          1234 + i / 10, lrs[i % 10]);
            make_run(dir, id, 0.01 * i, 20, spec);
            QVERIFY(compare.add_run(dir.filePath(QString::fromLatin1(id))));
        }
        auto* overlay = compare.overlay();
        QTRY_COMPARE_WITH_TIMEOUT(overlay->runs().size(), std::size_t(20), 30000);
        overlay->redraw_now();
        QApplication::processEvents();
        // Labels by what differs: "lr 2e-4 · seed 1235".
        QCOMPARE(overlay->run_label(ids[5]), QStringLiteral("lr 2e-4 · seed 1234"));
        QCOMPARE(overlay->run_label(ids[15]), QStringLiteral("lr 2e-4 · seed 1235"));
        auto* legend = overlay->legend();
        QStringList names;
        for (int i = 0; i < legend->count(); ++i) names << legend->item(i)->text();
        QCOMPARE(names.size(), 40 + 20);  // 20 runs x 2 legs, and each run's residual pair
        QCOMPARE(QSet<QString>(names.begin(), names.end()).size(), names.size());  // unique
        const QFontMetrics fm(legend->font());
        for (int i = 0; i < legend->count(); ++i) {
            auto* item = legend->item(i);
            QVERIFY2(!item->text().contains(QChar(0x2026)) && !item->text().endsWith(QStringLiteral("...")), qPrintable(item->text()));
            // Uncut: the whole name fits on its line beside its line sample.
            const int needed = fm.horizontalAdvance(item->text()) + legend->iconSize().width();
            QVERIFY2(needed <= legend->viewport()->width(), qPrintable(QStringLiteral("%1 needs %2 px of %3").arg(item->text()).arg(needed).arg(legend->viewport()->width())));
            QVERIFY2(legend->visualItemRect(item).height() < 2 * fm.height() + 8, qPrintable(item->text()));  // one line, not wrapped
        }
        // Twelve runs, twelve colours far apart; the two legs of a run share its colour.
        std::vector<QColor> colours;
        for (int i = 0; i < 12; ++i) colours.push_back(overlay->run_color(ids[std::size_t(i)]));
        for (std::size_t a = 0; a < colours.size(); ++a)
            for (std::size_t b = a + 1; b < colours.size(); ++b) {
                const double d = std::hypot(colours[a].redF() - colours[b].redF(), colours[a].greenF() - colours[b].greenF(),
                                            colours[a].blueF() - colours[b].blueF());
                QVERIFY2(d > 0.15, qPrintable(QStringLiteral("colours %1 and %2: %3").arg(colours[a].name(), colours[b].name()).arg(d)));
            }
        QVERIFY(overlay->run_color(ids[12]) != overlay->run_color(ids[0]));
        if (const auto shots = qEnvironmentVariable("TANDEM_SCREENSHOT_DIR"); !shots.isEmpty()) {
            overlay->set_panel_visible(TrajectoryView::residual_panel(), false);
            overlay->redraw_now();
            QApplication::processEvents();
            compare.grab().save(QDir(shots).filePath(QStringLiteral("compare-20-runs.png")));
        }
    }
};

QTEST_MAIN(TestViewsInteraction)
#include "test_views_interaction.moc"
