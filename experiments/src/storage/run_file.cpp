// The HDF5 run file: writer and reader. Layout: docs/hdf5-layout.md.
#include "tandem/experiments/run_file.h"

#include "hdf5_util.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/version.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

namespace tandem::experiments {

using h5::Handle;

namespace {

constexpr const char* kFormatName = "tandem-run";
constexpr std::int64_t kFormatVersion = 1;
constexpr hsize_t kStepChunkRows = 1024;
constexpr hsize_t kEvalChunkRows = 64;

// --- compound types ----------------------------------------------------------------------------
// Memory types use native types at the struct's offsets; file types are packed little-endian.

Handle step_type(bool file) {
    const hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
    const hid_t f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
    Handle type(H5Tcreate(H5T_COMPOUND, file ? 48 : sizeof(StepRow)), H5Tclose);
    H5Tinsert(type, "update", file ? 0 : offsetof(StepRow, update), i64);
    H5Tinsert(type, "loss", file ? 8 : offsetof(StepRow, loss), f64);
    H5Tinsert(type, "grad_norm", file ? 16 : offsetof(StepRow, grad_norm), f64);
    H5Tinsert(type, "lr", file ? 24 : offsetof(StepRow, lr), f64);
    H5Tinsert(type, "tokens", file ? 32 : offsetof(StepRow, tokens), i64);
    H5Tinsert(type, "wall_s", file ? 40 : offsetof(StepRow, wall_s), f64);
    return type;
}

Handle eval_type(bool file) {
    Handle type(H5Tcreate(H5T_COMPOUND, file ? 16 : sizeof(EvalRow)), H5Tclose);
    H5Tinsert(type, "update", file ? 0 : offsetof(EvalRow, update), file ? H5T_STD_I64LE : H5T_NATIVE_INT64);
    H5Tinsert(type, "heldout_ce", file ? 8 : offsetof(EvalRow, heldout_ce), file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE);
    return type;
}

Handle paired_type(bool file) {
    const hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
    const hid_t f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
    Handle type(H5Tcreate(H5T_COMPOUND, file ? 32 : sizeof(PairedPoint)), H5Tclose);
    H5Tinsert(type, "update", file ? 0 : offsetof(PairedPoint, update), i64);
    H5Tinsert(type, "a", file ? 8 : offsetof(PairedPoint, a), f64);
    H5Tinsert(type, "b", file ? 16 : offsetof(PairedPoint, b), f64);
    H5Tinsert(type, "diff", file ? 24 : offsetof(PairedPoint, diff), f64);
    return type;
}

Handle probe_row_type(bool file) {
    const hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
    const hid_t f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
    Handle type(H5Tcreate(H5T_COMPOUND, file ? 56 : sizeof(FaultProbeRow)), H5Tclose);
    H5Tinsert(type, "step", file ? 0 : offsetof(FaultProbeRow, step), i64);
    H5Tinsert(type, "size", file ? 8 : offsetof(FaultProbeRow, size), f64);
    H5Tinsert(type, "l1", file ? 16 : offsetof(FaultProbeRow, l1), i64);
    H5Tinsert(type, "l2", file ? 24 : offsetof(FaultProbeRow, l2), i64);
    H5Tinsert(type, "l3", file ? 32 : offsetof(FaultProbeRow, l3), i64);
    H5Tinsert(type, "l4", file ? 40 : offsetof(FaultProbeRow, l4), i64);
    H5Tinsert(type, "gate", file ? 48 : offsetof(FaultProbeRow, gate), i64);
    return type;
}

void validate_fault_name(const std::string& f, const std::string& fault) {
    if (fault.empty() || fault == "matrix" || fault.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
        throw Error(f + ": fault name '" + fault + "' is not lower case letters, digits and '-'");
}

Handle envelope_type(bool file) {
    const hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
    const hid_t f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
    Handle type(H5Tcreate(H5T_COMPOUND, file ? 88 : sizeof(EnvelopePoint)), H5Tclose);
    H5Tinsert(type, "update", file ? 0 : offsetof(EnvelopePoint, update), i64);
    H5Tinsert(type, "n", file ? 8 : offsetof(EnvelopePoint, n), i64);
    H5Tinsert(type, "min", file ? 16 : offsetof(EnvelopePoint, min), f64);
    H5Tinsert(type, "max", file ? 24 : offsetof(EnvelopePoint, max), f64);
    H5Tinsert(type, "mean", file ? 32 : offsetof(EnvelopePoint, mean), f64);
    H5Tinsert(type, "std", file ? 40 : offsetof(EnvelopePoint, std), f64);
    H5Tinsert(type, "q05", file ? 48 : offsetof(EnvelopePoint, q05), f64);
    H5Tinsert(type, "q25", file ? 56 : offsetof(EnvelopePoint, q25), f64);
    H5Tinsert(type, "q50", file ? 64 : offsetof(EnvelopePoint, q50), f64);
    H5Tinsert(type, "q75", file ? 72 : offsetof(EnvelopePoint, q75), f64);
    H5Tinsert(type, "q95", file ? 80 : offsetof(EnvelopePoint, q95), f64);
    return type;
}

Handle distance_type(bool file) {
    const hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
    const hid_t f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
    Handle type(H5Tcreate(H5T_COMPOUND, file ? 48 : sizeof(DistancePoint)), H5Tclose);
    H5Tinsert(type, "update", file ? 0 : offsetof(DistancePoint, update), i64);
    H5Tinsert(type, "value", file ? 8 : offsetof(DistancePoint, value), f64);
    H5Tinsert(type, "reference", file ? 16 : offsetof(DistancePoint, reference), f64);
    H5Tinsert(type, "difference", file ? 24 : offsetof(DistancePoint, difference), f64);
    H5Tinsert(type, "scale", file ? 32 : offsetof(DistancePoint, scale), f64);
    H5Tinsert(type, "distance", file ? 40 : offsetof(DistancePoint, distance), f64);
    return type;
}

Handle f64_type(bool file) { return Handle(H5Tcopy(file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE), H5Tclose); }

// --- attribute helpers ----------------------------------------------------------------------------

std::string leg_path(const std::string& leg) { return "/legs/" + leg; }

void validate_comparison_pair(const std::string& a, const std::string& b) {
    validate_leg_name(a);
    validate_leg_name(b);
}

std::string comparison_path(const std::string& a, const std::string& b) { return "/comparisons/" + a + "~" + b; }
std::string distance_path(const std::string& a, const std::string& b) { return "/distances/" + a + "~" + b; }
// Stacks are implementation names and members run ids: both follow the leg-name rule (a path component).
std::string envelope_path(const std::string& stack) { return "/envelope/" + stack; }

void validate_series_name(const std::string& series) {
    if (series.empty() || series.size() > 64 || series.find_first_of("/~") != std::string::npos || series == "." ||
        series == "..")
        throw Error("invalid comparison series name '" + series + "' (1..64 characters, no '/' or '~')");
}

std::string text_attr(const Attributes& a, const std::string& key) {
    auto it = a.find(key);
    if (it == a.end()) return {};
    if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
    return {};
}

std::int64_t int_attr(const Attributes& a, const std::string& key, std::int64_t fallback = 0) {
    auto it = a.find(key);
    if (it == a.end()) return fallback;
    if (const auto* i = std::get_if<std::int64_t>(&it->second)) return *i;
    if (const auto* d = std::get_if<double>(&it->second)) return static_cast<std::int64_t>(*d);
    return fallback;
}

double double_attr(const Attributes& a, const std::string& key, double fallback = -1) {
    auto it = a.find(key);
    if (it == a.end()) return fallback;
    if (const auto* d = std::get_if<double>(&it->second)) return *d;
    if (const auto* i = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*i);
    return fallback;
}

std::vector<std::string> split_commas(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ','))
        if (!item.empty()) out.push_back(item);
    return out;
}

void validate_probe_device(const std::string& device) {
    if (device.empty() || device.size() > 64 || device.find('/') != std::string::npos || device == "." || device == "..")
        throw Error("invalid probe device name '" + device + "'");
}

void validate_direction(const std::string& name) {
    if (name != "memcpy" && name != "h2d" && name != "d2h" && name != "d2d")
        throw Error("invalid probe direction '" + name + "' (expected memcpy, h2d, d2h or d2d)");
}

// File access without HDF5's own flock: the writer locks its hidden copy itself, and the published
// file is never opened for writing.
Handle unlocked_file_access() {
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_file_locking(fapl, false, true);
    return fapl;
}

void copy_bytes(const std::filesystem::path& from, int to_fd, const std::string& name) {
    const int from_fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (from_fd < 0) throw Error(name + ": cannot read run file (" + std::strerror(errno) + ")");
    std::vector<char> buffer(1 << 20);
    for (;;) {
        const ssize_t n = ::read(from_fd, buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int error = errno;
            ::close(from_fd);
            throw Error(name + ": cannot read run file (" + std::strerror(error) + ")");
        }
        if (n == 0) break;
        for (ssize_t done = 0; done < n;) {
            const ssize_t w = ::write(to_fd, buffer.data() + done, static_cast<std::size_t>(n - done));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) {
                const int error = errno;
                ::close(from_fd);
                throw Error(name + ": cannot write the working copy (" + std::strerror(error) + ")");
            }
            done += w;
        }
    }
    ::close(from_fd);
}

