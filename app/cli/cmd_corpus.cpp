// tandem subcommands: corpus build, tokens show, tokens diff (issue 3).
#include "commands.h"

namespace tandem::cli {

void add_corpus_commands(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace tandem::cli
