#include "tandem/views/main_window.h"

#include "tandem/views/fault_heatmap.h"

#include "tandem/assets.h"
#include "tandem/data/chat_template.h"
#include "tandem/data/corpus.h"
#include "tandem/data/tokenizer.h"
#include "tandem/views/compare_view.h"
#include "tandem/views/divergence_view.h"
#include "tandem/views/export.h"
#include "tandem/views/export_dialog.h"
#include "tandem/views/fault_heatmap.h"
#include "tandem/views/launcher_view.h"
#include "tandem/views/report_tables.h"
#include "tandem/views/run_follower.h"
#include "tandem/views/run_source.h"
#include "tandem/views/runs_browser.h"
#include "tandem/views/tables_view.h"
#include "tandem/views/token_diff_view.h"
#include "tandem/views/trajectory_view.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QRegularExpression>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QThread>
#include <QVBoxLayout>

#include "tandem/atomic_file.h"

namespace tandem::views {

namespace {
constexpr int kMaxRecent = 10;
const char* kPageFiles[] = {"runs.png", "launch.png", "trajectories.png", "token-diff.png", "tables.png", "compare.png", "faults.png",
                             "divergence.png"};

// A message line above the pages (wrapped, selectable, styled by `style`), hidden until it has
// something to say; added to `layout`.
QLabel* add_banner(QVBoxLayout* layout, QWidget* parent, const QString& name, const QString& style) {
    auto* banner = new QLabel(parent);
    banner->setObjectName(name);
    banner->setWordWrap(true);
    banner->setTextInteractionFlags(Qt::TextSelectableByMouse);
    banner->setStyleSheet(style);
    banner->hide();
    layout->addWidget(banner);
    return banner;
}
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setWindowTitle(tr("tandem workbench"));
    setWindowIcon(QIcon(QStringLiteral(":/tandem/icon.svg")));
    setAcceptDrops(true);
    pages_ = new QTabWidget(this);
    pages_->setObjectName(QStringLiteral("pages"));
    runs_ = new RunsBrowser(pages_);
    launcher_ = new LauncherView(pages_);
    trajectories_ = new TrajectoryView(pages_);
    token_diff_ = new TokenDiffView(pages_);
    tables_ = new TablesView(pages_);
    compare_ = new CompareView(pages_);
    faults_ = new FaultHeatmapView(pages_);
    divergence_ = new DivergenceView(pages_);
    pages_->addTab(runs_, tr("&Runs"));
    pages_->addTab(launcher_, tr("&Launch"));
    pages_->addTab(trajectories_, tr("Tra&jectories"));
    pages_->addTab(token_diff_, tr("Token &diff"));
    pages_->addTab(tables_, tr("Ta&bles"));
    pages_->addTab(compare_, tr("&Compare"));
    pages_->addTab(faults_, tr("&Faults"));
    pages_->addTab(divergence_, tr("Di&vergence"));
    auto* central = new QWidget(this);
    auto* central_layout = new QVBoxLayout(central);
    central_layout->setContentsMargins(0, 0, 0, 0);
    // Errors (a path that is not a run, ...) are shown here at once, in red, until the next action.
    error_ = add_banner(central_layout, central, QStringLiteral("error"),
                        QStringLiteral("QLabel { background: #fde2d8; color: #7a1f00; padding: 6px; border: 1px solid #d55e00; }"));
    // A run with an injected fault (docs/faults.md) is never shown without this, above every page.
    fault_banner_ = add_banner(central_layout, central, QStringLiteral("fault-banner"),
                               QStringLiteral("QLabel { background: #b00020; color: white; font-weight: bold; padding: 6px; }"));
    central_layout->addWidget(pages_, 1);
    setCentralWidget(central);
    // Below this the charts collapse and the tool rows clip (docs/workbench.md).
    setMinimumSize(880, 640);
    status_ = new QLabel(this);
    statusBar()->addWidget(status_, 1);

