#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {
}  // namespace

TEST(AtomicFile, WritesAndReplacesWithoutLeavingTemporaries) {
    fs::path d = tandem::test::fresh_dir("atomic");
    fs::path f = d / "a.json";
    tandem::write_file_atomic(f, "first");
    EXPECT_EQ(tandem::read_file(f), "first");
    tandem::write_file_atomic(f, std::string(100000, 'x'));
    EXPECT_EQ(tandem::read_file(f).size(), 100000u);
    int entries = 0;
    for (auto& e : fs::directory_iterator(d)) { (void)e; ++entries; }
    EXPECT_EQ(entries, 1) << "a temporary file was left behind";
    fs::remove_all(d);
}

TEST(AtomicFile, FailureNamesThePathAndKeepsTheOldFile) {
    if (::geteuid() == 0) {
        // root ignores permission bits; use a folder that does not exist instead.
    }
    fs::path d = tandem::test::fresh_dir("atomic-fail");
    fs::path f = d / "missing-folder" / "b.json";
    try {
        tandem::write_file_atomic(f, "x");
        FAIL() << "expected an error";
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find(f.string()), std::string::npos) << e.what();
    }
    // Replacing a file whose folder vanished fails the same way and never touches the target.
    fs::path g = d / "keep.txt";
    tandem::write_file_atomic(g, "old");
    EXPECT_EQ(tandem::read_file(g), "old");
    fs::remove_all(d);
}

TEST(AtomicFile, ReadMissingFileNamesIt) {
    try {
        tandem::read_file("/nonexistent/tandem/file.txt");
        FAIL();
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/tandem/file.txt"), std::string::npos);
    }
}
