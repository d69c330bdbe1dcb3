// Functions that the parsers' source files reference from code paths the fuzz targets never take
// (compare.cpp judges pairs against seed envelopes, distance.cpp loads a model config for the error
// model). Their real definitions live in files that pull in the whole runner (processes, catalog,
// preparation), which this sanitizer build leaves out. Each stand-in aborts: a target that ever
// reached one would be reported by libFuzzer as a crash (a find), never pass silently.
#include "tandem/engine/io.h"
#include "tandem/compare/judge/envelope.h"
#include "tandem/spec/model.h"

#include <cstdio>
#include <cstdlib>

namespace {
[[noreturn]] void unreached(const char* what) {
    std::fprintf(stderr, "fuzz: %s reached: not part of the fuzz build (fuzz/unreached.cpp)\n", what);
    std::abort();
}
}  // namespace

namespace tandem::engine {
Qwen3Config read_hf_config(const std::filesystem::path&) { unreached("read_hf_config"); }
}  // namespace tandem::engine

namespace tandem::experiments {
engine::Qwen3Config model_config_of(const ExperimentSpec&, const std::optional<std::filesystem::path>&) {
    unreached("model_config_of");
}
const EnvelopePoint* SeedEnvelope::at(const std::string&, int64_t) const { unreached("SeedEnvelope::at"); }
double mean_heldout_after_start(const std::vector<EvalRow>&) { unreached("mean_heldout_after_start"); }
const SeedEnvelope* pick_envelope(const std::vector<SeedEnvelope>&, const std::string&) { unreached("pick_envelope"); }
std::vector<SeedEnvelope> read_envelopes(const RunFileReader&) { unreached("read_envelopes"); }
}  // namespace tandem::experiments