    follower_ = new RunFollower(this);
    connect(follower_, &RunFollower::delta_ready, this, &MainWindow::on_delta);
    // A file that fails on the follower's thread (it passed the quick check) is said in the error
    // bar like any path that is not a run, and is not remembered in Recent runs.
    connect(follower_, &RunFollower::load_failed, this, [this](const QString& m) { show_error(m); });
    connect(runs_, &RunsBrowser::open_run_requested, this, [this](const QString& path) { open_run(path); });
    connect(runs_, &RunsBrowser::compare_requested, this, [this](const QStringList& files) {
        compare_->overlay()->set_run_tags(runs_->run_tags());  // a run's own tags name it in the legend
        compare_->set_runs(files);
        show_page(ComparePage);
    });
    connect(launcher_, &LauncherView::run_folder_found, this, [this](const QString& folder) {
        open_run(folder, true);
        show_page(TrajectoriesPage);
    });
    connect(launcher_, &LauncherView::run_finished, this, [this](int) {
        runs_->reload();
        if (!run_path_.isEmpty()) load_static_pages(run_path_);
    });

    build_menus();
    QSettings settings;
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
    pages_->setCurrentIndex(settings.value(QStringLiteral("window/page"), 0).toInt());
    if (auto catalog = settings.value(QStringLiteral("catalog")).toString(); !catalog.isEmpty()) open_catalog(catalog);
}

MainWindow::~MainWindow() = default;

void MainWindow::build_menus() {
    auto* file = menuBar()->addMenu(tr("&File"));
    auto add = [this](QMenu* menu, const QString& text, const QKeySequence& key, auto slot) {
        auto* action = menu->addAction(text);
        action->setShortcut(key);
        connect(action, &QAction::triggered, this, slot);
        return action;
    };
    add(file, tr("&Open run…"), QKeySequence::Open, [this] {
        const auto path = QFileDialog::getOpenFileName(this, tr("Open run file"), run_path_, tr("Run files (run.h5 *.h5)"));
        if (!path.isEmpty()) open_run(path);
    });
    add(file, tr("Open run &folder…"), QKeySequence(tr("Ctrl+Shift+O")), [this] {
        const auto path = QFileDialog::getExistingDirectory(this, tr("Open run folder"), run_path_);
        if (!path.isEmpty()) open_run(path);
    });
    add(file, tr("Open &catalog…"), QKeySequence(tr("Ctrl+K")), [this] {
        const auto path = QFileDialog::getOpenFileName(this, tr("Open catalog"), runs_->catalog(), tr("Catalog (*.db)"));
        if (!path.isEmpty()) open_catalog(path);
    });
    recent_menu_ = file->addMenu(tr("&Recent runs"));
    rebuild_recent_menu();
    file->addSeparator();
    add(file, tr("&Export figure…"), QKeySequence(tr("Ctrl+E")), &MainWindow::export_figure_dialog);
    add(file, tr("Export &multi-panel figure…"), QKeySequence(tr("Ctrl+Shift+F")), [this] { export_figure_with(true); });
    add(file, tr("Export &table…"), QKeySequence(tr("Ctrl+T")), &MainWindow::export_table_dialog);
    add(file, tr("Export curves (all) as CS&V…"), QKeySequence(tr("Ctrl+Shift+E")), [this] { export_curves_dialog(false); });
    add(file, tr("Export curves (&visible range) as CSV…"), QKeySequence(), [this] { export_curves_dialog(true); });
    file->addSeparator();
    add(file, tr("&Quit"), QKeySequence::Quit, &QWidget::close);

    auto* view = menuBar()->addMenu(tr("&View"));
    const QString names[] = {tr("&Runs"), tr("&Launch"), tr("Tra&jectories"), tr("Token &diff"), tr("Ta&bles"), tr("&Compare"),
                             tr("&Faults"), tr("Di&vergence")};
    for (int i = 0; i < 8; ++i)
        add(view, names[i], QKeySequence(QStringLiteral("Ctrl+%1").arg(i + 1)), [this, i] { show_page(static_cast<Page>(i)); });
    view->addSeparator();
    auto* log = add(view, tr("&Log y axis"), QKeySequence(tr("Ctrl+L")), [this](bool on) { trajectories_->set_log_y(on); });
    log->setCheckable(true);
    add(view, tr("&Fit all updates"), QKeySequence(tr("Ctrl+0")), [this] { trajectories_->set_x_range(std::nullopt); });
    add(view, tr("Reload &catalog"), QKeySequence::Refresh, [this] { runs_->reload(); });

    auto* run = menuBar()->addMenu(tr("&Run"));
    add(run, tr("&Start legs"), QKeySequence(tr("Ctrl+R")), [this] {
        show_page(LaunchPage);
        launcher_->start();
    });
    add(run, tr("S&top"), QKeySequence(tr("Ctrl+.")), [this] { launcher_->stop(); });
    add(run, tr("&Resume"), QKeySequence(tr("Ctrl+Shift+R")), [this] { launcher_->resume(); });
    add(run, tr("&Delete selected run…"), QKeySequence::Delete, [this] { runs_->delete_selected(true); });

    auto* help = menuBar()->addMenu(tr("&Help"));
    add(help, tr("&About"), QKeySequence(), [this] {
        QMessageBox::about(this, tr("About tandem workbench"),
                           tr("<b>tandem workbench %1</b><p>Shows whether independently implemented training stacks "
                              "compute the same fine-tuning run. The views draw what experiments/ computed.</p>")
                               .arg(QApplication::applicationVersion()));
    });
}

void MainWindow::show_page(Page page) { pages_->setCurrentIndex(static_cast<int>(page)); }

void MainWindow::open_catalog(const QString& path) {
    runs_->set_catalog(path);
    launcher_->set_catalog(path);
    // Runs launched from here go next to the catalog, as `tandem run` puts them by default.
    launcher_->set_runs_dir(QFileInfo(path).absoluteDir().filePath(QStringLiteral("runs")));
    QSettings().setValue(QStringLiteral("catalog"), path);
}

QString MainWindow::error_text() const { return error_->isVisibleTo(this) ? error_->text() : QString(); }

void MainWindow::show_error(const QString& message) {
    error_->setText(message);
    error_->setVisible(!message.isEmpty());
    if (!message.isEmpty()) status_->setText(message);
}

bool MainWindow::open_run(const QString& path, bool pending) {
    const QString clean = QDir::cleanPath(QFileInfo(path).absoluteFilePath());
    if (auto problem = run_path_problem(clean.toStdString(), pending)) {
        // Said at once; the run that is open stays open and nothing is remembered.
        show_error(tr("Cannot open %1").arg(QString::fromStdString(*problem)));
        return false;
    }
    show_error({});
    run_path_ = clean;
    last_point_count_ = 0;
    static_pages_loaded_ = false;
    snapshot_ = {};
    trajectories_->set_snapshot({});
    follower_->follow(run_path_);
    // Recent runs gets the run once its first rows arrived (on_delta): a file that fails to load is
    // never remembered.
    status_->setText(tr("Opening %1…").arg(run_path_));
    setWindowTitle(tr("tandem workbench — %1").arg(QFileInfo(run_path_).fileName() == QStringLiteral("run.h5")
                                                       ? QFileInfo(run_path_).dir().dirName()
                                                       : QFileInfo(run_path_).fileName()));
    return true;
}

void MainWindow::on_delta(std::shared_ptr<const RunDelta> delta) {
    Q_ASSERT(QThread::currentThread() == thread());
    apply_delta(snapshot_, *delta);
    last_point_count_ = snapshot_.point_count();
    trajectories_->apply_delta(*delta);
    status_->setText(tr("%1: %2 legs, %3 points").arg(QString::fromStdString(snapshot_.path)).arg(snapshot_.legs.size()).arg(last_point_count_));
    if (!static_pages_loaded_) {
        static_pages_loaded_ = true;
        remember_recent(run_path_);
        load_static_pages(QString::fromStdString(snapshot_.path));
    }
    Q_EMIT run_snapshot_shown();
}

void MainWindow::load_static_pages(const QString& run_file) {
    // Tables: the report's numbers.
    try {
        auto report = load_report_tables(run_file.toStdString());
        fault_banner_->setText(QString::fromStdString(report.fault_banner));
        fault_banner_->setVisible(!report.fault_banner.empty());
        tables_->set_tables(std::move(report.tables), QString::fromStdString(report.note));
    } catch (const std::exception& e) {
        tables_->set_tables({}, QString::fromUtf8(e.what()));
    }
    // Faults: the fault matrix's heatmap (a `tandem faults` run)
    try {
        faults_->set_matrix(load_fault_matrix(run_file.toStdString()));
    } catch (const std::exception& e) {
        faults_->set_matrix(std::nullopt, QString::fromUtf8(e.what()));
    }
    // Divergence: the localisation of the run's fingerprints (docs/observables.md), when recorded.
    divergence_->load(run_file.toStdString());
    // Token diff: every leg's L3 records, plus tandem's own rendering with both templates when the
    // run folder's corpus and the tokenizer are at hand.
    std::vector<std::vector<LegTokenRecord>> legs;
    try {
        legs = load_token_records(run_file.toStdString());
    } catch (const std::exception& e) {
        status_->setText(QString::fromUtf8(e.what()));
    }
    std::shared_ptr<data::Tokenizer> tokenizer;
    try {
        if (auto root = find_asset_root()) tokenizer = std::make_shared<data::Tokenizer>(data::Tokenizer::load(tokenizer_dir(*root)));
    } catch (const std::exception&) {
        tokenizer.reset();  // pieces fall back to ⟨id⟩
    }
    std::vector<std::pair<std::int64_t, std::string>> records;
    std::vector<std::string> previews;
    if (!legs.empty())
        for (const auto& r : legs.front()) {
            records.emplace_back(r.index, r.id);
            previews.push_back(r.text);
        }
    std::vector<SideSource> sources;
    auto shared_legs = std::make_shared<std::vector<std::vector<LegTokenRecord>>>(std::move(legs));
    for (std::size_t l = 0; l < shared_legs->size(); ++l) {
        if ((*shared_legs)[l].empty()) continue;
        sources.push_back({(*shared_legs)[l].front().label, [shared_legs, l, tokenizer](std::int64_t index) -> std::optional<TokenSide> {
                               for (const auto& r : (*shared_legs)[l])
                                   if (r.index == index) return side_from_leg_record(r, tokenizer.get());
                               return std::nullopt;
                           }});
    }
    const auto folder = QFileInfo(run_file).isDir() ? QDir(run_file) : QFileInfo(run_file).absoluteDir();
    const auto records_file = folder.filePath(QStringLiteral("corpus/records.jsonl")).toStdString();
    if (tokenizer && std::filesystem::exists(records_file)) {
        auto corpus = std::make_shared<std::vector<data::Record>>();
        std::size_t max_len = 0;
        try {
            *corpus = data::read_records(records_file);
            if (!shared_legs->empty() && !shared_legs->front().empty()) {
                // The legs' max_len: a truncated record tells it; otherwise no truncation applies.
                for (const auto& r : shared_legs->front())
                    if (r.truncated_at) max_len = static_cast<std::size_t>(*r.truncated_at);
            }
        } catch (const std::exception&) {
            corpus->clear();
        }
        if (records.empty())
            for (std::size_t i = 0; i < std::min<std::size_t>(corpus->size(), 64); ++i) {
                records.emplace_back((*corpus)[i].index, (*corpus)[i].id);
                previews.push_back((*corpus)[i].messages.empty() ? std::string() : (*corpus)[i].messages.front().content);
            }
        for (auto [kind, name] : {std::pair{data::TemplateKind::Qwen3, "template qwen3 (tandem)"},
                                  std::pair{data::TemplateKind::ChatML, "template chatml (tandem)"}}) {
            if (corpus->empty()) break;
            sources.push_back({name, [corpus, tokenizer, kind, name, max_len](std::int64_t index) -> std::optional<TokenSide> {
                                   if (index < 0 || static_cast<std::size_t>(index) >= corpus->size()) return std::nullopt;
                                   return side_from_template(*tokenizer, kind, name, (*corpus)[static_cast<std::size_t>(index)].messages, max_len);
                               }});
        }
    }
    token_diff_->set_sources(std::move(records), std::move(sources), std::move(previews));
}

void MainWindow::remember_recent(const QString& path) {
    QSettings settings;
    auto recent = settings.value(QStringLiteral("recent_runs")).toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > kMaxRecent) recent.removeLast();
    settings.setValue(QStringLiteral("recent_runs"), recent);
    rebuild_recent_menu();
}

