#pragma once
// What an output option (`--out`) may not replace without `--force` (docs/cli.md "Outputs never
// replace a run"): a file of a run folder (run.h5, events, checkpoints: anything below a folder
// holding legs.json and experiment.json), an HDF5 file, an SQLite database (a catalog). A report
// written over run.h5 destroys the run; these are never what a user means to overwrite.
#include <filesystem>
#include <string>

namespace tandem {

// The run folder holding `path` (the folder itself or one of its ancestors), or an empty path.
std::filesystem::path enclosing_run_folder(const std::filesystem::path& path);

// Why an existing `path` must not be overwritten ("run.h5 of the run folder /r", "an HDF5 file",
// "an SQLite database (a catalog)"), or "" when it does not exist or may be replaced.
std::string protected_file_reason(const std::filesystem::path& path);

// What the file at `path` starts with: true for the HDF5 signature (at byte 0, or at 512, 1024,
// ... where HDF5 allows a user block) and for SQLite's header.
bool is_hdf5_file(const std::filesystem::path& path);
bool is_sqlite_file(const std::filesystem::path& path);

}  // namespace tandem
