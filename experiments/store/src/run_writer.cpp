// The HDF5 run file's writer (tandem/store/run_file.h; layout docs/hdf5-layout.md, schema run_schema.h).
#include "tandem/store/run_file.h"

#include "run_schema.h"
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
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

namespace tandem::experiments {

using h5::Handle;
using namespace schema;

namespace {

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
        Attributes attributes;
        put_fields(attributes, host, host_fields());
        attributes["built_with_cuda"] = std::int64_t{host.built_with_cuda ? 1 : 0};
        h5::write_attributes(f, group, attributes);
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
                              {"memory_available_bytes", probe.memory_available_bytes},
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

// A leg's steps and eval tables: appended to, or emptied first (`replace`: a resumed leg's rows).
namespace {
template <class Row>
struct LegTable;
template <>
struct LegTable<StepRow> {
    static constexpr const char* name = "steps";
    static Handle type(bool file) { return step_type(file); }
    static constexpr hsize_t chunk_rows = kStepChunkRows;
};
template <>
struct LegTable<EvalRow> {
    static constexpr const char* name = "eval";
    static Handle type(bool file) { return eval_type(file); }
    static constexpr hsize_t chunk_rows = kEvalChunkRows;
};
}  // namespace

template <class Row>
void RunFileWriter::write_rows(const std::string& leg, const std::vector<Row>& rows, bool replace) {
    validate_leg_name(leg);
    guarded([=, this] {  // by value: replayed in the next session (double buffering)
        using T = LegTable<Row>;
        write_table_rows(path_.string(), file_, leg, T::name, T::type(true), T::type(false), T::chunk_rows, rows.data(),
                         rows.size(), replace);
    });
}

void RunFileWriter::append_steps(const std::string& leg, const std::vector<StepRow>& rows) { write_rows(leg, rows, false); }
void RunFileWriter::replace_steps(const std::string& leg, const std::vector<StepRow>& rows) { write_rows(leg, rows, true); }
void RunFileWriter::append_eval(const std::string& leg, const std::vector<EvalRow>& rows) { write_rows(leg, rows, false); }
void RunFileWriter::replace_eval(const std::string& leg, const std::vector<EvalRow>& rows) { write_rows(leg, rows, true); }

void RunFileWriter::write_timing(const std::string& leg, const LegTiming& timing) {
    validate_leg_name(leg);
    guarded([=, this] {
        Handle group = h5::require_group(path_.string(), file_, leg_path(leg) + "/timing");
        Attributes attributes = timing.extra;
        put_fields(attributes, timing, timing_fields());
        h5::write_attributes(path_.string(), group, attributes);
    });
}

void RunFileWriter::write_memory(const std::string& leg, const LegMemory& memory) {
    validate_leg_name(leg);
    guarded([=, this] {
        Handle group = h5::require_group(path_.string(), file_, leg_path(leg) + "/memory");
        Attributes attributes = memory.extra;
        put_fields(attributes, memory, memory_fields());
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


// ---- fingerprints, evaluation observables and localisations (docs/observables.md) -----------------

void RunFileWriter::replace_fingerprints(const std::string& leg, const std::vector<FingerprintRow>& rows) {
    validate_leg_name(leg);
    std::vector<FingerprintPod> pods(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        const FingerprintRow& r = rows[i];
        FingerprintPod& p = pods[i];
        put_site(p, r, "fingerprint");
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
        put_site(q, p, "localised");
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

}  // namespace tandem::experiments
