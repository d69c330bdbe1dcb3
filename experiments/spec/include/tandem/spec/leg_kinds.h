#pragma once
// The leg kinds (docs/legs.md "Leg kinds"): one row per kind — its name, the program that runs it and
// what an experiment may ask of it. The experiment parser checks a leg definition against its row,
// `tandem run --legs` accepts the names, the runner starts the program, and preflight counts the
// process's memory from it. A new kind is one row here (docs/architecture.md "Add a leg kind").
#include <string>
#include <vector>

namespace tandem::experiments {

struct LegKind {
    std::string name;         // "engine", "command", ... (experiment `implementation`; leg_kind_names() lists them)
    std::string description;  // one line, for help texts
    // The program and its first arguments; the runner appends the protocol's command line (--run DIR
    // --leg NAME --device D --threads T [--devices ...] [--resume] [--faults ...], docs/leg-protocol.md).
    // Empty for `command`, whose argument template comes from the experiment (legs.<name>.command).
    std::vector<std::string> (*program)() = nullptr;
    bool takes_command = false;  // legs.<name>.command is its argument template (required)
    bool takes_faults = false;   // faults are injected into it (docs/faults.md)
    bool takes_ranks = false;    // legs.<name>.devices: data-parallel ranks, one process each
    double host_overhead_bytes = 0;  // preflight: the process's memory besides the model's tensors
    // Runs in a Python interpreter the leg may name (legs.<name>.python, `--legs KIND@ENV`); for a command
    // leg the interpreter is its {python} placeholder. Preflight checks that the interpreter exists and
    // has the distributions in python_packages (docs/legs.md "Upgrade check").
    bool takes_python = false;
    std::vector<std::string> python_packages{};
};

// The interpreter ENV names: ENV/bin/python when ENV is a folder (a venv, a conda environment), else
// ENV itself; absolute, symbolic links kept (a venv's bin/python is a link, and following it would
// leave the venv).
std::string python_of_environment(const std::string& env);

// Every kind, in the order of docs/legs.md.
const std::vector<LegKind>& leg_kinds();
// The kind named `name`: nullptr when there is none; leg_kind throws tandem::Error listing the kinds.
const LegKind* find_leg_kind(const std::string& name);
const LegKind& leg_kind(const std::string& name);
// The names, in table order ("engine", "reference", ...).
std::vector<std::string> leg_kind_names();
// Whether a is the reference side of the pair (a, b): a is a "reference" implementation and b is not.
bool reference_is_first(const std::string& implementation_a, const std::string& implementation_b);

}  // namespace tandem::experiments
