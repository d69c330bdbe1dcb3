// Fuzz target: experiment files (parse_experiment_text = strict JSON + field validation), and the
// inline model config they may carry (Qwen3Config::from_json over the 0.6B defaults, as the runner
// resolves it). Properties: only tandem::Error escapes (anything else reaches the CLI as "internal
// error"); a spec that parses resolves to JSON that parses again to the same spec (same sha256).
#include "tandem/engine/config.h"
#include "tandem/error.h"
#include "tandem/spec/experiment.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace tandem;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    experiments::ExperimentSpec spec;
    try {
        spec = experiments::parse_experiment_text(text, "fuzz.json");
    } catch (const Error&) {
        return 0;
    }
    // Round trip: the resolved spec is itself a valid experiment with the same hash.
    const nlohmann::json resolved = spec.to_json();
    experiments::ExperimentSpec again;
    try {
        again = experiments::parse_experiment(resolved, "resolved");
    } catch (const Error& e) {
        std::fprintf(stderr, "resolved spec does not parse: %s\n", e.what());
        std::abort();
    }
    if (again.sha256() != spec.sha256()) {
        std::fprintf(stderr, "resolved spec parses to another spec\n");
        std::abort();
    }
    if (spec.model_config == "inline") {
        nlohmann::json full = engine::Qwen3Config::named("qwen3-0.6b").to_json();
        for (auto it = spec.model_inline.begin(); it != spec.model_inline.end(); ++it) full[it.key()] = it.value();
        try {
            engine::Qwen3Config c = engine::Qwen3Config::from_json(full, "model.config");
            (void)engine::Qwen3Config::from_json(c.to_json(), "round trip");
        } catch (const Error&) {
        }
    }
    return 0;
}
