// Experiment files: parsing, validation with field-naming errors, resolution to the full spec.
#include "tandem/spec/experiment.h"

#include "tandem/assets.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/leg_name.h"
#include "tandem/spec/leg_kinds.h"
#include "tandem/sha256.h"
#include "tandem/strict_json.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace tandem::experiments {
namespace {

using nlohmann::json;

const std::vector<std::string> kKnownTargets = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                "gate_proj", "up_proj", "down_proj"};
const std::vector<std::string> kKnownSources = {"pubmedqa", "medmcqa", "medqa"};

// Reads fields of one JSON object, remembering which were used so unknown ones can be reported.
class Fields {
public:
    Fields(const json& j, std::string source, std::string prefix)
        : j_(j), source_(std::move(source)), prefix_(std::move(prefix)) {
        if (!j_.is_object()) fail("", "must be an object");
    }

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        std::string field = prefix_.empty() ? key : (key.empty() ? prefix_ : prefix_ + "." + key);
        throw Error(source_ + ": field " + (field.empty() ? "(top level)" : field) + ": " + what);
    }
    // Present and not null. A null is an error, not "absent": `"lr": null` must not quietly run
    // with the default learning rate.
    bool has(const std::string& key) {
        used_.insert(key);
        if (!j_.contains(key)) return false;
        if (j_.at(key).is_null()) fail(key, "is null (give a value, or leave the field out to use its default)");
        return true;
    }
    const json& raw(const std::string& key) {
        used_.insert(key);
        return j_.at(key);
    }
    std::string path(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

    std::string str(const std::string& key, std::optional<std::string> def,
                     const std::vector<std::string>& allowed = {}) {
        if (!has(key)) {
            if (!def) fail(key, "is required");
            return *def;
        }
        const json& v = raw(key);
        if (!v.is_string()) fail(key, "must be a string");
        std::string s = v.get<std::string>();
        if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
            std::string list;
            for (const auto& a : allowed) list += (list.empty() ? "" : "|") + a;
            fail(key, "must be one of " + list + ", not '" + s + "'");
        }
        return s;
    }
    int64_t integer(const std::string& key, std::optional<int64_t> def, int64_t min_value,
                    const char* what = "must be a positive integer") {
        if (!has(key)) {
            if (!def) fail(key, "is required");
            return *def;
        }
        const json& v = raw(key);
        // An integer literal beyond 2^64 - 1 reaches us as a float (the JSON parser's fallback): it is
        // too large, not "not an integer".
        const bool huge_float = v.is_number_float() && std::isfinite(v.get<double>()) &&
                                v.get<double>() == std::floor(v.get<double>()) && v.get<double>() >= 9223372036854775808.0;
        if ((v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) || huge_float)
            fail(key, "is too large (at most " + std::to_string(INT64_MAX) + ")");
        if (!v.is_number_integer() || v.get<int64_t>() < min_value) fail(key, what);
        return v.get<int64_t>();
    }
    double number(const std::string& key, std::optional<double> def, double lo, double hi, bool lo_open,
                  const std::string& what) {
        if (!has(key)) {
            if (!def) fail(key, "is required");
            return *def;
        }
        const json& v = raw(key);
        if (!v.is_number()) fail(key, "must be a number");
        double d = v.get<double>();
        if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo)) fail(key, what);
        return d;
    }
    bool boolean(const std::string& key, bool def) {
        if (!has(key)) return def;
        const json& v = raw(key);
        if (!v.is_boolean()) fail(key, "must be true or false");
        return v.get<bool>();
    }
    // Unknown keys are errors: a misspelt field must not silently fall back to a default.
    void reject_unknown() const {
        for (auto it = j_.begin(); it != j_.end(); ++it)
            if (!used_.count(it.key())) fail(it.key(), "unknown field");
    }

private:
    const json& j_;
    std::string source_, prefix_;
    std::set<std::string> used_;
};

std::vector<std::string> string_list(Fields& f, const std::string& key, const std::vector<std::string>& def,
                                     const std::vector<std::string>& allowed) {
    if (!f.has(key)) return def;
    const json& v = f.raw(key);
    if (!v.is_array() || v.empty()) f.fail(key, "must be a non-empty list of strings");
    std::vector<std::string> out;
    for (const auto& e : v) {
        if (!e.is_string()) f.fail(key, "must be a non-empty list of strings");
        std::string s = e.get<std::string>();
        if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
            std::string list;
            for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
            f.fail(key, "unknown entry '" + s + "' (known: " + list + ")");
        }
        if (std::find(out.begin(), out.end(), s) != out.end()) f.fail(key, "entry '" + s + "' repeated");
        out.push_back(s);
    }
    return out;
}

