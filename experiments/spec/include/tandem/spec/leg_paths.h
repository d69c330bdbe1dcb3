#pragma once
// Where the reference environment's Python and the reference leg scripts are (used by `tandem
// import tensorboard`, which reads event files with TensorBoard's reader in that environment).
// Environment variables first, then the source checkout (compiled in), then the installed package.
// The runner (runner.cpp) has the same lookups for launching legs.
#include <filesystem>
#include <string>

namespace tandem::experiments {

// $TANDEM_REFENV_PYTHON, else $TANDEM_REFENV/bin/python, else the build's default refenv.
std::string reference_python();
// $TANDEM_LEGS_DIR, else <checkout>/experiments/legs, else <prefix>/share/tandem/legs.
std::filesystem::path legs_dir();
}  // namespace tandem::experiments
