#pragma once
// Experiment files (docs/experiment-format.md): JSON, validated with errors that name the file and
// the field ("experiments/x.json: field lora.rank: must be a positive integer"), resolved (every
// default filled in) into the spec every leg reads from the run folder's experiment.json.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/data/batch_plan.h"
#include "tandem/spec/faults.h"
#include "tandem/spec/gate_config.h"

namespace tandem::experiments {

// How a leg is submitted when `tandem run --executor slurm` runs it (docs/cluster.md): the experiment's
// legs.<name>.slurm. Empty fields are not passed (the cluster's defaults apply).
struct SlurmOptions {
    std::string partition;            // sbatch --partition
    std::string gres;                 // sbatch --gres, e.g. gpu:1
    std::string time;                 // sbatch --time, e.g. 02:00:00
    std::string account;              // sbatch --account
    std::vector<std::string> extra;   // further sbatch arguments, verbatim (e.g. --qos=short)
    std::vector<std::string> setup;   // shell lines run in the job before the leg (e.g. module load cuda)
    bool empty() const;
    nlohmann::json to_json() const;   // only the fields that are set
    // Reads `j` (an object); errors name `source` and `field` (e.g. legs.reference.slurm).
    static SlurmOptions from_json(const nlohmann::json& j, const std::string& source, const std::string& field);
};

// The resolved spec is one attribute of the run file's /experiment group (docs/hdf5-layout.md), whose
// size HDF5 limits (64 KiB object header messages); parse_experiment refuses a larger spec.
inline constexpr size_t kMaxSpecJsonBytes = 60000;

struct ExperimentSpec {
    std::string name;
    std::string description;
    uint64_t seed = 1234;

    // What each seed decides (docs/experiment-format.md "seeds"): the held-out split, the generated
    // base weights, the initial adapter, the shared batch plan (and a leg's native plan), and the
    // dropout masks / a leg's native RNG. Each defaults to `seed`; `tandem envelope` varies some of
    // them while the experiment stays the same. Written into the resolved spec only when one differs
    // from `seed`, so specs (and their hashes) without a `seeds` object stay the same.
    struct Seeds {
        uint64_t split = 1234, base = 1234, adapter = 1234, plan = 1234, dropout = 1234;
        bool operator==(const Seeds&) const = default;
    };
    Seeds seeds;
    // The names of the seeds, in the spec's order: split, base, adapter, plan, dropout.
    static const std::vector<std::string>& seed_names();
    uint64_t& seed_of(const std::string& name);  // throws tandem::Error for an unknown name
    uint64_t seed_of(const std::string& name) const;
    bool seeds_differ() const;  // some seed differs from `seed`

    // model: exactly one of config_name / inline config / base_path.
    std::string model_config;            // a Qwen3Config::named name ("tiny", "qwen3-0.6b") or "inline"
    nlohmann::json model_inline;         // inline config.json fields when model_config == "inline"
    std::string model_base;              // an HF checkpoint folder (or "assets:NAME", a shipped one) instead of generating one

    int64_t lora_rank = 16;
    double lora_alpha = 32.0;
    bool lora_use_rslora = true;
    double lora_dropout = 0.05;
    std::vector<std::string> lora_targets;

    double lr = 1e-4;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
    double warmup_fraction = 0.03;
    double clip = 1.0;

    int64_t micro_batch = 2;
    int64_t accumulation = 8;
    int64_t epochs = 1;
    int64_t max_updates = 0;             // 0: all updates of `epochs` epochs
    int64_t max_len = 512;

    std::vector<std::string> sources;    // pubmedqa, medmcqa, medqa (in this order when present)
    double heldout_fraction = 0.15;
    int64_t max_records_per_source = 0;  // 0: no limit (first N converted records of each source)

    int64_t eval_interval = 250;
    int64_t eval_prefix = 512;
    int64_t checkpoint_interval = 0;     // 0: no checkpoints

    std::string dropout_masks = "shared";  // native | shared
    std::string plan = "shared";           // shared | native
    std::string template_name = "qwen3";   // qwen3 | chatml
    int64_t l3_records = 64;

    // Per-leg overrides of dropout_masks / plan / template: overrides[leg][field] = value.
    std::map<std::string, std::map<std::string, std::string>> overrides;

