// tandem env create DIR [--with NAME==VERSION ...] [--from ENV]
//   A Python environment for a leg (docs/legs.md "Upgrade check"): the reference environment (or
//   ENV) with the named packages in the versions given, everything else reused from it; its
//   `pip freeze` is recorded in DIR/tandem-freeze.txt. Run a leg in it with --legs reference@DIR or
//   legs.<name>.python.
#include "commands.h"

#include "tandem/runner/python_env.h"

#include <cstdio>
#include <memory>

namespace tandem::cli {

namespace {
struct EnvArgs {
    std::string dir;
    std::vector<std::string> with;
    std::string from;
};
}  // namespace

void add_env_commands(CLI::App& app, int& exit_code) {
    auto* env = group(app, "env", "Python environments for legs (docs/legs.md \"Upgrade check\")");
    auto args = std::make_shared<EnvArgs>();
    auto* create = env->add_subcommand("create", "A virtual environment that reuses the reference environment's packages "
                                                 "and pins the ones named with --with");
    create->add_option("dir", args->dir, "the new environment's folder (must not exist, or be empty)")->required();
    create->add_option("--with", args->with, "NAME==VERSION installed over the base (repeatable)");
    create->add_option("--from", args->from, "the environment reused (a folder or an interpreter; default: the reference environment)");
    create->callback([args, &exit_code] {
        experiments::PythonEnvOptions o;
        o.dir = args->dir;
        o.packages = args->with;
        o.base = args->from;
        o.say = [](const std::string& s) { std::fprintf(stderr, "tandem env: %s\n", s.c_str()); };
        const auto r = experiments::create_python_env(o);
        std::printf("created %s in %.1f s\n", o.dir.c_str(), r.seconds);
        for (const auto& i : r.installed) std::printf("  %s\n", i.c_str());
        std::printf("python: %s\npip freeze: %s\nrun a leg in it: tandem run EXPERIMENT --legs reference,reference@%s\n",
                    r.python.c_str(), r.freeze.c_str(), o.dir.c_str());
        exit_code = kOk;
    });
}

}  // namespace tandem::cli