// A sub-object of the spec, or an empty object when absent (every field then takes its default).
const json& section(Fields& top, const std::string& key) {
    static const json empty = json::object();
    return top.has(key) ? top.raw(key) : empty;
}

}  // namespace

bool SlurmOptions::empty() const {
    return partition.empty() && gres.empty() && time.empty() && account.empty() && extra.empty() && setup.empty();
}

json SlurmOptions::to_json() const {
    json j = json::object();
    if (!partition.empty()) j["partition"] = partition;
    if (!gres.empty()) j["gres"] = gres;
    if (!time.empty()) j["time"] = time;
    if (!account.empty()) j["account"] = account;
    if (!extra.empty()) j["extra"] = extra;
    if (!setup.empty()) j["setup"] = setup;
    return j;
}

SlurmOptions SlurmOptions::from_json(const json& j, const std::string& source, const std::string& field) {
    Fields f(j, source, field);
    SlurmOptions o;
    auto one_line = [&](const std::string& key) {
        std::string v = f.str(key, std::string());
        if (v.find_first_of("\n\r") != std::string::npos) f.fail(key, "must be one line");
        return v;
    };
    o.partition = one_line("partition");
    o.gres = one_line("gres");
    o.time = one_line("time");
    o.account = one_line("account");
    for (const char* key : {"extra", "setup"}) {
        if (!f.has(key)) continue;
        const json& v = f.raw(key);
        const std::string what = std::string(key) == "extra" ? "must be a list of strings (sbatch arguments, e.g. \"--qos=short\")"
                                                            : "must be a list of strings (shell lines, e.g. \"module load cuda\")";
        if (!v.is_array()) f.fail(key, what);
        auto& out = std::string(key) == "extra" ? o.extra : o.setup;
        for (const auto& e : v) {
            if (!e.is_string() || e.get<std::string>().find_first_of("\n\r") != std::string::npos) f.fail(key, what);
            out.push_back(e.get<std::string>());
        }
    }
    f.reject_unknown();
    return o;
}

const std::vector<std::string>& ExperimentSpec::seed_names() {
    static const std::vector<std::string> k = {"split", "base", "adapter", "plan", "dropout"};
    return k;
}

uint64_t& ExperimentSpec::seed_of(const std::string& n) {
    if (n == "split") return seeds.split;
    if (n == "base") return seeds.base;
    if (n == "adapter") return seeds.adapter;
    if (n == "plan") return seeds.plan;
    if (n == "dropout") return seeds.dropout;
    throw Error("unknown seed '" + n + "' (known: split, base, adapter, plan, dropout)");
}

uint64_t ExperimentSpec::seed_of(const std::string& n) const { return const_cast<ExperimentSpec*>(this)->seed_of(n); }

bool ExperimentSpec::seeds_differ() const {
    for (const auto& n : seed_names())
        if (seed_of(n) != seed) return true;
    return false;
}

const ExperimentSpec::LegDefinition* ExperimentSpec::leg_definition(const std::string& leg) const {
    for (const auto& d : legs)
        if (d.name == leg) return &d;
    return nullptr;
}

FaultSettings ExperimentSpec::fault_settings() const {
    return {lora_targets, lora_use_rslora, lora_rank, lora_dropout, accumulation, clip, template_name};
}

std::vector<FaultSwitch> ExperimentSpec::leg_fault_switches(const std::string& leg) const {
    if (const LegDefinition* d = leg_definition(leg)) {
        if (d->implementation != "engine") return {};
        if (d->faults) return *d->faults;
    }
    return faults;
}

std::string ExperimentSpec::leg_setting(const std::string& leg, const std::string& field) const {
    if (auto it = overrides.find(leg); it != overrides.end())
        if (auto f = it->second.find(field); f != it->second.end()) return f->second;
    if (field == "dropout_masks") return dropout_masks;
    if (field == "plan") return plan;
    if (field == "template") return template_name;
    throw Error("leg setting '" + field + "' cannot be overridden per leg");
}

