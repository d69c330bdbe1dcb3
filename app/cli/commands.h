#pragma once
// Each group of `tandem` subcommands (one app/cli/cmd_<group>.cpp) registers itself here. A subcommand's callback stores its
// exit status in `exit_code` (see docs/cli.md for the codes) and throws tandem::Error for bad input.
#include <CLI/CLI.hpp>

namespace tandem::cli {

// Documented exit codes (docs/cli.md).
enum ExitCode : int {
    kOk = 0,
    kError = 1,        // bad input, I/O failure, a leg or a step failed
    kUsage = 2,        // unknown flag, missing argument, invalid value on the command line
    kCheckFailed = 3,  // ran fine but a check failed (doctor found something missing, a cross-check did not pass)
    kInterrupted = 130 // stopped by Ctrl-C / SIGTERM
};

void add_doctor_command(CLI::App& app, int& exit_code);   // cmd_doctor.cpp
void add_probe_command(CLI::App& app, int& exit_code);    // cmd_probe.cpp
void add_tokens_commands(CLI::App& app, int& exit_code);     // cmd_tokens.cpp: tokens encode, tokens show, tokens diff
void add_template_commands(CLI::App& app, int& exit_code);   // cmd_template.cpp: template render
void add_bench_commands(CLI::App& app, int& exit_code);      // cmd_bench.cpp: bench tokenizer, bench engine
void add_corpus_commands(CLI::App& app, int& exit_code);     // cmd_corpus.cpp: corpus build, corpus plan
void add_inspect_command(CLI::App& app, int& exit_code);     // cmd_inspect.cpp: inspect
void add_run_command(CLI::App& app, int& exit_code);         // cmd_run.cpp: run EXPERIMENT | --resume RUN
void add_report_command(CLI::App& app, int& exit_code);      // cmd_report.cpp: report RUN
void add_envelope_command(CLI::App& app, int& exit_code);    // cmd_envelope.cpp: envelope EXPERIMENT
void add_leg_commands(CLI::App& app, int& exit_code);        // cmd_leg.cpp: leg stop|pause|resume, leg engine
void add_import_commands(CLI::App& app, int& exit_code);     // cmd_import.cpp: import tensorboard|csv|events
void add_export_commands(CLI::App& app, int& exit_code);     // cmd_export.cpp: export tensorboard
void add_compare_command(CLI::App& app, int& exit_code);     // cmd_compare.cpp: compare RUN_A:LEG RUN_B:LEG
void add_localise_command(CLI::App& app, int& exit_code);    // cmd_localise.cpp: localise RUN [--update K]
void add_faults_command(CLI::App& app, int& exit_code);      // cmd_faults.cpp: faults EXPERIMENT (the fault matrix)
void add_env_commands(CLI::App& app, int& exit_code);        // cmd_env.cpp: env create DIR --with NAME==VERSION

// A command group shared by two families (e.g. `tokens`): returns the existing one or creates it.
inline CLI::App* group(CLI::App& app, const std::string& name, const std::string& description) {
    for (auto* existing : app.get_subcommands([&](CLI::App* a) { return a->get_name() == name; }))
        return existing;
    auto* g = app.add_subcommand(name, description);
    g->require_subcommand(1);
    return g;
}

}  // namespace tandem::cli
