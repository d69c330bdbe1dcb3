// Validation and the size estimate before a run folder is prepared.
#include "preflight.h"

#include "tandem/assets.h"
#include "tandem/data/supervision.h"
#include "tandem/data/tokenizer.h"
#include "tandem/engine/config.h"
#include "tandem/engine/io.h"
#include "tandem/error.h"
#include "tandem/measure/host_info.h"
#include "tandem/runner/prepare.h"
#include "tandem/spec/leg_kinds.h"
#include "tandem/spec/leg_paths.h"
#include "tandem/spec/model.h"
#include "executors/executor.h"

#include <nlohmann/json.hpp>

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

namespace tandem::experiments {
namespace fs = std::filesystem;

namespace {

std::string gib(double bytes) {
    char b[64];
    if (bytes >= 1e15) std::snprintf(b, sizeof b, "%.3g GiB", bytes / 1073741824.0);
    else if (bytes >= 1073741824.0) std::snprintf(b, sizeof b, "%.1f GiB", bytes / 1073741824.0);
    else std::snprintf(b, sizeof b, "%.0f MiB", bytes / 1048576.0);
    return b;
}

double free_disk_bytes(fs::path dir) {
    // The output folder may not exist yet: measure the nearest existing ancestor.
    std::error_code ec;
    dir = fs::absolute(dir, ec);
    while (!dir.empty() && !fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir) dir = dir.parent_path();
    struct statvfs st {};
    if (statvfs(dir.c_str(), &st) != 0) return -1;
    return static_cast<double>(st.f_bavail) * static_cast<double>(st.f_frsize);
}

// Besides the tensors (the process overhead of each leg kind: tandem/spec/leg_kinds.h).
constexpr double kCorpusAndTokenizerBytes = 16.0 * 1048576;  // tokenizer copy 11 MiB + corpus files

// The distributions `python` has, by name (null: not importable), and its own version under "python";
// found without importing them (importing torch takes seconds, on a busy machine half a minute).
std::optional<nlohmann::json> python_packages(const std::string& python, const std::vector<std::string>& names,
                                              std::string* why) {
    std::vector<std::string> argv = {python, "-c",
                                     "import json, sys, importlib.util, importlib.metadata as m\n"
                                     "out = {'python': '%d.%d.%d' % sys.version_info[:3]}\n"
                                     "for n in sys.argv[1:]:\n"
                                     "    v = None\n"
                                     "    if importlib.util.find_spec(n) is not None:\n"
                                     "        try:\n"
                                     "            v = m.version(n)\n"
                                     "        except Exception:\n"
                                     "            v = '(version unknown)'\n"
                                     "    out[n] = v\n"
                                     "print(json.dumps(out))\n"};
    argv.insert(argv.end(), names.begin(), names.end());
    const CommandResult r = run_command(argv, 60.0);
    if (r.exit_status != 0) {
        const std::string err = r.err.substr(0, r.err.find('\n'));
        if (why) *why = r.timed_out ? "did not answer within 60 s" : err.empty() ? "exit status " + std::to_string(r.exit_status) : err;
        return std::nullopt;
    }
    try {
        return nlohmann::json::parse(r.out);
    } catch (const std::exception&) {
        if (why) *why = "printed no package list";
        return std::nullopt;
    }
}

}  // namespace

void check_leg_interpreters(const std::vector<LegPlan>& legs) {
    std::vector<std::string> lines;
    std::optional<nlohmann::json> reference;  // the reference environment's versions, asked once when needed
    for (const auto& l : legs) {
        if (l.python.empty()) continue;
        const LegKind& kind = leg_kind(l.implementation);
        std::error_code ec;
        if (!fs::exists(l.python, ec) || fs::is_directory(l.python, ec)) {
            lines.push_back("leg " + l.name + ": no Python interpreter at " + l.python +
                            " (give an interpreter or its environment folder, one holding bin/python)");
            continue;
        }
        std::string why;
        const auto have = python_packages(l.python, kind.python_packages, &why);
        if (!have) {
            lines.push_back("leg " + l.name + ": the Python interpreter " + l.python + " does not run (" + why + ")");
            continue;
        }
        for (const auto& package : kind.python_packages) {
            if (have->contains(package) && !(*have)[package].is_null()) continue;
            if (!reference) {
                std::string ignored;
                reference = python_packages(reference_python(), kind.python_packages, &ignored);
                if (!reference) reference = nlohmann::json::object();
            }
            static const std::map<std::string, std::string> pins = reference_pins();
            std::string version;
            if (auto p = pins.find(package); p != pins.end()) version = "the reference environment pins " + package + "==" + p->second;
            else if (reference->contains(package) && (*reference)[package].is_string())
                version = "the reference environment has " + package + " " + (*reference)[package].get<std::string>();
            else version = "any version";
            lines.push_back("leg " + l.name + ": " + l.python + " has no package " + package + " (the " + l.implementation +
                            " leg imports it; " + version + ")");
        }
    }
    if (lines.empty()) return;
    std::string all;
    for (const auto& s : lines) all += (all.empty() ? "" : "\n") + s;
    throw Error(all);
}

std::string ResourceEstimate::summary() const {
    std::string s = "~" + gib(host_bytes_per_cpu_leg) + " memory per CPU leg (" + gib(host_bytes_all_legs) +
                    " for all legs";
    if (memory_available_bytes > 0) s += ", " + gib(memory_available_bytes) + " available";
    s += "), ~" + gib(disk_bytes) + " disk";
    if (disk_available_bytes >= 0) s += " (" + gib(disk_available_bytes) + " free)";
    return s;
}

ResourceEstimate estimate_resources(const ExperimentSpec& spec, const std::vector<LegPlan>& legs,
                                    const fs::path& out_dir, const std::optional<fs::path>& assets, int max_concurrent) {
    const engine::Qwen3Config c = model_config_of(spec, assets);
    const double V = static_cast<double>(c.vocab_size), H = static_cast<double>(c.hidden_size);
    const double I = static_cast<double>(c.intermediate_size), L = static_cast<double>(c.num_hidden_layers);
    const double heads = static_cast<double>(c.num_attention_heads), kv = static_cast<double>(c.num_key_value_heads);
    const double hd = static_cast<double>(c.head_dim);
    const double q = heads * hd, kvd = kv * hd;
    // Base parameters (count_parameters in double: absurd configs must not overflow).
    const double per_layer = H * q + 2 * H * kvd + q * H + 3 * H * I + 2 * H + 2 * hd;
    const double params = V * H * (c.tie_word_embeddings ? 1 : 2) + L * per_layer + H;
    // LoRA parameters: rank * (in + out) per adapted projection and layer.
    const double r = static_cast<double>(spec.lora_rank);
    double lora = 0;
    for (const auto& t : spec.lora_targets) {
        double in = H, out = H;
        if (t == "q_proj") out = q;
        else if (t == "k_proj" || t == "v_proj") out = kvd;
        else if (t == "o_proj") in = q;
        else if (t == "gate_proj" || t == "up_proj") out = I;
        else if (t == "down_proj") in = I;
        lora += r * (in + out);
    }
    lora *= L;
    const double tokens = static_cast<double>(spec.micro_batch) * static_cast<double>(spec.max_len);
    const double seq = static_cast<double>(spec.max_len);
    // Saved activations per layer (norms, projections, attention probabilities, MLP) and the LM head's
    // logits and their gradient over at most every token of a micro-batch; float32.
    const double activations = 4 * L * (tokens * (10 * H + 4 * I + 2 * (q + 2 * kvd)) +
                                         static_cast<double>(spec.micro_batch) * heads * seq * seq);
    const double lm_head = 4 * 2 * tokens * V;
    const double tensors = 4 * 2 * params + 4 * 4 * lora + activations + lm_head;

    ResourceEstimate e;
    e.host_bytes_per_cpu_leg = tensors + leg_kind("reference").host_overhead_bytes;
    // Legs that run at once: all of them, or (RunnerOptions::max_concurrent_legs, `tandem faults --jobs`)
    // the largest max_concurrent of them.
    std::vector<double> per_leg;
    for (const auto& l : legs) {
        if (l.executor == "slurm") continue;  // runs on a cluster node, not in this machine's memory
        const double overhead = leg_kind(l.implementation).host_overhead_bytes;
        const double ranks = static_cast<double>(std::max<size_t>(1, l.devices.size()));  // one process each
        per_leg.push_back(ranks * ((l.device == "cpu" ? tensors : 4 * params) + overhead));
    }
    std::sort(per_leg.begin(), per_leg.end(), std::greater<double>());
    const size_t at_once = max_concurrent > 0 ? std::min(per_leg.size(), static_cast<size_t>(max_concurrent)) : per_leg.size();
    for (size_t i = 0; i < at_once; ++i) e.host_bytes_all_legs += per_leg[i];
    const double updates = spec.max_updates > 0 ? static_cast<double>(spec.max_updates) : 10000.0;
    const double checkpoints = spec.checkpoint_interval > 0 ? std::max(0.0, updates / static_cast<double>(spec.checkpoint_interval)) : 0;
    const double base_on_disk = spec.model_base.empty() ? 4 * params : 0;  // a given base is linked, not copied
    e.disk_bytes = base_on_disk + 4 * lora + static_cast<double>(legs.size()) * (checkpoints * 3 + 1) * 4 * lora +
                   kCorpusAndTokenizerBytes;
    e.memory_available_bytes = static_cast<double>(collect_host_info().memory_available_bytes);
    e.disk_available_bytes = free_disk_bytes(out_dir);
    return e;
}

ResourceEstimate preflight(const ExperimentSpec& spec, const std::vector<LegPlan>& legs, const fs::path& out_dir,
                           const std::optional<fs::path>& assets, int max_concurrent) {
    const std::string source = "experiment '" + spec.name + "'";
    check_leg_interpreters(legs);
    engine::Qwen3Config config;
    try {
        config = model_config_of(spec, assets);
    } catch (const Error& err) {
        const std::string what = err.what();
        const std::string named = "experiment field model.";  // base_folder_of names the field already
        throw Error(source + ": " + (what.rfind(named, 0) == 0 ? what.substr(std::string("experiment ").size())
                                                               : "field model." + std::string(spec.model_base.empty() ? "config" : "base") + ": " + what));
    }
    // A given base's safetensors headers are parsed, not only hashed (docs/run-folder.md): a truncated or
    // damaged file is named by its source path here, not by its link in the run folder when a leg loads it.
    if (!spec.model_base.empty()) {
        try {
            engine::read_hf_checkpoint_entries(base_folder_of(spec, assets));
            // and its shapes against its config.json: both legs build the model from the config, so a
            // mismatch would otherwise surface only once the legs load it, inside a run folder.
            engine::check_hf_checkpoint_shapes(base_folder_of(spec, assets));
        } catch (const Error& err) {
            throw Error(source + ": field model.base: " + err.what());
        }
    }
    // The embedding must hold every id the tokenizer emits (docs/experiment-format.md "model"). The
    // tokenizer is loaded from its asset folder, so a missing or damaged file is named by its source path
    // before any run folder exists (its copy in the run folder would be gone with the folder).
    const data::Tokenizer tokenizer = data::Tokenizer::load(tokenizer_dir(require_asset_root(assets)));
    if (config.vocab_size < static_cast<int64_t>(tokenizer.vocab_size()))
        throw Error(source + ": field model.config.vocab_size: " + std::to_string(config.vocab_size) +
                    " is below the tokenizer's " + std::to_string(tokenizer.vocab_size()) + " ids (largest id " +
                    std::to_string(tokenizer.vocab_size() - 1) + "); give at least " +
                    std::to_string(tokenizer.vocab_size()));
    // The shortest possible supervised record (docs/corpus.md): a one-token question and answer. Its prompt
    // must leave room for one supervised token, or no record of any corpus trains anything.
    if (spec.max_len > 0) {
        size_t boundary = 0;
        try {
            boundary = data::tokenize_record(tokenizer, data::TemplateKind::Qwen3,
                                             {{"user", "x", std::nullopt, {}}, {"assistant", "x", std::nullopt, {}}}, 0)
                           .boundary;
        } catch (const std::exception&) {
        }
        if (boundary > 0 && static_cast<size_t>(spec.max_len) <= boundary)
            throw Error(source + ": field sequence.max_len: " + std::to_string(spec.max_len) +
                        " is shorter than the shortest possible supervised record (the chat template's prompt alone takes " +
                        std::to_string(boundary) + " tokens, so no answer token fits); give at least " +
                        std::to_string(boundary + 1));
    }
    ResourceEstimate e = estimate_resources(spec, legs, out_dir, assets, max_concurrent);
    const std::string sizes = "model, lora.rank " + std::to_string(spec.lora_rank) + ", batch.micro_batch " +
                              std::to_string(spec.micro_batch) + ", sequence.max_len " + std::to_string(spec.max_len);
    if (e.memory_available_bytes > 0 && e.host_bytes_all_legs > e.memory_available_bytes)
        throw Error(source + ": the run needs an estimated " + gib(e.host_bytes_all_legs) + " of memory for its legs (" +
                    sizes + "), more than the " + gib(e.memory_available_bytes) + " available; make it smaller");
    if (e.disk_available_bytes >= 0 && e.disk_bytes > e.disk_available_bytes)
        throw Error(source + ": the run folder needs an estimated " + gib(e.disk_bytes) + " of disk (" + sizes +
                    ", checkpoint.interval " + std::to_string(spec.checkpoint_interval) + "), more than the " +
                    gib(e.disk_available_bytes) + " free under " + out_dir.string());
    return e;
}

}  // namespace tandem::experiments
