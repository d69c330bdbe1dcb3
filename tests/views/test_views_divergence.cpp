// The divergence page (docs/observables.md): the grid model over a hand-made localisation (rows, columns, the
// largest ratio over micro-batches, the localised cell, colours, model invariants), the update
// chooser, and the page on a run file without fingerprints (says how to record them); the per-layer
// LoRA update-norm curves overlaid across legs equal what h5py reads from the run file (the layer's
// sqrt(sum of |dW|^2) recomputed in Python).
#include "views_test_support.h"

#include "tandem/store/run_file.h"
#include "tandem/views/divergence_model.h"
#include "tandem/views/divergence_view.h"
#include "tandem/views/trajectory_chart.h"

#include <nlohmann/json.hpp>

#include <QAbstractItemModelTester>
#include <QChart>
#include <QChartView>
#include <QTemporaryDir>
#include <QXYSeries>
#include <QtTest>

#include <cmath>

using namespace tandem::views;
using tandem::experiments::LocalisedPoint;

namespace {
LocalisedPoint point(int64_t u, int64_t mb, int64_t layer, const char* op, const char* pass, double ratio) {
    LocalisedPoint p;
    p.update = u;
    p.micro_batch = mb;
    p.layer = layer;
    p.op = op;
    p.pass = pass;
    p.ratio = ratio;
    p.bound = 1e-5;
    p.rel_diff = ratio * 1e-5;
    return p;
}

// h5py's reading of /legs/<leg>/adapter_norms, each layer's update norm recomputed in Python:
// {"<leg> · layer <l>": [[update, norm], ...]} sorted by update.
nlohmann::json h5py_layer_norms(const QString& file) {
    return test::refenv_python_json(QStringLiteral(R"(
import h5py, json, math, sys
out = {}
with h5py.File(sys.argv[1], "r") as f:
    for leg in f["legs"]:
        if "adapter_norms" not in f["legs"][leg]:
            continue
        sums = {}
        for r in f["legs"][leg]["adapter_norms"][()]:
            k = (int(r["layer"]), int(r["update"]))
            sums[k] = sums.get(k, 0.0) + float(r["delta_norm"]) ** 2
        for (layer, update), v in sorted(sums.items()):
            out.setdefault(leg + " \u00b7 layer " + str(layer), []).append([update, math.sqrt(v)])
print(json.dumps(out))
)"), file);
}

QList<QPointF> drawn(const DivergenceView& v, const QString& name, QColor* color = nullptr, Qt::PenStyle* style = nullptr) {
    for (auto* s : v.norm_chart().chart()->series())
        if (s->name() == name) {
            auto* xy = static_cast<QXYSeries*>(s);
            if (color) *color = xy->pen().color();
            if (style) *style = xy->pen().style();
            return xy->points();
        }
    return {};
}
}  // namespace

class TestViewsDivergence : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void grid_of_one_update() {
        tandem::experiments::Localisation l;
        l.leg_a = "engine";
        l.leg_b = "reference";
        l.points = {point(0, 0, -1, "tokens", "forward", 0), point(0, 0, 0, "input_norm", "forward", 0.5),
                    point(0, 0, 0, "attention", "forward", 3), point(0, 0, 1, "input_norm", "forward", 100),
                    point(0, 1, 1, "input_norm", "forward", 200), point(0, 0, 1, "mlp_act", "backward", 50),
                    point(1, 0, 0, "input_norm", "forward", 0.25)};
        l.first = 2;
        l.updates = {0, 1};
        DivergenceModel m;
        QAbstractItemModelTester tester(&m);
        m.set_localisation(l);
        QCOMPARE(m.update(), int64_t(0));  // the localised point's update
        QCOMPARE(m.rowCount(), 4);         // forward outside, forward 0, forward 1, backward 1
        QCOMPARE(m.columnCount(), 4);      // tokens, input_norm, attention, mlp_act
        QCOMPARE(m.headerData(1, Qt::Vertical).toString(), QStringLiteral("forward · layer 0"));
        QCOMPARE(m.headerData(0, Qt::Vertical).toString(), QStringLiteral("forward · outside layers"));
        QCOMPARE(m.headerData(2, Qt::Horizontal).toString(), QStringLiteral("attention"));
        // layer 1's input_norm: the larger of micro-batches 0 and 1
        QCOMPARE(m.data(m.index(2, 1), kRatioRole).toDouble(), 200.0);
        // the localised cell
        QVERIFY(m.data(m.index(1, 2), kLocalisedRole).toBool());
        QVERIFY(m.data(m.index(1, 2)).toString().startsWith(QStringLiteral("◆")));
        QVERIFY(!m.data(m.index(2, 1), kLocalisedRole).toBool());
        // no point: no value, no colour
        QVERIFY(!m.data(m.index(0, 2), kRatioRole).isValid());
        QVERIFY(!m.data(m.index(0, 2), Qt::BackgroundRole).isValid());
        // colours: within the bound yellowish-white (red and green 255), over it orange to red
        const QColor within = m.data(m.index(1, 1), Qt::BackgroundRole).value<QColor>();
        const QColor over = m.data(m.index(2, 1), Qt::BackgroundRole).value<QColor>();
        QCOMPARE(within.green(), 255);
        QCOMPARE(over.red(), 255);
        QVERIFY(over.green() < 160);
        QVERIFY(ratio_colour(1e4).green() < ratio_colour(3).green());
        // another update
        m.set_update(1);
        QCOMPARE(m.rowCount(), 1);
        QCOMPARE(m.data(m.index(0, 0), kRatioRole).toDouble(), 0.25);
    }

