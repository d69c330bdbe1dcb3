#include "tandem/atomic_file.h"

#include "tandem/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace tandem {
namespace {

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, std::string_view bytes, const std::filesystem::path& shown) {
    const char* p = bytes.data();
    size_t left = bytes.size();
    while (left > 0) {
        ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error("cannot write " + shown.string() + ": " + errno_text());
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
}

}  // namespace

void fsync_directory(const std::filesystem::path& dir) {
    int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw Error("cannot open folder " + dir.string() + " to sync it: " + errno_text());
    int rc = ::fsync(fd);
    int saved = errno;
    ::close(fd);
    if (rc != 0) throw Error("cannot sync folder " + dir.string() + ": " + std::strerror(saved));
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
    const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
    const std::filesystem::path tmp =
        dir / (path.filename().string() + ".tmp." + std::to_string(::getpid()));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("cannot write " + path.string() + ": " + errno_text());
    try {
        write_all(fd, bytes, path);
        if (::fsync(fd) != 0) throw Error("cannot sync " + path.string() + ": " + errno_text());
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    if (::close(fd) != 0) {
        ::unlink(tmp.c_str());
        throw Error("cannot close " + path.string() + ": " + errno_text());
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        std::string why = errno_text();
        ::unlink(tmp.c_str());
        throw Error("cannot write " + path.string() + ": " + why);
    }
    fsync_directory(dir);
}

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot open " + path.string() + ": " + errno_text());
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw Error("cannot read " + path.string());
    return std::move(ss).str();
}

void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to) {
    if (::rename(from.c_str(), to.c_str()) != 0)
        throw Error("cannot rename " + from.string() + " to " + to.string() + ": " + errno_text());
    fsync_directory(to.has_parent_path() ? to.parent_path() : ".");
}

}  // namespace tandem
