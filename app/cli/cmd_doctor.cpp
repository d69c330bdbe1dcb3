// tandem doctor — what this machine has, what is missing for a run, and how to fix it (docs/cli.md).
// Exit 0 when everything a CPU run needs is present, 3 otherwise.
#include "commands.h"

#include "tandem/assets.h"
#include "tandem/atomic_file.h"
#include "tandem/data/corpus.h"
#include "tandem/data/tokenizer.h"
#include "tandem/error.h"
#include "tandem/spec/leg_paths.h"
#include "tandem/strict_json.h"
#include "tandem/measure/host_info.h"
#include "tandem/measure/probe.h"
#include "tandem/version.h"

#include <hdf5.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;
namespace ex = tandem::experiments;

// One report line: "[ OK ]", "[MISS]" (needed for CPU runs: makes doctor exit 3) or "[INFO]".
struct Report {
    bool missing = false;
    void ok(const std::string& what, const std::string& detail) { line("  OK  ", what, detail); }
    void info(const std::string& what, const std::string& detail) { line(" INFO ", what, detail); }
    // Usable, but not what tandem ships (does not change the exit status).
    void warn(const std::string& what, const std::string& detail) { line(" WARN ", what, detail); }
    void miss(const std::string& what, const std::string& detail) {
        missing = true;
        line("MISSING", what, detail);
    }
    static void line(const char* tag, const std::string& what, const std::string& detail) {
        std::printf("[%-7s] %-22s %s\n", tag, what.c_str(), detail.c_str());
    }
};

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// Runs `command` and returns its stdout (nullopt when it could not run or exited non-zero).
std::optional<std::string> capture(const std::string& command) {
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    if (!pipe) return std::nullopt;
    std::string out;
    std::array<char, 4096> buffer{};
    while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe.get())) out.append(buffer.data(), n);
    const int status = pclose(pipe.release());
    if (status != 0) return std::nullopt;
    return out;
}

fs::path reference_python() {
    if (const char* env = std::getenv("TANDEM_REFENV"); env && *env) return fs::path(env) / "bin" / "python";
    if (const char* home = std::getenv("HOME"); home && *home)
        return fs::path(home) / ".cache" / "tandem" / "refenv" / "bin" / "python";
    return TANDEM_REFENV_PYTHON_DEFAULT;
}

void check_host(Report& r) {
    const ex::HostInfo host = ex::collect_host_info();
    r.ok("CPU", host.cpu_model + " (" + std::to_string(host.logical_cores) + " logical, " +
                    std::to_string(host.physical_cores) + " physical cores; last-level cache " +
                    ex::format_bytes(host.llc_bytes) + ")");
    r.ok("memory", ex::format_bytes(host.memory_total_bytes) + " total, " +
                       ex::format_bytes(host.memory_available_bytes) + " available");
    r.ok("system", host.os + ", " + host.kernel + " " + host.machine);
    unsigned major = 0, minor = 0, release = 0;
    H5get_libversion(&major, &minor, &release);
    r.ok("HDF5 / SQLite", "HDF5 " + std::to_string(major) + "." + std::to_string(minor) + "." +
                              std::to_string(release) + ", SQLite " + sqlite3_libversion());
}

// Library files of a CUDA install, for a build without CUDA (it cannot ask the libraries).
std::string cuda_library_files() {
    std::string found;
    for (const char* dir : {"/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"}) {
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(dir, ec)) {
            const std::string name = entry.path().filename().string();
            if (name == "libcublas.so" || name == "libcudnn.so" || name == "libcudart.so")
                found += (found.empty() ? "" : ", ") + entry.path().string();
        }
    }
    return found;
}

