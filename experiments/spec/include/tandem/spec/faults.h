#pragma once
// The fault catalogue (docs/faults.md): every named fault tandem can inject into an engine
// leg — a one-line description, the level expected to catch it, and its size where it has one — and
// how a list of switches becomes the engine's FaultConfig (tandem/engine/faults.h) and the engine
// leg's data-path faults (DataFaults, applied by encode_record in the leg's data path).
//
// Faults are set only through an experiment file (`faults`: every engine leg; `legs.<name>.faults`:
// one leg) or `tandem faults`. The runner hands an engine leg its faults on its command line
// (`--faults name=size,...`), records them in legs.json, run.h5 (/legs/<leg> attribute `faults`) and
// the catalog (legs.faults, runs.faults), and every view of a run with a fault leads with
// fault_banner(): "FAULT INJECTED: ...".
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tandem/data/supervision.h"
#include "tandem/engine/faults.h"

namespace tandem::experiments {

// A fault's size: what it is measured in, the value `tandem faults` injects, and the range the size
// search (binary search, docs/faults.md) explores between `smallest` and `default_value`.
struct FaultSize {
    std::string unit;      // "tokens", "x the config's eps", ...
    double default_value = 0;
    double smallest = 0;   // the search's lower end (the fault's weakest form)
    bool integer = false;  // sizes are whole numbers
    bool log_scale = false;  // the search halves the ratio (geometric midpoints), not the difference
};

struct LegFaults;

// The experiment's settings a fault's applicability reads (ExperimentSpec::fault_settings()): the
// catalogue judges these, not the whole experiment, so it needs nothing above it.
struct FaultSettings {
    std::vector<std::string> lora_targets;
    bool lora_use_rslora = true;
    int64_t lora_rank = 16;
    double lora_dropout = 0;
    int64_t accumulation = 1;
    double clip = 0;
    std::string template_name;
};

struct FaultInfo {
    std::string name;         // "rope-theta": lower case, digits, '-'
    std::string category;     // data/template, loading/config, adapter, loss/optimizer, training loop, runtime
    std::string description;  // one line
    std::vector<std::string> expected;  // the levels expected to catch it on clinical-tiny: L1 L2 L3 L4 gate
    std::optional<FaultSize> size;
    std::string paper;        // the paper's Table 8 row it re-injects, "" when none
    // Sets the fault's switch in the engine's FaultConfig or the data path's DataFaults (`size`: the
    // switch's size, the default filled in; 0 for a fault without one). A new fault is one catalogue
    // entry with its setter, plus the switch it sets (docs/architecture.md "Add a fault").
    void (*set)(LegFaults& faults, double size) = nullptr;
    // Why the fault cannot apply to an experiment ("" when it can): a fault whose switch would change
    // nothing, or that the engine refuses, for this experiment's settings (docs/faults.md "Not
    // applicable"). nullptr: it always applies.
    std::string (*not_applicable)(const FaultSettings& settings) = nullptr;
    // A test fault (test_faults()): a numerical perturbation the tests inject to check that the bounds
    // and the gate catch it. Hidden from the docs, `tandem faults --list` and the fault matrix; the
    // engine leg applies it after each update (no setter), from the switch's from_update on.
    bool test_only = false;
};

// The fault's not_applicable reason for an experiment's `settings` ("" = it applies). `tandem faults` checks it before any
// leg starts: such a fault is a `not applicable` row, not a leg.
std::string fault_not_applicable(const FaultInfo& fault, const FaultSettings& settings);

// Every documented fault, in catalogue order (the order of docs/faults.md and of `tandem faults`).
const std::vector<FaultInfo>& fault_catalogue();
// The test faults (FaultInfo::test_only): test-lr-scale, test-adapter-noise, test-bf16-adapter,
// test-warmup-shift, test-residual-noise (docs/thresholds.md "Injected faults").
const std::vector<FaultInfo>& test_faults();
// The named fault, documented or test; throws tandem::Error listing the documented names.
const FaultInfo& fault_info(const std::string& name);

// One switch: a fault and its size (nullopt for a fault without one). A test fault may start at a
// later update (`from_update`, "name=size@K"); every other fault acts from update 0.
struct FaultSwitch {
    std::string name;
    std::optional<double> size;
    int64_t from_update = 0;
    bool operator==(const FaultSwitch&) const = default;
};

// "name", "name=size" or, for a test fault from a later update, "name=size@K" (sizes printed with up
// to 6 significant digits).
std::string fault_text(const FaultSwitch& f);
// "rope-theta=100, qk-norm-skipped" ("" for none).
std::string faults_text(const std::vector<FaultSwitch>& faults);
// Parses "name" / "name=size" / "name=size@K" (what fault_text writes and `--faults` takes), checking the name and the
// size (a size for a fault without one, a size outside the fault's range, or a non-number are errors
// naming `what`). The default size is filled in when absent.
FaultSwitch parse_fault_switch(const std::string& text, const std::string& what);
// A comma-separated list of them ("" = none); a fault named twice is an error.
std::vector<FaultSwitch> parse_fault_list(const std::string& text, const std::string& what);
// The experiment file's form: a list of "name" / "name=size" strings or {"name": ..., "size": ...,
// "from_update": ...} objects; errors name `what` ("experiments/x.json: field faults").
std::vector<FaultSwitch> faults_from_json(const nlohmann::json& j, const std::string& what);
nlohmann::json faults_to_json(const std::vector<FaultSwitch>& faults);  // resolved: {"name", "size"?, "from_update"?} objects

// The data/template faults, applied by the engine leg's data path (encode_record).
struct DataFaults {
    bool chatml = false;               // ChatML instead of the model's template
    int64_t boundary_shift = 0;        // < 0: supervision starts this many tokens early; > 0: late
    bool im_end_unsupervised = false;  // the closing <|im_end|> is not a label
    bool truncate_left = false;        // keep the LAST max_len tokens instead of the first
    bool think_dropped = false;        // the empty <think></think> block is left out of the rendering
    bool operator==(const DataFaults&) const = default;
    bool any() const { return *this != DataFaults{}; }
};

// A test fault as the engine leg applies it (apply_test_faults): its name, its size (the default
// filled in; 0 without one) and the first update it acts on.
struct TestFault {
    std::string name;
    double size = 0;
    int64_t from_update = 0;
    bool operator==(const TestFault&) const = default;
};

struct LegFaults {
    engine::FaultConfig engine;
    DataFaults data;
    std::vector<TestFault> test;  // in the order given
    bool any() const { return engine.any() || data.any() || !test.empty(); }
};
// The switches as the engine's FaultConfig and the data path's DataFaults (sizes filled in).
LegFaults leg_faults(const std::vector<FaultSwitch>& faults);

// The engine leg's data path for one record: render (with `kind`, ChatML under DataFaults::chatml,
// without the empty think block under think_dropped), tokenize, mark supervision (shifted, without
// <|im_end|>), truncate (from the right, or the left). With no data fault it is exactly
// data::tokenize_record (tested).
data::TokenizedRecord encode_record(const data::Tokenizer& tokenizer, data::TemplateKind kind,
                                    const std::vector<data::Message>& messages, size_t max_len,
                                    const DataFaults& faults);

// "FAULT INJECTED: engine-rope: rope-theta=100; engine-b: qk-norm-skipped" for the legs with faults
// (leg, its faults text); "" when none has any. Every view of a run leads with it.
std::string fault_banner(const std::vector<std::pair<std::string, std::string>>& leg_faults);

}  // namespace tandem::experiments
