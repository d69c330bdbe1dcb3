#pragma once
// `tandem localise` (docs/observables.md "Localisation"): the first point where two legs of a run
// diverge, from the fingerprints in its run.h5 (the alignment: tandem/compare/judge/localise.h).
#include "tandem/compare/judge/localise.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

namespace tandem::experiments {

// Reads a run folder's (or run.h5's) fingerprints and localises a pair: the given legs, else the
// first two legs that hold fingerprints (a reference-implementation leg second). Throws naming the
// file when the run holds no fingerprints. With `store`, writes /localisation/<a>~<b> into run.h5.
Localisation localise_run(const std::filesystem::path& run, std::optional<std::pair<std::string, std::string>> legs,
                          std::optional<std::int64_t> update, bool store);

}  // namespace tandem::experiments