// Reserves room for the session's growth past the copy's end, so that a full disk shows up here as
// a clean error instead of inside HDF5's writes and close (which HDF5 1.10 does not survive well).
// HDF5 truncates the file to its used size when it closes it.
void reserve_room(int fd, const std::string& name) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw Error(name + ": cannot write the working copy (" + std::strerror(errno) + ")");
    const off_t room = std::max<off_t>(off_t{4} << 20, st.st_size / 4);
    const int rc = ::posix_fallocate(fd, st.st_size, room);
    if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
        throw Error(name + ": cannot write the working copy (" + std::strerror(rc) + ")");
}

// HDF5's own file locking ("unable to lock file, errno = 11, ..."): another HDF5 program holds it.
// Match the whole phrase: other messages contain "lock" too ("sblock->base_addr" of a truncated file).
bool is_lock_conflict(const std::string& detail) {
    return detail.find("unable to lock file") != std::string::npos;
}

}  // namespace

const SgemmFigure* ProbeResult::sgemm_at(int threads) const {
    for (const auto& s : sgemm)
        if (s.threads == threads) return &s;
    return nullptr;
}

const ProbeDirection* ProbeResult::direction(const std::string& name) const {
    for (const auto& d : directions)
        if (d.name == name) return &d;
    return nullptr;
}

const char* check_level_name(CheckLevel level) {
    switch (level) {
        case CheckLevel::L1: return "l1";
        case CheckLevel::L2: return "l2";
        case CheckLevel::L3: return "l3";
    }
    return "?";
}

void validate_leg_name(const std::string& leg) {
    const bool bad_chars = std::any_of(leg.begin(), leg.end(), [](char c) {
        return !(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' || c == '-');
    });
    if (leg.empty() || leg.size() > 64 || bad_chars || leg == "." || leg == "..")
        throw Error("invalid leg name '" + leg + "' (1..64 characters from A-Z a-z 0-9 _ . + -)");
}

// =================================================================================================
// Writer

RunFileWriter::RunFileWriter(const std::filesystem::path& path)
    : path_(path),
      temp_path_(path.parent_path() / ("." + path.filename().string() + ".writing")),
      spare_path_(path.parent_path() / ("." + path.filename().string() + ".previous")) {
    h5::silence_library_errors();
    const std::string name = path.string();
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) {
        if (!std::filesystem::is_regular_file(path, ec)) throw Error(name + ": not a regular file");
        if (H5Fis_hdf5(name.c_str()) <= 0) {
            H5Eclear2(H5E_DEFAULT);
            throw Error(name + ": exists and is not an HDF5 file (left untouched)");
        }
    } else {
        const auto parent = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
        if (!std::filesystem::is_directory(parent, ec))
            throw Error(name + ": cannot create run file, folder " + parent.string() + " does not exist");
    }
    ensure_open();
}

