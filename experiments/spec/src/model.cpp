// The model and the adapter an experiment names (tandem/spec/model.h).
#include "tandem/spec/model.h"

#include "tandem/assets.h"
#include "tandem/engine/io.h"
#include "tandem/error.h"

#include <nlohmann/json.hpp>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

fs::path base_folder_of(const ExperimentSpec& spec, const std::optional<fs::path>& assets) {
    if (spec.model_base.empty()) return {};
    if (!is_asset_reference(spec.model_base)) {
        const fs::path dir = fs::absolute(spec.model_base);
        std::error_code ec;
        if (!fs::is_regular_file(dir / "config.json", ec))
            throw Error("experiment field model.base: " + dir.string() +
                        " is not a checkpoint folder (no config.json); name a folder or a shipped base (assets:NAME)");
        return dir;
    }
    try {
        return resolve_asset_reference(spec.model_base, assets, "config.json");
    } catch (const Error& e) {
        throw Error(std::string("experiment field model.base: ") + e.what());
    }
}

engine::Qwen3Config model_config_of(const ExperimentSpec& spec, const std::optional<fs::path>& assets) {
    if (!spec.model_base.empty()) return engine::read_hf_config(base_folder_of(spec, assets));
    if (spec.model_config == "inline") {
        // Inline fields override the Qwen3-0.6B architecture's config.json (docs/spec.md §Recipe).
        json full = engine::Qwen3Config::named("qwen3-0.6b").to_json();
        for (auto it = spec.model_inline.begin(); it != spec.model_inline.end(); ++it) full[it.key()] = it.value();
        return engine::Qwen3Config::from_json(full, "experiment field model.config");
    }
    return engine::Qwen3Config::named(spec.model_config);
}

engine::LoraConfig lora_config_of(const ExperimentSpec& spec) {
    engine::LoraConfig l;
    l.rank = spec.lora_rank;
    l.alpha = spec.lora_alpha;
    l.use_rslora = spec.lora_use_rslora;
    l.dropout = spec.lora_dropout;
    l.targets = spec.lora_targets;
    return l;
}

}  // namespace tandem::experiments
