#pragma once
// The runner's catalog connection, kept continuous (docs/catalog.md "Continuity"). SQLite writes
// through its open file: a catalog deleted (or replaced by another file) while a run runs would
// take the run's rows with it, unnoticed. So before every write the file at the catalog's path is
// checked to be the one opened (device and inode); when it is not, the catalog is opened anew at
// that path (created when absent), the run's rows are written again by the re-register callback,
// and a loud warning says so — once on the spot and again as the run's final line (notice()).
#include "tandem/store/catalog.h"

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>

namespace tandem::experiments {

class ContinuousCatalog {
public:
    explicit ContinuousCatalog(const std::filesystem::path& path);  // opens it (tandem::Error when it cannot)

    // What writes the run's rows into a re-created catalog, and where the warning goes.
    void on_recreated(std::function<void(Catalog&)> reregister, std::function<void(const std::string&)> warn);
    // The connection, checked first: re-opened (and the run re-registered) when the file at the
    // path is no longer the one opened. Never throws for that check: a catalog that cannot be
    // re-created is warned about and the old connection kept (run.h5 holds everything).
    Catalog& get();
    // "" unless the catalog was re-created (or could not be): the warning for the run's last line.
    const std::string& notice() const { return notice_; }

private:
    bool same_file() const;
    void remember_identity();

    std::filesystem::path path_;
    Catalog catalog_;
    dev_t dev_ = 0;
    ino_t ino_ = 0;
    bool known_ = false;
    std::function<void(Catalog&)> reregister_;
    std::function<void(const std::string&)> warn_;
    std::string notice_, last_failure_;
};

}  // namespace tandem::experiments
