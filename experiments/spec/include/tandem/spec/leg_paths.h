#pragma once
// Where the programs of the leg kinds are (tandem/spec/leg_kinds.h) and what they need: the tandem
// executable, the reference environment's Python and the reference leg scripts (also `tandem import
// tensorboard`, which reads event files with TensorBoard's reader there), the SDK folder, the Go SDK
// leg and the engine's C library. Environment variables first, then the build or source tree
// (compiled in), then the installed package.
#include <filesystem>
#include <map>
#include <string>

namespace tandem::experiments {

// $TANDEM_REFENV_PYTHON, else $TANDEM_REFENV/bin/python, else the build's default refenv.
std::string reference_python();
// $TANDEM_LEGS_DIR, else <checkout>/experiments/legs, else <prefix>/share/tandem/legs.
std::filesystem::path legs_dir();
// The reference environment's pins, "name==version" lines of legs_dir()/requirements.txt (name -> version;
// empty when the file is missing): what scripts/setup installs.
std::map<std::string, std::string> reference_pins();
// The running tandem executable (/proc/self/exe): the engine leg and envelope members run it again.
std::filesystem::path self_executable();
// The engine's C library, for the SDK legs that drive it (docs/legs.md): $TANDEM_ENGINE_LIB, else the
// build tree next to this binary, else the installed one.
std::string engine_c_library();
// The SDK folder (sdk/python, ...): $TANDEM_SDK_DIR, else the source tree, else the installed copy.
std::filesystem::path sdk_dir();
// The Go SDK leg's binary: $TANDEM_SDK_GO_LEG, else the build tree next to this binary, else installed.
std::string sdk_go_leg();

}  // namespace tandem::experiments
