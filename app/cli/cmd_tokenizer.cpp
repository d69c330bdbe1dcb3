// tandem subcommands: tokens encode, template render, bench tokenizer (issue 3).
#include "commands.h"

namespace tandem::cli {

void add_tokenizer_commands(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace tandem::cli
