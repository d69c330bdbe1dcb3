// tandem localise RUN [--update K] [--legs A,B] [--format text|md|csv|tex] [--no-store]
//   Where two legs of a run diverged (docs/observables.md "Localisation"): aligns their fingerprints,
//   computes each point's relative difference, and names the first point whose difference exceeds
//   the bound for its depth, with the chain before and after it. The table is printed and stored in
//   run.h5 (/localisation/<a>~<b>). Exit 0: no divergence; 3: a point exceeds its bound; 1: no
//   fingerprints (or another error).
#include "commands.h"

#include "tandem/error.h"
#include "tandem/studies/localise_run.h"
#include "tandem/compare/report.h"

#include <cstdio>
#include <memory>
#include <optional>

namespace tandem::cli {

namespace {
struct LocaliseArgs {
    std::string run;
    int64_t update = -1;
    std::string legs;
    std::string format = "text";
    bool no_store = false;
    size_t context = 4;
};
}  // namespace

void add_localise_command(CLI::App& app, int& exit_code) {
    auto args = std::make_shared<LocaliseArgs>();
    auto* cmd = app.add_subcommand("localise", "Name the first layer and op where two legs' fingerprints diverge "
                                               "(exit 3 when one exceeds its bound)");
    cmd->add_option("run", args->run, "run folder or run.h5")->required();
    cmd->add_option("--update", args->update, "only this (0-based) update's fingerprints")->check(CLI::NonNegativeNumber);
    cmd->add_option("--legs", args->legs, "A,B: the pair (default: the first two legs with fingerprints, reference second)");
    cmd->add_option("--format", args->format, "text, md, csv or tex")->capture_default_str();
    cmd->add_option("--context", args->context, "points shown before and after the named one")->capture_default_str();
    cmd->add_flag("--no-store", args->no_store, "do not write /localisation into run.h5");
    cmd->callback([args, &exit_code] {
        const auto format = experiments::parse_report_format(args->format);
        std::optional<std::pair<std::string, std::string>> legs;
        if (!args->legs.empty()) {
            const auto comma = args->legs.find(',');
            if (comma == std::string::npos || comma == 0 || comma + 1 == args->legs.size())
                throw Error("--legs: expected A,B (two leg names), not '" + args->legs + "'");
            legs = std::pair{args->legs.substr(0, comma), args->legs.substr(comma + 1)};
        }
        std::optional<int64_t> update;
        if (args->update >= 0) update = args->update;
        const auto l = experiments::localise_run(args->run, legs, update, !args->no_store);
        const std::string text = experiments::render_table(experiments::localisation_table(l, args->context), format);
        std::fwrite(text.data(), 1, text.size(), stdout);
        exit_code = l.diverged() ? kCheckFailed : kOk;
    });
}

}  // namespace tandem::cli
