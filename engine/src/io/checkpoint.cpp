// Checkpoint folders committed by a manifest written last (checkpoint.h).
#include "tandem/engine/checkpoint.h"

#include "tandem/atomic_file.h"
#include "tandem/engine/safetensors.h"
#include "tandem/error.h"
#include "tandem/sha256.h"
#include "tandem/version.h"

#include <algorithm>
#include <cstdio>
#include <regex>

namespace tandem::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* kAdapterFile = "adapter_model.safetensors";
const char* kAdapterConfigFile = "adapter_config.json";
const char* kOptimizerFile = "optimizer.safetensors";
const char* kStateFile = "state.json";
const char* kManifestFile = "manifest.json";

std::string folder_name(int64_t update) {
    char name[40];
    std::snprintf(name, sizeof name, "ckpt-%06lld", static_cast<long long>(update));
    return name;
}

const std::string& spec_of(const json& state, const std::string& where) {
    const auto it = state.find("spec_sha256");
    if (it == state.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
        throw Error(where + ": state must hold a non-empty string \"spec_sha256\"");
    return it->get_ref<const std::string&>();
}

}  // namespace

fs::path write_checkpoint(const fs::path& leg_dir, const Checkpoint& ck) {
    if (ck.update < 0) throw Error(leg_dir.string() + ": checkpoint update must be non-negative");
    const std::string name = folder_name(ck.update);
    const std::string spec = spec_of(ck.state, (leg_dir / name).string());
    const fs::path final_dir = leg_dir / name;
    const fs::path tmp = leg_dir / (name + ".tmp");
    std::error_code ec;
    fs::create_directories(leg_dir, ec);
    if (ec) throw Error(leg_dir.string() + ": cannot create the leg folder: " + ec.message());
    fs::remove_all(tmp, ec);  // an earlier attempt that never committed
    if (ec) throw Error(tmp.string() + ": cannot remove a stale temporary folder: " + ec.message());
    fs::create_directory(tmp, ec);
    if (ec) throw Error(tmp.string() + ": cannot create: " + ec.message());

    std::vector<std::string> files;
    write_safetensors(tmp / kAdapterFile, ck.adapter, {{"format", "pt"}});
    files.push_back(kAdapterFile);
    if (ck.adapter_config) {
        write_file_atomic(tmp / kAdapterConfigFile, ck.adapter_config->dump(2) + "\n");
        files.push_back(kAdapterConfigFile);
    }
    write_safetensors(tmp / kOptimizerFile, ck.optimizer);
    files.push_back(kOptimizerFile);
    write_file_atomic(tmp / kStateFile, ck.state.dump(2) + "\n");
    files.push_back(kStateFile);

    json listed = json::object();
    for (const auto& f : files) listed[f] = {{"size", fs::file_size(tmp / f)}, {"sha256", sha256_file_hex(tmp / f)}};
    const json manifest = {{"format", kCheckpointFormat},
                           {"update", ck.update},
                           {"spec_sha256", spec},
                           {"files", listed},
                           {"tandem_version", TANDEM_VERSION}};
    write_file_atomic(tmp / kManifestFile, manifest.dump(1) + "\n");  // the commit record: last
    fsync_directory(tmp);

    // Replacing a same-numbered checkpoint: move the old one aside first so a crash leaves either
    // the old one (as .old, ignored) plus older ones, or the new one.
    const fs::path old = leg_dir / (name + ".old");
    if (fs::exists(final_dir)) {
        fs::remove_all(old, ec);
        rename_durably(final_dir, old);
    }
    rename_durably(tmp, final_dir);
    fs::remove_all(old, ec);
    return final_dir;
}

fs::path write_checkpoint(const fs::path& leg_dir, int64_t update, const TensorMap& tensors, const json& state) {
    Checkpoint ck;
    ck.update = update;
    ck.state = state;
    for (const auto& [n, t] : tensors) (n.starts_with("base_model.model.") ? ck.adapter : ck.optimizer).emplace(n, t);
    return write_checkpoint(leg_dir, ck);
}

