// `tandem env create` (tandem/runner/python_env.h).
#include "tandem/runner/python_env.h"

#include "executors/executor.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/join.h"
#include "tandem/spec/leg_kinds.h"
#include "tandem/spec/leg_paths.h"
#include "tandem/store/catalog.h"
#include "tandem/utc_time.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <regex>

namespace tandem::experiments {
namespace fs = std::filesystem;

namespace {

std::string last_line(const std::string& text) {
    std::string t = text;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    const auto nl = t.rfind('\n');
    return nl == std::string::npos ? t : t.substr(nl + 1);
}

CommandResult must_run(const std::vector<std::string>& argv, const std::string& what, double timeout_s) {
    CommandResult r = run_command(argv, timeout_s);
    if (r.exit_status != 0)
        throw Error(what + " failed (" + (r.timed_out ? "no end within " + std::to_string(static_cast<int>(timeout_s)) + " s"
                                                      : last_line(r.err.empty() ? r.out : r.err)) +
                    ")");
    return r;
}

// The folders a Python's site-packages are (purelib, platlib; one when they are the same).
std::vector<std::string> site_packages(const std::string& python, const std::string& what) {
    const CommandResult r = must_run({python, "-c",
                                      "import sysconfig\n"
                                      "p = sysconfig.get_paths()\n"
                                      "print(p['purelib'])\n"
                                      "print(p['platlib'])\n"},
                                     what, 60);
    std::vector<std::string> out;
    size_t start = 0;
    while (start < r.out.size()) {
        size_t nl = r.out.find('\n', start);
        if (nl == std::string::npos) nl = r.out.size();
        std::string line = r.out.substr(start, nl - start);
        if (!line.empty() && std::find(out.begin(), out.end(), line) == out.end()) out.push_back(line);
        start = nl + 1;
    }
    if (out.empty()) throw Error(what + ": " + python + " names no site-packages folder");
    return out;
}

}  // namespace

PythonEnvResult create_python_env(const PythonEnvOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    auto say = o.say ? o.say : [](const std::string&) {};
    // Pinned, so the environment is the same stack whenever it is made again (and the Stacks table's
    // version is the one asked for).
    static const std::regex pinned(R"(^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9.+!_-]+$)");
    std::vector<std::string> names;
    for (const auto& p : o.packages) {
        if (!std::regex_match(p, pinned))
            throw Error("--with: '" + p + "' is not a pinned package (NAME==VERSION, e.g. transformers==5.17.0)");
        std::string name = p.substr(0, p.find("=="));
        name = name.substr(0, name.find('['));
        names.push_back(name);
    }
    std::error_code ec;
    const fs::path dir = fs::absolute(o.dir);
    if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
        throw Error(dir.string() + ": exists and is not an empty folder (give a new folder for the environment)");
    const std::string base_python = o.base.empty() ? reference_python() : python_of_environment(o.base.string());
    if (!fs::exists(base_python, ec))
        throw Error("no Python interpreter at " + base_python + (o.base.empty() ? " (the reference environment: run scripts/setup or set TANDEM_REFENV)" : ""));
    const std::vector<std::string> base_sites = site_packages(base_python, "asking " + base_python + " for its site-packages");

    say("creating a virtual environment at " + dir.string() + " (the interpreter of " + base_python + ")");
    try {
        must_run({base_python, "-m", "venv", dir.string()}, base_python + " -m venv " + dir.string(), 600);
        PythonEnvResult out;
        out.python = dir / "bin" / "python";
        const std::vector<std::string> own = site_packages(out.python.string(), "the new environment");
        // Lines of a .pth file are appended to sys.path after the folder that holds it: the new
        // environment's own packages come first, the base's fill in the rest.
        std::string pth;
        for (const auto& s : base_sites) pth += s + "\n";
        write_file_atomic(fs::path(own.front()) / "_tandem_base_env.pth", pth);
        if (!o.packages.empty()) {
            say("installing " + join(o.packages, ", ") + " (pip; the base's packages are reused where they fit)");
            std::vector<std::string> argv = {out.python.string(), "-m", "pip", "install", "--disable-pip-version-check",
                                             "--no-input"};
            argv.insert(argv.end(), o.packages.begin(), o.packages.end());
            must_run(argv, "pip install " + join(o.packages, " "), 3600);
        }
        // What the environment has now, and that each named package is the version asked for.
        std::string script = "import importlib.metadata as m, sys\nfor n in sys.argv[1:]:\n    print(n, m.version(n))\n";
        std::vector<std::string> argv = {out.python.string(), "-c", script};
        argv.insert(argv.end(), names.begin(), names.end());
        const CommandResult versions = must_run(argv, "reading the installed versions", 60);
        size_t start = 0;
        while (start < versions.out.size()) {
            size_t nl = versions.out.find('\n', start);
            if (nl == std::string::npos) nl = versions.out.size();
            if (nl > start) out.installed.push_back(versions.out.substr(start, nl - start));
            start = nl + 1;
        }
        for (size_t i = 0; i < o.packages.size() && i < out.installed.size(); ++i) {
            const std::string want = o.packages[i].substr(o.packages[i].find("==") + 2);
            const std::string have = out.installed[i].substr(out.installed[i].find(' ') + 1);
            if (want != have)
                throw Error(dir.string() + ": " + names[i] + " is " + have + " there, not " + want +
                            " (an installed copy shadows it?)");
        }
        const CommandResult freeze = must_run({out.python.string(), "-m", "pip", "freeze", "--disable-pip-version-check"},
                                              "pip freeze", 120);
        out.freeze = dir / "tandem-freeze.txt";
        write_file_atomic(out.freeze, freeze.out);
        out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const nlohmann::json record{{"created_at", utc_timestamp_now()},
                                    {"base_python", base_python},
                                    {"base_site_packages", base_sites},
                                    {"with", o.packages},
                                    {"installed", out.installed},
                                    {"seconds", out.seconds}};
        write_file_atomic(dir / "tandem-env.json", record.dump(1) + "\n");
        return out;
    } catch (...) {
        // A half-made environment would pass for a whole one later: remove what this call made.
        fs::remove_all(dir, ec);
        throw;
    }
}

}  // namespace tandem::experiments
