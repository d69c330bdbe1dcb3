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
