#pragma once
// `tandem env create` (docs/legs.md "Upgrade check"): a Python environment for a leg that is the
// reference environment with a few packages in other versions. A virtual environment of the base
// environment's interpreter whose site-packages hold the named packages, pinned, and a .pth file that
// puts the base environment's site-packages after its own: everything not named (torch above all) is
// the base's, so an upgrade of transformers downloads transformers and what it needs, not torch again.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace tandem::experiments {

struct PythonEnvOptions {
    std::filesystem::path dir;          // the new environment (must not exist, or be an empty folder)
    std::vector<std::string> packages;  // "name==version", each pinned; empty: the base's stack, as is
    std::filesystem::path base;         // the environment reused; empty: the reference environment
    std::function<void(const std::string&)> say;  // progress lines
};

struct PythonEnvResult {
    std::filesystem::path python;   // <dir>/bin/python
    std::filesystem::path freeze;   // <dir>/tandem-freeze.txt: `pip freeze` of the new environment
    double seconds = 0;             // wall time of the whole creation
    std::vector<std::string> installed;  // "name version" of each named package, as the environment has it
};

// Creates the environment. Throws tandem::Error with one line naming the step that failed (a package
// that is not pinned, a folder that is not empty, pip's last error line).
PythonEnvResult create_python_env(const PythonEnvOptions& options);

}  // namespace tandem::experiments
