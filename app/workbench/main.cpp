// tandem-workbench — the desktop window. Wiring only: options, then views::MainWindow.
//
// --version and --help are answered before any window system is touched (a QCoreApplication
// parses them), so they work without a display (packaging checks, CI).
#include "tandem/version.h"
#include "tandem/views/compare_view.h"
#include "tandem/views/launcher_view.h"
#include "tandem/views/main_window.h"
#include "tandem/views/tandem_binary.h"
#include "tandem/views/trajectory_view.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QStandardPaths>
#include <QThread>
#include <QTimer>

#include <cstdio>
#include <memory>

namespace {

struct Options {
    QString run;
    QString catalog;
    QString experiment;
    QString runs_dir;
    QString tandem;
    QString screenshot_dir;
    QString page;
    QStringList compare;
    QString export_figure;
    QString export_wide_figure;
    QString export_heatmap;
    QSize size{1280, 800};
};

void describe(QCommandLineParser& parser) {
    parser.setApplicationDescription(QStringLiteral(
        "tandem workbench: launch legs, watch their trajectories overlay live, diff tokens, export figures and tables."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addPositionalArgument(QStringLiteral("run"), QStringLiteral("A run folder or run.h5 file to open."), QStringLiteral("[run]"));
    parser.addOption({QStringLiteral("catalog"), QStringLiteral("The catalog (tandem.db) whose runs to list."), QStringLiteral("file")});
    parser.addOption({QStringLiteral("experiment"), QStringLiteral("Experiment file preselected in the launcher."), QStringLiteral("file")});
    parser.addOption({QStringLiteral("runs-dir"), QStringLiteral("Where launched runs go (default: runs/ next to the catalog)."), QStringLiteral("dir")});
    parser.addOption({QStringLiteral("tandem"), QStringLiteral("The tandem CLI the launcher runs (default: next to this binary, in the build tree, installed, then PATH)."), QStringLiteral("file")});
    parser.addOption({QStringLiteral("page"), QStringLiteral("Page to show first: runs, launch, trajectories, token-diff, tables."), QStringLiteral("name")});
    parser.addOption({QStringLiteral("screenshot-dir"),
                      QStringLiteral("Open the run, save a PNG of every page into dir, and quit (for docs/screenshots)."), QStringLiteral("dir")});
    parser.addOption({QStringLiteral("size"), QStringLiteral("Window size WxH (default 1280x800)."), QStringLiteral("WxH")});
    parser.addOption({QStringLiteral("compare"), QStringLiteral("A run for the Compare page (repeat for several)."), QStringLiteral("run")});
    parser.addOption({QStringLiteral("export-figure"),
                      QStringLiteral("With --screenshot-dir: also export the open run's held-out CE + residual + grad norm as one "
                                     "multi-panel figure (journal column width) to file."),
                      QStringLiteral("file")});
    parser.addOption({QStringLiteral("export-wide-figure"),
                      QStringLiteral("With --screenshot-dir: the same figure at the double-column preset (17.8 cm) to file."),
                      QStringLiteral("file")});
    parser.addOption({QStringLiteral("export-heatmap"),
                      QStringLiteral("With --screenshot-dir: also export the open faults run's matrix as a heatmap (PNG, SVG "
                                     "or PDF by suffix; docs/faults.md) to file."),
                      QStringLiteral("file")});
}

Options read_options(QCommandLineParser& parser) {
    Options o;
    if (!parser.positionalArguments().isEmpty()) o.run = parser.positionalArguments().first();
    o.catalog = parser.value(QStringLiteral("catalog"));
    o.experiment = parser.value(QStringLiteral("experiment"));
    o.runs_dir = parser.value(QStringLiteral("runs-dir"));
    o.tandem = parser.value(QStringLiteral("tandem"));
    o.page = parser.value(QStringLiteral("page"));
    o.screenshot_dir = parser.value(QStringLiteral("screenshot-dir"));
    o.compare = parser.values(QStringLiteral("compare"));
    o.export_figure = parser.value(QStringLiteral("export-figure"));
    o.export_wide_figure = parser.value(QStringLiteral("export-wide-figure"));
    o.export_heatmap = parser.value(QStringLiteral("export-heatmap"));
    if (parser.isSet(QStringLiteral("size"))) {
        const auto parts = parser.value(QStringLiteral("size")).split(QLatin1Char('x'));
        if (parts.size() == 2) o.size = QSize(parts[0].toInt(), parts[1].toInt());
    }
    return o;
}

void set_identity() {
    QCoreApplication::setOrganizationName(QStringLiteral("tandem"));
    QCoreApplication::setApplicationName(QStringLiteral("tandem-workbench"));
    QCoreApplication::setApplicationVersion(QStringLiteral(TANDEM_VERSION));
}

}  // namespace

int main(int argc, char** argv) {
    Q_INIT_RESOURCE(views);  // the icon, from the static tandem_views library
    Options options;
    {
        // Parse with a window-system-free application: --help/--version print and exit here.
        QCoreApplication core(argc, argv);
        set_identity();
        QCommandLineParser parser;
        describe(parser);
        parser.process(core);  // exits on --help, --version and unknown options
        options = read_options(parser);
    }

    QApplication app(argc, argv);
    set_identity();
    app.setWindowIcon(QIcon(QStringLiteral(":/tandem/icon.svg")));

    tandem::views::MainWindow window;
    window.resize(options.size);
    auto* launcher = window.launcher();
    // Next to this binary, in the build tree, installed, then PATH (or only --tandem FILE).
    launcher->set_tandem(tandem::views::find_tandem_binary(QCoreApplication::applicationDirPath(), tandem::views::installed_bindir(),
                                                           qEnvironmentVariable("PATH"), options.tandem));
    launcher->set_legs({{QStringLiteral("engine"), QStringLiteral("engine"), QStringLiteral("cpu")},
                        {QStringLiteral("reference"), QStringLiteral("reference"), QStringLiteral("cpu")}});
    if (!options.catalog.isEmpty()) window.open_catalog(options.catalog);
    if (!options.runs_dir.isEmpty()) launcher->set_runs_dir(options.runs_dir);
    if (!options.experiment.isEmpty()) launcher->set_experiment(options.experiment);
    if (!options.run.isEmpty()) window.open_run(options.run);
    for (const auto& run : options.compare) window.compare()->add_run(run);

    const QStringList pages{QStringLiteral("runs"), QStringLiteral("launch"), QStringLiteral("trajectories"),
                            QStringLiteral("token-diff"), QStringLiteral("tables"), QStringLiteral("compare"),
                            QStringLiteral("faults"), QStringLiteral("divergence")};
    if (const auto page = pages.indexOf(options.page); page >= 0) window.show_page(static_cast<tandem::views::MainWindow::Page>(page));
    window.show();

    if (!options.screenshot_dir.isEmpty()) {
        // Wait for the run's first snapshot (or its load error), then grab every page and quit.
        auto shoot = [&window, dir = options.screenshot_dir, figure = options.export_figure, wide = options.export_wide_figure,
                      heatmap = options.export_heatmap,
                      compared = options.compare.size()] {
            // The compare page's runs load on their own threads: wait for them (at most 20 s).
            for (int i = 0; i < 200 && window.compare()->overlay()->runs().size() < static_cast<std::size_t>(compared); ++i) {
                QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
                QThread::msleep(50);
            }
            const auto files = window.save_screenshots(dir);
            for (const auto& f : files) std::printf("%s\n", qPrintable(f));
            bool exported = true;
            if (!figure.isEmpty()) {
                exported = window.export_multi_panel_figure(figure);
                if (exported) std::printf("%s\n", qPrintable(figure));
            }
            if (!wide.isEmpty()) {
                const bool ok = window.export_multi_panel_figure(wide, tandem::views::FigurePreset::DoubleColumn);
                if (ok) std::printf("%s\n", qPrintable(wide));
                exported = exported && ok;
            }
            if (!heatmap.isEmpty()) {
                const bool ok = window.export_fault_heatmap(heatmap);
                if (ok) std::printf("%s\n", qPrintable(heatmap));
                exported = exported && ok;
            }
            QCoreApplication::exit(files.size() >= 5 && exported ? 0 : 1);
        };
        if (options.run.isEmpty()) {
            QTimer::singleShot(500, &window, shoot);
        } else {
            // The loader's own signals decide, not a clock: its first snapshot shoots, its failure (shown in the
            // window's error line) ends with that message. On a busy machine loading takes what it takes; a loader
            // that neither delivers nor fails within 10 minutes is reported as hung.
            QObject::connect(&window, &tandem::views::MainWindow::run_snapshot_shown, &window,
                             [shoot] { QTimer::singleShot(800, shoot); }, Qt::SingleShotConnection);
            auto* failed = new QTimer(&window);
            QObject::connect(failed, &QTimer::timeout, &window, [&window] {
                if (window.error_text().isEmpty()) return;
                std::fprintf(stderr, "tandem-workbench: %s\n", qPrintable(window.error_text()));
                QCoreApplication::exit(1);
            });
            failed->start(200);
            QTimer::singleShot(600000, &window, [] {
                std::fprintf(stderr, "tandem-workbench: the run neither loaded nor failed within 10 minutes\n");
                QCoreApplication::exit(1);
            });
        }
    }
    return app.exec();
}
