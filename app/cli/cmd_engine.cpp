// tandem subcommands of the engine family — registered in main.cpp.
#include "commands.h"

namespace tandem::cli {

void add_engine_commands(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace tandem::cli
