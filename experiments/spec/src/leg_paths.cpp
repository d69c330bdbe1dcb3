#include "tandem/spec/leg_paths.h"

#include "tandem/version.h"

#include <cstdlib>

namespace tandem::experiments {
namespace fs = std::filesystem;

std::string reference_python() {
    if (const char* p = std::getenv("TANDEM_REFENV_PYTHON"); p && *p) return p;
    if (const char* r = std::getenv("TANDEM_REFENV"); r && *r) return std::string(r) + "/bin/python";
    return TANDEM_REFENV_PYTHON_DEFAULT;
}

fs::path legs_dir() {
    if (const char* d = std::getenv("TANDEM_LEGS_DIR"); d && *d) return d;
    fs::path src = fs::path(TANDEM_SOURCE_DIR) / "experiments" / "legs";
    if (fs::exists(src / "reference_leg.py")) return src;
    return fs::path(TANDEM_INSTALL_DATADIR) / "legs";
}

}  // namespace tandem::experiments
