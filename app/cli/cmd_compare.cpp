// tandem compare RUN_A:LEG RUN_B:LEG [--format text|md|csv|tex] [--out FILE] [--catalog DB]
//   The L1–L4 statistics between a leg of one run and a leg of another run (or another leg of the
//   same run), with the experiment files' differences first: experiments' compare_run_legs, judged as
//   `tandem report` judges (the same envelopes, the same verdict), the numbers the workbench's diff-runs
//   view shows. Exit 0 when the verdict passes, 3 when it does not, 2 for a leg compared with itself.
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/compare/compare_runs.h"
#include "tandem/compare/report.h"

#include <cstdio>
#include <memory>

namespace tandem::cli {

namespace {
struct CompareArgs {
    std::string a, b;
    ReportOutput output;
};
}  // namespace

void add_compare_command(CLI::App& app, int& exit_code) {
    auto args = std::make_shared<CompareArgs>();
    auto* cmd = app.add_subcommand("compare", "Compare a leg of one run with a leg of another run: config differences, "
                                              "L1-L4 statistics and the verdict `tandem report` gives (exit 3 unless "
                                              "equivalent or within the seed envelope)");
    cmd->add_option("a", args->a, "RUN_A:LEG (a run folder or run.h5, a colon, a leg name)")->required();
    cmd->add_option("b", args->b, "RUN_B:LEG")->required();
    add_report_output(cmd, args->output,
                      "SQLite catalog whose seed envelope judges the pair when the run files hold none (read only when it exists; "
                      "repeat it to look in several, in order)");
    cmd->callback([args, &exit_code] {
        const auto format = checked_report_format(args->output);
        const auto a = experiments::parse_run_leg(args->a), b = experiments::parse_run_leg(args->b);
        if (experiments::same_run_leg(a, b))
            throw CLI::ValidationError("compare", args->a + " and " + args->b +
                                                      " are the same leg of the same run: a leg equals itself by construction");
        note_live_run(a.run.string(), "the comparison covers what it has recorded so far");
        if (b.run != a.run) note_live_run(b.run.string(), "the comparison covers what it has recorded so far");
        note_missing_catalogs(args->output);
        const auto r = experiments::compare_run_legs(a, b, {}, args->output.catalog_paths());
        write_report_output(args->output, experiments::render_runs_comparison(r, format));
        exit_code = r.comparison.passed() ? kOk : kCheckFailed;
    });
}

}  // namespace tandem::cli