void MainWindow::rebuild_recent_menu() {
    recent_menu_->clear();
    const auto recent = QSettings().value(QStringLiteral("recent_runs")).toStringList();
    for (int i = 0; i < recent.size(); ++i) {
        auto* action = recent_menu_->addAction(QStringLiteral("&%1 %2").arg(i + 1).arg(recent[i]));
        connect(action, &QAction::triggered, this, [this, path = recent[i]] { open_run(path); });
    }
    recent_menu_->setEnabled(!recent.isEmpty());
}

void MainWindow::export_figure_dialog() {
    export_figure_with(false);
}

namespace {
// A file name that says what the file holds: "<run id>-<what>.<suffix>", in the folder of the last export.
QString suggested_file(const QString& key, const std::string& run_id, const QString& what, const QString& suffix) {
    QSettings settings;
    const QString folder = settings.value(key).toString();
    return QDir(folder.isEmpty() ? QDir::currentPath() : folder).filePath(export_file_name(QString::fromStdString(run_id), what, suffix));
}
void remember_folder(const QString& key, const QString& file) { QSettings().setValue(key, QFileInfo(file).absolutePath()); }
}  // namespace

TrajectoryView* MainWindow::figure_source() const {
    // The Compare page's overlay when it is the page in front, else the run's trajectories.
    return pages_->currentIndex() == ComparePage ? compare_->overlay() : trajectories_;
}

