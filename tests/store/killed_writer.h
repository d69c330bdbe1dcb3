#pragma once
// tests/store: a writer child (storage_tool) that prints a running count after every commit is
// SIGKILLed after `lines_before_kill` counts and a further `sleep_us`; what survives is then checked
// against the last count it reported (test_run_file.cpp, test_catalog.cpp).
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace tandem::test {

struct KilledWriter {
    long long reported = 0;  // the last count the writer printed (its committed rows)
    int seen = 0;            // counts read before the kill
    int status = 0;          // waitpid status
};

// Runs `storage_tool args...`, reads `lines_before_kill` counts from its stdout, sleeps `sleep_us`,
// kills it and reads what it printed meanwhile. Fails the test (ASSERT) when it cannot start the tool.
inline void run_and_kill(const std::vector<std::string>& args, int lines_before_kill, long sleep_us, KilledWriter& k) {
    const std::string tool = std::string(TANDEM_TEST_BINARY_DIR) + "/tests/store/storage_tool";
    ASSERT_TRUE(std::filesystem::exists(tool)) << tool;
    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<char*> argv{const_cast<char*>(tool.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, tool.c_str(), &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    FILE* progress = fdopen(out[0], "r");
    while (k.seen < lines_before_kill && std::fscanf(progress, "%lld", &k.reported) == 1) ++k.seen;
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &k.status, 0);
    // Counts printed after our last read were committed too.
    long long more = 0;
    while (std::fscanf(progress, "%lld", &more) == 1) k.reported = more;
    std::fclose(progress);
}

}  // namespace tandem::test
