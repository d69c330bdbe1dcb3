#pragma once
// `tandem envelope` (docs/envelope.md): runs the members of a same-stack seed envelope and stores each
// stack's envelope (the statistics: tandem/compare/judge/envelope.h).
#include "tandem/compare/judge/envelope.h"
#include "tandem/spec/experiment.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// ---- `tandem envelope` ------------------------------------------------------------------------------

struct EnvelopeOptions {
    std::filesystem::path experiment;
    int64_t seeds = 8;                       // N members
    std::string legs = "reference";          // stacks, comma-separated (implementations)
    std::optional<std::vector<std::string>> vary;  // nullopt: default_vary(the experiment)
    std::filesystem::path out_dir = "runs";
    std::filesystem::path catalog = "tandem.db";
    std::optional<std::filesystem::path> assets;
    int cpu_threads = 0;                     // 0: hardware concurrency
    int parallel = 0;                        // member runs at once; 0: threads / legs per member
    std::function<void(const std::string&)> say;
};

struct EnvelopeOutcome {
    std::filesystem::path folder;            // <out>/<name>-envelope-<stamp>
    std::vector<SeedEnvelope> envelopes;     // one per stack
    std::vector<std::string> failed_members; // "<member>: <why>" (the envelope is not built then)
    double wall_s = 0;
};

// What an envelope varies by default (docs/envelope.md "What it varies"): only what the experiment's
// legs do not share. A leg on its own dropout masks: the dropout seed; on its own plan: the plan seed
// too (the adapter is shared — L2 checks it — so it stays). When every leg is paired (shared masks and
// plan) the error-model bound judges them and the envelope only sizes an effect: dropout, plan and
// adapter, the seed noise of a training run. `why` says which, in one line.
struct DefaultVary {
    std::vector<std::string> vary;
    std::string why;
};
DefaultVary default_vary(const ExperimentSpec& spec);

// The member's spec: seeds in `vary` become seed + index (member 0 keeps the experiment's seeds).
ExperimentSpec envelope_member_spec(const ExperimentSpec& spec, const std::vector<std::string>& vary, int64_t index);

// Runs the N members (`tandem run` processes, as many at once as the CPU threads allow), computes each
// stack's envelope, writes <folder>/run.h5 and the catalog. Throws tandem::Error for bad input, and
// when a member does not finish complete (an envelope over missing data is never stored).
EnvelopeOutcome run_envelope(const EnvelopeOptions& options);

}  // namespace tandem::experiments
