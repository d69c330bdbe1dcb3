// Opening a recorded run in the workbench window: the run file is written here through
// experiments' RunFileWriter (the runner's own writer), the catalog through its Catalog; the test
// checks what the views then show against what was written.
#include "views_test_support.h"

#include "tandem/store/catalog.h"
#include "tandem/compare/distance.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/compare/judge/gate.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/compare/comparison_io.h"
#include "tandem/store/run_file.h"
#include "tandem/views/main_window.h"
#include "tandem/views/run_source.h"
#include "tandem/views/runs_browser.h"
#include "tandem/views/token_diff_view.h"
#include "tandem/views/trajectory_view.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QChart>
#include <QCheckBox>
#include <QHelpEvent>
#include <QMimeData>
#include <QMouseEvent>
#include <QSettings>
#include <QRegularExpression>
#include <QToolTip>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTextEdit>
#include <QValueAxis>
#include <QXYSeries>
#include <QTreeView>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

namespace ex = tandem::experiments;
using namespace tandem::views;

namespace {

// Two legs with different numbers of updates and evaluations, so a mix-up between legs shows.
struct LegShape {
    std::string name;
    int steps;
    int eval_every;
    double offset;
};
const LegShape kLegs[] = {{"engine", 37, 5, 0.0}, {"reference", 23, 10, 0.01}};

// The one grad norm that differs between the legs: the engine's at update kPlantedUpdate.
constexpr int kPlantedUpdate = 7;
constexpr double kPlantedGradNorm = 2.5;
double grad_norm_at(const LegShape& leg, int u) {
    return leg.name == "engine" && u == kPlantedUpdate ? kPlantedGradNorm : 1.0 + 0.1 * std::sin(u);
}
double loss_at(const LegShape& leg, int u) { return 3.0 - 0.01 * u + leg.offset; }
double heldout_at(const LegShape& leg, int u) { return 3.1 - 0.01 * u + leg.offset; }

int eval_count(const LegShape& leg) { return (leg.steps + leg.eval_every - 1) / leg.eval_every + 1; }  // 0, k, 2k, ... < steps, and the end

std::vector<ex::L3Record> l3_records(bool differ) {
    std::vector<ex::L3Record> records;
    for (int r = 0; r < 3; ++r) {
        ex::L3Record rec;
        rec.index = r;
        rec.id = "pubmedqa:" + std::to_string(1000 + r);
        for (int i = 0; i < 12; ++i) rec.ids.push_back(100 + i + r);
        if (differ && r == 1) rec.ids[5] = 999;  // the first mismatch of record 1 is token 5
        rec.boundary = 7;
        rec.supervised_count = 5;
        rec.full_length = 12;
        rec.text = "text";
        records.push_back(rec);
    }
    return records;
}

void write_run(const std::filesystem::path& file) {
    ex::RunFileWriter w(file);
    ex::ExperimentInfo info;
    info.name = "views-test";
    info.run_id = "views-test-20261129-100000";
    info.spec_json = R"({"name":"views-test","model":{"config":"tiny"}})";  // what compare_run_file needs for L4
    w.write_experiment(info);
    for (const auto& leg : kLegs) {
        w.create_leg(leg.name, {{"implementation", leg.name}, {"device", std::string("cpu")}, {"status", std::string("finished")}});
        std::vector<ex::StepRow> steps;
        for (int u = 0; u < leg.steps; ++u)
            steps.push_back({u, loss_at(leg, u), grad_norm_at(leg, u), 1e-3, 100, 0.5});
        w.append_steps(leg.name, steps);
        std::vector<ex::EvalRow> evals;
        for (int u = 0; u < leg.steps; u += leg.eval_every) evals.push_back({u, heldout_at(leg, u)});
        evals.push_back({leg.steps, heldout_at(leg, leg.steps)});
        w.append_eval(leg.name, evals);
        ex::LegTrace trace;
        trace.has_l3 = true;
        trace.l3_template = "qwen3";
        trace.l3_max_len = 256;
        trace.l3 = l3_records(leg.name == "reference");
        w.write_check(leg.name, ex::CheckLevel::L3, ex::l3_to_json(trace).dump());
    }
}

// A finished two-leg run (engine, reference; 6 updates, evaluations every 2) holding a reference
// seed envelope of four members and one gate flag of the engine at update 4 — what the runner
// writes when the catalog has an envelope for the experiment.
const char* const kEnvSpec = R"({"name":"views-env","model":{"config":"tiny"},"sequence":{"max_len":128},"eval":{"interval":2}})";
double env_ce(double offset, int u) { return 3.0 - 0.05 * u + (u > 0 ? offset : 0.0); }

ex::SeedEnvelope write_envelope_run(const std::filesystem::path& file) {
    const ex::ExperimentSpec spec = ex::parse_experiment(nlohmann::json::parse(kEnvSpec), "test");
    std::vector<ex::EnvelopeMember> members;
    for (double offset : {-0.03, -0.01, 0.01, 0.03}) {
        ex::EnvelopeMember m;
        m.name = "m" + std::to_string(members.size());
        for (int u = 0; u < 6; ++u) m.steps.push_back({u, 3.2 - 0.04 * u + offset, 1.0 + offset, 1e-4, 10, 0.5});
        for (int u = 0; u <= 6; u += 2) m.evals.push_back({u, env_ce(offset, u)});
        members.push_back(std::move(m));
    }
    ex::SeedEnvelope e = ex::compute_envelope(members);
    e.key = spec.sha256_without_seeds();
    e.implementation = "reference";
    e.experiment = spec.name;
    ex::RunFileWriter w(file);
    ex::ExperimentInfo info;
    info.name = spec.name;
    info.run_id = "views-env-20261201-120000";
    info.spec_json = spec.to_json().dump();
    info.total_updates = 6;
    w.write_experiment(info);
    for (const auto& [leg, offset] : {std::pair<std::string, double>{"engine", 0.2}, {"reference", 0.0}}) {
        w.create_leg(leg, {{"implementation", leg}, {"device", std::string("cpu")}, {"status", std::string("finished")}});
        std::vector<ex::StepRow> steps;
        for (int u = 0; u < 6; ++u) steps.push_back({u, 3.2 - 0.04 * u + offset, 1.0, 1e-4, 10, 0.5});
        w.append_steps(leg, steps);
        std::vector<ex::EvalRow> evals;
        for (int u = 0; u <= 6; u += 2) evals.push_back({u, env_ce(offset, u)});
        w.append_eval(leg, evals);
        // L1-L3 agree: only the trajectories differ.
        ex::LegTrace trace;
        trace.l1_ce = env_ce(0, 0);
        trace.l1_tokens = 100;
        trace.has_l2 = true;
        trace.l2.push_back({"model.norm.weight", "base", {4}, 4.0, 4.0, 1.0, std::string(64, 'a')});
        trace.has_l3 = true;
        trace.l3_template = "qwen3";
        trace.l3_max_len = 128;
        trace.l3 = l3_records(false);
        w.write_check(leg, ex::CheckLevel::L1, ex::l1_to_json(trace).dump());
        w.write_check(leg, ex::CheckLevel::L2, ex::l2_to_json(trace).dump());
        w.write_check(leg, ex::CheckLevel::L3, ex::l3_to_json(trace).dump());
    }
    ex::GateFlag f;
    f.leg = "engine";
    f.kind = "envelope";
    f.update = 4;
    f.value = env_ce(0.2, 4);
    f.threshold = 2.9;
    f.action = ex::GateAction::Stop;
    f.message = "engine: held-out CE 3 at update 4 is above the reference seed envelope band";
    f.series = "heldout_ce";
    w.write_flags("engine", ex::flags_to_json({f}).dump());
    ex::write_envelope(w, e, nullptr);
    w.commit();
    return e;
}

// `window` (1200 x 800, on screen) opening `file`: whether it showed the run's snapshot within 10 s.
bool show_run_in(MainWindow& window, const std::filesystem::path& file) {
    window.resize(1200, 800);
    window.show();
    QSignalSpy shown(&window, &MainWindow::run_snapshot_shown);
    window.open_run(QString::fromStdString(file.string()));
    return shown.wait(10000);
}

}  // namespace

