// Files an --out must not replace without --force (tandem/overwrite_guard.h).
#include "tandem/overwrite_guard.h"

#include <cstring>
#include <fstream>

namespace tandem {
namespace fs = std::filesystem;

namespace {

bool starts_with_at(const fs::path& path, std::uintmax_t offset, const char* magic, size_t n) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    in.seekg(static_cast<std::streamoff>(offset));
    char buf[16] = {};
    in.read(buf, static_cast<std::streamsize>(n));
    return in.gcount() == static_cast<std::streamsize>(n) && std::memcmp(buf, magic, n) == 0;
}

bool is_run_folder(const fs::path& dir) {
    std::error_code ec;
    return fs::is_regular_file(dir / "legs.json", ec) && fs::is_regular_file(dir / "experiment.json", ec);
}

}  // namespace

bool is_hdf5_file(const fs::path& path) {
    static const char kMagic[] = "\x89HDF\r\n\x1a\n";
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) return false;
    const std::uintmax_t size = fs::file_size(path, ec);
    if (ec) return false;
    for (std::uintmax_t at = 0; at + 8 <= size; at = at == 0 ? 512 : at * 2)
        if (starts_with_at(path, at, kMagic, 8)) return true;
    return false;
}

bool is_sqlite_file(const fs::path& path) {
    std::error_code ec;
    return fs::is_regular_file(path, ec) && starts_with_at(path, 0, "SQLite format 3", 16);
}

fs::path enclosing_run_folder(const fs::path& path) {
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
    if (ec) p = fs::absolute(path, ec);
    for (; !p.empty(); p = p.parent_path()) {
        if (is_run_folder(p)) return p;
        if (p == p.parent_path()) break;
    }
    return {};
}

std::string protected_file_reason(const fs::path& path) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path, ec)) && !fs::exists(path, ec)) return "";
    if (const fs::path run = enclosing_run_folder(path); !run.empty()) {
        std::error_code e2;
        const fs::path canonical = fs::weakly_canonical(path, e2);
        const std::string rel = fs::relative(canonical, run, e2).string();
        return (rel.empty() || rel == "." ? std::string("the run folder ") + run.string()
                                          : rel + " of the run folder " + run.string());
    }
    if (is_hdf5_file(path)) return "an HDF5 file";
    if (is_sqlite_file(path)) return "an SQLite database (a catalog)";
    return "";
}

}  // namespace tandem