void MainWindow::export_figure_with(bool several) {
    QStringList panels;
    for (int p = 0; p < TrajectoryView::panel_count(); ++p) panels << TrajectoryView::panel_name(p);
    TrajectoryView* view = figure_source();
    FigureExportDialog dialog(panels, 0, this);
    if (several) dialog.choose_panels(TrajectoryView::figure_panels());
    dialog.set_run_id(QString::fromStdString(view->snapshot().run_id));
    if (dialog.exec() != QDialog::Accepted) return;
    try {
        std::vector<PanelFigure> figure;
        for (int p : dialog.panels()) figure.push_back({view->panel_curves(p), view->panel_options(p)});
        export_figure_panels(figure, dialog.size(), *figure_format_for(dialog.path()), dialog.path().toStdString(),
                             QStringLiteral("tandem: %1").arg(QString::fromStdString(view->snapshot().run_id)));
        status_->setText(tr("Wrote %1").arg(dialog.path()));
    } catch (const std::exception& e) {
        QMessageBox::warning(this, tr("Export figure"), QString::fromUtf8(e.what()));
    }
}

void MainWindow::export_table_dialog() {
    const int index = tables_->current_index();
    if (index < 0) {
        QMessageBox::information(this, tr("Export table"), tr("Open a run first: the Tables page is empty."));
        return;
    }
    // Qt's save dialog asks before it replaces a file; the name says which run and table it is.
    const auto& table = tables_->tables()[static_cast<std::size_t>(index)];
    const auto path = QFileDialog::getSaveFileName(
        this, tr("Export table"), suggested_file(QStringLiteral("export/table_folder"), trajectories_->snapshot().run_id, QString::fromStdString(table.id), QStringLiteral("tex")),
        tr("LaTeX booktabs (*.tex);;CSV (*.csv);;Markdown (*.md)"));
    if (path.isEmpty()) return;
    remember_folder(QStringLiteral("export/table_folder"), path);
    const auto format = table_format_for(path);
    if (!format) {
        QMessageBox::warning(this, tr("Export table"), tr("The file name must end in .tex, .csv or .md."));
        return;
    }
    try {
        export_table(table, *format, path.toStdString());
        status_->setText(tr("Wrote %1").arg(path));
    } catch (const std::exception& e) {
        QMessageBox::warning(this, tr("Export table"), QString::fromUtf8(e.what()));
    }
}

