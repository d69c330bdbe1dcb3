// run_update_flops (tandem/runner/run_flops.h): the FLOPs of each update of a run folder's shared plan.
#include <algorithm>

#include "tandem/data/batch_plan.h"
#include "tandem/data/corpus.h"
#include "tandem/engine/io.h"
#include "tandem/error.h"
#include "tandem/spec/experiment.h"
#include "tandem/spec/model.h"
#include "tandem/compare/flops.h"
#include "tandem/runner/run_flops.h"
#include "tandem/runner/prepare.h"

namespace tandem::experiments {

std::vector<double> run_update_flops(const std::filesystem::path& run_dir, const ExperimentSpec& spec) {
    const engine::Qwen3Config config = engine::read_hf_config(run_dir / "base");
    const engine::LoraConfig lora = lora_config_of(spec);
    const std::vector<data::Record> records = data::read_records(run_dir / "corpus" / "records.jsonl");
    const data::BatchPlan plan = data::read_plan(run_dir / "plan.json");
    const size_t max_len = spec.max_len > 0 ? size_t(spec.max_len) : SIZE_MAX;
    std::vector<double> out;
    for (const auto& update : plan.updates) {
        std::vector<MicroBatchShape> shapes;
        for (const auto& mb : update) {
            MicroBatchShape s;
            s.batch = int64_t(mb.size());
            for (size_t i : mb) {
                if (i >= records.size())
                    throw Error((run_dir / "plan.json").string() + ": record " + std::to_string(i) + " is not in records.jsonl");
                const data::Record& r = records[i];
                const size_t length = std::min(r.length, max_len);
                s.seq = std::max<int64_t>(s.seq, int64_t(length));
                // supervised tokens are labels from the boundary on (never position 0: the prompt is first)
                s.supervised += int64_t(std::min(r.supervised, length > r.boundary ? length - r.boundary : size_t(0)));
            }
            shapes.push_back(s);
        }
        out.push_back(update_flops(config, lora, shapes).total());
    }
    return out;
}

}  // namespace tandem::experiments
