#pragma once
// Small helpers shared by the GoogleTest suites (tests/ is on every suite's include path).
#include <filesystem>
#include <functional>
#include <string>
#include <unistd.h>

#include "tandem/error.h"

namespace tandem::test {

// An empty folder of this process under the temporary directory: /tmp/tandem-test-<name>-<pid>.
inline std::filesystem::path fresh_dir(const std::string& name) {
    const std::filesystem::path d =
        std::filesystem::temp_directory_path() / ("tandem-test-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
}

// The message of the tandem::Error that f throws, or "<no error>" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const tandem::Error& e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace tandem::test
