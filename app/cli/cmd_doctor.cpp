// tandem doctor — owned by the foundation work (issue 2).
#include "commands.h"

namespace tandem::cli {

void add_doctor_command(CLI::App& /*app*/, int& /*exit_code*/) {}

}  // namespace tandem::cli
