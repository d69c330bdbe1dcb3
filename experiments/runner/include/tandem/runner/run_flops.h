#pragma once
// The FLOPs of a run folder's updates through the one formula (tandem/compare/flops.h).
#include <filesystem>
#include <vector>

namespace tandem::experiments {

struct ExperimentSpec;
// The FLOPs of every update of a run folder's shared plan (plan.json over corpus/records.jsonl's
// token lengths and supervised counts, base/config.json, the spec's LoRA): what every leg that
// follows the shared plan is credited with. Throws tandem::Error naming a file it cannot read.
std::vector<double> run_update_flops(const std::filesystem::path& run_dir, const ExperimentSpec& spec);

}  // namespace tandem::experiments
