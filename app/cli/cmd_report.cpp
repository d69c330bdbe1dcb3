// tandem report RUN [--format text|md|csv|tex] [--out FILE] [--catalog DB]: a run's comparison, its two
// distances and its verdict (docs/report.md).
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/compare/comparison_io.h"
#include "tandem/compare/report.h"

#include <cstdio>
#include <memory>
#include <string>

namespace tandem::cli {

namespace {

struct ReportArgs {
    std::string run;
    ReportOutput output;
};

}  // namespace

void add_report_command(CLI::App& app, int& exit_code) {
    auto rep = std::make_shared<ReportArgs>();
    auto* report = app.add_subcommand("report", "Print the L1-L4 comparison of a run, its two distances and its verdict "
                                                "(exit 3 unless equivalent or within the seed envelope)");
    report->add_option("run", rep->run, "run folder or run.h5")->required();
    add_report_output(report, rep->output,
                      "SQLite catalog whose seed envelope judges the run when its run.h5 holds none (read only when it exists; "
                      "repeat it to look in several, in order)");
    report->callback([rep, &exit_code] {
        const auto fmt = checked_report_format(rep->output);  // before anything is read or written
        note_live_run(rep->run, "this report covers what it has recorded so far (legs still running are not finished)");
        note_missing_catalogs(rep->output);
        std::string title;
        experiments::Comparison c = experiments::compare_run_file(rep->run, &title, rep->output.catalog_paths());
        write_report_output(rep->output, experiments::render_report(title, c, fmt));
        exit_code = c.passed() ? kOk : kCheckFailed;
    });
}

}  // namespace tandem::cli