namespace {

// The top level's name, description, seed and per-purpose seeds.
void parse_name_and_seeds(Fields& top, const std::string& source, ExperimentSpec& s) {
    s.name = top.str("name", std::nullopt);
    if (s.name.empty() || s.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
                              std::string::npos)
        top.fail("name", "must be non-empty and use only letters, digits, '-', '_' and '.'");
    s.description = top.str("description", std::string());
    s.seed = static_cast<uint64_t>(top.integer("seed", 1234, 0, "must be a non-negative integer"));
    Fields f(section(top, "seeds"), source, "seeds");
    for (const auto& n : ExperimentSpec::seed_names())
        s.seed_of(n) = static_cast<uint64_t>(f.integer(n, static_cast<int64_t>(s.seed), 0, "must be a non-negative integer"));
    f.reject_unknown();
}

// The model section: exactly one of config (a name or inline fields) or base (a checkpoint folder).
void parse_model(Fields& top, const std::string& source, ExperimentSpec& s) {
    Fields f(section(top, "model"), source, "model");
    if (!top.has("model")) top.fail("model", "is required");
    int given = 0;
    if (f.has("config")) {
        ++given;
        const json& c = f.raw("config");
        if (c.is_string()) {
            s.model_config = c.get<std::string>();
            if (s.model_config.empty() || s.model_config == "inline")
                f.fail("config", "must name a config (tiny, qwen3-0.6b, ...) or be an object of config.json fields");
        } else if (c.is_object()) {
            s.model_config = "inline";
            s.model_inline = c;
        } else {
            f.fail("config", "must be a config name or an object of config.json fields");
        }
    }
    if (f.has("base")) {
        ++given;
        s.model_base = f.str("base", std::nullopt);
        if (s.model_base.empty()) f.fail("base", "must be a non-empty path or assets:NAME");
        if (is_asset_reference(s.model_base))
            if (auto problem = asset_reference_problem(s.model_base); !problem.empty()) f.fail("base", problem);
    }
    if (given != 1) f.fail("", "needs exactly one of config (a name or fields) or base (a checkpoint folder)");
    f.reject_unknown();
}

// The lora section: rank, alpha, rsLoRA, dropout and target modules.
void parse_lora(Fields& top, const std::string& source, ExperimentSpec& s) {
    Fields f(section(top, "lora"), source, "lora");
    s.lora_rank = f.integer("rank", 16, 1);
    s.lora_alpha = f.number("alpha", 32.0, 0, 1e9, true, "must be a number in (0, 1e9]");
    s.lora_use_rslora = f.boolean("use_rslora", true);
    s.lora_dropout = f.number("dropout", 0.05, 0, 0.999, false, "must be in [0, 1)");
    s.lora_targets = string_list(f, "targets", kKnownTargets, kKnownTargets);
    f.reject_unknown();
}

// The optimizer and schedule sections and the top level's clip.
void parse_optimizer(Fields& top, const std::string& source, ExperimentSpec& s) {
    {
        Fields f(section(top, "optimizer"), source, "optimizer");
        std::string kind = f.str("name", std::string("adamw"), {"adamw"});
        s.lr = f.number("lr", 1e-4, 0, 10, true, "must be a number in (0, 10]");
        if (f.has("betas")) {
            const json& b = f.raw("betas");
            if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number() ||
                b[0].get<double>() < 0 || b[0].get<double>() >= 1 || b[1].get<double>() < 0 || b[1].get<double>() >= 1)
                f.fail("betas", "must be two numbers in [0, 1)");
            s.beta1 = b[0].get<double>();
            s.beta2 = b[1].get<double>();
        }
        s.eps = f.number("eps", 1e-8, 0, 1, true, "must be a number in (0, 1]");
        s.weight_decay = f.number("weight_decay", 0.0, 0, 1, false, "must be in [0, 1]");
        f.reject_unknown();
    }
    {
        Fields f(section(top, "schedule"), source, "schedule");
        f.str("name", std::string("cosine_with_warmup"), {"cosine_with_warmup"});
        s.warmup_fraction = f.number("warmup_fraction", 0.03, 0, 1, false, "must be in [0, 1]");
        f.reject_unknown();
    }
    s.clip = top.number("clip", 1.0, 0, 1e9, true, "must be a number in (0, 1e9]");
}