class TestViewsRun : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { tandem::views::test::use_test_settings("test_views_run"); }

    void the_envelope_band_flags_verdict_and_z_come_from_experiments() {
        QTemporaryDir dir;
        const std::filesystem::path file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        const ex::SeedEnvelope e = write_envelope_run(file);
        const RunSnapshot snap = load_run_snapshot(file);
        // The verdict is experiments' own (the engine, paired with the reference, is shifted far above it:
        // different, and far beyond the envelope's seed noise).
        const std::string verdict = ex::compare_run_file(file).verdict();
        QCOMPARE(snap.verdict, verdict);
        QVERIFY2(verdict.rfind("different: ", 0) == 0, verdict.c_str());
        QVERIFY2(verdict.find("effect beyond seed noise") != std::string::npos, verdict.c_str());
        // The band: min/max and mean -/+ 2 std of every point, as experiments' envelope_band_points.
        QCOMPARE(snap.bands.size(), std::size_t(3));
        const auto& band = snap.bands[0];
        QCOMPARE(band.metric, Metric::HeldoutCe);
        const auto expected = ex::envelope_band_points(e, "heldout_ce");
        QCOMPARE(band.min.size(), expected.size());
        for (std::size_t i = 0; i < expected.size(); ++i) {
            QCOMPARE(band.min[i].value, expected[i].min);
            QCOMPARE(band.max[i].value, expected[i].max);
            QCOMPARE(band.hi[i].value, expected[i].hi);
        }
        // The flag, on the engine's held-out curve at update 4.
        QCOMPARE(snap.flags.size(), std::size_t(1));
        QCOMPARE(snap.flags[0].metric, Metric::HeldoutCe);
        QCOMPARE(snap.flags[0].y, env_ce(0.2, 4));
        // z per evaluation with a spread (not update 0: the members start identical).
        const auto model = ex::error_model_for(ex::parse_experiment(nlohmann::json::parse(kEnvSpec), "test"));
        const auto z = ex::envelope_z_points({{0, env_ce(0.2, 0)}, {2, env_ce(0.2, 2)}, {4, env_ce(0.2, 4)}, {6, env_ce(0.2, 6)}}, e, model);
        const auto engine_z = std::find_if(snap.z_scores.begin(), snap.z_scores.end(), [](const ZTrajectory& t) { return t.leg == "engine"; });
        QVERIFY(engine_z != snap.z_scores.end());
        QCOMPARE(engine_z->z.size(), std::size_t(3));
        for (std::size_t i = 0; i < z.size(); ++i) QCOMPARE(engine_z->z[i].value, z[i].distance);

        TrajectoryView view;
        view.resize(900, 1200);
        view.set_snapshot(snap);
        view.redraw_now();
        QVERIFY(view.verdict_text().contains(QStringLiteral("different: ")));
        QStringList names;
        for (const auto& c : view.panel_curves(TrajectoryView::metric_panel(Metric::HeldoutCe))) names << c.name;
        for (const char* n : {envelope_min_name, envelope_max_name, envelope_lo_name, envelope_hi_name, flags_curve_name})
            QVERIFY2(names.contains(QString::fromUtf8(n)), qPrintable(names.join(QStringLiteral(", "))));
        QCOMPARE(names.indexOf(QString::fromUtf8(envelope_min_name)), 0);  // drawn first: behind the legs
        QCOMPARE(view.panel_chart(TrajectoryView::metric_panel(Metric::HeldoutCe)).drawn_point_count(QString::fromUtf8(flags_curve_name)), 1);
        view.hover_at(4);
        QVERIFY2(view.hover_text().contains(QStringLiteral("gate flag")) &&
                     view.hover_text().contains(QStringLiteral("above the reference seed envelope band")),
                 qPrintable(view.hover_text()));
        view.hover_at(2);
        QVERIFY(!view.hover_text().contains(QStringLiteral("gate flag")));
        view.set_residual_z(true);
        view.redraw_now();
        const auto curves = view.panel_curves(TrajectoryView::residual_panel());
        QCOMPARE(curves.size(), std::size_t(2));
        QCOMPARE(curves[0].name, QStringLiteral("engine"));
        QCOMPARE(curves[0].series->size(), std::size_t(3));
        QCOMPARE(view.panel_chart(TrajectoryView::residual_panel()).chart()->title(), z_chart_title(snap));
    }

    void opening_a_run_fills_every_chart_with_every_point_of_every_leg() {
        QTemporaryDir dir;
        const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        write_run(file);

        MainWindow window;
        QVERIFY(show_run_in(window, file));
        auto* view = window.trajectories();
        view->redraw_now();
        QCOMPARE(view->snapshot().legs.size(), std::size_t(2));
        for (const auto& leg : kLegs) {
            const auto name = QString::fromStdString(leg.name);
            QCOMPARE(view->panel_chart(TrajectoryView::metric_panel(Metric::HeldoutCe)).drawn_point_count(name), eval_count(leg));  // held-out CE
            QCOMPARE(view->panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).drawn_point_count(name), leg.steps);        // grad norm
        }
        // Zooming one panel zooms all of them (shared x range); only the points in range (plus
        // one neighbour on each side) are then drawn.
        view->set_x_range(std::make_pair(10.0, 20.0));
        view->redraw_now();
        QCOMPARE(view->panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).drawn_point_count(QStringLiteral("engine")), 11 + 2);
        QCOMPARE(view->panel_chart(TrajectoryView::metric_panel(Metric::HeldoutCe)).x_axis()->min(), 10.0);
        QCOMPARE(view->panel_chart(TrajectoryView::residual_panel()).x_axis()->max(), 20.0);
        // Smoothing adds a smoothed series per leg and keeps the raw one with all its points.
        view->set_x_range(std::nullopt);
        view->set_smoothing(0.6);
        view->redraw_now();
        QCOMPARE(view->panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).drawn_point_count(QStringLiteral("engine")), 37);
        QCOMPARE(view->panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).drawn_point_count(QStringLiteral("engine (smoothed)")), 37);
        // Log y keeps every (positive) point.
        view->set_log_y(true);
        view->redraw_now();
        QCOMPARE(view->panel_chart(TrajectoryView::metric_panel(Metric::HeldoutCe)).drawn_point_count(QStringLiteral("reference")), eval_count(kLegs[1]));

        // Hover: every leg's value at the nearest recorded update.
        auto* panel = view->panel_view(TrajectoryView::metric_panel(Metric::GradNorm));
        const QPointF at = panel->chart()->mapToPosition(QPointF(12, 1.0));
        const QPointF local = panel->mapFromScene(panel->chart()->mapToScene(at));
        QMouseEvent move(QEvent::MouseMove, local, panel->viewport()->mapToGlobal(local), Qt::NoButton, Qt::NoButton, Qt::NoModifier);
        QApplication::sendEvent(panel->viewport(), &move);
        QTRY_VERIFY2(view->hover_text().contains(QStringLiteral("update 12")), qPrintable(view->hover_text()));
        QVERIFY(view->hover_text().contains(QStringLiteral("engine")));
        QVERIFY(view->hover_text().contains(QStringLiteral("reference")));
        QVERIFY(view->hover_text().contains(QString::number(1.0 + 0.1 * std::sin(12), 'g', 8)));

        // Token diff: record 1 differs at token 5 (written above), records 0 and 2 are identical.
        auto* diff = window.token_diff();
        diff->select(1, 0, 1);
        QVERIFY(!diff->current_diff().identical);
        QCOMPARE(diff->current_diff().first_mismatch.value(), std::size_t(5));
        QVERIFY(diff->summary_text().contains(QStringLiteral("token 5")));
        QVERIFY(diff->side_view(0)->textCursor().position() > 0);  // scrolled to the mismatch
        // Hovering a token shows its index and id (the tooltip of the token's character format).
        auto* left = diff->side_view(0);
        QTextCursor probe(left->document());
        probe.setPosition(6);
        const QPoint at_token = left->cursorRect(probe).center() - QPoint(2, 0);
        QHelpEvent help(QEvent::ToolTip, at_token, left->viewport()->mapToGlobal(at_token));
        QApplication::sendEvent(left->viewport(), &help);
        QTRY_VERIFY(QToolTip::isVisible());
        QVERIFY2(QToolTip::text().contains(QRegularExpression(QStringLiteral("^token \\d+ · id 1\\d\\d"))), qPrintable(QToolTip::text()));
        QToolTip::hideText();
        diff->select(0, 0, 1);
        QVERIFY(diff->current_diff().identical);
    }

    void the_panels_are_the_metric_table() {
        // A panel per metric of experiments' metric table, in its order, then the residual panel:
        // no second list of quantities in the views. Fails when the panels and the table drift apart.
        TrajectoryView view;
        const auto& table = ex::metric_table();
        QCOMPARE(TrajectoryView::panel_count(), static_cast<int>(table.size()) + 1);
        QStringList labels;
        for (const auto& m : table) labels << QString::fromLatin1(m.label);
        std::set<int> taken;
        for (const auto& m : table) {
            const int p = TrajectoryView::metric_panel(m.metric);
            QVERIFY2(p >= 0 && p < TrajectoryView::residual_panel() && taken.insert(p).second, m.label);  // a panel of its own
            QCOMPARE(TrajectoryView::panel_metric(p), std::optional<Metric>(m.metric));
            QCOMPARE(view.panel_options(p).metric, m.metric);
            QVERIFY(!view.panel_options(p).residual);
            auto* box = view.findChild<QCheckBox*>(QStringLiteral("show_panel%1").arg(p));
            QVERIFY(box);
            QCOMPARE(box->text(), QString::fromLatin1(m.label));
            QCOMPARE(box->isChecked(), m.shown);
        }
        for (int p = 0; p < TrajectoryView::residual_panel(); ++p)  // every metric panel's name is a metric of the table
            QVERIFY2(labels.contains(TrajectoryView::panel_name(p)), qPrintable(TrajectoryView::panel_name(p)));
        const int residual = TrajectoryView::residual_panel();
        QCOMPARE(TrajectoryView::panel_metric(residual), std::optional<Metric>());
        QVERIFY(view.panel_options(residual).residual);
        QCOMPARE(view.findChild<QCheckBox*>(QStringLiteral("show_panel%1").arg(residual))->text(), QStringLiteral("residual"));
        QVERIFY(view.panel_visible(residual));
        QVERIFY(!view.findChild<QCheckBox*>(QStringLiteral("show_panel%1").arg(TrajectoryView::panel_count())));
        // The paper figure's panels name their metrics, whatever else the table holds.
        QStringList figure;
        for (int p : TrajectoryView::figure_panels()) figure << TrajectoryView::panel_name(p);
        QCOMPARE(figure, (QStringList{QStringLiteral("held-out CE"), QStringLiteral("residual"), QStringLiteral("pre-clip grad norm")}));
    }

    void gate_flags_sit_on_the_curve_of_their_series() {
        // The marker's panel is the metric of the flag's series (experiments' flag_series); its y is
        // the leg's value of that metric at the flag's update (a step-time flag: the update's throughput).
        QTemporaryDir dir;
        const std::filesystem::path file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        write_envelope_run(file);
        {
            ex::RunFileWriter w(file);
            auto flag = [](const char* kind, std::int64_t update, const char* message, const char* series) {
                ex::GateFlag f;
                f.leg = "engine";
                f.kind = kind;
                f.update = update;
                f.value = -1;
                f.message = message;
                f.series = series;
                return f;
            };
            w.write_flags("engine", ex::flags_to_json({flag("envelope", 4, "engine: held-out CE", "heldout_ce"),
                                                       flag("step-time", 3, "engine: update 3 took 2 s of CPU", "cpu_s"),
                                                       flag("non-finite", 2, "engine: non-finite grad norm at update 2", "grad_norm"),
                                                       flag("loss-spike", 5, "engine: loss", "loss"),
                                                       flag("non-finite", 1, "engine: non-finite grad norm at update 1", "")})
                                        .dump());
            w.commit();
        }
        const RunSnapshot snap = load_run_snapshot(file);
        QCOMPARE(snap.flags.size(), std::size_t(5));
        const auto& engine = snap.legs[0];
        QCOMPARE(engine.leg, std::string("engine"));
        auto value_at = [](const Series& s, double update) {
            for (const auto& p : s)
                if (p.update == update) return p.value;
            return std::nan("");
        };
        const std::pair<Metric, double> expected[] = {{Metric::HeldoutCe, 4}, {Metric::Throughput, 3}, {Metric::GradNorm, 2},
                                                      {Metric::TrainLoss, 5}, {Metric::GradNorm, 1}};
        for (std::size_t i = 0; i < snap.flags.size(); ++i) {
            QCOMPARE(snap.flags[i].metric, expected[i].first);
            QCOMPARE(snap.flags[i].update, expected[i].second);
            QCOMPARE(snap.flags[i].y, value_at(engine.series(expected[i].first), expected[i].second));
        }
    }

    void residual_panel_plots_leg_minus_reference_in_percent() {
        QTemporaryDir dir;
        const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        write_run(file);
        const auto comparison = ex::compare_run_file(file);  // what experiments/ computed
        QCOMPARE(comparison.l4.size(), std::size_t(1));
        const auto& l4 = comparison.l4[0];

        MainWindow window;
        QVERIFY(show_run_in(window, file));
        auto* view = window.trajectories();
        const auto name = QString::fromUtf8("engine − reference");
        const auto& chart = view->panel_chart(TrajectoryView::residual_panel());
        auto plotted = [&] {
            for (auto* s : chart.chart()->series())
                if (s->name() == name) return static_cast<QXYSeries*>(s)->points();
            return QList<QPointF>{};
        };
        const auto& engine = kLegs[0];
        const auto& reference = kLegs[1];
        // Hand-computed float64: 100 * (engine - reference) / |reference| at each paired update.
        auto percent = [](double leg, double ref) { return 100.0 * (leg - ref) / std::fabs(ref); };

        // Held-out CE: evaluations paired at updates 0, 10, 20 (engine every 5, reference every 10).
        view->set_residual_metric(Metric::HeldoutCe);
        view->redraw_now();
        QCOMPARE(chart.chart()->axes(Qt::Vertical).value(0)->titleText(), QString::fromUtf8("%"));
        QVERIFY(chart.chart()->title().contains(QString::fromUtf8("held-out CE: leg − reference")));
        QCOMPARE(chart.drawn_point_count(name), 3);
        auto points = plotted();
        for (int i = 0; i < 3; ++i) {
            const int u = 10 * i;
            QCOMPARE(points[i].x(), double(u));
            QCOMPARE(points[i].y(), l4.eval_percent.points[static_cast<std::size_t>(i)].percent);
            QVERIFY(std::fabs(points[i].y() - percent(heldout_at(engine, u), heldout_at(reference, u))) < 1e-12);
        }

        // Training loss: every update both legs ran (the reference's 23).
        view->set_residual_metric(Metric::TrainLoss);
        view->redraw_now();
        QCOMPARE(chart.drawn_point_count(name), reference.steps);
        points = plotted();
        for (int u = 0; u < reference.steps; ++u)
            QVERIFY(std::fabs(points[u].y() - percent(loss_at(engine, u), loss_at(reference, u))) < 1e-12);

        // Grad norm: equal everywhere but at the planted update.
        view->set_residual_metric(Metric::GradNorm);
        view->redraw_now();
        QCOMPARE(chart.drawn_point_count(name), reference.steps);
        points = plotted();
        const double planted = percent(kPlantedGradNorm, grad_norm_at(reference, kPlantedUpdate));
        QCOMPARE(points[kPlantedUpdate].y(), l4.grad_percent.points[kPlantedUpdate].percent);
        QVERIFY(std::fabs(points[kPlantedUpdate].y() - planted) < 1e-12);
        QVERIFY(planted > 100.0);  // 2.5 against about 1.07: the plant is visible, not rounding noise
        for (int u = 0; u < reference.steps; ++u)
            if (u != kPlantedUpdate) QCOMPARE(points[u].y(), 0.0);

        // Hover over the planted update: the read-out names the pair and shows the percent.
        auto* panel = view->panel_view(TrajectoryView::residual_panel());
        const QPointF at = panel->chart()->mapToPosition(QPointF(kPlantedUpdate, planted));
        const QPointF local = panel->mapFromScene(panel->chart()->mapToScene(at));
        QMouseEvent move(QEvent::MouseMove, local, panel->viewport()->mapToGlobal(local), Qt::NoButton, Qt::NoButton, Qt::NoModifier);
        QApplication::sendEvent(panel->viewport(), &move);
        QTRY_VERIFY2(view->hover_text().contains(QStringLiteral("update %1").arg(kPlantedUpdate)), qPrintable(view->hover_text()));
        QVERIFY2(view->hover_text().contains(QStringLiteral("residual (%), pre-clip grad norm")), qPrintable(view->hover_text()));
        QVERIFY2(view->hover_text().contains(name + QStringLiteral("</span> ") + QString::number(planted, 'g', 6) + QStringLiteral("%")),
                 qPrintable(view->hover_text()));
    }

    void a_run_being_written_is_followed_live() {
        QTemporaryDir dir;
        const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        auto append = [&](int first, int count) {
            ex::RunFileWriter w(file);  // one writer per event batch, as the runner does
            if (first == 0) w.create_leg("engine", {{"device", std::string("cpu")}});
            std::vector<ex::StepRow> rows;
            for (int u = first; u < first + count; ++u) rows.push_back({u, 2.0, 1.0 + u, 1e-3, 10, 0.1});
            w.append_steps("engine", rows);
        };
        append(0, 10);
        MainWindow window;
        window.show();
        window.open_run(QString::fromStdString(file.string()));
        auto drawn = [&] { return window.trajectories()->panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).drawn_point_count(QStringLiteral("engine")); };
        QTRY_COMPARE_WITH_TIMEOUT(drawn(), 10, 10000);
        append(10, 15);
        QTRY_COMPARE_WITH_TIMEOUT(drawn(), 25, 10000);  // picked up without reopening
        QCOMPARE(window.trajectories()->panel_chart(TrajectoryView::metric_panel(Metric::GradNorm)).x_axis()->max(), 24.0);
    }

    // Live following reads appended rows only; the residuals it accumulates equal experiments'
    // comparison of the whole file; a rewritten file is read afresh.
    void a_growing_run_is_read_by_its_new_rows_only() {
        QTemporaryDir dir;
        const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        auto write = [&](int first, int count, bool create) {
            ex::RunFileWriter w(file);
            if (create) {
                ex::ExperimentInfo info;
                info.name = "grow";
                info.run_id = "grow-1";
                info.spec_json = R"({"name":"grow","model":{"config":"tiny"}})";
                w.write_experiment(info);
            }
            for (const char* leg : {"engine", "reference"}) {
                if (create) w.create_leg(leg, {{"implementation", std::string(leg)}});
                std::vector<ex::StepRow> rows;
                std::vector<ex::EvalRow> evals;
                for (int u = first; u < first + count; ++u) {
                    const double shift = std::string(leg) == "engine" ? 1e-3 * std::sin(u) : 0.0;
                    rows.push_back({u, 2.0 - 0.01 * u + shift, 1.0 + shift, 1e-4, 10, 0.1});
                    if (u % 5 == 0) evals.push_back({u, 2.1 - 0.01 * u + shift});
                }
                w.append_steps(leg, rows);
                w.append_eval(leg, evals);
            }
        };
        write(0, 10, true);
        IncrementalRunReader reader;
        RunSnapshot followed;
        auto first = reader.read(file);
        QVERIFY(first.reset);
        apply_delta(followed, first);
        QCOMPARE(followed.legs[0].series(Metric::TrainLoss).size(), std::size_t(10));
        const auto read_before = reader.rows_read();
        write(10, 5, false);
        auto second = reader.read(file);
        QVERIFY(!second.reset);
        QCOMPARE(second.added.legs[0].series(Metric::TrainLoss).size(), std::size_t(5));  // only the new rows
        QCOMPARE(second.added.legs[0].series(Metric::TrainLoss).front().update, 10.0);
        // Per leg: the 5 new steps and 1 new evaluation, plus the one row of overlap of each table.
        QCOMPARE(reader.rows_read() - read_before, std::size_t(2 * (5 + 1 + 1 + 1)));
        apply_delta(followed, second);
        // The accumulated residuals equal what experiments/ computes over the whole file.
        const auto l4 = ex::compare_run_file(file).l4.at(0);
        for (const auto& r : followed.residuals) {
            const auto& expected = r.metric == Metric::HeldoutCe ? l4.eval_percent : r.metric == Metric::TrainLoss ? l4.loss_percent : l4.grad_percent;
            QCOMPARE(r.percent.size(), expected.points.size());
            for (std::size_t i = 0; i < r.percent.size(); ++i) {
                QCOMPARE(r.percent[i].update, double(expected.points[i].update));
                QCOMPARE(r.percent[i].value, expected.points[i].percent);
            }
        }
        // A rewritten file (fewer rows, other values) is read afresh.
        std::filesystem::remove(file);
        write(0, 7, true);
        auto third = reader.read(file);
        QVERIFY(third.reset);
        QCOMPARE(third.added.legs[0].series(Metric::TrainLoss).size(), std::size_t(7));
    }

    void a_dropped_run_folder_is_opened_and_remembered() {
        QTemporaryDir dir;
        write_run(std::filesystem::path(dir.path().toStdString()) / "run.h5");
        MainWindow window;
        window.show();
        QSignalSpy shown(&window, &MainWindow::run_snapshot_shown);
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(dir.path())});
        QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&window, &enter);
        QVERIFY(enter.isAccepted());
        QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&window, &drop);
        QCOMPARE(window.current_run(), QDir::cleanPath(dir.path()));
        QVERIFY(shown.wait(10000));
        QCOMPARE(window.trajectories()->snapshot().legs.size(), std::size_t(2));
        QCOMPARE(QSettings().value(QStringLiteral("recent_runs")).toStringList().value(0), QDir::cleanPath(dir.path()));
    }

    void runs_browser_lists_catalog_legs_and_deletes_after_confirmation() {
        QTemporaryDir dir;
        const auto db = std::filesystem::path(dir.path().toStdString()) / "tandem.db";
        {
            ex::Catalog catalog(db);
            for (const char* id : {"tiny-20261129-100000", "tiny-20261129-110000"}) {
                ex::RunRecord run;
                run.id = id;
                run.experiment = "clinical-tiny";
                run.folder = dir.path().toStdString() + "/" + id;
                run.run_file = run.folder + "/run.h5";
                run.started_at = std::string("2026-11-29T") + (id[14] == '1' && id[15] == '1' ? "11" : "10") + ":00:00Z";
                run.status = "finished";
                catalog.upsert_run(run);
                for (const char* leg : {"engine", "reference"}) {
                    ex::LegRecord l;
                    l.run_id = id;
                    l.name = leg;
                    l.implementation = leg;
                    l.device = "cpu";
                    l.status = "finished";
                    l.final_loss = std::string(leg) == "engine" ? 2.5 : 2.25;
                    l.tokens_per_s = 123.0;
                    l.peak_host_bytes = 1 << 20;
                    catalog.upsert_leg(l);
                }
            }
        }
        RunsBrowser browser;
        QAbstractItemModelTester tester(browser.proxy(), QAbstractItemModelTester::FailureReportingMode::QtTest);
        browser.set_catalog(QString::fromStdString(db.string()));
        // Two runs, each with its two legs under it.
        QCOMPARE(browser.model()->rowCount(), 2);
        QCOMPARE(browser.model()->leg_count(), 4);
        const auto run0 = browser.model()->index(0, 0);
        QCOMPARE(browser.model()->rowCount(run0), 2);
        QCOMPARE(browser.model()->index(0, RunsModel::PeakMemory, run0).data().toString(), QStringLiteral("1.0 MiB"));
        browser.table()->selectionModel()->select(browser.proxy()->index(0, 0), QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
        const auto id = browser.selected_run_id();
        QVERIFY(!id.isEmpty());
        browser.delete_selected(false);
        QCOMPARE(browser.model()->rowCount(), 1);
        QCOMPARE(browser.model()->leg_count(), 2);
        ex::Catalog check(db);
        QCOMPARE(check.runs().size(), std::size_t(1));
        QVERIFY(!check.run(id.toStdString()));
    }
};

QTEST_MAIN(TestViewsRun)
#include "test_views_run.moc"
