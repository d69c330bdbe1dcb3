#include "tandem/spec/leg_paths.h"

#include "tandem/error.h"
#include "tandem/version.h"

#include <cstdlib>
#include <fstream>

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

std::map<std::string, std::string> reference_pins() {
    std::map<std::string, std::string> pins;
    std::ifstream in(legs_dir() / "requirements.txt");
    std::string line;
    while (std::getline(in, line)) {
        const auto eq = line.find("==");
        if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
        pins[line.substr(0, eq)] = line.substr(eq + 2);
    }
    return pins;
}

fs::path self_executable() {
    std::error_code ec;
    fs::path p = fs::read_symlink("/proc/self/exe", ec);
    if (ec) throw Error("cannot find the tandem executable (/proc/self/exe): " + ec.message());
    return p;
}

std::string engine_c_library() {
    if (const char* p = std::getenv("TANDEM_ENGINE_LIB"); p && *p) return p;
    const fs::path built = self_executable().parent_path().parent_path() / "engine" / "libtandem_engine_c.so";
    if (fs::exists(built)) return built.string();
    return (fs::path(TANDEM_INSTALL_LIBDIR) / "libtandem_engine_c.so").string();
}

fs::path sdk_dir() {
    if (const char* d = std::getenv("TANDEM_SDK_DIR"); d && *d) return d;
    fs::path src = fs::path(TANDEM_SOURCE_DIR) / "sdk";
    if (fs::exists(src)) return src;
    return fs::path(TANDEM_INSTALL_DATADIR) / "sdk";
}

std::string sdk_go_leg() {
    if (const char* p = std::getenv("TANDEM_SDK_GO_LEG"); p && *p) return p;
    const fs::path built = self_executable().parent_path().parent_path() / "sdk" / "go" / "tandem-leg-go";
    if (fs::exists(built)) return built.string();
    return (fs::path(TANDEM_INSTALL_LIBEXECDIR) / "tandem-leg-go").string();
}

}  // namespace tandem::experiments