// The batch, sequence, corpus, eval and checkpoint sections.
void parse_data(Fields& top, const std::string& source, ExperimentSpec& s) {
    {
        Fields f(section(top, "batch"), source, "batch");
        s.micro_batch = f.integer("micro_batch", 2, 1);
        s.accumulation = f.integer("accumulation", 8, 1);
        s.epochs = f.integer("epochs", 1, 1);
        s.max_updates = f.integer("max_updates", 0, 0, "must be a non-negative integer (0: no limit)");
        f.reject_unknown();
    }
    {
        Fields f(section(top, "sequence"), source, "sequence");
        s.max_len = f.integer("max_len", 512, 2, "must be an integer >= 2");
        f.reject_unknown();
    }
    {
        Fields f(section(top, "corpus"), source, "corpus");
        s.sources = string_list(f, "sources", kKnownSources, kKnownSources);
        s.heldout_fraction = f.number("heldout_fraction", 0.15, 0, 1, true, "must be in (0, 1)");
        if (s.heldout_fraction >= 1) f.fail("heldout_fraction", "must be in (0, 1)");
        s.max_records_per_source = f.integer("max_records_per_source", 0, 0, "must be a non-negative integer (0: no limit)");
        f.reject_unknown();
    }
    {
        Fields f(section(top, "eval"), source, "eval");
        s.eval_interval = f.integer("interval", 250, 1);
        s.eval_prefix = f.integer("prefix_size", 512, 1);
        f.reject_unknown();
    }
    {
        Fields f(section(top, "checkpoint"), source, "checkpoint");
        s.checkpoint_interval = f.integer("interval", 0, 0, "must be a non-negative integer (0: none)");
        f.reject_unknown();
    }
}

// The top level's per-leg settings (dropout_masks, plan, template), l3_records and their per-leg overrides.
void parse_leg_settings(Fields& top, const std::string& source, ExperimentSpec& s) {
    s.dropout_masks = top.str("dropout_masks", std::string("shared"), {"native", "shared"});
    s.plan = top.str("plan", std::string("shared"), {"shared", "native"});
    s.template_name = top.str("template", std::string("qwen3"), {"qwen3", "chatml"});
    s.l3_records = top.integer("l3_records", 64, 0, "must be a non-negative integer");
    if (!top.has("overrides")) return;
    const json& o = top.raw("overrides");
    if (!o.is_object()) top.fail("overrides", "must be an object {leg: {field: value}}");
    for (auto it = o.begin(); it != o.end(); ++it) {
        Fields f(it.value(), source, "overrides." + it.key());
        auto& m = s.overrides[it.key()];
        if (f.has("dropout_masks")) m["dropout_masks"] = f.str("dropout_masks", std::nullopt, {"native", "shared"});
        if (f.has("plan")) m["plan"] = f.str("plan", std::nullopt, {"shared", "native"});
        if (f.has("template")) m["template"] = f.str("template", std::nullopt, {"qwen3", "chatml"});
        f.reject_unknown();
    }
}

// A leg's command: a non-empty list of strings, given exactly when the leg's kind takes one.
void parse_leg_command(Fields& f, const LegKind& kind, ExperimentSpec::LegDefinition& d) {
    if (f.has("command")) {
        const json& c = f.raw("command");
        if (!c.is_array() || c.empty()) f.fail("command", "must be a non-empty list of strings (program and arguments)");
        for (const auto& a : c) {
            if (!a.is_string()) f.fail("command", "must be a non-empty list of strings (program and arguments)");
            d.command.push_back(a.get<std::string>());
        }
    }
    if (kind.takes_command && d.command.empty()) f.fail("command", "is required for a command leg");
    if (!kind.takes_command && !d.command.empty())
        f.fail("command", "is only for implementation command (the others start their own program)");
}