// Starts a session from the previous version (the spare hard link made at the last commit) by
// replaying the last session's writes onto it; false when that is not possible (first session, the
// published file is not the one this writer committed, a reader still has the old version open, a
// replay failed) — the caller then copies the published file.
bool RunFileWriter::reopen_previous_version() {
    if (spare_ino_ == 0 || published_ino_ == 0) return false;
    struct stat pub {}, spare {};
    if (::stat(path_.c_str(), &pub) != 0 || pub.st_ino != published_ino_) return false;
    const int fd = ::open(spare_path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return false;
    // A reader holding the old version open (HDF5's own locking: a shared flock) keeps it: we must not
    // change a file someone reads.
    if (::fstat(fd, &spare) != 0 || spare.st_ino != spare_ino_ || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        ::close(fd);
        return false;
    }
    if (::rename(spare_path_.c_str(), temp_path_.c_str()) != 0) {
        ::close(fd);
        return false;
    }
    spare_ino_ = 0;
    lock_fd_ = fd;
    const std::string name = path_.string();
    try {
        reserve_room(lock_fd_, name);
        Handle fapl = unlocked_file_access();
        file_ = H5Fopen(temp_path_.c_str(), H5F_ACC_RDWR, fapl);
        if (file_ < 0) h5::fail(name, "cannot open run file for writing");
        replaying_ = true;
        for (auto& w : last_session_writes_) w();
        replaying_ = false;
    } catch (...) {
        replaying_ = false;
        H5Eclear2(H5E_DEFAULT);
        discard();  // unlinks the half-replayed copy; the caller starts over from a full copy
        return false;
    }
    last_session_writes_.clear();
    last_copied_bytes_ = 0;
    return true;
}

void RunFileWriter::forget_previous_version() noexcept {
    if (spare_ino_ != 0) {
        struct stat st {};
        if (::stat(spare_path_.c_str(), &st) == 0 && st.st_ino == spare_ino_) ::unlink(spare_path_.c_str());
    }
    spare_ino_ = 0;
    last_session_writes_.clear();
}

// Opens a session: lock the hidden copy, fill it with the published file (or create a new file).
void RunFileWriter::ensure_open() {
    if (file_ >= 0) return;
    session_writes_.clear();
    failed_ = false;
    if (reopen_previous_version()) return;
    forget_previous_version();
    const std::string name = path_.string();
    lock_fd_ = ::open(temp_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd_ < 0) throw Error(name + ": cannot write run file (" + temp_path_.string() + ": " + std::strerror(errno) + ")");
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
        ::close(lock_fd_);
        lock_fd_ = -1;
        throw Error(name + ": another process is writing this run file (lock on " + temp_path_.string() + ")");
    }
    // A copy left by a killed writer is stale: start over from the published file.
    failed_ = false;
    try {
        if (::ftruncate(lock_fd_, 0) != 0) throw Error(name + ": cannot reset " + temp_path_.string());
        Handle fapl = unlocked_file_access();
        std::error_code ec;
        if (std::filesystem::exists(path_, ec)) {
            copy_bytes(path_, lock_fd_, name);
            last_copied_bytes_ = static_cast<std::int64_t>(std::filesystem::file_size(temp_path_, ec));
            reserve_room(lock_fd_, name);
            file_ = H5Fopen(temp_path_.c_str(), H5F_ACC_RDWR, fapl);
            if (file_ < 0) h5::fail(name, "cannot open run file for writing");
        } else {
            last_copied_bytes_ = 0;
            // Default (earliest) format bounds: readable by every HDF5 tool.
            file_ = H5Fcreate(temp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
            if (file_ < 0) h5::fail(name, "cannot create run file");
            Handle root = h5::open_group(name, file_, "/");
            h5::write_attribute(name, root, "format", std::string(kFormatName));
            h5::write_attribute(name, root, "format_version", kFormatVersion);
            h5::write_attribute(name, root, "created_by", std::string("tandem ") + TANDEM_VERSION);
        }
    } catch (...) {
        discard();
        throw;
    }
}

template <class F>
void RunFileWriter::guarded(F&& write) {
    ensure_open();
    try {
        write();
    } catch (...) {
        failed_ = true;  // the copy may hold half of this call: never publish it
        throw;
    }
    // Kept for the next session, which may start from the version before this one (double buffering).
    session_writes_.emplace_back(std::forward<F>(write));
}

void RunFileWriter::commit() {
    if (file_ < 0) return;
    const std::string name = path_.string();
    if (failed_) throw Error(name + ": not committing a write session in which a write failed");
    const herr_t flushed = H5Fflush(file_, H5F_SCOPE_GLOBAL);
    const herr_t closed = H5Fclose(file_);
    file_ = -1;
    if (flushed < 0 || closed < 0) {
        const std::string detail = h5::take_error_detail();
        discard();
        throw Error(name + ": cannot finish run file (" + detail + ")");
    }
    if (::fsync(lock_fd_) != 0) {
        const int error = errno;
        discard();
        throw Error(name + ": cannot fsync " + temp_path_.string() + " (" + std::strerror(error) + ")");
    }
    // Keep the version being replaced as the next session's starting point (a hard link; where the
    // file system has none, every session copies).
    struct stat old_published {};
    const bool had_published = ::stat(path_.c_str(), &old_published) == 0;
    ::unlink(spare_path_.c_str());
    const bool spare = had_published && ::link(path_.c_str(), spare_path_.c_str()) == 0;
    try {
        rename_durably(temp_path_, path_);  // rename + fsync of the folder
    } catch (...) {
        if (spare) ::unlink(spare_path_.c_str());
        discard();
        throw;
    }
    struct stat now_published {};
    ::fstat(lock_fd_, &now_published);
    published_ino_ = now_published.st_ino;
    spare_ino_ = spare ? old_published.st_ino : 0;
    last_session_writes_ = std::move(session_writes_);
    session_writes_.clear();
    ::close(lock_fd_);  // releases the lock; the descriptor now names the published file
    lock_fd_ = -1;
}

void RunFileWriter::discard() noexcept {
    if (file_ >= 0) {
        H5Fclose(file_);
        H5Eclear2(H5E_DEFAULT);
        file_ = -1;
    }
    if (lock_fd_ >= 0) {
        ::unlink(temp_path_.c_str());  // still locked by us, so it is ours to remove
        ::close(lock_fd_);
        lock_fd_ = -1;
    }
}

RunFileWriter::~RunFileWriter() {
    try {
        if (file_ >= 0 && !failed_) commit();
    } catch (...) {
    }
    discard();
    forget_previous_version();
}

RunFileWriter::RunFileWriter(RunFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      spare_path_(std::move(other.spare_path_)),
      file_(std::exchange(other.file_, -1)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      failed_(other.failed_),
      session_writes_(std::move(other.session_writes_)),
      last_session_writes_(std::move(other.last_session_writes_)),
      published_ino_(std::exchange(other.published_ino_, 0)),
      spare_ino_(std::exchange(other.spare_ino_, 0)),
      last_copied_bytes_(other.last_copied_bytes_) {}

RunFileWriter& RunFileWriter::operator=(RunFileWriter&& other) noexcept {
    if (this != &other) {
        try {
            if (file_ >= 0 && !failed_) commit();
        } catch (...) {
        }
        discard();
        forget_previous_version();
        path_ = std::move(other.path_);
        temp_path_ = std::move(other.temp_path_);
        spare_path_ = std::move(other.spare_path_);
        file_ = std::exchange(other.file_, -1);
        lock_fd_ = std::exchange(other.lock_fd_, -1);
        failed_ = other.failed_;
        session_writes_ = std::move(other.session_writes_);
        last_session_writes_ = std::move(other.last_session_writes_);
        published_ino_ = std::exchange(other.published_ino_, 0);
        spare_ino_ = std::exchange(other.spare_ino_, 0);
        last_copied_bytes_ = other.last_copied_bytes_;
    }
    return *this;
}

void RunFileWriter::write_host(const HostInfo& host) {
    guarded([=, this] {
        const std::string f = path_.string();
        Handle group = h5::require_group(f, file_, "/host");
        h5::write_attributes(f, group,
                             {{"cpu_model", host.cpu_model},
                              {"logical_cores", host.logical_cores},
                              {"physical_cores", host.physical_cores},
                              {"memory_total_bytes", host.memory_total_bytes},
                              {"memory_available_bytes", host.memory_available_bytes},
                              {"llc_bytes", host.llc_bytes},
                              {"os", host.os},
                              {"kernel", host.kernel},
                              {"machine", host.machine},
                              {"hostname", host.hostname},
                              {"tandem_version", host.tandem_version},
                              {"built_with_cuda", std::int64_t{host.built_with_cuda ? 1 : 0}}});
    });
}

void RunFileWriter::write_experiment(const ExperimentInfo& experiment) {
    if (experiment.spec_json.size() > 60000)
        throw Error(path_.string() + ": experiment spec JSON is " + std::to_string(experiment.spec_json.size()) +
                    " bytes; /experiment holds at most 60000 as an attribute");
    guarded([=, this] {
        const std::string f = path_.string();
        Handle group = h5::require_group(f, file_, "/experiment");
        Attributes attrs = experiment.extra;
        attrs["name"] = experiment.name;
        attrs["spec_json"] = experiment.spec_json;
        attrs["spec_sha256"] = experiment.spec_sha256;
        attrs["tandem_version"] = experiment.tandem_version.empty() ? std::string(TANDEM_VERSION) : experiment.tandem_version;
        attrs["run_id"] = experiment.run_id;
        attrs["total_updates"] = experiment.total_updates;
        attrs["base"] = experiment.base;
        attrs["base_sha256"] = experiment.base_sha256;
        h5::write_attributes(f, group, attrs);
    });
}

void RunFileWriter::write_probe(const ProbeResult& probe) {
    validate_probe_device(probe.device);
    std::string names;
    for (const auto& d : probe.directions) {
        validate_direction(d.name);
        names += (names.empty() ? "" : ",") + d.name;
    }
    guarded([=, this] {
        const std::string f = path_.string();
        // Replace a previous probe of the same device as a whole, so no stale direction survives.
        h5::require_group(f, file_, "/probes");
        h5::remove_link(f, file_, "/probes/" + probe.device);
        Handle group = h5::require_group(f, file_, "/probes/" + probe.device);
        Attributes attributes{{"device", probe.device},
                              {"device_name", probe.device_name},
                              {"bytes", probe.bytes},
                              {"repeats", std::int64_t{probe.repeats}},
                              {"warmup", std::int64_t{probe.warmup}},
                              {"method", probe.method},
                              {"timestamp", probe.timestamp},
                              {"pcie_link", probe.pcie_link},
                              {"pcie_source", probe.pcie_source},
                              {"directions", names}};
        for (const auto& d : probe.directions) {
            attributes["gbps_" + d.name] = d.gbps;
            attributes["best_s_" + d.name] = d.best_seconds;
            attributes["median_s_" + d.name] = d.median_seconds;
            attributes["bytes_counted_" + d.name] = d.bytes_counted;
        }
        if (!probe.sgemm.empty()) {  // docs/hdf5-layout.md: sgemm_threads lists the thread counts
            std::string threads;
            for (const auto& s : probe.sgemm) {
                const std::string t = std::to_string(s.threads);
                threads += (threads.empty() ? "" : ",") + t;
                attributes["sgemm_flops_per_s_t" + t] = s.flops_per_s;
                attributes["sgemm_median_flops_per_s_t" + t] = s.median_flops_per_s;
                attributes["sgemm_best_s_t" + t] = s.best_seconds;
                attributes["sgemm_median_s_t" + t] = s.median_seconds;
                attributes["sgemm_shape_t" + t] = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
            }
            attributes["sgemm_threads"] = threads;
            attributes["sgemm_method"] = probe.sgemm_method;
        }
        h5::write_attributes(f, group, attributes);
    });
}

void RunFileWriter::create_leg(const std::string& leg, const Attributes& attributes) {
    validate_leg_name(leg);
    guarded([=, this] {
        Handle group = h5::require_group(path_.string(), file_, leg_path(leg));
        h5::write_attributes(path_.string(), group, attributes);
    });
}

void RunFileWriter::set_leg_attributes(const std::string& leg, const Attributes& attributes) {
    create_leg(leg, attributes);
}

namespace {
// Opens /legs/<leg>/<name> (created empty when absent), emptied first when `replace`, then appends.
void write_table_rows(const std::string& f, hid_t file, const std::string& leg, const char* name, hid_t file_type,
                      hid_t memory_type, hsize_t chunk_rows, const void* rows, hsize_t count, bool replace) {
    Handle group = h5::require_group(f, file, leg_path(leg));
    Handle dataset;
    if (h5::exists(group, name)) {
        dataset = Handle(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
        if (!dataset.valid()) h5::fail(f, "cannot open " + leg_path(leg) + "/" + name);
        if (replace) {
            hsize_t zero[1] = {0};
            if (H5Dset_extent(dataset, zero) < 0) h5::fail(f, "cannot empty " + leg_path(leg) + "/" + name);
        }
    } else {
        dataset = h5::create_table(f, group, name, file_type, chunk_rows);
    }
    h5::append_rows(f, dataset, memory_type, rows, count);
}
}  // namespace

void RunFileWriter::append_steps(const std::string& leg, const std::vector<StepRow>& rows) {
    validate_leg_name(leg);
    guarded([=, this] {
        write_table_rows(path_.string(), file_, leg, "steps", step_type(true), step_type(false), kStepChunkRows,
                         rows.data(), rows.size(), false);
    });
}

void RunFileWriter::replace_steps(const std::string& leg, const std::vector<StepRow>& rows) {
    validate_leg_name(leg);
    guarded([=, this] {
        write_table_rows(path_.string(), file_, leg, "steps", step_type(true), step_type(false), kStepChunkRows,
                         rows.data(), rows.size(), true);
    });
}

void RunFileWriter::append_eval(const std::string& leg, const std::vector<EvalRow>& rows) {
    validate_leg_name(leg);
    guarded([=, this] {
        write_table_rows(path_.string(), file_, leg, "eval", eval_type(true), eval_type(false), kEvalChunkRows,
                         rows.data(), rows.size(), false);
    });
}

void RunFileWriter::replace_eval(const std::string& leg, const std::vector<EvalRow>& rows) {
    validate_leg_name(leg);
    guarded([=, this] {
        write_table_rows(path_.string(), file_, leg, "eval", eval_type(true), eval_type(false), kEvalChunkRows,
                         rows.data(), rows.size(), true);
    });
}

void RunFileWriter::write_timing(const std::string& leg, const LegTiming& timing) {
    validate_leg_name(leg);
    guarded([=, this] {
        Handle group = h5::require_group(path_.string(), file_, leg_path(leg) + "/timing");
        Attributes attributes = timing.extra;
        attributes["model_load_s"] = timing.model_load_s;
        attributes["tokenize_s"] = timing.tokenize_s;
        attributes["median_update_s"] = timing.median_update_s;
        attributes["window_first"] = timing.window_first;
        attributes["window_last"] = timing.window_last;
        attributes["tokens_per_s"] = timing.tokens_per_s;
        attributes["total_s"] = timing.total_s;
        h5::write_attributes(path_.string(), group, attributes);
    });
}

void RunFileWriter::write_memory(const std::string& leg, const LegMemory& memory) {
    validate_leg_name(leg);
    guarded([=, this] {
        Handle group = h5::require_group(path_.string(), file_, leg_path(leg) + "/memory");
        Attributes attributes = memory.extra;
        attributes["peak_device_bytes"] = memory.peak_device_bytes;
        attributes["peak_host_bytes"] = memory.peak_host_bytes;
        h5::write_attributes(path_.string(), group, attributes);
    });
}

void RunFileWriter::write_check(const std::string& leg, CheckLevel level, const std::string& json) {
    validate_leg_name(leg);
    guarded([=, this] {
        Handle group = h5::require_group(path_.string(), file_, leg_path(leg) + "/checks");
        h5::write_string_dataset(path_.string(), group, check_level_name(level), json);
    });
}

void RunFileWriter::write_flags(const std::string& leg, const std::string& json) {
    validate_leg_name(leg);
    guarded([=, this] {
        Handle group = h5::require_group(path_.string(), file_, leg_path(leg));
        h5::write_string_dataset(path_.string(), group, "flags", json);
    });
}

void RunFileWriter::write_comparison(const std::string& leg_a, const std::string& leg_b,
                                     const ComparisonSeries& series) {
    validate_comparison_pair(leg_a, leg_b);
    validate_series_name(series.series);
    guarded([=, this] {
        const std::string f = path_.string();
        Handle group = h5::require_group(f, file_, comparison_path(leg_a, leg_b));
        h5::remove_link(f, group, series.series);
        Handle dataset = h5::create_table(f, group, series.series, paired_type(true), 256);
        h5::append_rows(f, dataset, paired_type(false), series.points.data(), series.points.size());
        h5::write_attributes(f, dataset, series.summary);
    });
}

void RunFileWriter::set_comparison_attributes(const std::string& leg_a, const std::string& leg_b,
                                              const Attributes& attributes) {
    validate_comparison_pair(leg_a, leg_b);
    guarded([=, this] {
        Handle group = h5::require_group(path_.string(), file_, comparison_path(leg_a, leg_b));
        h5::write_attributes(path_.string(), group, attributes);
    });
}

void RunFileWriter::write_faults(const Attributes& attributes, const std::string& matrix_json,
                                 const std::vector<FaultGroup>& faults) {
    for (const auto& g : faults) validate_fault_name(path_.string(), g.fault);
    guarded([&] {
        const std::string f = path_.string();
        h5::remove_link(f, file_, "/faults");
        Handle group = h5::require_group(f, file_, "/faults");
        h5::write_attributes(f, group, attributes);
        h5::write_string_dataset(f, group, "matrix", matrix_json);
        for (const auto& g : faults) {
            Handle fg = h5::require_group(f, group, g.fault);
            h5::write_attributes(f, fg, g.attributes);
            if (g.probes.empty()) continue;
            Handle dataset = h5::create_table(f, fg, "search", probe_row_type(true), 64);
            h5::append_rows(f, dataset, probe_row_type(false), g.probes.data(), g.probes.size());
        }
    });
}

void RunFileWriter::remove_envelope(const std::string& stack) {
    validate_leg_name(stack);
    guarded([=, this] {  // by value: replayed in the next session (double buffering)
        if (h5::exists(file_, envelope_path(stack))) h5::remove_link(path_.string(), file_, envelope_path(stack));
    });
}

void RunFileWriter::set_envelope_attributes(const std::string& stack, const Attributes& attributes) {
    validate_leg_name(stack);
    guarded([=, this] {  // by value: replayed in the next session (double buffering)
        Handle group = h5::require_group(path_.string(), file_, envelope_path(stack));
        h5::write_attributes(path_.string(), group, attributes);
    });
}

void RunFileWriter::write_envelope_series(const std::string& stack, const std::string& series,
                                          const std::vector<EnvelopePoint>& points) {
    validate_leg_name(stack);
    validate_series_name(series);
    guarded([=, this] {  // by value: replayed in the next session (double buffering)
        const std::string f = path_.string();
        Handle group = h5::require_group(f, file_, envelope_path(stack));
        h5::remove_link(f, group, series);
        Handle dataset = h5::create_table(f, group, series, envelope_type(true), 256);
        h5::append_rows(f, dataset, envelope_type(false), points.data(), points.size());
    });
}

void RunFileWriter::write_envelope_values(const std::string& stack, const std::string& name, const std::vector<double>& values) {
    validate_leg_name(stack);
    validate_series_name(name);
    guarded([=, this] {  // by value: replayed in the next session (double buffering)
        const std::string f = path_.string();
        Handle group = h5::require_group(f, file_, envelope_path(stack));
        h5::remove_link(f, group, name);
        Handle dataset = h5::create_table(f, group, name, f64_type(true), 64);
        h5::append_rows(f, dataset, f64_type(false), values.data(), values.size());
    });
}

void RunFileWriter::write_envelope_member(const std::string& stack, const std::string& member,
                                          const std::vector<StepRow>& steps, const std::vector<EvalRow>& evals,
                                          const Attributes& attributes) {
    validate_leg_name(stack);
    validate_leg_name(member);
    guarded([=, this] {  // by value: replayed in the next session (double buffering)
        const std::string f = path_.string();
        const std::string path = envelope_path(stack) + "/members/" + member;
        if (h5::exists(file_, path)) h5::remove_link(f, file_, path);
        Handle group = h5::require_group(f, file_, path);
        h5::write_attributes(f, group, attributes);
        Handle st = h5::create_table(f, group, "steps", step_type(true), kStepChunkRows);
        h5::append_rows(f, st, step_type(false), steps.data(), steps.size());
        Handle ev = h5::create_table(f, group, "eval", eval_type(true), kEvalChunkRows);
        h5::append_rows(f, ev, eval_type(false), evals.data(), evals.size());
    });
}

void RunFileWriter::write_distance(const std::string& leg_a, const std::string& leg_b, const std::string& name,
                                   const std::vector<DistancePoint>& points, const Attributes& attributes) {
    validate_comparison_pair(leg_a, leg_b);
    validate_series_name(name);
    guarded([=, this] {  // by value: replayed in the next session (double buffering)
        const std::string f = path_.string();
        Handle group = h5::require_group(f, file_, distance_path(leg_a, leg_b));
        h5::remove_link(f, group, name);
        Handle dataset = h5::create_table(f, group, name, distance_type(true), 256);
        h5::append_rows(f, dataset, distance_type(false), points.data(), points.size());
        h5::write_attributes(f, dataset, attributes);
    });
}

void RunFileWriter::set_distance_attributes(const std::string& leg_a, const std::string& leg_b, const Attributes& attributes) {
    validate_comparison_pair(leg_a, leg_b);
    guarded([=, this] {  // by value: replayed in the next session (double buffering)
        Handle group = h5::require_group(path_.string(), file_, distance_path(leg_a, leg_b));
        h5::write_attributes(path_.string(), group, attributes);
    });
}

// =================================================================================================
// Reader

RunFileReader::RunFileReader(const std::filesystem::path& path, double wait_s) : path_(path) {
    h5::silence_library_errors();
    const std::string name = path.string();
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) throw Error(name + ": no such run file");
    if (H5Fis_hdf5(name.c_str()) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        throw Error(name + ": not an HDF5 file");
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
    for (;;) {
        file_ = H5Fopen(name.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
        if (file_ >= 0) return;
        const std::string detail = h5::take_error_detail();
        if (detail.find("truncated file") != std::string::npos)
            throw Error(name + ": run file is truncated (" + detail +
                        "); it was cut short, e.g. copied while a run was writing it or on a full disk");
        if (!is_lock_conflict(detail) || std::chrono::steady_clock::now() >= deadline)
            throw Error(name + ": cannot open run file" + (detail.empty() ? "" : " (" + detail + ")") +
                        (is_lock_conflict(detail) ? "; another HDF5 program holds it locked" : ""));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

RunFileReader::~RunFileReader() {
    if (file_ >= 0) {
        H5Fclose(file_);
        H5Eclear2(H5E_DEFAULT);
    }
}

RunFileReader::RunFileReader(RunFileReader&& other) noexcept : path_(std::move(other.path_)), file_(other.file_) {
    other.file_ = -1;
}

RunFileReader& RunFileReader::operator=(RunFileReader&& other) noexcept {
    if (this != &other) {
        if (file_ >= 0) H5Fclose(file_);
        path_ = std::move(other.path_);
        file_ = other.file_;
        other.file_ = -1;
    }
    return *this;
}

Attributes RunFileReader::attributes(const std::string& object_path) const {
    if (!h5::exists(file_, object_path)) return {};
    Handle object = h5::open_object(path_.string(), file_, object_path);
    return h5::read_attributes(path_.string(), object);
}

std::optional<HostInfo> RunFileReader::host() const {
    if (!h5::exists(file_, "/host")) return std::nullopt;
    const Attributes a = attributes("/host");
    HostInfo h;
    h.cpu_model = text_attr(a, "cpu_model");
    h.logical_cores = int_attr(a, "logical_cores");
    h.physical_cores = int_attr(a, "physical_cores");
    h.memory_total_bytes = int_attr(a, "memory_total_bytes");
    h.memory_available_bytes = int_attr(a, "memory_available_bytes");
    h.llc_bytes = int_attr(a, "llc_bytes");
    h.os = text_attr(a, "os");
    h.kernel = text_attr(a, "kernel");
    h.machine = text_attr(a, "machine");
    h.hostname = text_attr(a, "hostname");
    h.tandem_version = text_attr(a, "tandem_version");
    h.built_with_cuda = int_attr(a, "built_with_cuda") != 0;
    return h;
}

std::optional<ExperimentInfo> RunFileReader::experiment() const {
    if (!h5::exists(file_, "/experiment")) return std::nullopt;
    const Attributes a = attributes("/experiment");
    ExperimentInfo info{text_attr(a, "name"), text_attr(a, "spec_json"), text_attr(a, "spec_sha256"),
                        text_attr(a, "tandem_version"), text_attr(a, "run_id"), int_attr(a, "total_updates", -1),
                        // absent in files written before the base was recorded: ""
                        text_attr(a, "base"), text_attr(a, "base_sha256"), {}};
    for (const auto& [k, v] : a)
        if (k != "name" && k != "spec_json" && k != "spec_sha256" && k != "tandem_version" && k != "run_id" &&
            k != "total_updates" && k != "base" && k != "base_sha256")
            info.extra[k] = v;
    return info;
}

std::vector<ProbeResult> RunFileReader::probes() const {
    std::vector<ProbeResult> out;
    if (!h5::exists(file_, "/probes")) return out;
    Handle group = h5::open_group(path_.string(), file_, "/probes");
    for (const auto& device : h5::child_names(path_.string(), group)) {
        const Attributes a = attributes("/probes/" + device);
        ProbeResult p;
        p.device = text_attr(a, "device");
        if (p.device.empty()) p.device = device;
        p.device_name = text_attr(a, "device_name");
        p.bytes = int_attr(a, "bytes");
        p.repeats = static_cast<std::int32_t>(int_attr(a, "repeats"));
        p.warmup = static_cast<std::int32_t>(int_attr(a, "warmup"));
        p.method = text_attr(a, "method");
        p.timestamp = text_attr(a, "timestamp");
        p.pcie_link = text_attr(a, "pcie_link");
        p.pcie_source = text_attr(a, "pcie_source");
        for (const auto& name : split_commas(text_attr(a, "directions")))
            p.directions.push_back({name, int_attr(a, "bytes_counted_" + name), double_attr(a, "best_s_" + name),
                                    double_attr(a, "median_s_" + name), double_attr(a, "gbps_" + name)});
        for (const auto& t : split_commas(text_attr(a, "sgemm_threads"))) {
            if (t.size() > 4 || !std::all_of(t.begin(), t.end(), [](unsigned char ch) { return std::isdigit(ch); }))
                throw Error(path_.string() + ": /probes/" + device + " attribute sgemm_threads: '" + t +
                            "' is not a thread count");
            SgemmFigure s;
            s.threads = static_cast<std::int32_t>(std::stoi(t));
            const std::string shape = text_attr(a, "sgemm_shape_t" + t);
            if (std::sscanf(shape.c_str(), "%ldx%ldx%ld", &s.m, &s.n, &s.k) != 3) s.m = s.n = s.k = 0;
            s.best_seconds = double_attr(a, "sgemm_best_s_t" + t);
            s.median_seconds = double_attr(a, "sgemm_median_s_t" + t);
            s.flops_per_s = double_attr(a, "sgemm_flops_per_s_t" + t);
            s.median_flops_per_s = double_attr(a, "sgemm_median_flops_per_s_t" + t);
            p.sgemm.push_back(s);
        }
        p.sgemm_method = text_attr(a, "sgemm_method");
        out.push_back(std::move(p));
    }
    return out;
}

std::vector<std::string> RunFileReader::legs() const {
    if (!h5::exists(file_, "/legs")) return {};
    Handle group = h5::open_group(path_.string(), file_, "/legs");
    return h5::child_names(path_.string(), group);
}

Attributes RunFileReader::leg_attributes(const std::string& leg) const {
    validate_leg_name(leg);
    return attributes(leg_path(leg));
}

std::vector<StepRow> RunFileReader::steps(const std::string& leg) const {
    validate_leg_name(leg);
    const std::string path = leg_path(leg) + "/steps";
    if (!h5::exists(file_, path)) return {};
    Handle dataset(H5Dopen2(file_, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) h5::fail(path_.string(), "cannot open " + path);
    std::vector<StepRow> rows(h5::row_count(path_.string(), dataset));
    h5::read_rows(path_.string(), dataset, step_type(false), rows.data());
    return rows;
}

std::vector<EvalRow> RunFileReader::eval(const std::string& leg) const {
    validate_leg_name(leg);
    const std::string path = leg_path(leg) + "/eval";
    if (!h5::exists(file_, path)) return {};
    Handle dataset(H5Dopen2(file_, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) h5::fail(path_.string(), "cannot open " + path);
    std::vector<EvalRow> rows(h5::row_count(path_.string(), dataset));
    h5::read_rows(path_.string(), dataset, eval_type(false), rows.data());
    return rows;
}

std::vector<StepRow> RunFileReader::steps(const std::string& leg, std::size_t first_row) const {
    validate_leg_name(leg);
    const std::string path = leg_path(leg) + "/steps";
    if (!h5::exists(file_, path)) return {};
    Handle dataset(H5Dopen2(file_, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) h5::fail(path_.string(), "cannot open " + path);
    const hsize_t total = h5::row_count(path_.string(), dataset);
    if (first_row >= total) return {};
    std::vector<StepRow> rows(total - first_row);
    h5::read_rows(path_.string(), dataset, step_type(false), first_row, rows.size(), rows.data());
    return rows;
}

std::vector<EvalRow> RunFileReader::eval(const std::string& leg, std::size_t first_row) const {
    validate_leg_name(leg);
    const std::string path = leg_path(leg) + "/eval";
    if (!h5::exists(file_, path)) return {};
    Handle dataset(H5Dopen2(file_, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) h5::fail(path_.string(), "cannot open " + path);
    const hsize_t total = h5::row_count(path_.string(), dataset);
    if (first_row >= total) return {};
    std::vector<EvalRow> rows(total - first_row);
    h5::read_rows(path_.string(), dataset, eval_type(false), first_row, rows.size(), rows.data());
    return rows;
}

std::optional<LegTiming> RunFileReader::timing(const std::string& leg) const {
    validate_leg_name(leg);
    const std::string path = leg_path(leg) + "/timing";
    if (!h5::exists(file_, path)) return std::nullopt;
    Attributes a = attributes(path);
    LegTiming t;
    t.model_load_s = double_attr(a, "model_load_s");
    t.tokenize_s = double_attr(a, "tokenize_s");
    t.median_update_s = double_attr(a, "median_update_s");
    t.window_first = int_attr(a, "window_first", -1);
    t.window_last = int_attr(a, "window_last", -1);
    t.tokens_per_s = double_attr(a, "tokens_per_s");
    t.total_s = double_attr(a, "total_s");
    for (const char* known : {"model_load_s", "tokenize_s", "median_update_s", "window_first", "window_last",
                              "tokens_per_s", "total_s"})
        a.erase(known);
    t.extra = std::move(a);
    return t;
}

std::optional<LegMemory> RunFileReader::memory(const std::string& leg) const {
    validate_leg_name(leg);
    const std::string path = leg_path(leg) + "/memory";
    if (!h5::exists(file_, path)) return std::nullopt;
    Attributes a = attributes(path);
    LegMemory m;
    m.peak_device_bytes = int_attr(a, "peak_device_bytes", -1);
    m.peak_host_bytes = int_attr(a, "peak_host_bytes", -1);
    a.erase("peak_device_bytes");
    a.erase("peak_host_bytes");
    m.extra = std::move(a);
    return m;
}

std::optional<std::string> RunFileReader::check(const std::string& leg, CheckLevel level) const {
    validate_leg_name(leg);
    const std::string path = leg_path(leg) + "/checks/" + check_level_name(level);
    if (!h5::exists(file_, path)) return std::nullopt;
    return h5::read_string_dataset(path_.string(), file_, path);
}

std::optional<std::string> RunFileReader::flags(const std::string& leg) const {
    validate_leg_name(leg);
    const std::string path = leg_path(leg) + "/flags";
    if (!h5::exists(file_, path)) return std::nullopt;
    return h5::read_string_dataset(path_.string(), file_, path);
}

std::optional<std::string> RunFileReader::fault_matrix() const {
    if (!h5::exists(file_, "/faults/matrix")) return std::nullopt;
    Handle group = h5::open_group(path_.string(), file_, "/faults");
    return h5::read_string_dataset(path_.string(), group, "matrix");
}

std::vector<FaultProbeRow> RunFileReader::fault_probes(const std::string& fault) const {
    validate_fault_name(path_.string(), fault);
    const std::string p = "/faults/" + fault + "/search";
    if (!h5::exists(file_, p)) return {};
    Handle dataset(H5Dopen2(file_, p.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) h5::fail(path_.string(), "cannot open " + p);
    std::vector<FaultProbeRow> rows(h5::row_count(path_.string(), dataset));
    if (!rows.empty()) h5::read_rows(path_.string(), dataset, probe_row_type(false), rows.data());
    return rows;
}

std::vector<std::pair<std::string, std::string>> RunFileReader::comparisons() const {
    std::vector<std::pair<std::string, std::string>> out;
    if (!h5::exists(file_, "/comparisons")) return out;
    Handle group = h5::open_group(path_.string(), file_, "/comparisons");
    for (const auto& name : h5::child_names(path_.string(), group)) {
        const auto tilde = name.find('~');
        if (tilde == std::string::npos) continue;
        out.emplace_back(name.substr(0, tilde), name.substr(tilde + 1));
    }
    return out;
}

Attributes RunFileReader::comparison_attributes(const std::string& leg_a, const std::string& leg_b) const {
    validate_comparison_pair(leg_a, leg_b);
    return attributes(comparison_path(leg_a, leg_b));
}

std::vector<ComparisonSeries> RunFileReader::comparison_series(const std::string& leg_a,
                                                               const std::string& leg_b) const {
    validate_comparison_pair(leg_a, leg_b);
    const std::string path = comparison_path(leg_a, leg_b);
    std::vector<ComparisonSeries> out;
    if (!h5::exists(file_, path)) return out;
    Handle group = h5::open_group(path_.string(), file_, path);
    for (const auto& name : h5::child_names(path_.string(), group)) {
        Handle dataset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
        if (!dataset.valid()) h5::fail(path_.string(), "cannot open " + path + "/" + name);
        ComparisonSeries series;
        series.series = name;
        series.points.resize(h5::row_count(path_.string(), dataset));
        h5::read_rows(path_.string(), dataset, paired_type(false), series.points.data());
        series.summary = h5::read_attributes(path_.string(), dataset);
        out.push_back(std::move(series));
    }
    return out;
}

namespace {
template <class Row>
std::vector<Row> read_table(const std::string& file_name, hid_t file, const std::string& path, hid_t memory_type) {
    if (!h5::exists(file, path)) return {};
    Handle dataset(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) h5::fail(file_name, "cannot open " + path);
    std::vector<Row> rows(h5::row_count(file_name, dataset));
    h5::read_rows(file_name, dataset, memory_type, rows.data());
    return rows;
}
}  // namespace

std::vector<std::string> RunFileReader::envelope_stacks() const {
    if (!h5::exists(file_, "/envelope")) return {};
    Handle group = h5::open_group(path_.string(), file_, "/envelope");
    return h5::child_names(path_.string(), group);
}

std::vector<EnvelopePoint> RunFileReader::envelope_series(const std::string& stack, const std::string& series) const {
    validate_leg_name(stack);
    validate_series_name(series);
    return read_table<EnvelopePoint>(path_.string(), file_, envelope_path(stack) + "/" + series, envelope_type(false));
}

std::vector<double> RunFileReader::envelope_values(const std::string& stack, const std::string& name) const {
    validate_leg_name(stack);
    validate_series_name(name);
    return read_table<double>(path_.string(), file_, envelope_path(stack) + "/" + name, f64_type(false));
}

std::vector<std::string> RunFileReader::envelope_members(const std::string& stack) const {
    validate_leg_name(stack);
    const std::string path = envelope_path(stack) + "/members";
    if (!h5::exists(file_, path)) return {};
    Handle group = h5::open_group(path_.string(), file_, path);
    return h5::child_names(path_.string(), group);
}

std::vector<StepRow> RunFileReader::envelope_member_steps(const std::string& stack, const std::string& member) const {
    validate_leg_name(stack);
    validate_leg_name(member);
    return read_table<StepRow>(path_.string(), file_, envelope_path(stack) + "/members/" + member + "/steps", step_type(false));
}

std::vector<EvalRow> RunFileReader::envelope_member_eval(const std::string& stack, const std::string& member) const {
    validate_leg_name(stack);
    validate_leg_name(member);
    return read_table<EvalRow>(path_.string(), file_, envelope_path(stack) + "/members/" + member + "/eval", eval_type(false));
}

std::vector<DistancePoint> RunFileReader::distance(const std::string& leg_a, const std::string& leg_b, const std::string& name) const {
    validate_comparison_pair(leg_a, leg_b);
    validate_series_name(name);
    return read_table<DistancePoint>(path_.string(), file_, distance_path(leg_a, leg_b) + "/" + name, distance_type(false));
}

}  // namespace tandem::experiments

// =================================================================================================
// Fingerprints, evaluation observables and localisations (docs/observables.md)

namespace tandem::experiments {
namespace {

constexpr size_t kOpChars = 32, kPassChars = 12, kProjectionChars = 12;

// Fixed-size, NUL-padded strings inside compound rows (h5py reads them as bytes).
template <size_t N>
void put(char (&dst)[N], const std::string& s, const char* what) {
    if (s.size() >= N) throw Error(std::string(what) + " '" + s + "' is longer than " + std::to_string(N - 1) + " bytes");
    std::memset(dst, 0, N);
    std::memcpy(dst, s.data(), s.size());
}
template <size_t N>
std::string get(const char (&src)[N]) {
    return std::string(src, strnlen(src, N));
}

Handle fixed_string(size_t n) {
    Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(t, n);
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    return t;
}
Handle f64_array(hsize_t n, bool file) {
    hsize_t dims[1] = {n};
    return Handle(H5Tarray_create2(file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE, 1, dims), H5Tclose);
}
Handle i64_array(hsize_t n, bool file) {
    hsize_t dims[1] = {n};
    return Handle(H5Tarray_create2(file ? H5T_STD_I64LE : H5T_NATIVE_INT64, 1, dims), H5Tclose);
}

// A compound type built field by field: packed in the file, at the struct's offsets in memory.
class Compound {
public:
    Compound(bool file, size_t memory_size) : file_(file), type_(H5Tcreate(H5T_COMPOUND, file ? 4096 : memory_size), H5Tclose) {}
    void add(const char* name, size_t memory_offset, hid_t type) {
        H5Tinsert(type_, name, file_ ? packed_ : memory_offset, type);
        packed_ += H5Tget_size(type);
    }
    void i64(const char* name, size_t off) { add(name, off, file_ ? H5T_STD_I64LE : H5T_NATIVE_INT64); }
    void f64(const char* name, size_t off) { add(name, off, file_ ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE); }
    void str(const char* name, size_t off, size_t n) { add(name, off, fixed_string(n)); }
    void f64s(const char* name, size_t off, hsize_t n) { add(name, off, f64_array(n, file_)); }
    void i64s(const char* name, size_t off, hsize_t n) { add(name, off, i64_array(n, file_)); }
    Handle done() {
        if (file_) H5Tset_size(type_, packed_);
        return std::move(type_);
    }

private:
    bool file_;
    Handle type_;
    size_t packed_ = 0;
};

struct FingerprintPod {
    std::int64_t update, micro_batch, layer;
    char op[kOpChars];
    char pass[kPassChars];
    std::int64_t count;
    double norm, mean, maxabs;
    double sketch[kFingerprintSketch];
};
Handle fingerprint_type(bool file) {
    Compound c(file, sizeof(FingerprintPod));
    c.i64("update", offsetof(FingerprintPod, update));
    c.i64("micro_batch", offsetof(FingerprintPod, micro_batch));
    c.i64("layer", offsetof(FingerprintPod, layer));
    c.str("op", offsetof(FingerprintPod, op), kOpChars);
    c.str("pass", offsetof(FingerprintPod, pass), kPassChars);
    c.i64("count", offsetof(FingerprintPod, count));
    c.f64("norm", offsetof(FingerprintPod, norm));
    c.f64("mean", offsetof(FingerprintPod, mean));
    c.f64("maxabs", offsetof(FingerprintPod, maxabs));
    c.f64s("sketch", offsetof(FingerprintPod, sketch), kFingerprintSketch);
    return c.done();
}

struct AdapterNormPod {
    std::int64_t update, layer;
    char projection[kProjectionChars];
    double a_norm, b_norm, delta_norm;
};
Handle adapter_norm_type(bool file) {
    Compound c(file, sizeof(AdapterNormPod));
    c.i64("update", offsetof(AdapterNormPod, update));
    c.i64("layer", offsetof(AdapterNormPod, layer));
    c.str("projection", offsetof(AdapterNormPod, projection), kProjectionChars);
    c.f64("a_norm", offsetof(AdapterNormPod, a_norm));
    c.f64("b_norm", offsetof(AdapterNormPod, b_norm));
    c.f64("delta_norm", offsetof(AdapterNormPod, delta_norm));
    return c.done();
}

Handle probe_type(bool file) {
    Compound c(file, sizeof(ProbeRow));
    c.i64("update", offsetof(ProbeRow, update));
    c.i64("probe", offsetof(ProbeRow, probe));
    c.i64("record", offsetof(ProbeRow, record));
    c.i64("position", offsetof(ProbeRow, position));
    c.i64s("ids", offsetof(ProbeRow, ids), kProbeTopK);
    c.f64s("probs", offsetof(ProbeRow, probs), kProbeTopK);
    return c.done();
}

struct LocalisedPod {
    std::int64_t update, micro_batch, layer;
    char op[kOpChars];
    char pass[kPassChars];
    std::int64_t depth;
    double rel_diff, norm_rel_diff, bound, ratio;
};
Handle localised_type(bool file) {
    Compound c(file, sizeof(LocalisedPod));
    c.i64("update", offsetof(LocalisedPod, update));
    c.i64("micro_batch", offsetof(LocalisedPod, micro_batch));
    c.i64("layer", offsetof(LocalisedPod, layer));
    c.str("op", offsetof(LocalisedPod, op), kOpChars);
    c.str("pass", offsetof(LocalisedPod, pass), kPassChars);
    c.i64("depth", offsetof(LocalisedPod, depth));
    c.f64("rel_diff", offsetof(LocalisedPod, rel_diff));
    c.f64("norm_rel_diff", offsetof(LocalisedPod, norm_rel_diff));
    c.f64("bound", offsetof(LocalisedPod, bound));
    c.f64("ratio", offsetof(LocalisedPod, ratio));
    return c.done();
}

std::string localisation_path(const std::string& a, const std::string& b) { return "/localisation/" + a + "~" + b; }

// Replaces /legs/<leg>/<name> by `rows` (a table of `file_type`).
template <class Pod>
void replace_leg_table(const std::string& f, hid_t file, const std::string& leg, const char* name, hid_t file_type,
                       hid_t memory_type, const std::vector<Pod>& rows) {
    Handle group = h5::require_group(f, file, leg_path(leg));
    h5::remove_link(f, group, name);
    Handle dataset = h5::create_table(f, group, name, file_type, 1024);
    h5::append_rows(f, dataset, memory_type, rows.data(), rows.size());
}


}  // namespace

void RunFileWriter::replace_fingerprints(const std::string& leg, const std::vector<FingerprintRow>& rows) {
    validate_leg_name(leg);
    std::vector<FingerprintPod> pods(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        const FingerprintRow& r = rows[i];
        FingerprintPod& p = pods[i];
        p.update = r.update;
        p.micro_batch = r.micro_batch;
        p.layer = r.layer;
        put(p.op, r.op, "fingerprint op");
        put(p.pass, r.pass, "fingerprint pass");
        p.count = r.count;
        p.norm = r.norm;
        p.mean = r.mean;
        p.maxabs = r.maxabs;
        std::copy(r.sketch.begin(), r.sketch.end(), p.sketch);
    }
    guarded([=, this] {
        replace_leg_table(path_.string(), file_, leg, "fingerprints", fingerprint_type(true), fingerprint_type(false), pods);
    });
}

void RunFileWriter::replace_adapter_norms(const std::string& leg, const std::vector<AdapterNormRow>& rows) {
    validate_leg_name(leg);
    std::vector<AdapterNormPod> pods(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        pods[i].update = rows[i].update;
        pods[i].layer = rows[i].layer;
        put(pods[i].projection, rows[i].projection, "adapter norm projection");
        pods[i].a_norm = rows[i].a_norm;
        pods[i].b_norm = rows[i].b_norm;
        pods[i].delta_norm = rows[i].delta_norm;
    }
    guarded([=, this] {
        replace_leg_table(path_.string(), file_, leg, "adapter_norms", adapter_norm_type(true), adapter_norm_type(false), pods);
    });
}

void RunFileWriter::replace_next_token(const std::string& leg, const std::vector<ProbeRow>& rows) {
    validate_leg_name(leg);
    guarded([=, this] { replace_leg_table(path_.string(), file_, leg, "next_token", probe_type(true), probe_type(false), rows); });
}

void RunFileWriter::write_localisation(const std::string& leg_a, const std::string& leg_b,
                                       const std::vector<LocalisedPoint>& points, const Attributes& attributes) {
    validate_comparison_pair(leg_a, leg_b);
    std::vector<LocalisedPod> pods(points.size());
    for (size_t i = 0; i < points.size(); ++i) {
        const LocalisedPoint& p = points[i];
        LocalisedPod& q = pods[i];
        q.update = p.update;
        q.micro_batch = p.micro_batch;
        q.layer = p.layer;
        put(q.op, p.op, "localised op");
        put(q.pass, p.pass, "localised pass");
        q.depth = p.depth;
        q.rel_diff = p.rel_diff;
        q.norm_rel_diff = p.norm_rel_diff;
        q.bound = p.bound;
        q.ratio = p.ratio;
    }
    guarded([=, this] {
        const std::string f = path_.string();
        const std::string path = localisation_path(leg_a, leg_b);
        h5::remove_link(f, file_, path);
        Handle group = h5::require_group(f, file_, path);
        Handle dataset = h5::create_table(f, group, "points", localised_type(true), 1024);
        h5::append_rows(f, dataset, localised_type(false), pods.data(), pods.size());
        h5::write_attributes(f, group, attributes);
    });
}

std::vector<FingerprintRow> RunFileReader::fingerprints(const std::string& leg) const {
    validate_leg_name(leg);
    std::vector<FingerprintRow> out;
    for (const auto& p : read_table<FingerprintPod>(path_.string(), file_, leg_path(leg) + "/fingerprints", fingerprint_type(false))) {
        FingerprintRow r;
        r.update = p.update;
        r.micro_batch = p.micro_batch;
        r.layer = p.layer;
        r.op = get(p.op);
        r.pass = get(p.pass);
        r.count = p.count;
        r.norm = p.norm;
        r.mean = p.mean;
        r.maxabs = p.maxabs;
        std::copy(std::begin(p.sketch), std::end(p.sketch), r.sketch.begin());
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<AdapterNormRow> RunFileReader::adapter_norms(const std::string& leg) const {
    validate_leg_name(leg);
    std::vector<AdapterNormRow> out;
    for (const auto& p : read_table<AdapterNormPod>(path_.string(), file_, leg_path(leg) + "/adapter_norms", adapter_norm_type(false)))
        out.push_back({p.update, p.layer, get(p.projection), p.a_norm, p.b_norm, p.delta_norm});
    return out;
}

std::vector<ProbeRow> RunFileReader::next_token(const std::string& leg) const {
    validate_leg_name(leg);
    return read_table<ProbeRow>(path_.string(), file_, leg_path(leg) + "/next_token", probe_type(false));
}

std::vector<std::pair<std::string, std::string>> RunFileReader::localisations() const {
    std::vector<std::pair<std::string, std::string>> out;
    if (!h5::exists(file_, "/localisation")) return out;
    Handle group = h5::open_group(path_.string(), file_, "/localisation");
    for (const auto& name : h5::child_names(path_.string(), group)) {
        const auto tilde = name.find('~');
        if (tilde != std::string::npos) out.emplace_back(name.substr(0, tilde), name.substr(tilde + 1));
    }
    return out;
}

std::vector<LocalisedPoint> RunFileReader::localisation_points(const std::string& leg_a, const std::string& leg_b) const {
    validate_comparison_pair(leg_a, leg_b);
    std::vector<LocalisedPoint> out;
    for (const auto& p : read_table<LocalisedPod>(path_.string(), file_, localisation_path(leg_a, leg_b) + "/points",
                                                  localised_type(false)))
        out.push_back({p.update, p.micro_batch, p.layer, get(p.op), get(p.pass), p.depth, p.rel_diff, p.norm_rel_diff,
                       p.bound, p.ratio});
    return out;
}

}  // namespace tandem::experiments