std::string verify_checkpoint(const fs::path& dir, json* manifest_out) {
    const fs::path mp = dir / kManifestFile;
    std::error_code ec;
    if (!fs::exists(mp, ec)) return "no manifest.json (never committed)";
    json m;
    try {
        m = json::parse(read_file(mp));
    } catch (const std::exception& e) {
        return std::string("manifest.json unreadable: ") + e.what();
    }
    if (!m.is_object()) return "manifest.json is not an object";
    if (m.value("format", -1) != kCheckpointFormat)
        return "manifest format " + (m.contains("format") ? m["format"].dump() : std::string("missing")) + ", expected " +
               std::to_string(kCheckpointFormat);
    if (!m.contains("update") || !m["update"].is_number_integer()) return "manifest has no integer 'update'";
    if (folder_name(m["update"].get<int64_t>()) != dir.filename().string())
        return "manifest update " + m["update"].dump() + " does not match the folder name";
    if (!m.contains("spec_sha256") || !m["spec_sha256"].is_string()) return "manifest has no spec_sha256";
    if (!m.contains("files") || !m["files"].is_object() || m["files"].empty()) return "manifest lists no files";
    for (const auto& [name, meta] : m["files"].items()) {
        if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
            return "manifest lists an invalid file name '" + name + "'";
        if (!meta.is_object() || !meta.contains("size") || !meta["size"].is_number_unsigned() || !meta.contains("sha256") ||
            !meta["sha256"].is_string())
            return "manifest entry of " + name + " lacks size or sha256";
        const fs::path f = dir / name;
        if (!fs::is_regular_file(f, ec)) return "file " + name + " missing";
        const auto size = fs::file_size(f, ec);
        if (ec || size != meta["size"].get<uint64_t>())
            return "file " + name + " has " + std::to_string(size) + " bytes, manifest says " + meta["size"].dump();
        if (sha256_file_hex(f) != meta["sha256"].get<std::string>()) return "file " + name + " fails its SHA-256";
    }
    for (const char* required : {kAdapterFile, kOptimizerFile, kStateFile})
        if (!m["files"].contains(required)) return std::string("manifest does not list ") + required;
    if (manifest_out) *manifest_out = std::move(m);
    return "";
}

std::vector<fs::path> list_checkpoints(const fs::path& leg_dir) {
    std::vector<fs::path> found;
    std::error_code ec;
    if (!fs::is_directory(leg_dir, ec)) return found;
    static const std::regex pattern("^ckpt-[0-9]{6,}$");
    for (const auto& e : fs::directory_iterator(leg_dir, ec))
        if (e.is_directory() && std::regex_match(e.path().filename().string(), pattern)) found.push_back(e.path());
    // Newest first: by update number (names may grow past six digits).
    std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) {
        const auto na = a.filename().string().substr(5), nb = b.filename().string().substr(5);
        return na.size() != nb.size() ? na.size() > nb.size() : na > nb;
    });
    return found;
}

std::optional<LoadedCheckpoint> find_latest_checkpoint(const fs::path& leg_dir, const std::string& expected_spec_sha256,
                                                       std::vector<std::string>* skipped) {
    std::vector<std::string> local;
    auto& why_skipped = skipped ? *skipped : local;
    for (const auto& dir : list_checkpoints(leg_dir)) {
        LoadedCheckpoint out;
        std::string why = verify_checkpoint(dir, &out.manifest);
        if (why.empty()) {
            if (out.manifest["spec_sha256"] != expected_spec_sha256)
                throw Error(dir.string() + ": checkpoint was written for experiment spec " +
                            out.manifest["spec_sha256"].get<std::string>() + ", not " + expected_spec_sha256 +
                            "; refusing to resume a different experiment");
            try {
                Checkpoint& ck = out.checkpoint;
                ck.update = out.manifest["update"].get<int64_t>();
                ck.adapter = read_safetensors(dir / kAdapterFile);
                ck.optimizer = read_safetensors(dir / kOptimizerFile);
                ck.state = json::parse(read_file(dir / kStateFile));
                if (out.manifest["files"].contains(kAdapterConfigFile))
                    ck.adapter_config = json::parse(read_file(dir / kAdapterConfigFile));
                if (!ck.state.is_object() || ck.state.value("spec_sha256", std::string()) != expected_spec_sha256)
                    throw Error("state.json's spec_sha256 differs from the manifest's");
            } catch (const std::exception& e) {
                why = std::string("unreadable despite a verified manifest: ") + e.what();
            }
            if (why.empty()) {
                out.dir = dir;
                out.skipped = why_skipped;
                return out;
            }
        }
        why_skipped.push_back(dir.string() + ": " + why);
    }
    return std::nullopt;
}

LoadedCheckpoint load_latest_checkpoint(const fs::path& leg_dir, const std::string& expected_spec_sha256) {
    std::vector<std::string> skipped;
    auto found = find_latest_checkpoint(leg_dir, expected_spec_sha256, &skipped);
    if (found) return std::move(*found);
    std::string msg = leg_dir.string() + ": no checkpoint to resume from";
    if (skipped.empty()) msg += " (no ckpt-<update> folder)";
    for (const auto& s : skipped) msg += "; skipped " + s;
    throw Error(msg);
}

}  // namespace tandem::engine
