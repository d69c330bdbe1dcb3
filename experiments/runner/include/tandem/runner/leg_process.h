#pragma once
// A leg as a child process of the runner: started with its stdout and stderr on pipes, in its own
// process group, killed by the kernel when the runner dies (PR_SET_PDEATHSIG), read line by line
// without blocking, and reaped. POSIX only; nothing here knows the leg protocol.
#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::experiments {

struct ChildProcess {
    pid_t pid = -1;
    int out_fd = -1;  // the child's stdout (non-blocking read end), -1 once at end of file
    int err_fd = -1;  // the child's stderr
    std::string out_buf, err_buf;  // bytes of an unfinished line
};

// Starts argv[0] with `argv`, the given extra environment (NAME=VALUE) and its own process group.
// The child gets SIGKILL when the runner's thread that started it dies; a child whose parent died
// before that was armed exits at once. Throws tandem::Error when pipes or fork fail.
ChildProcess spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env);

// Reads what is available on `fd` and calls on_line for each complete line (without '\n'); at end of
// file the unfinished rest, if any, is passed as a last line. Returns false at end of file.
bool read_lines(int fd, std::string& buf, const std::function<void(std::string_view)>& on_line);
// Appends `chunk` to `buf`, calls on_line for each complete line and keeps the unfinished rest in buf
// (read_lines' and the Slurm executor's file follower's step).
void append_lines(std::string& buf, std::string_view chunk, const std::function<void(std::string_view)>& on_line);

// Waits for the child (its pipes should be at end of file); returns its exit code, or 128 + signal.
// `signal_out` receives the terminating signal (0 when it exited).
int wait_for_exit(pid_t pid, int* signal_out);

// Sends `sig` to the child's whole process group.
void signal_group(pid_t pid, int sig);

// A process recorded by an earlier runner (pid and its start time in clock ticks since boot, from
// /proc/<pid>/stat), so a later runner can tell whether that very process still runs.
struct ProcessIdentity {
    pid_t pid = -1;
    unsigned long long start_ticks = 0;
};
ProcessIdentity identify_process(pid_t pid);  // start_ticks 0 when the process does not exist
bool still_running(const ProcessIdentity& p);

// What /proc/<pid>/stat says of a process now (the leg watchdog names a stopped leg as such):
// its state letter — R running, S sleeping, D waiting on I/O, T stopped (SIGSTOP, job control),
// t stopped by a debugger, Z exited — and the CPU time it used (user + system). state 0: gone.
struct ProcessState {
    char state = 0;
    double cpu_s = 0;
};
ProcessState process_state(pid_t pid);
// "stopped (T state: SIGSTOP or job control; SIGCONT continues it)", "sleeping (S state)", ...
std::string process_state_text(char state);

// While it lives, SIGINT and SIGTERM call `handler` (the runner's and the envelope's interrupt flag);
// the handlers from before come back when it goes.
class StopSignalHandlers {
public:
    explicit StopSignalHandlers(void (*handler)(int));
    ~StopSignalHandlers();
    StopSignalHandlers(const StopSignalHandlers&) = delete;
    StopSignalHandlers& operator=(const StopSignalHandlers&) = delete;

private:
    struct sigaction old_int_ {}, old_term_ {};
};

// An exclusive advisory lock on a file (created when absent), held until release or process exit.
class FileLock {
public:
    FileLock() = default;
    ~FileLock();
    FileLock(FileLock&& other) noexcept;
    FileLock& operator=(FileLock&& other) noexcept;
    // Takes the lock or returns false at once when another process holds it.
    bool try_lock(const std::filesystem::path& path);
    // Replaces the lock file's text (who holds it, for readers' messages); the lock stays held.
    void note(const std::string& text);
    void release();

private:
    int fd_ = -1;
};

}  // namespace tandem::experiments
