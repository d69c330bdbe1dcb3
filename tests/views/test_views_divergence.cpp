// The divergence page (issue 16): the grid model over a hand-made localisation (rows, columns, the
// largest ratio over micro-batches, the localised cell, colours, model invariants), the update
// chooser, and the page on a run file without fingerprints (says how to record them).
#include "tandem/experiments/run_file.h"
#include "tandem/views/divergence_model.h"
#include "tandem/views/divergence_view.h"

#include <QAbstractItemModelTester>
#include <QTemporaryDir>
#include <QtTest>

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
    }
};

QTEST_MAIN(TestViewsDivergence)
#include "test_views_divergence.moc"
