#pragma once
// The one atomic-write helper: every small file tandem writes (configs, manifests, adapters,
// plans, reports) goes through here. A reader sees either the old file or the complete new one.
//
// Method: write <name>.tmp.<pid> in the same folder, fsync it, rename() over the target, fsync the
// folder so the rename itself is durable. On any failure the temporary is removed and the
// existing target is untouched.
#include <filesystem>
#include <string_view>

namespace tandem {

// Writes `bytes` to `path` atomically. Throws tandem::Error naming `path` on failure.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Reads a whole file. Throws tandem::Error naming `path` on failure.
std::string read_file(const std::filesystem::path& path);

// fsync a folder (after renaming a file or a sub-folder into it).
void fsync_directory(const std::filesystem::path& dir);

// Renames `from` to `to` (files or folders, same filesystem) and fsyncs the parent folder.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace tandem
