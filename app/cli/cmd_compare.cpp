// tandem compare RUN_A:LEG RUN_B:LEG [--format text|md|csv|tex] [--out FILE]
//   The L1–L4 statistics between a leg of one run and a leg of another (or the same) run, with the
//   experiment files' differences first: experiments' compare_run_legs, the numbers the workbench's
//   diff-runs view shows. Exit 3 when a gated level fails its threshold.
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
    bool force = false;
};
}  // namespace

void add_compare_command(CLI::App& app, int& exit_code) {
    auto args = std::make_shared<CompareArgs>();
    auto* cmd = app.add_subcommand("compare", "Compare a leg of one run with a leg of another run: config differences and "
                                              "L1-L4 statistics (exit 3 when a gated level fails)");
    cmd->add_option("a", args->a, "RUN_A:LEG (a run folder or run.h5, a colon, a leg name)")->required();
    cmd->add_option("b", args->b, "RUN_B:LEG")->required();
    cmd->add_option("--format", args->format, "text, md, csv or tex (LaTeX, booktabs)")->capture_default_str();
    cmd->add_option("--out", args->out, "write to this file instead of stdout (never over a run's file unless --force)");
    add_force_flag(cmd, args->force);
    cmd->callback([args, &exit_code] {
        refuse_protected_out("--out", args->out, args->force);
        const auto format = experiments::parse_report_format(args->format);
        const auto r = experiments::compare_run_legs(experiments::parse_run_leg(args->a), experiments::parse_run_leg(args->b));
        const std::string text = experiments::render_runs_comparison(r, format);
        if (args->out.empty()) std::fwrite(text.data(), 1, text.size(), stdout);
        else write_file_atomic(args->out, text);
        exit_code = r.comparison.passed() ? kOk : kCheckFailed;
    });
}

}  // namespace tandem::cli
