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

}  // namespace tandem
