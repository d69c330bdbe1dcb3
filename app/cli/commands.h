#pragma once
// Each family of `tandem` subcommands registers itself here. A subcommand's callback stores its
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
void add_tokenizer_commands(CLI::App& app, int& exit_code);  // cmd_tokenizer.cpp: tokens encode, template render, bench tokenizer
void add_corpus_commands(CLI::App& app, int& exit_code);     // cmd_corpus.cpp: corpus build, tokens show, tokens diff
void add_engine_commands(CLI::App& app, int& exit_code);     // cmd_engine.cpp: inspect, bench engine
void add_bench_engine(CLI::App& app, int& exit_code);        // cmd_bench_engine.cpp: bench engine
void add_run_commands(CLI::App& app, int& exit_code);        // cmd_run.cpp: run, report, leg
void add_import_commands(CLI::App& app, int& exit_code);     // cmd_import.cpp: import tensorboard|csv|events
void add_compare_command(CLI::App& app, int& exit_code);     // cmd_compare.cpp: compare RUN_A:LEG RUN_B:LEG
void add_localise_command(CLI::App& app, int& exit_code);    // cmd_localise.cpp: localise RUN [--update K]
void add_faults_command(CLI::App& app, int& exit_code);      // cmd_faults.cpp: faults EXPERIMENT (the fault matrix)

// A command group shared by two families (e.g. `tokens`): returns the existing one or creates it.
inline CLI::App* group(CLI::App& app, const std::string& name, const std::string& description) {
    for (auto* existing : app.get_subcommands([&](CLI::App* a) { return a->get_name() == name; }))
        return existing;
    auto* g = app.add_subcommand(name, description);
    g->require_subcommand(1);
    return g;
}

}  // namespace tandem::cli
