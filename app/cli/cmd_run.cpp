// tandem subcommands of the run family — registered in main.cpp.
#include "commands.h"

namespace tandem::cli {

void add_run_commands(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace tandem::cli
