#pragma once
// Preparing a run folder (docs/run-folder.md): every shared artifact is written ONCE by the runner,
// and every leg reads these files and nothing else.
//   experiment.json (resolved spec + sha256), tokenizer/ (copy of the tokenizer folder),
//   corpus/ (records, accounting, split, selection, eval prefix), plan.json, base/, init/.
#include "tandem/engine/config.h"
#include "tandem/spec/experiment.h"

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::experiments {

struct PrepareOptions {
    std::optional<std::filesystem::path> assets;  // --assets (tokenizer and corpora); default lookup otherwise
    std::function<void(const std::string&)> log;  // one line per step (may be empty)
};

struct PreparedRun {
    std::filesystem::path folder;
    std::string run_id;          // the folder's name
    int64_t total_updates = 0;   // updates in plan.json
    int64_t train_records = 0, heldout_records = 0, eval_examples = 0;
    nlohmann::json summary;      // what was prepared, also written to prepare.json
    // The sha256 of every asset the run read (also assets.json in the run folder):
    // {"tokenizer": {file: sha}, "corpora": {relative path: sha}, "tokenizer_is_shipped_qwen3": bool}.
    nlohmann::json assets = nlohmann::json::object();
    // Loud warnings about the inputs (a tokenizer that is not the shipped Qwen3 one), one line each;
    // printed during preparation, kept in prepare.json, and recorded in run.h5 (/experiment
    // attribute `input_warnings`) by the runner.
    std::vector<std::string> warnings;

    // /experiment attributes for run.h5: tokenizer_sha256, tokenizer_is_shipped_qwen3 (0/1),
    // input_warnings ("; "-joined, "" when none), assets_json (the `assets` object as JSON text),
    // prepared_sha256_json (prepare.json's "prepared_sha256", when recorded).
    std::map<std::string, std::variant<int64_t, double, std::string>> run_attributes() const;
};

// SHA-256 of the prepared artifacts the legs read and a resume checks (prepare.json
// "prepared_sha256"): plan.json and every file under corpus/ and init/, by path relative to `folder`.
nlohmann::json prepared_files_sha256(const std::filesystem::path& folder);

// Writes every shared artifact into `folder` (created). Throws tandem::Error naming the step.
PreparedRun prepare_run(const ExperimentSpec& spec, const std::filesystem::path& folder, const PrepareOptions& opt);

// {"<file>": "<sha256 hex>"} for every file of a base folder (links followed), by name: what
// prepare.json's "base_sha256" and run.h5's /experiment attribute base_sha256 hold.
nlohmann::json base_files_sha256(const std::filesystem::path& base_dir);

// Reads back what prepare_run wrote (for --resume and the report).
PreparedRun read_prepared_run(const std::filesystem::path& folder);

}  // namespace tandem::experiments
