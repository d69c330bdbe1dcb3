// tandem faults EXPERIMENT [--faults a,b,...] [--size-search] [--jobs N] [--clean-seeds N] (docs/faults.md):
// the fault matrix — one clean reference leg, one clean engine leg and one faulty engine leg per fault.
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/spec/faults.h"
#include "tandem/studies/faults_run.h"
#include "tandem/compare/report.h"

#include <cstdio>
#include <memory>

namespace tandem::cli {

namespace {

struct FaultsArgs {
    std::string experiment;
    std::string faults;
    bool size_search = false;
    int search_steps = 6;
    int jobs = 2;
    int clean_seeds = 0;
    RunnerArgs runner;
    bool list = false;
};

}  // namespace

void add_faults_command(CLI::App& app, int& exit_code) {
    auto a = std::make_shared<FaultsArgs>();
    auto* cmd = app.add_subcommand(
        "faults", "Measure which check level catches which injected fault, and how early: one clean reference leg, one "
                  "clean engine leg and one faulty engine leg per fault in one run folder (docs/faults.md)");
    cmd->add_option("experiment", a->experiment, "a clean experiment file (experiments/*.json)");
    auto* faults = cmd->add_option("--faults", a->faults,
                                   "faults to inject, comma-separated name[=size] (default: the whole catalogue; none: only "
                                   "the clean pair)");
    cmd->add_flag("--size-search", a->size_search,
                  "for faults with a size: the smallest size each level detects (binary search, more legs in the same run)");
    cmd->add_option("--search-steps", a->search_steps, "midpoints of each binary search after the weakest size (>= 6)")
        ->capture_default_str();
    cmd->add_option("--jobs", a->jobs, "legs running at once (the CPU threads are split between them)")->capture_default_str();
    cmd->add_option("--clean-seeds", a->clean_seeds,
                    "instead of the matrix: the clean pair on N seeds (seed, seed+1, ...; one run each) and how often "
                    "each level fires");
    add_runner_args(cmd, a->runner, "CPU threads shared by the running legs (0: all cores)", "tables printed: text, md, csv, tex");
    cmd->add_flag("--list", a->list, "print the fault catalogue and exit");
    cmd->callback([a, faults, &exit_code] {
        require_out_folder("--out", a->runner.out);  // new folders go inside it
        const auto fmt = experiments::parse_report_format(a->runner.format);
        if (a->list) {
            experiments::Table tb{"catalogue", "Fault catalogue (docs/faults.md)",
                                  {"fault", "category", "size (default)", "expected", "description"}, {}, {}};
            for (const auto& f : experiments::fault_catalogue()) {
                std::string size = "-", expected;
                if (f.size) {
                    char b[64];
                    std::snprintf(b, sizeof b, "%g", f.size->default_value);
                    size = f.size->unit + " (" + b + ")";
                }
                for (const auto& e : f.expected) expected += (expected.empty() ? "" : " ") + e;
                tb.rows.push_back({f.name, f.category, size, expected, f.description});
            }
            std::fputs(experiments::render_table(tb, fmt).c_str(), stdout);
            exit_code = kOk;
            return;
        }
        if (a->experiment.empty()) throw CLI::ValidationError("faults", "give an experiment file (or --list)");
        experiments::FaultsOptions o;
        o.experiment = a->experiment;
        if (faults->count() > 0) o.faults = a->faults;
        o.size_search = a->size_search;
        o.search_steps = a->search_steps;
        o.jobs = a->jobs;
        o.clean_seeds = a->clean_seeds;
        apply_runner_args(a->runner, o.runner);
        o.runner.say = [](const std::string& s) { std::fprintf(stderr, "tandem faults: %s\n", s.c_str()); };
        experiments::FaultsOutcome r = experiments::run_faults(o);
        std::fputs(r.text.c_str(), stdout);
        std::fflush(stdout);
        // 0: the matrix is complete, the clean pair raised nothing and every fault was caught; 3: a fault
        // went uncaught or the clean pair was flagged; 1: a leg did not finish.
        exit_code = !r.all_legs_finished ? kError : (r.clean_pair_passed && r.every_fault_caught) ? kOk : kCheckFailed;
    });
}

}  // namespace tandem::cli