void MainWindow::export_curves_dialog(bool visible_only) {
    // Every run the figure source shows (the Compare page: all its runs), plain numbers, units in the header.
    TrajectoryView* view = figure_source();
    const auto path = QFileDialog::getSaveFileName(
        this, tr("Export curves"),
        suggested_file(QStringLiteral("export/curves_folder"), view->multi_run() ? std::string("compare") : view->snapshot().run_id,
                       visible_only ? QStringLiteral("curves-visible") : QStringLiteral("curves"), QStringLiteral("csv")),
        tr("CSV (*.csv)"));
    if (path.isEmpty()) return;
    remember_folder(QStringLiteral("export/curves_folder"), path);
    try {
        write_file_atomic(path.toStdString(), curves_csv(view->runs(), visible_only ? view->visible_x_range() : std::nullopt, view->x_axis()));
        status_->setText(tr("Wrote %1").arg(path));
    } catch (const std::exception& e) {
        QMessageBox::warning(this, tr("Export curves"), QString::fromUtf8(e.what()));
    }
}

bool MainWindow::export_multi_panel_figure(const QString& path, FigurePreset preset) {
    const auto format = figure_format_for(path);
    if (!format) return false;
    trajectories_->redraw_now();
    std::vector<PanelFigure> figure;
    for (int p : TrajectoryView::figure_panels())
        figure.push_back({trajectories_->panel_curves(p), trajectories_->panel_options(p)});
    try {
        export_figure_panels(figure, preset_size(preset, static_cast<int>(figure.size())), *format, path.toStdString(),
                             QStringLiteral("tandem: %1").arg(QString::fromStdString(trajectories_->snapshot().run_id)));
        return true;
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
        return false;
    }
}

