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
void add_data_commands(CLI::App& app, int& exit_code);    // cmd_data.cpp: tokens, template, corpus, bench tokenizer
void add_engine_commands(CLI::App& app, int& exit_code);  // cmd_engine.cpp: inspect, engine-leg, bench engine
void add_run_commands(CLI::App& app, int& exit_code);     // cmd_run.cpp: run, report, leg

}  // namespace tandem::cli
