// A catalog connection that notices its file deleted or replaced (tandem/runner/catalog_continuity.h).
#include "tandem/runner/catalog_continuity.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>

namespace tandem::experiments {

ContinuousCatalog::ContinuousCatalog(const std::filesystem::path& path) : path_(path), catalog_(path) { remember_identity(); }

void ContinuousCatalog::on_recreated(std::function<void(Catalog&)> reregister, std::function<void(const std::string&)> warn) {
    reregister_ = std::move(reregister);
    warn_ = std::move(warn);
}

void ContinuousCatalog::remember_identity() {
    struct stat st {};
    known_ = ::stat(path_.c_str(), &st) == 0;
    dev_ = st.st_dev;
    ino_ = st.st_ino;
}

bool ContinuousCatalog::same_file() const {
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) return false;  // deleted (or its folder)
    return known_ && st.st_dev == dev_ && st.st_ino == ino_;
}

namespace {

// Whether a catalog can be opened at `path` now (what Catalog's constructor refuses, checked before
// the old connection is closed): its folder exists, and the file there, if any, is empty or SQLite.
std::string cannot_open_reason(const std::filesystem::path& path) {
    std::error_code ec;
    const auto parent = path.parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) return "folder " + parent.string() + " does not exist";
    if (!std::filesystem::exists(path, ec)) return "";
    if (!std::filesystem::is_regular_file(path, ec)) return "not a regular file";
    if (std::filesystem::file_size(path, ec) == 0) return "";
    char header[16] = {};
    FILE* f = std::fopen(path.c_str(), "rb");
    const size_t n = f ? std::fread(header, 1, sizeof header, f) : 0;
    if (f) std::fclose(f);
    if (n != sizeof header || std::memcmp(header, "SQLite format 3", 16) != 0) return "not an SQLite database";
    return "";
}

}  // namespace

Catalog& ContinuousCatalog::get() {
    if (same_file()) return catalog_;
    const bool deleted = !std::filesystem::exists(path_);
    const std::string what = path_.string() + (deleted ? " was deleted" : " was replaced by another file") + " while this run ran";
    if (const std::string why = cannot_open_reason(path_); !why.empty()) {
        // Keep writing through the old connection (its file is gone from the path, but run.h5 holds
        // everything) and say so once per reason; a later change of the path is noticed again.
        notice_ = "WARNING: the catalog " + what + " and cannot be re-created (" + why +
                  "); this run is in no catalog at that path — run.h5 holds all of it";
        if (warn_ && why != last_failure_) warn_(notice_);
        last_failure_ = why;
        return catalog_;
    }
    {
        // Close the old connection first: SQLite checkpoints its WAL into the old file and removes the
        // -wal/-shm files, which a new database at the same path must not pick up.
        Catalog old = std::move(catalog_);
    }
    catalog_ = Catalog(path_);  // an I/O failure here is the run's (the runner stops the legs, --resume continues)
    remember_identity();
    last_failure_.clear();
    if (reregister_) reregister_(catalog_);
    notice_ = "WARNING: the catalog " + what + "; tandem re-created it and registered this run again" +
              (deleted ? " (rows of other runs it held are not in the new file)" : " (in the file now at that path)");
    if (warn_) warn_(notice_);
    return catalog_;
}

}  // namespace tandem::experiments
