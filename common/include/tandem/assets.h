#pragma once
// Where the shared assets (the Qwen3 tokenizer, the source corpora) are found.
//
// Search order (first that exists wins):
//   1. an explicit folder given on the command line (--assets DIR),
//   2. the environment variable TANDEM_ASSETS,
//   3. ../shared next to the source checkout (compiled in) and next to the current directory,
//   4. <prefix>/share/tandem/shared of an installed package.
// The folder is laid out like ../shared: assets/qwen3-tokenizer/ and data/corpora/.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

struct AssetRoot {
    std::filesystem::path root;  // the folder holding assets/ and data/
    std::string found_via;       // "--assets", "TANDEM_ASSETS", "../shared next to the checkout", ...
};

// Every candidate in search order, with how it was derived (for `tandem doctor`).
std::vector<AssetRoot> asset_root_candidates(const std::optional<std::filesystem::path>& flag);

// The first candidate that has a tokenizer folder; nullopt when none has.
std::optional<AssetRoot> find_asset_root(const std::optional<std::filesystem::path>& flag = std::nullopt);

std::filesystem::path tokenizer_dir(const AssetRoot& root);  // root/assets/qwen3-tokenizer
std::filesystem::path corpora_dir(const AssetRoot& root);    // root/data/corpora

// Same as find_asset_root but throws tandem::Error listing every place looked at.
AssetRoot require_asset_root(const std::optional<std::filesystem::path>& flag = std::nullopt);

// ---- the shipped Qwen3 tokenizer's digests ---------------------------------------------------
// L3 compares tandem's tokenizer with HuggingFace's over the SAME file, so a tokenizer.json with two
// vocabulary ids swapped (or another model's tokenizer) passes every check. The one detection is
// the file's digest against the shipped one: a run records the digest of every asset and warns
// loudly (stderr, prepare.json, run.h5 /experiment attributes) when the tokenizer differs, and
// `tandem doctor` says so.
struct KnownDigest {
    const char* file;    // name inside the tokenizer folder
    const char* sha256;  // of ../shared/assets/qwen3-tokenizer/<file>
};
inline constexpr KnownDigest kQwen3TokenizerDigests[] = {
    {"tokenizer.json", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"},
    {"tokenizer_config.json", "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"},
};

// Hashes tokenizer.json and tokenizer_config.json of `dir` into `digests` (file -> sha256; a
// missing file is left out) and returns one line per file that differs from the shipped Qwen3
// tokenizer ("tokenizer.json: sha256 1f2e... is not the shipped Qwen3 tokenizer's aeb1..."); empty
// when both match.
std::vector<std::string> tokenizer_differences(const std::filesystem::path& dir,
                                               std::map<std::string, std::string>* digests = nullptr);

// Every regular file below `dir` (recursively, symlinks followed) -> its sha256, keyed by the path
// relative to `dir` with '/' separators. Throws tandem::Error naming a file that cannot be read.
std::map<std::string, std::string> folder_digests(const std::filesystem::path& dir);

// Named assets: an experiment names a shipped folder as "assets:<name>" (e.g. the pretrained base
// "assets:qwen3-tiny-clinical" = <root>/assets/qwen3-tiny-clinical/).
inline constexpr const char* kAssetPrefix = "assets:";
bool is_asset_reference(const std::string& text);  // starts with "assets:"
// "" when `text` is a well-formed reference ("assets:" + letters, digits, '-', '_', '.', not
// starting with '.'), else why it is not.
std::string asset_reference_problem(const std::string& text);
// The folder a reference names: the first candidate root (same order as above) whose
// assets/<name>/ holds `required_file`. A root named by --assets or TANDEM_ASSETS that lacks it is
// an error, not a reason to look further (as for the tokenizer). Throws tandem::Error on one line
// naming the reference and every folder tried.
std::filesystem::path resolve_asset_reference(const std::string& reference,
                                              const std::optional<std::filesystem::path>& flag,
                                              const std::string& required_file);

}  // namespace tandem
