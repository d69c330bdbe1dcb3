#pragma once
// The engine leg: tandem's own stack (tokenizer, chat template, supervision, batch plan, the C++
// engine's Trainer) run as a leg process that speaks the leg protocol on stdout
// (`tandem leg engine --run DIR --leg NAME --device cpu [--resume] [--threads N] [--faults LIST]`).
#include "tandem/engine/observe.h"
#include "tandem/store/run_file.h"

#include <filesystem>
#include <string>
#include <vector>

namespace tandem::experiments {

struct EngineLegOptions {
    std::filesystem::path run;
    std::string leg = "engine";
    std::string device = "cpu";
    bool resume = false;
    int threads = 0;  // <= 0: the engine's default
    // Faults to inject (docs/faults.md), "name=size,..." as the runner passes them (--faults); "" = none.
    std::string faults;
};

// Runs the leg to the end; returns the process exit status (0 done, 1 error). Every failure is
// reported as an "error" event before returning; nothing is thrown.
int run_engine_leg(const EngineLegOptions& options);

// The engine's recorded points as run.h5 rows (the engine leg's fingerprints event).
std::vector<FingerprintRow> fingerprint_rows(const std::vector<engine::Fingerprint>& points);

}  // namespace tandem::experiments
