// The leg kinds (tandem/spec/leg_kinds.h).
#include "tandem/spec/leg_kinds.h"

#include "tandem/error.h"
#include "tandem/join.h"
#include "tandem/spec/leg_paths.h"

#include <cstdlib>
#include <filesystem>

namespace tandem::experiments {

namespace {

// The process memory preflight adds per leg (docs/run-folder.md "Preflight"): a Python interpreter
// with torch, transformers and peft loaded, or tandem's own process.
constexpr double kPythonStackBytes = 700.0 * 1048576;
constexpr double kTandemProcessBytes = 60.0 * 1048576;

std::vector<std::string> engine_program() { return {self_executable().string(), "leg", "engine"}; }
std::vector<std::string> reference_program() { return {reference_python(), (legs_dir() / "reference_leg.py").string()}; }
std::vector<std::string> sdk_python_program() {
    const char* py = std::getenv("TANDEM_SDK_PYTHON");
    return {py && *py ? py : "python3", (sdk_dir() / "python" / "sdk_leg.py").string()};
}
std::vector<std::string> sdk_go_program() { return {sdk_go_leg()}; }

}  // namespace

const std::vector<LegKind>& leg_kinds() {
    static const std::vector<LegKind> k = {
        {"engine", "tandem's C++ engine (`tandem leg engine`)", engine_program, false, true, false, kTandemProcessBytes},
        {"reference", "PyTorch + transformers + peft (experiments/legs/reference_leg.py)", reference_program, false, false,
         true, kPythonStackBytes, true,
         // What reference_leg.py and hf_text.py import besides the standard library and the checkout's tandem_leg.
         {"torch", "transformers", "peft", "safetensors", "tokenizers", "numpy", "jinja2"}},
        {"sdk-python", "the tandem_leg SDK's Python leg (sdk/python/sdk_leg.py)", sdk_python_program, false, false, false,
         kTandemProcessBytes, true},
        {"sdk-go", "the Go SDK leg (tandem-leg-go)", sdk_go_program, false, false, false, kTandemProcessBytes},
        {"command", "any program speaking the leg protocol (legs.<name>.command)", nullptr, true, false, false,
         kTandemProcessBytes, true},
    };
    return k;
}

const LegKind* find_leg_kind(const std::string& name) {
    for (const auto& k : leg_kinds())
        if (k.name == name) return &k;
    return nullptr;
}

const LegKind& leg_kind(const std::string& name) {
    if (const LegKind* k = find_leg_kind(name)) return *k;
    throw Error("unknown leg implementation '" + name + "' (known: " + join(leg_kind_names(), ", ") + ")");
}

std::string python_of_environment(const std::string& env) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path p = fs::absolute(env, ec);
    if (ec) p = env;
    if (fs::is_directory(p, ec)) p /= fs::path("bin") / "python";
    return p.lexically_normal().string();
}

std::vector<std::string> leg_kind_names() {
    std::vector<std::string> names;
    for (const auto& k : leg_kinds()) names.push_back(k.name);
    return names;
}

bool reference_is_first(const std::string& implementation_a, const std::string& implementation_b) {
    return implementation_a == "reference" && implementation_b != "reference";
}

}  // namespace tandem::experiments
