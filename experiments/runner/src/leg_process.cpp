// Legs as child processes: fork/exec with pipes, PR_SET_PDEATHSIG, non-blocking line reads, reaping.
#include "tandem/runner/leg_process.h"

#include "tandem/error.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace tandem::experiments {

ChildProcess spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    if (argv.empty()) throw Error("cannot start a leg: empty command");
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0) throw Error(std::string("cannot start a leg: pipe: ") + std::strerror(errno));
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
        const int e = errno;
        close(out_pipe[0]);
        close(out_pipe[1]);
        throw Error(std::string("cannot start a leg: pipe: ") + std::strerror(e));
    }
    // Everything the child needs is built before fork: after it only async-signal-safe calls.
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> envs = env;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
        const int e = errno;
        for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
        throw Error(std::string("cannot start a leg: fork: ") + std::strerror(e));
    }
    if (pid == 0) {
        setpgid(0, 0);  // its own process group: Ctrl-C reaches the runner, which stops the legs cleanly
        // The leg must not outlive the runner (docs/run-folder.md "Interruptions"): the kernel kills it
        // when the runner dies; if the runner died before this was armed, stop now.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(128 + SIGKILL);
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        for (auto& e : envs) putenv(e.data());
        signal(SIGPIPE, SIG_DFL);
        execvp(cargv[0], cargv.data());
        const char* what = std::strerror(errno);
        dprintf(2, "cannot execute %s: %s\n", cargv[0], what);
        _exit(127);
    }
    setpgid(pid, pid);
    close(out_pipe[1]);
    close(err_pipe[1]);
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    ChildProcess c;
    c.pid = pid;
    c.out_fd = out_pipe[0];
    c.err_fd = err_pipe[0];
    return c;
}

void append_lines(std::string& buf, std::string_view chunk, const std::function<void(std::string_view)>& on_line) {
    buf.append(chunk);
    size_t start = 0, pos;
    while ((pos = buf.find('\n', start)) != std::string::npos) {
        on_line(std::string_view(buf).substr(start, pos - start));
        start = pos + 1;
    }
    buf.erase(0, start);
}

bool read_lines(int fd, std::string& buf, const std::function<void(std::string_view)>& on_line) {
    char chunk[65536];
    for (;;) {
        const ssize_t n = read(fd, chunk, sizeof chunk);
        if (n > 0) {
            append_lines(buf, std::string_view(chunk, static_cast<size_t>(n)), on_line);
            continue;
        }
        if (n == 0) {
            if (!buf.empty()) on_line(buf);
            buf.clear();
            return false;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        if (errno == EINTR) continue;
        return false;
    }
}

int wait_for_exit(pid_t pid, int* signal_out) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            if (signal_out) *signal_out = 0;
            return -1;
        }
    }
    if (WIFEXITED(st)) {
        if (signal_out) *signal_out = 0;
        return WEXITSTATUS(st);
    }
    const int sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    if (signal_out) *signal_out = sig;
    return 128 + sig;
}

void signal_group(pid_t pid, int sig) {
    if (pid > 0) kill(-pid, sig);
}

ProcessIdentity identify_process(pid_t pid) {
    ProcessIdentity p;
    p.pid = pid;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Field 2 (comm) may hold spaces and parentheses: the fields after it start after the last ')'.
    const auto close = text.rfind(')');
    if (close == std::string::npos) return p;
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    for (int i = 3; i <= 22 && rest >> field; ++i)
        if (i == 22) p.start_ticks = std::strtoull(field.c_str(), nullptr, 10);
    return p;
}

ProcessState process_state(pid_t pid) {
    ProcessState st;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');  // as identify_process: comm may hold spaces
    if (close == std::string::npos || close + 2 >= text.size()) return st;
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    unsigned long long ticks = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 3) st.state = field.empty() ? 0 : field[0];
        if (i == 14 || i == 15) ticks += std::strtoull(field.c_str(), nullptr, 10);  // utime, stime
    }
    const long hz = sysconf(_SC_CLK_TCK);
    st.cpu_s = static_cast<double>(ticks) / static_cast<double>(hz > 0 ? hz : 100);
    return st;
}

std::string process_state_text(char state) {
    switch (state) {
        case 'R': return "running (R state)";
        case 'S': return "sleeping (S state)";
        case 'D': return "waiting on I/O (D state)";
        case 'T': return "stopped (T state: SIGSTOP or job control; SIGCONT continues it)";
        case 't': return "stopped by a debugger (t state)";
        case 'Z': return "exited, not yet reaped (Z state)";
        case 0: return "gone";
        default: return std::string("in state ") + state;
    }
}

bool still_running(const ProcessIdentity& p) {
    if (p.pid <= 0 || p.start_ticks == 0) return false;
    return identify_process(p.pid).start_ticks == p.start_ticks;
}

StopSignalHandlers::StopSignalHandlers(void (*handler)(int)) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
}

StopSignalHandlers::~StopSignalHandlers() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
}

FileLock::~FileLock() { release(); }
FileLock::FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
FileLock& FileLock::operator=(FileLock&& other) noexcept {
    if (this != &other) {
        release();
        fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
}

bool FileLock::try_lock(const std::filesystem::path& path) {
    release();
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(path.string() + ": cannot create lock file (" + std::strerror(errno) + ")");
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return false;
    }
    fd_ = fd;
    return true;
}

void FileLock::note(const std::string& text) {
    // Written in place (not write_file_atomic): a rename would leave the lock on the old file.
    if (fd_ < 0) return;
    if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, text.data(), text.size(), 0);
}

void FileLock::release() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
}

}  // namespace tandem::experiments
