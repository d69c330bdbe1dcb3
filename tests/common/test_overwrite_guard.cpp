// What an --out may not replace without --force (tandem/overwrite_guard.h): a run folder's files,
// HDF5 files (signature at 0 or in a user block at 512, 1024, ...), SQLite databases. The files
// written by real HDF5 and SQLite (h5py, sqlite3) are checked by tests/cli/bad_inputs.py's --out cases.
#include "tandem/overwrite_guard.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <fstream>

namespace fs = std::filesystem;
using namespace tandem;

namespace {
void write(const fs::path& p, const std::string& bytes) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}
const std::string kHdf5("\x89HDF\r\n\x1a\n", 8);
}  // namespace

TEST(OverwriteGuard, ARunFoldersFilesAreProtected) {
    const fs::path d = test::fresh_dir("guard-run");
    const fs::path run = d / "runs" / "r1";
    write(run / "legs.json", "[]");
    write(run / "experiment.json", "{}");
    write(run / "run.h5", kHdf5 + "rest");
    write(run / "legs" / "engine" / "events.jsonl", "{}\n");
    EXPECT_EQ(enclosing_run_folder(run / "legs" / "engine" / "events.jsonl"), fs::weakly_canonical(run));
    EXPECT_EQ(protected_file_reason(run / "run.h5"), "run.h5 of the run folder " + fs::weakly_canonical(run).string());
    EXPECT_EQ(protected_file_reason(run / "legs" / "engine" / "events.jsonl"),
              "legs/engine/events.jsonl of the run folder " + fs::weakly_canonical(run).string());
    EXPECT_EQ(protected_file_reason(run), "the run folder " + fs::weakly_canonical(run).string());
    // Through a relative path with '..' and through a symlink to the file: the same run file.
    fs::create_symlink(run / "run.h5", d / "link.h5");
    EXPECT_NE(protected_file_reason(d / "link.h5"), "");
    EXPECT_EQ(protected_file_reason(d / "runs" / "r1" / "missing.txt"), "");  // not there: may be written
    EXPECT_TRUE(enclosing_run_folder(d / "runs").empty());
    // A folder with only one of the two markers is not a run folder.
    write(d / "half" / "legs.json", "[]");
    write(d / "half" / "notes.txt", "x");
    EXPECT_EQ(protected_file_reason(d / "half" / "notes.txt"), "");
}

TEST(OverwriteGuard, HDF5AndSQLiteFilesAreRecognisedByTheirSignature) {
    const fs::path d = test::fresh_dir("guard-sig");
    write(d / "a.h5", kHdf5 + std::string(100, '\0'));
    write(d / "ub.h5", std::string(512, 'u') + kHdf5 + "x");        // a 512-byte user block
    write(d / "ub2.h5", std::string(2048, 'u') + kHdf5 + "x");       // 2048: allowed too
    write(d / "odd.h5", std::string(700, 'u') + kHdf5 + "x");        // 700: not an offset HDF5 uses
    write(d / "short.h5", kHdf5.substr(0, 7));
    write(d / "c.db", std::string("SQLite format 3\0", 16) + std::string(84, '\0'));
    write(d / "not.db", "SQLite format 2");
    write(d / "report.md", "# report\n");
    EXPECT_TRUE(is_hdf5_file(d / "a.h5"));
    EXPECT_TRUE(is_hdf5_file(d / "ub.h5"));
    EXPECT_TRUE(is_hdf5_file(d / "ub2.h5"));
    EXPECT_FALSE(is_hdf5_file(d / "odd.h5"));
    EXPECT_FALSE(is_hdf5_file(d / "short.h5"));
    EXPECT_TRUE(is_sqlite_file(d / "c.db"));
    EXPECT_FALSE(is_sqlite_file(d / "not.db"));
    EXPECT_EQ(protected_file_reason(d / "a.h5"), "an HDF5 file");
    EXPECT_EQ(protected_file_reason(d / "c.db"), "an SQLite database (a catalog)");
    EXPECT_EQ(protected_file_reason(d / "report.md"), "");  // an earlier report may be replaced
    EXPECT_EQ(protected_file_reason(d / "none"), "");
}
