#include "file_util.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tandem::engine::detail {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path.string() + ": cannot open for reading: " + errno_text());
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const std::string why = errno_text();
        ::close(fd);
        throw Error(path.string() + ": cannot stat: " + why);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(path.string() + ": not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ > 0) {
        // MAP_POPULATE: every reader of a mapping reads all of it, so map the pages in one go
        // rather than through one page fault per 4 KiB.
        void* p = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED) {
            const std::string why = errno_text();
            ::close(fd);
            throw Error(path.string() + ": cannot map: " + why);
        }
        data_ = static_cast<const char*>(p);
        mapped_ = true;
    } else {
        static const char empty = 0;
        data_ = &empty;
    }
    ::close(fd);  // the mapping stays valid
}

MappedFile::~MappedFile() {
    if (mapped_) ::munmap(const_cast<char*>(data_), static_cast<size_t>(size_));
}

AtomicStreamWriter::AtomicStreamWriter(const std::filesystem::path& path) : path_(path) {
    tmp_ = path;
    tmp_ += ".tmp." + std::to_string(::getpid());
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(path.string() + ": cannot create " + tmp_.filename().string() + ": " + errno_text());
}

AtomicStreamWriter::~AtomicStreamWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) {
        std::error_code ec;
        std::filesystem::remove(tmp_, ec);
    }
}

void AtomicStreamWriter::write(const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t n = ::write(fd_, p, bytes);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(path_.string() + ": write failed: " + errno_text());
        }
        p += n;
        bytes -= static_cast<size_t>(n);
    }
}

void AtomicStreamWriter::commit() {
    if (::fsync(fd_) != 0) throw Error(path_.string() + ": fsync failed: " + errno_text());
    if (::close(fd_) != 0) {
        fd_ = -1;
        throw Error(path_.string() + ": close failed: " + errno_text());
    }
    fd_ = -1;
    rename_durably(tmp_, path_);
    committed_ = true;
}

}  // namespace tandem::engine::detail
