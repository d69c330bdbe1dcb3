// tandem subcommands: inspect, engine bench (issue 4).
#include "commands.h"

namespace tandem::cli {

void add_engine_commands(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace tandem::cli