    void page_without_fingerprints_says_how_to_record_them() {
        QTemporaryDir dir;
        const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        {
            tandem::experiments::RunFileWriter w(file);
            w.create_leg("engine");
            w.commit();
        }
        DivergenceView v;
        v.load(file);
        QVERIFY2(v.summary_text().contains(QStringLiteral("observe")), qPrintable(v.summary_text()));
        QCOMPARE(v.model()->rowCount(), 0);
        QVERIFY(v.update_norm_curves().empty());
        QVERIFY2(v.norm_note_text().contains(QStringLiteral("adapter norms")), qPrintable(v.norm_note_text()));
    }

    void update_norm_curves_are_the_run_files_values() {
        QTemporaryDir dir;
        const auto file = std::filesystem::path(dir.path().toStdString()) / "run.h5";
        const char* projections[] = {"q_proj", "v_proj", "down_proj"};
        {
            // Two legs, 3 layers x 3 projections at evaluations 0, 5, 10; the second leg slightly off
            // in layer 2 (a divergence the curves must show, not hide).
            tandem::experiments::RunFileWriter w(file);
            for (const char* leg : {"engine", "reference"}) {
                w.create_leg(leg);
                std::vector<tandem::experiments::AdapterNormRow> rows;
                for (int u : {0, 5, 10})
                    for (int layer = 0; layer < 3; ++layer)
                        for (int j = 0; j < 3; ++j) {
                            double d = u == 0 ? 0.0 : 1e-3 * u * (1 + layer) * (1 + 0.5 * j);
                            if (std::string(leg) == "reference" && layer == 2) d *= 1.25;
                            rows.push_back({u, layer, projections[j], 1.0 + layer, 1e-2 * u, d});
                        }
                w.replace_adapter_norms(leg, rows);
            }
            w.commit();
        }
        DivergenceView v;
        v.resize(900, 700);
        v.load(file);
        const auto oracle = h5py_layer_norms(QString::fromStdString(file.string()));
        QVERIFY2(oracle.is_object() && oracle.size() == 6, oracle.dump().c_str());
        QCOMPARE(v.update_norm_curves().size(), size_t(6));
        QColor first_color;
        for (const auto& [name, points] : oracle.items()) {
            QColor color;
            Qt::PenStyle style{};
            const QList<QPointF> got = drawn(v, QString::fromStdString(name), &color, &style);
            QCOMPARE(got.size(), qsizetype(points.size()));
            for (size_t i = 0; i < points.size(); ++i) {
                QCOMPARE(got[qsizetype(i)].x(), points[i][0].get<double>());
                const double want = points[i][1].get<double>();
                QVERIFY2(std::fabs(got[qsizetype(i)].y() - want) <= 1e-12 * std::max(1.0, want),
                         qPrintable(QStringLiteral("%1 at %2: %3 vs %4").arg(QString::fromStdString(name)).arg(i).arg(got[qsizetype(i)].y()).arg(want)));
            }
            // colour per layer, line style per leg (the first leg solid, the others dashed)
            const bool reference = name.rfind("reference", 0) == 0;
            QCOMPARE(style, reference ? Qt::DashLine : Qt::SolidLine);
            QColor other;
            const std::string layer = name.substr(name.find(" · "));
            drawn(v, QString::fromStdString((reference ? "engine" : "reference") + layer), &other);
            QCOMPARE(color, other);
            if (name == "engine · layer 0") first_color = color;
        }
        QColor layer1;
        drawn(v, QStringLiteral("engine · layer 1"), &layer1);
        QVERIFY(layer1 != first_color);
        // the divergence in layer 2 is on the page: the legs' last points differ by the factor written
        const QList<QPointF> e2 = drawn(v, QStringLiteral("engine · layer 2")), r2 = drawn(v, QStringLiteral("reference · layer 2"));
        QVERIFY(std::fabs(r2.back().y() / e2.back().y() - 1.25) < 1e-12);
        // one layer chosen: only its legs' curves are drawn, still the run file's values
        v.show_norm_layer(1);
        QVERIFY(drawn(v, QStringLiteral("engine · layer 0")).isEmpty());
        const QList<QPointF> e1 = drawn(v, QStringLiteral("engine · layer 1"));
        QCOMPARE(e1.size(), qsizetype(3));
        QVERIFY(std::fabs(e1.back().y() - oracle["engine · layer 1"][2][1].get<double>()) <= 1e-12);
        QCOMPARE(v.norm_chart().chart()->series().size() - 1, qsizetype(2));  // + the hidden zero line
        v.show_norm_layer(std::nullopt);
        QCOMPARE(drawn(v, QStringLiteral("engine · layer 0")).size(), qsizetype(3));
    }
};

QTEST_MAIN(TestViewsDivergence)
#include "test_views_divergence.moc"