// A leg's devices: one rank each, all cpu or distinct cuda:N, for leg kinds that take ranks.
void parse_leg_devices(Fields& f, const LegKind& kind, ExperimentSpec::LegDefinition& d) {
    const char* what = "must be a list of at least two devices, all cpu or all distinct cuda:N (one rank each)";
    const json& v = f.raw("devices");
    if (!v.is_array() || v.size() < 2) f.fail("devices", what);
    for (const auto& e : v) {
        if (!e.is_string()) f.fail("devices", what);
        std::string dev = e.get<std::string>();
        const bool cuda = dev.rfind("cuda:", 0) == 0;
        if (dev != "cpu" && !cuda) f.fail("devices", "'" + dev + "' is not cpu or cuda:N");
        if (!d.devices.empty() && (d.devices.front() == "cpu") != (dev == "cpu"))
            f.fail("devices", "mixes cpu and cuda devices (all ranks must be of one kind)");
        if (cuda && std::find(d.devices.begin(), d.devices.end(), dev) != d.devices.end())
            f.fail("devices", "'" + dev + "' given twice (one rank per GPU)");
        d.devices.push_back(dev);
    }
    if (!kind.takes_ranks)
        f.fail("devices", "is only for implementation reference (its ranks run with torch.distributed)");
    if (!d.device.empty()) f.fail("devices", "give device or devices, not both");
}

// One leg of the legs section, named `name`.
ExperimentSpec::LegDefinition parse_leg(const std::string& name, const json& j, const std::string& source) {
    Fields f(j, source, "legs." + name);
    ExperimentSpec::LegDefinition d;
    d.name = name;
    try {
        validate_leg_name(d.name);
    } catch (const Error& e) {
        f.fail("", e.what());
    }
    d.implementation = f.str("implementation", std::nullopt, leg_kind_names());
    const LegKind& kind = leg_kind(d.implementation);
    parse_leg_command(f, kind, d);
    if (f.has("python")) {
        d.python = f.str("python", std::string());
        if (d.python.empty()) f.fail("python", "must be a Python interpreter or an environment folder (a venv, a conda environment)");
        if (!kind.takes_python)
            f.fail("python", "is only for Python legs (reference, sdk-python, or a command leg's {python}), not '" +
                                 d.implementation + "'");
    }
    d.device = f.str("device", std::string());
    if (!d.device.empty() && d.device != "cpu" && d.device.rfind("cuda:", 0) != 0)
        f.fail("device", "must be cpu or cuda:N, not '" + d.device + "'");
    if (f.has("faults")) {
        d.faults = faults_from_json(f.raw("faults"), source + ": field " + f.path("faults"));
        if (!kind.takes_faults)
            f.fail("faults", "faults are injected into engine legs only (docs/faults.md), not '" + d.implementation + "'");
    }
    if (f.has("devices")) parse_leg_devices(f, kind, d);
    if (f.has("slurm")) d.slurm = SlurmOptions::from_json(f.raw("slurm"), source, "legs." + d.name + ".slurm");
    f.reject_unknown();
    return d;
}

// The legs section, when given: a non-empty object of leg definitions.
void parse_legs(Fields& top, const std::string& source, ExperimentSpec& s) {
    if (!top.has("legs")) return;
    const json& o = top.raw("legs");
    if (!o.is_object() || o.empty())
        top.fail("legs", "must be an object {leg: {implementation, command?, python?, device?, devices?, slurm?, faults?}}");
    for (auto it = o.begin(); it != o.end(); ++it) s.legs.push_back(parse_leg(it.key(), it.value(), source));
}

// The observe section, when given: the updates to fingerprint (sorted, without repeats) and every how many.
void parse_observe(Fields& top, const std::string& source, ExperimentSpec& s) {
    if (!top.has("observe")) return;
    Fields f(top.raw("observe"), source, "observe");
    if (f.has("updates")) {
        const json& u = f.raw("updates");
        if (!u.is_array()) f.fail("updates", "must be a list of update indices (integers >= 0)");
        for (const auto& e : u) {
            if (!e.is_number_integer() || e.get<int64_t>() < 0)
                f.fail("updates", "must be a list of update indices (integers >= 0), not " + e.dump());
            s.observe_updates.push_back(e.get<int64_t>());
        }
        std::sort(s.observe_updates.begin(), s.observe_updates.end());
        s.observe_updates.erase(std::unique(s.observe_updates.begin(), s.observe_updates.end()), s.observe_updates.end());
    }
    s.observe_every = f.integer("every", 0, 0, "must be a non-negative integer (0: only the listed updates)");
    f.reject_unknown();
}

