#pragma once
// tests/store: a store file of the wrong kind (text where a catalog or a run file belongs) is refused
// with a one-line error that names it and says what it is not, and its bytes stay as they were
// (test_catalog.cpp, test_run_file.cpp).
#include <gtest/gtest.h>

#include "tandem/atomic_file.h"
#include "test_support.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace tandem::test {

// Writes `text` to `file`, calls open(file), which must throw; checks the message (names the file,
// says `what`, one line) and that the file still holds `text`.
inline void expect_text_file_refused(const std::filesystem::path& file, const std::string& text, const std::string& what,
                                     const std::function<void(const std::filesystem::path&)>& open) {
    { std::ofstream(file) << text; }
    const std::string message = error_of([&] { open(file); });
    EXPECT_NE(message.find(file.string()), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message is not one line: " << message;
    EXPECT_EQ(tandem::read_file(file), text) << "the refused file changed";
}

}  // namespace tandem::test
