#pragma once
// Private file helpers of tandem_engine_io: a read-only memory map (so a multi-GB checkpoint is read
// without a second copy and never out of bounds), and a streaming atomic writer for large files
// (same method as tandem::write_file_atomic, which needs the whole file in one buffer).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace tandem::engine::detail {

class MappedFile {
public:
    explicit MappedFile(const std::filesystem::path& path);  // throws tandem::Error naming the file
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const char* data() const { return data_; }
    uint64_t size() const { return size_; }
    std::string_view view() const { return {data_, static_cast<size_t>(size_)}; }

private:
    const char* data_ = nullptr;
    uint64_t size_ = 0;
    bool mapped_ = false;
};

// Writes <path>.tmp.<pid> in the target's folder; commit() fsyncs it, renames it over `path` and
// fsyncs the folder. Destroyed without commit() (an exception), the temporary is removed.
class AtomicStreamWriter {
public:
    explicit AtomicStreamWriter(const std::filesystem::path& path);
    ~AtomicStreamWriter();
    AtomicStreamWriter(const AtomicStreamWriter&) = delete;
    AtomicStreamWriter& operator=(const AtomicStreamWriter&) = delete;

    void write(const void* data, size_t bytes);
    void commit();

private:
    std::filesystem::path path_;
    std::filesystem::path tmp_;
    int fd_ = -1;
    bool committed_ = false;
};

}  // namespace tandem::engine::detail