// The checks across sections, once every field is read: overrides' legs, observed updates, the spec's size.
void check_experiment(const ExperimentSpec& s, const std::string& source) {
    // An override names a leg the experiment defines or a leg kind (docs/experiment-format.md): a misspelt
    // name would otherwise be ignored without a word.
    for (const auto& [leg, fields] : s.overrides) {
        if (s.leg_definition(leg) || find_leg_kind(leg)) continue;
        std::string known;
        for (const auto& d : s.legs) known += (known.empty() ? "" : ", ") + d.name;
        for (const auto& k : leg_kind_names()) known += (known.empty() ? "" : ", ") + k;
        throw Error(source + ": field overrides." + leg + ": '" + leg + "' is not a leg the experiment defines nor a leg kind (" +
                    known + ")");
    }
    // Observed updates are 0-based indices into the plan (docs/observables.md); the plan holds at most
    // batch.max_updates updates, so a later index would never be fingerprinted.
    if (s.max_updates > 0 && !s.observe_updates.empty() && s.observe_updates.back() >= s.max_updates)
        throw Error(source + ": field observe.updates: update " + std::to_string(s.observe_updates.back()) +
                    " is beyond the plan (batch.max_updates " + std::to_string(s.max_updates) + ": updates 0-" +
                    std::to_string(s.max_updates - 1) + ")");
    // The resolved spec is stored as one attribute of the run file's /experiment group, which holds
    // at most kMaxSpecJsonBytes (docs/hdf5-layout.md): refused here, before any run folder exists.
    if (const size_t n = s.to_json().dump().size(); n > kMaxSpecJsonBytes) {
        const bool description = s.description.size() * 2 > n;
        throw Error(source + ": " + (description ? "field description: " : "") + "the experiment is " + std::to_string(n) +
                    " bytes as JSON, more than the " + std::to_string(kMaxSpecJsonBytes) +
                    " the run file stores (one HDF5 attribute); shorten " + (description ? "the description" : "it"));
    }
}

}  // namespace

ExperimentSpec parse_experiment(const json& j, const std::string& source) {
    ExperimentSpec s;
    Fields top(j, source, "");
    parse_name_and_seeds(top, source, s);
    parse_model(top, source, s);
    parse_lora(top, source, s);
    parse_optimizer(top, source, s);
    parse_data(top, source, s);
    parse_leg_settings(top, source, s);
    parse_legs(top, source, s);
    if (top.has("gate")) s.gate = GateConfig::from_json(top.raw("gate"), source);
    parse_observe(top, source, s);
    if (top.has("faults")) s.faults = faults_from_json(top.raw("faults"), source + ": field faults");
    top.str("$schema", std::string());  // allowed, ignored
    top.reject_unknown();
    check_experiment(s, source);
    return s;
}

json ExperimentSpec::to_json() const {
    json model = json::object();
    if (!model_base.empty()) model["base"] = model_base;
    else if (model_config == "inline") model["config"] = model_inline;
    else model["config"] = model_config;
    json ov = json::object();
    for (const auto& [leg, fields] : overrides) {
        json f = json::object();
        for (const auto& [k, v] : fields) f[k] = v;
        ov[leg] = f;
    }
    json j{
        {"name", name},
        {"description", description},
        {"seed", seed},
        {"model", model},
        {"lora", {{"rank", lora_rank}, {"alpha", lora_alpha}, {"use_rslora", lora_use_rslora},
                  {"dropout", lora_dropout}, {"targets", lora_targets}}},
        {"optimizer", {{"name", "adamw"}, {"lr", lr}, {"betas", {beta1, beta2}}, {"eps", eps},
                       {"weight_decay", weight_decay}}},
        {"schedule", {{"name", "cosine_with_warmup"}, {"warmup_fraction", warmup_fraction}}},
        {"clip", clip},
        {"batch", {{"micro_batch", micro_batch}, {"accumulation", accumulation}, {"epochs", epochs},
                   {"max_updates", max_updates}}},
        {"sequence", {{"max_len", max_len}}},
        {"corpus", {{"sources", sources}, {"heldout_fraction", heldout_fraction},
                    {"max_records_per_source", max_records_per_source}}},
        {"eval", {{"interval", eval_interval}, {"prefix_size", eval_prefix}}},
        {"checkpoint", {{"interval", checkpoint_interval}}},
        {"dropout_masks", dropout_masks},
        {"plan", plan},
        {"template", template_name},
        {"l3_records", l3_records},
        {"overrides", ov},
    };
    // Present only when used, so specs (and their sha256) written before legs existed stay the same.
    if (!legs.empty()) {
        json lj = json::object();
        for (const auto& d : legs) {
            json x{{"implementation", d.implementation}};
            if (!d.command.empty()) x["command"] = d.command;
            if (!d.python.empty()) x["python"] = d.python;  // present only when used: hashes stay
            if (!d.device.empty()) x["device"] = d.device;
            if (d.faults) x["faults"] = faults_to_json(*d.faults);
            if (!d.devices.empty()) x["devices"] = d.devices;  // present only when used: hashes stay
            if (!d.slurm.empty()) x["slurm"] = d.slurm.to_json();
            lj[d.name] = x;
        }
        j["legs"] = lj;
    }
    if (!gate.is_default()) j["gate"] = gate.to_json();
    if (observes_any()) j["observe"] = {{"updates", observe_updates}, {"every", observe_every}};
    if (seeds_differ()) {
        json sj = json::object();
        for (const auto& n : seed_names()) sj[n] = seed_of(n);
        j["seeds"] = sj;
    }
    if (!faults.empty()) j["faults"] = faults_to_json(faults);  // only when used: clean specs keep their hash
    return j;
}

