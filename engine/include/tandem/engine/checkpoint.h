#pragma once
// Resumable checkpoints of a leg: legs/<leg>/ckpt-<update:06d>/ (docs/engine-io.md, "Checkpoints").
//
//   adapter_model.safetensors   the LoRA factors, peft names (F32)
//   adapter_config.json         peft's config, when given (the folder then loads with PeftModel)
//   optimizer.safetensors       optimizer tensors (e.g. "exp_avg.<peft name>", "exp_avg_sq.<peft name>")
//   state.json                  step, RNG state, data cursor, spec_sha256, build/version, device, ...
//   manifest.json               WRITTEN LAST: {"format": 1, "update": N, "spec_sha256": "...",
//                               "files": {name: {"size": bytes, "sha256": hex}}, "tandem_version": "..."}
//
// Writing: everything goes into ckpt-<update>.tmp/ (each file fsynced), manifest.json last, then the
// folder is renamed to ckpt-<update>/ and the leg folder fsynced. A crash at any point leaves either
// no ckpt-<update>/ or a complete one. The manifest format is the one the Python reference leg
// (sdk/python/tandem_leg/checkpoint.py) writes, so both legs' checkpoints verify the same way.
//
// Loading: the newest ckpt-<N>/ whose manifest parses and whose every listed file has its size and
// SHA-256 is used; older ones are tried when a newer one does not verify, and each skipped folder
// is reported with its reason. A verified checkpoint written for another experiment spec is refused
// (an error, never a fallback): it means the leg folder belongs to another experiment.
#include "tandem/engine/tensor.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::engine {

inline constexpr int kCheckpointFormat = 1;

struct Checkpoint {
    int64_t update = 0;                           // optimizer updates done when it was written
    TensorMap adapter;                            // peft names
    TensorMap optimizer;                          // any names
    nlohmann::json state = nlohmann::json::object();  // must hold "spec_sha256" (string)
    std::optional<nlohmann::json> adapter_config;     // peft adapter_config.json, written when set
};

// Writes leg_dir/ckpt-<update:06d>/ as described above and returns its path. An existing folder of
// the same update (a checkpoint being rewritten after a resume) is replaced only once the new one is
// complete. Throws tandem::Error on I/O failure (the .tmp folder is then left for the next write
// to clear; loading ignores it).
std::filesystem::path write_checkpoint(const std::filesystem::path& leg_dir, const Checkpoint& checkpoint);

// The form of the brief: `tensors` holds the adapter (names starting "base_model.model.") and the
// optimizer tensors (all other names); `state` must hold "spec_sha256".
std::filesystem::path write_checkpoint(const std::filesystem::path& leg_dir, int64_t update, const TensorMap& tensors,
                                       const nlohmann::json& state);

struct LoadedCheckpoint {
    std::filesystem::path dir;
    Checkpoint checkpoint;
    nlohmann::json manifest;
    std::vector<std::string> skipped;  // "<folder>: <why>" for every newer folder that did not verify
};

// Why a checkpoint folder cannot be used ("" when its manifest verifies). Does not look at the spec.
std::string verify_checkpoint(const std::filesystem::path& dir, nlohmann::json* manifest_out = nullptr);

// Every ckpt-<6 digits>/ folder of leg_dir, newest first (committed or not verified yet).
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& leg_dir);

// The newest verifying checkpoint, or nullopt when none verifies (skipped reasons in *skipped).
// Throws when the newest verifying one was written for a different spec than expected_spec_sha256.
std::optional<LoadedCheckpoint> find_latest_checkpoint(const std::filesystem::path& leg_dir,
                                                       const std::string& expected_spec_sha256,
                                                       std::vector<std::string>* skipped = nullptr);

// Same, but throws a tandem::Error naming leg_dir (and every skipped folder with its reason) when no
// checkpoint verifies: asked to resume, we never restart from scratch silently.
LoadedCheckpoint load_latest_checkpoint(const std::filesystem::path& leg_dir, const std::string& expected_spec_sha256);

}  // namespace tandem::engine
