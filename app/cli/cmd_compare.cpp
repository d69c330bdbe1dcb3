// tandem compare RUN_A:LEG RUN_B:LEG [--format text|md|csv|tex] [--out FILE] [--catalog DB]
//   The L1–L4 statistics between a leg of one run and a leg of another run (or another leg of the
//   same run), with the experiment files' differences first: experiments' compare_run_legs, judged as
//   `tandem report` judges (the same envelopes, the same verdict), the numbers the workbench's diff-runs
//   view shows. Exit 0 when the verdict passes, 3 when it does not, 2 for a leg compared with itself.
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/atomic_file.h"
#include "tandem/compare/compare.h"
#include "tandem/compare/report.h"

#include <cstdio>
#include <memory>

namespace tandem::cli {

namespace {
struct CompareArgs {
    std::string a, b;
    std::string format = "text";
    std::string out;
    std::string catalog = "tandem.db";
    bool force = false;
};
}  // namespace

void add_compare_command(CLI::App& app, int& exit_code) {
    auto args = std::make_shared<CompareArgs>();
    auto* cmd = app.add_subcommand("compare", "Compare a leg of one run with a leg of another run: config differences, "
                                              "L1-L4 statistics and the verdict `tandem report` gives (exit 3 unless "
                                              "equivalent or within the seed envelope)");
    cmd->add_option("a", args->a, "RUN_A:LEG (a run folder or run.h5, a colon, a leg name)")->required();
    cmd->add_option("b", args->b, "RUN_B:LEG")->required();
    cmd->add_option("--format", args->format, "text, md, csv or tex (LaTeX, booktabs)")->capture_default_str();
    cmd->add_option("--out", args->out, "write to this file instead of stdout (never over a run's file unless --force)");
    cmd->add_option("--catalog", args->catalog,
                    "SQLite catalog whose seed envelope judges the pair when the run files hold none (read only when it exists)")
        ->capture_default_str();
    add_force_flag(cmd, args->force);
    cmd->callback([args, &exit_code] {
        refuse_protected_out("--out", args->out, args->force);
        const auto format = experiments::parse_report_format(args->format);
        const auto a = experiments::parse_run_leg(args->a), b = experiments::parse_run_leg(args->b);
        if (experiments::same_run_leg(a, b))
            throw CLI::ValidationError("compare", args->a + " and " + args->b +
                                                      " are the same leg of the same run: a leg equals itself by construction");
        const auto r = experiments::compare_run_legs(a, b, {}, args->catalog);
        const std::string text = experiments::render_runs_comparison(r, format);
        if (args->out.empty()) std::fwrite(text.data(), 1, text.size(), stdout);
        else write_file_atomic(args->out, text);
        exit_code = r.comparison.passed() ? kOk : kCheckFailed;
    });
}

}  // namespace tandem::cli