    // Faults injected into every engine leg (docs/faults.md; `faults`, absent = none) — unless the leg's
    // definition has its own `faults` list, which replaces this one for that leg ([] = a clean leg).
    std::vector<FaultSwitch> faults;

    // Legs the experiment defines (docs/legs.md), in name order: a name, what runs it, and for a
    // `command` leg its argument list with {run}, {leg}, {device}, {threads}, {resume} placeholders.
    struct LegDefinition {
        std::string name;
        std::string implementation;        // a leg kind (tandem/spec/leg_kinds.h): engine, reference, ...
        std::vector<std::string> command;  // command legs only
        // Python legs (LegKind::takes_python): the interpreter or environment folder it runs in, as
        // written (tandem/spec/leg_kinds.h python_of_environment resolves it); "" = the reference environment.
        std::string python;
        std::string device;                // "" = from --devices
        std::optional<std::vector<FaultSwitch>> faults;  // engine legs only; replaces the spec's `faults`
        // Data-parallel ranks of a reference leg, one per entry ("cpu", "cpu" or "cuda:0", "cuda:1"):
        // torch.distributed, one micro-batch per rank, gradients all-reduced. Empty: one process.
        std::vector<std::string> devices;
        SlurmOptions slurm;                // sbatch options when the run uses the Slurm executor
    };
    std::vector<LegDefinition> legs;

    // The live trajectory gate's settings (docs/gate.md): experiment field `gate`.
    GateConfig gate;

    // Fingerprints (docs/observables.md): experiment field `observe: {updates: [...], every: N}`. The
    // legs record per-layer, per-op fingerprints for the updates listed and every N-th update
    // (0, N, 2N, ...); absent (the default): none.
    std::vector<int64_t> observe_updates;  // sorted, unique
    int64_t observe_every = 0;             // 0: only the listed updates
    bool observes(int64_t update) const;   // whether the legs fingerprint this 0-based update
    bool observes_any() const { return !observe_updates.empty() || observe_every > 0; }
    const LegDefinition* leg_definition(const std::string& name) const;  // nullptr when not defined

    // The setting a leg uses: its override when there is one, else the spec's.
    std::string leg_setting(const std::string& leg, const std::string& field) const;
    // The faults an engine leg of this name runs with: its definition's list when it has one, else
    // `faults` (docs/faults.md). Legs of other implementations run no faults.
    std::vector<FaultSwitch> leg_fault_switches(const std::string& leg) const;
    // What the fault catalogue's applicability checks read (fault_not_applicable).
    FaultSettings fault_settings() const;

    // The resolved spec as JSON (every field present); this is experiment.json's "spec".
    nlohmann::json to_json() const;
    // SHA-256 of to_json().dump() (keys sorted, no spaces): docs/run-folder.md.
    std::string sha256() const;
    // The experiment without its seeds and without what does not change the distribution of the
    // numbers: SHA-256 of the resolved spec's model, lora, optimizer, schedule, clip, batch, sequence,
    // corpus, eval, plan, template and overrides (less their dropout_masks). Runs of one experiment with
    // other seeds, another name, gate, legs section or mask generator share it; it keys the seed
    // envelope (docs/envelope.md "Reuse: the key").
    std::string sha256_without_seeds() const;
};

// Parses and validates; `source` (the file name) starts every error message.
ExperimentSpec parse_experiment(const nlohmann::json& j, const std::string& source);
// The text of an experiment file, parsed strictly (tandem/strict_json.h: a duplicated key or a
// number beyond the double range is an error naming the field), then parse_experiment.
ExperimentSpec parse_experiment_text(std::string_view text, const std::string& source);
ExperimentSpec load_experiment(const std::filesystem::path& path);
// Reads a run folder's experiment.json (the resolved spec) and checks its hash.
ExperimentSpec load_run_spec(const std::filesystem::path& run_dir);

// The batch-plan options of the experiment's recipe (seeds.plan, micro-batch, accumulation, max_len,
// epochs): the shared plan (runner/prepare) and the engine leg's native plan use the same ones.
data::PlanOptions batch_plan_options(const ExperimentSpec& spec);

}  // namespace tandem::experiments
