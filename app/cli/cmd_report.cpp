// tandem report RUN [--format text|md|csv|tex] [--out FILE] [--catalog DB]: a run's comparison, its two
// distances and its verdict (docs/report.md).
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/atomic_file.h"
#include "tandem/compare/report.h"

#include <cstdio>
#include <memory>
#include <string>

namespace tandem::cli {

namespace {

struct ReportArgs {
    std::string run;
    std::string format = "text";
    std::string out;
    std::string catalog = "tandem.db";
    bool force = false;
};

}  // namespace

void add_report_command(CLI::App& app, int& exit_code) {
    auto rep = std::make_shared<ReportArgs>();
    auto* report = app.add_subcommand("report", "Print the L1-L4 comparison of a run, its two distances and its verdict "
                                                "(exit 3 unless equivalent or within the seed envelope)");
    report->add_option("run", rep->run, "run folder or run.h5")->required();
    report->add_option("--format", rep->format, "text, md, csv or tex (LaTeX, booktabs)")->capture_default_str();
    report->add_option("--out", rep->out, "write to this file instead of stdout (never over a run's file unless --force)");
    add_force_flag(report, rep->force);
    report->add_option("--catalog", rep->catalog,
                       "SQLite catalog whose seed envelope judges the run when its run.h5 holds none (read only when it exists)")
        ->capture_default_str();
    report->callback([rep, &exit_code] {
        refuse_protected_out("--out", rep->out, rep->force);  // before anything is read or written
        auto fmt = experiments::parse_report_format(rep->format);
        std::string title;
        experiments::Comparison c = experiments::compare_run_file(rep->run, &title, rep->catalog);
        std::string text = experiments::render_report(title, c, fmt);
        if (rep->out.empty()) {
            std::fwrite(text.data(), 1, text.size(), stdout);
        } else {
            write_file_atomic(rep->out, text);
        }
        exit_code = c.passed() ? kOk : kCheckFailed;
    });
}

}  // namespace tandem::cli
