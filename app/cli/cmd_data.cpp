// tandem subcommands of the data family — registered in main.cpp.
#include "commands.h"

namespace tandem::cli {

void add_data_commands(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace tandem::cli