QStringList MainWindow::save_screenshots(const QString& dir) {
    QDir().mkpath(dir);
    QStringList written;
    const int current = pages_->currentIndex();
    for (int i = 0; i < pages_->count(); ++i) {
        pages_->setCurrentIndex(i);
        if (i == TrajectoriesPage) trajectories_->redraw_now();
        QApplication::processEvents();
        const auto file = QDir(dir).filePath(QString::fromLatin1(kPageFiles[i]));
        if (grab().save(file, "PNG")) written << file;
        if (i == TokenDiffPage && token_diff_->source_count() >= 4) {
            // Also the template comparison (tandem's qwen3 vs chatml rendering): a real mismatch.
            token_diff_->select(0, token_diff_->source_count() - 2, token_diff_->source_count() - 1);
            QApplication::processEvents();
            const auto templates = QDir(dir).filePath(QStringLiteral("token-diff-templates.png"));
            if (grab().save(templates, "PNG")) written << templates;
            token_diff_->select(0, 0, 1);
        }
        if (i == ComparePage && compare_->diff_choices().size() >= 2) {
            // The comparison of the first two runs' first leg: its diff tables.
            compare_->overlay()->redraw_now();
            QApplication::processEvents();
            const auto file_overlay = QDir(dir).filePath(QString::fromLatin1(kPageFiles[i]));
            if (grab().save(file_overlay, "PNG") && !written.contains(file_overlay)) written << file_overlay;
            const auto choices = compare_->diff_choices();
            QString b = choices.value(1);
            const QString a = choices.value(0), leg = a.mid(a.lastIndexOf(QLatin1Char(':')));
            for (const auto& c : choices)
                if (c != a && c.endsWith(leg)) b = c;
            compare_->compare(a, b);
            compare_->show_diff_tab();
            compare_->diff_view()->set_current_index(0);
            QApplication::processEvents();
            const auto diff = QDir(dir).filePath(QStringLiteral("compare-diff.png"));
            if (grab().save(diff, "PNG")) written << diff;
        }
    }
    pages_->setCurrentIndex(current);
    return written;
}

void MainWindow::closeEvent(QCloseEvent* event) {
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/state"), saveState());
    settings.setValue(QStringLiteral("window/page"), pages_->currentIndex());
    if (launcher_->running() &&
        QMessageBox::question(this, tr("Quit"), tr("Legs are running. Stop them and quit?"), QMessageBox::Yes | QMessageBox::Cancel) !=
            QMessageBox::Yes) {
        event->ignore();
        return;
    }
    event->accept();
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
    if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
    for (const auto& url : event->mimeData()->urls()) {
        if (!url.isLocalFile()) continue;
        const QString path = url.toLocalFile();
        if (path.endsWith(QStringLiteral(".db"))) open_catalog(path);
        else open_run(path);
        event->acceptProposedAction();
        return;
    }
}


bool MainWindow::export_fault_heatmap(const QString& path) {
    const auto& m = faults_->matrix();
    const auto format = figure_format_for(path);
    if (!m || !format) return false;
    try {
        FigureSize size;
        size.width = kJournalColumnCm;
        size.height = 4.0 + 0.45 * static_cast<double>(m->rows.size() + 1);  // cm: a line per fault
        views::export_fault_heatmap(*m, size, *format, path.toStdString());
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
        return false;
    }
    return true;
}

}  // namespace tandem::views
