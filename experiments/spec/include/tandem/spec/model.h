#pragma once
// The model and the adapter an experiment names (docs/experiment-format.md "model", "lora"): the base
// checkpoint folder, the Qwen3 configuration (named, inline or the checkpoint's) and the LoRA
// configuration. The runner prepares the run folder from them, the engine leg builds its model from
// them and the error model reads the depth from them.
#include "tandem/engine/config.h"
#include "tandem/spec/experiment.h"

#include <filesystem>
#include <optional>

namespace tandem::experiments {

// The checkpoint folder model.base names: a path, or "assets:NAME" looked up like the tokenizer
// (--assets, TANDEM_ASSETS, ../shared; tandem/assets.h). Empty when the base is generated. Throws
// tandem::Error naming model.base and every folder tried.
std::filesystem::path base_folder_of(const ExperimentSpec& spec,
                                     const std::optional<std::filesystem::path>& assets = std::nullopt);
// The model and adapter configuration an experiment asks for (named, inline or a checkpoint's).
engine::Qwen3Config model_config_of(const ExperimentSpec& spec,
                                    const std::optional<std::filesystem::path>& assets = std::nullopt);
engine::LoraConfig lora_config_of(const ExperimentSpec& spec);

}  // namespace tandem::experiments
