// The runner's words for legs (leg_plan.h): their names and the plan of a run's legs.
#include "tandem/runner/leg_plan.h"

#include "tandem/error.h"
#include "tandem/join.h"
#include "tandem/spec/leg_kinds.h"
#include "tandem/leg_name.h"

#include <cctype>
#include <filesystem>

namespace fs = std::filesystem;

namespace tandem::experiments {

const char* leg_status_name(LegStatus s) {
    switch (s) {
        case LegStatus::Pending: return "pending";
        case LegStatus::Running: return "running";
        case LegStatus::Finished: return "finished";
        case LegStatus::Failed: return "failed";
        case LegStatus::Interrupted: return "interrupted";
        case LegStatus::Paused: return "paused";
        case LegStatus::Stopped: return "stopped";
    }
    return "pending";
}

const char* leg_action_name(LegAction a) {
    switch (a) {
        case LegAction::Stop: return "stop";
        case LegAction::Pause: return "pause";
        case LegAction::Resume: return "resume";
    }
    return "stop";
}

const std::vector<std::string>& leg_executors() {
    static const std::vector<std::string> k = {"local", "slurm"};
    return k;
}

std::vector<LegPlan> plan_legs(const std::string& legs, const std::string& devices, const ExperimentSpec* spec) {
    std::vector<std::string> names = split_list(legs), devs = split_list(devices);
    if (names.empty()) throw Error("--legs: no leg given (e.g. engine,reference)");
    if (devs.empty()) devs = {"cpu"};
    std::vector<LegPlan> out;
    for (size_t i = 0; i < names.size(); ++i) {
        LegPlan p;
        // NAME=IMPL@ENV: the environment is everything after the first '@' (a path may hold '=').
        const auto at = names[i].find('@');
        const std::string item = names[i].substr(0, at);
        const std::string env = at == std::string::npos ? "" : names[i].substr(at + 1);
        if (at != std::string::npos && env.empty())
            throw Error("--legs: '" + names[i] + "': no environment after '@' (KIND@ENV, ENV a Python interpreter or its environment folder)");
        auto eq = item.find('=');
        p.name = eq == std::string::npos ? item : item.substr(0, eq);
        const ExperimentSpec::LegDefinition* def = spec ? spec->leg_definition(p.name) : nullptr;
        if (eq != std::string::npos) p.implementation = item.substr(eq + 1);
        else if (def) p.implementation = def->implementation;
        else p.implementation = p.name;
        const LegKind* kind = find_leg_kind(p.implementation);
        if (!kind)
            throw Error("--legs: '" + names[i] + "': not a leg the experiment defines, and '" + p.implementation +
                        "' is not an implementation (" + join(leg_kind_names(), ", ") + "; NAME=IMPL to name a leg)");
        if (!env.empty()) {
            if (!kind->takes_python)
                throw Error("--legs: '" + names[i] + "': only Python legs run in another environment (" + p.implementation +
                            " is not one)");
            p.python = python_of_environment(env);
            if (eq == std::string::npos && !def) {
                // Unnamed: the kind and the environment's folder (…/envs/old/bin/python -> reference-old).
                fs::path folder = fs::path(p.python).parent_path();
                if (folder.filename() == "bin") folder = folder.parent_path();
                std::string tail = folder.filename().string();
                for (char& c : tail)
                    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-')) c = '-';
                p.name = p.implementation + "-" + tail;
                if (p.name.size() > 64) p.name.resize(64);
            }
        } else if (def && !def->python.empty()) {
            p.python = python_of_environment(def->python);
        }
        if (kind->takes_command) {
            if (!def || def->command.empty())
                throw Error("--legs: '" + names[i] + "': a command leg needs its command in the experiment's legs." +
                            p.name + ".command");
            p.command = def->command;
        }
        validate_leg_name(p.name);
        for (const auto& o : out)
            if (o.name == p.name)
                throw Error("--legs: leg name '" + p.name + "' given twice" +
                            (env.empty() ? "" : " (name the leg: NAME=" + p.implementation + "@" + env + ")"));
        if (kind->takes_faults && spec) p.faults = spec->leg_fault_switches(p.name);  // docs/faults.md
        p.device = def && !def->device.empty() ? def->device : devs[i % devs.size()];
        if (def && !def->devices.empty()) {
            p.devices = def->devices;
            p.device = def->devices.front();
        }
        if (p.device != "cpu" && p.device.rfind("cuda:", 0) != 0)
            throw Error("--devices: '" + p.device + "' is not cpu or cuda:N");
        out.push_back(p);
    }
    return out;
}

}  // namespace tandem::experiments
