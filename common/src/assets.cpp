#include "tandem/assets.h"

#include "tandem/error.h"
#include "tandem/sha256.h"
#include "tandem/version.h"

#include <cstdlib>

namespace tandem {

std::vector<AssetRoot> asset_root_candidates(const std::optional<std::filesystem::path>& flag) {
    std::vector<AssetRoot> out;
    if (flag) out.push_back({*flag, "--assets"});
    if (const char* env = std::getenv("TANDEM_ASSETS"); env && *env) out.push_back({env, "TANDEM_ASSETS"});
    out.push_back({std::filesystem::path(TANDEM_SOURCE_DIR).parent_path() / "shared",
                   "../shared next to the checkout"});
    std::error_code ec;
    auto cwd = std::filesystem::current_path(ec);
    if (!ec) out.push_back({cwd.parent_path() / "shared", "../shared next to the current folder"});
    out.push_back({std::filesystem::path(TANDEM_INSTALL_DATADIR) / "shared", "installed package"});
    return out;
}

std::filesystem::path tokenizer_dir(const AssetRoot& root) { return root.root / "assets" / "qwen3-tokenizer"; }
std::filesystem::path corpora_dir(const AssetRoot& root) { return root.root / "data" / "corpora"; }

std::optional<AssetRoot> find_asset_root(const std::optional<std::filesystem::path>& flag) {
    for (const auto& c : asset_root_candidates(flag)) {
        std::error_code ec;
        if (std::filesystem::exists(tokenizer_dir(c) / "tokenizer.json", ec)) return c;
        // An explicitly named folder that is wrong is an error, not a reason to look elsewhere.
        if (c.found_via == "--assets" || c.found_via == "TANDEM_ASSETS")
            throw Error("assets folder " + c.root.string() + " (from " + c.found_via +
                        ") has no assets/qwen3-tokenizer/tokenizer.json");
    }
    return std::nullopt;
}

AssetRoot require_asset_root(const std::optional<std::filesystem::path>& flag) {
    if (auto r = find_asset_root(flag)) return *r;
    std::string looked;
    for (const auto& c : asset_root_candidates(flag)) looked += " " + c.root.string();
    throw Error("cannot find the shared assets (tokenizer and corpora); looked in:" + looked +
                "; pass --assets DIR or set TANDEM_ASSETS");
}

std::vector<std::string> tokenizer_differences(const std::filesystem::path& dir, std::map<std::string, std::string>* digests) {
    std::vector<std::string> out;
    for (const auto& known : kQwen3TokenizerDigests) {
        const std::filesystem::path file = dir / known.file;
        std::error_code ec;
        if (!std::filesystem::is_regular_file(file, ec)) {
            out.push_back(std::string(known.file) + ": missing (the shipped Qwen3 tokenizer has it)");
            continue;
        }
        const std::string sha = sha256_file_hex(file);
        if (digests) (*digests)[known.file] = sha;
        if (sha != known.sha256)
            out.push_back(std::string(known.file) + ": sha256 " + sha.substr(0, 12) + "... is not the shipped Qwen3 tokenizer's " +
                          std::string(known.sha256).substr(0, 12) + "...");
    }
    return out;
}

std::map<std::string, std::string> folder_digests(const std::filesystem::path& dir) {
    std::map<std::string, std::string> out;
    std::error_code ec;
    std::filesystem::recursive_directory_iterator it(dir, std::filesystem::directory_options::follow_directory_symlink, ec);
    if (ec) throw Error("cannot list " + dir.string() + ": " + ec.message());
    for (; it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) throw Error("cannot list " + dir.string() + ": " + ec.message());
        if (!it->is_regular_file(ec)) continue;
        out[std::filesystem::relative(it->path(), dir).generic_string()] = sha256_file_hex(it->path());
    }
    if (ec) throw Error("cannot list " + dir.string() + ": " + ec.message());
    return out;
}

bool is_asset_reference(const std::string& text) { return text.rfind(kAssetPrefix, 0) == 0; }

std::string asset_reference_problem(const std::string& text) {
    if (!is_asset_reference(text)) return "does not start with 'assets:'";
    const std::string name = text.substr(std::string(kAssetPrefix).size());
    if (name.empty()) return "names no asset after 'assets:'";
    // The name becomes one path component: no separators, no '..', no hidden folders.
    if (name.front() == '.' ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != std::string::npos)
        return "asset name '" + name + "' must use only letters, digits, '-', '_', '.' and not start with '.'";
    return "";
}

std::filesystem::path resolve_asset_reference(const std::string& reference,
                                              const std::optional<std::filesystem::path>& flag,
                                              const std::string& required_file) {
    if (auto problem = asset_reference_problem(reference); !problem.empty())
        throw Error(reference + ": " + problem);
    const std::string name = reference.substr(std::string(kAssetPrefix).size());
    std::string tried;
    for (const auto& c : asset_root_candidates(flag)) {
        const auto dir = c.root / "assets" / name;
        std::error_code ec;
        if (std::filesystem::is_regular_file(dir / required_file, ec)) return dir;
        const std::string where = dir.string() + " (" + c.found_via + ")";
        if (tried.find(dir.string() + " (") == std::string::npos) tried += (tried.empty() ? "" : ", ") + where;
        if (c.found_via == "--assets" || c.found_via == "TANDEM_ASSETS") break;
    }
    throw Error(reference + ": no shipped asset '" + name + "' (a folder holding " + required_file + "); tried " + tried +
                "; pass --assets DIR or set TANDEM_ASSETS to the folder that holds assets/" + name + "/");
}

}  // namespace tandem