bool ExperimentSpec::observes(int64_t update) const {
    if (update < 0) return false;
    if (observe_every > 0 && update % observe_every == 0) return true;
    return std::binary_search(observe_updates.begin(), observe_updates.end(), update);
}

std::string ExperimentSpec::sha256() const { return sha256_hex(to_json().dump()); }

ExperimentSpec parse_experiment_text(std::string_view text, const std::string& source) {
    return parse_experiment(parse_json_strict(text, source), source);
}

std::string ExperimentSpec::sha256_without_seeds() const {
    // Only what decides the distribution of a stack's numbers (docs/envelope.md "Reuse: the key"):
    // not the name, seeds, the legs section, the gate, checkpoints (a resume is bit-identical) or
    // l3_records, and not how dropout masks are drawn (shared or a leg's native RNG: both Bernoulli
    // masks of the same rate). The plan stays: a native plan batches differently.
    const json full = to_json();
    json j = json::object();
    for (const char* k : {"model", "lora", "optimizer", "schedule", "clip", "batch", "sequence", "corpus", "eval", "plan",
                          "template", "overrides"})
        j[k] = full.at(k);
    for (auto& [leg, fields] : j["overrides"].items()) fields.erase("dropout_masks");
    for (auto it = j["overrides"].begin(); it != j["overrides"].end();) {
        if (it.value().empty()) it = j["overrides"].erase(it);
        else ++it;
    }
    return sha256_hex(j.dump());
}

ExperimentSpec load_experiment(const std::filesystem::path& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw Error(path.string() + ": is a folder, not an experiment file (e.g. experiments/clinical-tiny.json)");
    const auto st = std::filesystem::status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)  // a symlink loop, a folder we may not enter
        throw Error(path.string() + ": cannot read the experiment file (" + ec.message() + ")");
    if (!std::filesystem::exists(st)) throw Error(path.string() + ": no such experiment file");
    // A FIFO would block until someone writes it, a device (/dev/zero) never ends: only a file.
    if (!std::filesystem::is_regular_file(st))
        throw Error(path.string() + ": not a regular file (a FIFO, a device or a socket); give an experiment file");
    return parse_experiment_text(read_file(path), path.string());
}

ExperimentSpec load_run_spec(const std::filesystem::path& run_dir) {
    auto path = run_dir / "experiment.json";
    const json doc = parse_json_strict(read_file(path), path.string());
    if (!doc.is_object() || !doc.contains("spec") || !doc.contains("spec_sha256") || !doc["spec_sha256"].is_string())
        throw Error(path.string() + ": missing field spec or spec_sha256 (a string)");
    ExperimentSpec s = parse_experiment(doc["spec"], path.string() + " (spec)");
    if (s.sha256() != doc["spec_sha256"].get<std::string>())
        throw Error(path.string() + ": spec_sha256 does not match the spec (file edited after the run was prepared?)");
    return s;
}

data::PlanOptions batch_plan_options(const ExperimentSpec& spec) {
    data::PlanOptions o;
    o.seed = spec.seeds.plan;
    o.micro_batch = static_cast<size_t>(spec.micro_batch);
    o.accumulation = static_cast<size_t>(spec.accumulation);
    o.max_len = static_cast<size_t>(spec.max_len);
    o.epochs = static_cast<size_t>(spec.epochs);
    return o;
}

}  // namespace tandem::experiments
