// tandem inspect (docs/engine-io.md): parameter counts per group and trainable LoRA counts of a model, from
// config arithmetic (--config NAME) or from a checkpoint folder's config.json and safetensors
// header(s) (--model DIR) — never loading a weight.
#include "commands.h"

#include "tandem/engine/config.h"
#include "tandem/engine/io.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/strict_json.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::cli {
namespace {

namespace eng = tandem::engine;

struct InspectOptions {
    std::string model_dir;
    std::string config_name;
    std::string adapter_dir;
    std::optional<int64_t> lora_rank;
    double lora_alpha = 32.0;
    std::vector<std::string> lora_targets;
    bool no_rslora = false;
    bool json = false;
};

// 596049920 -> "596,049,920"
std::string thousands(int64_t v) {
    std::string digits = std::to_string(v < 0 ? -v : v), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return v < 0 ? "-" + out : out;
}

// Counts from a checkpoint folder's headers: each stored tensor is classified by its HF name, and
// the stored shapes must be the ones the folder's config.json implies.
eng::ParameterCounts counts_from_headers(const std::filesystem::path& dir, const eng::Qwen3Config& c) {
    auto entries = eng::read_hf_checkpoint_entries(dir);
    if (c.tie_word_embeddings) entries.erase("lm_head.weight");  // transformers ties it and ignores the copy
    const auto expected = eng::expected_base_shapes(c);
    eng::ParameterCounts p;
    for (const auto& [name, e] : entries) {
        if (name.ends_with("rotary_emb.inv_freq")) continue;
        const auto it = expected.find(name);
        if (it == expected.end()) throw Error(dir.string() + ": unexpected tensor '" + name + "' for a Qwen3 model");
        if (it->second != e.shape) throw Error(dir.string() + ": tensor '" + name + "' has a shape config.json does not imply");
        const int64_t n = eng::Tensor::count(e.shape);
        if (name == "model.embed_tokens.weight") p.embedding += n;
        else if (name == "lm_head.weight") p.lm_head += n;
        else if (name.find(".self_attn.") != std::string::npos && name.find("_norm.") == std::string::npos) p.attention += n;
        else if (name.find(".mlp.") != std::string::npos) p.mlp += n;
        else p.norms += n;
        p.total += n;
    }
    for (const auto& [name, shape] : expected)
        if (!entries.count(name)) throw Error(dir.string() + ": tensor '" + name + "' is missing");
    return p;
}

void run_inspect(const InspectOptions& o) {
    eng::Qwen3Config c;
    std::string source;
    eng::ParameterCounts p;
    if (!o.model_dir.empty()) {
        c = eng::read_hf_config(o.model_dir);
        p = counts_from_headers(o.model_dir, c);
        source = o.model_dir + " (config.json + safetensors header; no weights loaded)";
    } else {
        c = eng::Qwen3Config::named(o.config_name);
        p = eng::count_parameters(c, nullptr);
        source = o.config_name + " (config arithmetic; no weights loaded)";
    }
    std::optional<eng::LoraConfig> lora;
    if (!o.adapter_dir.empty()) {
        const auto path = std::filesystem::path(o.adapter_dir) / "adapter_config.json";
        lora = eng::LoraConfig::from_peft_json(tandem::parse_json_strict(tandem::read_file(path), path.string()), path.string());
    } else if (o.lora_rank) {
        eng::LoraConfig l;
        l.rank = *o.lora_rank;
        l.alpha = o.lora_alpha;
        l.use_rslora = !o.no_rslora;
        if (!o.lora_targets.empty()) {
            l.targets.clear();
            for (const auto& t : eng::all_lora_targets())
                for (const auto& want : o.lora_targets)
                    if (want == t) l.targets.push_back(t);
            for (const auto& want : o.lora_targets) eng::projection_block(want);  // throws for unknown names
        }
        lora = l;
    }
    if (lora) p.trainable = eng::count_parameters(c, &*lora).trainable;
    const double percent = p.total ? 100.0 * static_cast<double>(p.trainable) / static_cast<double>(p.total) : 0.0;

    if (o.json) {
        nlohmann::json j = {{"source", source}, {"config", c.to_json()},
                            {"parameters", {{"embedding", p.embedding}, {"attention", p.attention}, {"mlp", p.mlp},
                                            {"norms", p.norms}, {"lm_head", p.lm_head}, {"total", p.total}}},
                            {"trainable", p.trainable}, {"trainable_percent", percent}};
        if (lora) j["lora"] = lora->to_peft_json("");
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("model: %s\n", source.c_str());
    std::printf("  %lld layers, hidden %lld, %lld query / %lld key-value heads, head_dim %lld, intermediate %lld, "
                "vocab %s, %s embeddings\n",
                static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
                static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
                static_cast<long long>(c.head_dim), static_cast<long long>(c.intermediate_size),
                thousands(c.vocab_size).c_str(), c.tie_word_embeddings ? "tied" : "untied");
    const auto row = [](const char* name, const std::string& value, const char* note) {
        if (*note) std::printf("  %-10s %15s  %s\n", name, value.c_str(), note);
        else std::printf("  %-10s %15s\n", name, value.c_str());
    };
    row("embedding", thousands(p.embedding), "embed_tokens");
    row("attention", thousands(p.attention), "q/k/v/o projections");
    row("mlp", thousands(p.mlp), "gate/up/down projections");
    row("norms", thousands(p.norms), "input/post-attention RMSNorm, q_norm, k_norm, final norm");
    if (c.tie_word_embeddings) row("lm_head", "tied", "shares the embedding (no parameters of its own)");
    else row("lm_head", thousands(p.lm_head), "");
    row("total", thousands(p.total), "");
    if (lora) {
        std::string targets;
        for (const auto& t : lora->targets) targets += (targets.empty() ? "" : ",") + t;
        std::printf("LoRA: rank %lld, alpha %g, %s scaling %g, dropout %g, targets %s\n",
                    static_cast<long long>(lora->rank), lora->alpha, lora->use_rslora ? "rsLoRA" : "LoRA",
                    lora->scaling(), lora->dropout, targets.c_str());
        std::printf("  %-10s %15s  (%.3f%% of the base model; base frozen)\n", "trainable", thousands(p.trainable).c_str(),
                    percent);
    } else {
        std::printf("  %-10s %15s  (no adapter: pass --lora-rank R or --adapter DIR)\n", "trainable", "0");
    }
}

}  // namespace

void add_inspect_command(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<InspectOptions>();
    auto* inspect = app.add_subcommand(
        "inspect", "Parameter counts per group and trainable LoRA counts, without loading weights");
    auto* model = inspect->add_option("--model", opts->model_dir, "HuggingFace checkpoint folder (config.json + safetensors)")
                      ->check(CLI::ExistingDirectory);
    auto* config = inspect->add_option("--config", opts->config_name, "named architecture: qwen3-0.6b, bench-cpu, tiny");
    model->excludes(config);
    auto* adapter = inspect->add_option("--adapter", opts->adapter_dir, "peft adapter folder (its adapter_config.json)")
                        ->check(CLI::ExistingDirectory);
    auto* rank = inspect->add_option("--lora-rank", opts->lora_rank, "LoRA rank r")->check(CLI::PositiveNumber);
    adapter->excludes(rank);
    inspect->add_option("--lora-alpha", opts->lora_alpha, "LoRA alpha (default 32)")->needs(rank);
    inspect->add_option("--lora-targets", opts->lora_targets, "projections to adapt (default: all seven)")
        ->delimiter(',')
        ->needs(rank);
    inspect->add_flag("--no-rslora", opts->no_rslora, "plain LoRA scaling alpha / r instead of alpha / sqrt(r)")->needs(rank);
    inspect->add_flag("--json", opts->json, "print the counts as JSON");
    inspect->callback([opts, model, config, &exit_code] {
        if (model->count() + config->count() != 1) throw CLI::RequiredError("exactly one of --model or --config");
        run_inspect(*opts);
        exit_code = kOk;
    });
}

}  // namespace tandem::cli