void check_cuda(Report& r) {
    const ex::CudaEnvironment cuda = ex::cuda_environment();
    if (!cuda.built_with_cuda) {
        const std::string files = cuda_library_files();
        r.info("CUDA", "built without CUDA; CPU runs need nothing more (for GPU legs install the CUDA toolkit "
                       "and rebuild: scripts/build)");
        r.info("cuBLAS / cuDNN", files.empty() ? "no CUDA libraries found" : "library files found: " + files);
        return;
    }
    if (cuda.driver_version.empty()) {
        r.info("CUDA", "built with CUDA " + cuda.runtime_version +
                           ", but no NVIDIA driver is loaded; CPU runs are unaffected (GPU legs need the driver)");
    } else {
        r.ok("CUDA", "driver " + cuda.driver_version + ", runtime " + cuda.runtime_version);
    }
    r.info("cuBLAS / cuDNN", "cuBLAS " + (cuda.cublas_version.empty() ? std::string("not loadable") : cuda.cublas_version) +
                                 ", cuDNN " +
                                 (cuda.cudnn_version.empty() ? std::string("not loadable (not used yet)") : cuda.cudnn_version));
    if (cuda.devices.empty() && !cuda.driver_version.empty())
        r.info("CUDA devices", "none visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    for (const auto& d : cuda.devices)
        r.ok(d.device, d.name + ", " + ex::format_bytes(d.memory_bytes) + ", compute " + d.compute_capability +
                           ", PCI " + d.pci_bus_id + (d.pcie_link.empty() ? "" : ", PCIe " + d.pcie_link));
    if (!cuda.error.empty()) r.info("CUDA error", cuda.error);
}

void check_reference_environment(Report& r) {
    const fs::path python = reference_python();
    std::error_code ec;
    if (!fs::exists(python, ec)) {
        r.miss("reference env", "no Python at " + python.string() + "; run scripts/setup (or set TANDEM_REFENV)");
        return;
    }
    const std::string script =
        "import json\n"
        "out = {}\n"
        "for m in ('torch', 'transformers', 'peft', 'safetensors', 'tokenizers', 'jinja2', 'h5py', 'numpy'):\n"
        "    try:\n"
        "        out[m] = __import__(m).__version__\n"
        "    except Exception:\n"
        "        out[m] = None\n"
        "print(json.dumps(out))\n";
    const auto output = capture(shell_quote(python.string()) + " -c " + shell_quote(script) + " 2>/dev/null");
    nlohmann::json versions;
    try {
        if (output) versions = nlohmann::json::parse(*output);
    } catch (const std::exception&) {
    }
    if (!versions.is_object()) {
        r.miss("reference env", python.string() + " does not run; run scripts/setup");
        return;
    }
    const auto pins = ex::reference_pins();
    std::string present, problems;
    for (const auto& [module, version] : versions.items()) {
        if (version.is_null()) {
            problems += (problems.empty() ? "" : ", ") + module + " missing";
            continue;
        }
        const std::string v = version.get<std::string>();
        present += (present.empty() ? "" : ", ") + module + " " + v;
        const auto pin = pins.find(module);
        if (pin != pins.end() && v.substr(0, v.find('+')) != pin->second)
            problems += (problems.empty() ? "" : ", ") + module + " " + v + " but requirements pin " + pin->second;
    }
    if (problems.empty())
        r.ok("reference env", python.string() + ": " + present);
    else
        r.miss("reference env", python.string() + ": " + problems + "; run scripts/setup");
}

void check_assets(Report& r, const std::optional<fs::path>& flag) {
    std::optional<AssetRoot> root;
    try {
        root = find_asset_root(flag);
    } catch (const Error& e) {
        r.miss("tokenizer", e.what());
        return;
    }
    if (!root) {
        std::string looked;
        for (const auto& c : asset_root_candidates(flag)) looked += (looked.empty() ? "" : ", ") + c.root.string();
        r.miss("tokenizer", "not found (looked in " + looked +
                                "); pass --assets DIR, set TANDEM_ASSETS, or put the shared folder at ../shared");
        r.miss("corpora", "not found (no asset folder)");
        return;
    }
    // Parse what is checked: a tokenizer.json that exists but is empty, truncated or not a Qwen3
    // tokenizer is as missing as no file at all.
    const fs::path tokenizer = tokenizer_dir(*root);
    std::optional<data::Tokenizer> tok;
    try {
        tok = data::Tokenizer::load(tokenizer);
        const fs::path config = tokenizer / "tokenizer_config.json";
        std::error_code ec;
        if (!fs::exists(config, ec)) throw Error(config.string() + ": missing (it holds the chat template)");
        const nlohmann::json c = parse_json_strict(read_file(config), config.string());
        if (!c.is_object() || !c.contains("chat_template") || !c["chat_template"].is_string())
            throw Error(config.string() + ": field chat_template missing or not a string");
        r.ok("tokenizer", tokenizer.string() + " (via " + root->found_via + "; " + std::to_string(tok->vocab_size()) +
                              " ids, chat template " + std::to_string(c["chat_template"].get<std::string>().size()) +
                              " bytes)");
    } catch (const Error& e) {
        r.miss("tokenizer", e.what());
        tok.reset();
    }
    if (tok) {
        const auto differences = tokenizer_differences(tokenizer);
        std::string text;
        for (const auto& d : differences) text += (text.empty() ? "" : "; ") + d;
        if (differences.empty())
            r.ok("tokenizer digest", "identical to the shipped Qwen3 tokenizer");
        else
            r.warn("tokenizer digest", "NOT the shipped Qwen3 tokenizer (" + text +
                                           "); L3 cannot detect a changed vocabulary, runs will warn");
    }
    const fs::path corpora = corpora_dir(*root);
    std::error_code ec;
    std::size_t files = 0;
    for (const auto& entry : fs::recursive_directory_iterator(corpora, ec))
        if (entry.is_regular_file()) ++files;
    if (files == 0) {
        r.miss("corpora", corpora.string() + " is missing or empty; copy the corpora there or pass --assets DIR");
    } else if (!tok) {
        r.info("corpora", corpora.string() + " (" + std::to_string(files) + " files) not checked: the tokenizer did not load");
    } else {
        try {
            const data::CorpusBuild build = data::build_corpus(corpora, *tok, data::CorpusOptions{});
            r.ok("corpora", corpora.string() + " (" + std::to_string(files) + " files; " +
                                std::to_string(build.records.size()) + " records converted from " +
                                std::to_string(build.input_total()) + " source rows)");
        } catch (const Error& e) {
            r.miss("corpora", e.what());
        }
    }
    // The pretrained base the main job (experiments/clinical-tiny.json) names; same lookup as `tandem run`.
    const std::string base = "assets:qwen3-tiny-clinical";
    try {
        const fs::path dir = resolve_asset_reference(base, flag, "model.safetensors");
        r.ok("pretrained base", dir.string() + " (" + base + ", the main job's base)");
    } catch (const Error& e) {
        r.miss("pretrained base", e.what());
    }
}

}  // namespace

void add_doctor_command(CLI::App& app, int& exit_code) {
    auto* cmd = app.add_subcommand("doctor", "Report this machine, CUDA, the reference environment and the assets; "
                                             "exit 3 when something a CPU run needs is missing");
    auto assets = std::make_shared<std::string>();
    cmd->add_option("--assets", *assets, "folder holding assets/qwen3-tokenizer and data/corpora (default: "
                                         "TANDEM_ASSETS, then ../shared next to the checkout)");
    cmd->callback([assets, &exit_code] {
        std::printf("tandem %s doctor\n", TANDEM_VERSION);
        Report report;
        check_host(report);
        check_cuda(report);
        check_reference_environment(report);
        check_assets(report, assets->empty() ? std::nullopt : std::optional<fs::path>(*assets));
        if (report.missing) {
            std::printf("Something a CPU run needs is missing (lines marked MISSING); fix it as each line says.\n");
            exit_code = kCheckFailed;
        } else {
            std::printf("Everything a CPU run needs is present.\n");
            exit_code = kOk;
        }
    });
}

}  // namespace tandem::cli
