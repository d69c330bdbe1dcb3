#pragma once
// Where the programs of the shipped leg kinds are (docs/legs.md): the reference environment's Python,
// the reference leg scripts, the SDK legs. Environment variables first, then the source checkout
// (compiled in), then the installed package.
#include <filesystem>
#include <string>

namespace tandem::experiments {

// $TANDEM_REFENV_PYTHON, else $TANDEM_REFENV/bin/python, else the build's default refenv.
std::string reference_python();
// $TANDEM_LEGS_DIR, else <checkout>/experiments/legs, else <prefix>/share/tandem/legs.
std::filesystem::path legs_dir();
// $TANDEM_SDK_DIR, else <checkout>/sdk, else <prefix>/share/tandem/sdk: sdk/python (tandem_leg,
// sdk_python_leg.py) and sdk/go.
std::filesystem::path sdk_dir();

}  // namespace tandem::experiments
