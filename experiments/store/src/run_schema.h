#pragma once
// The run file's schema (docs/hdf5-layout.md), shared by its writer (run_writer.cpp) and reader
// (run_reader.cpp); private to tandem_store. Every row type is one field list (run_schema.cpp):
// packed little-endian in the file in field order, at the struct's own offsets in memory. Also the
// object paths, the name rules and the attribute readers.
#include "hdf5_util.h"
#include "tandem/error.h"
#include "tandem/store/run_file.h"

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace tandem::experiments::schema {

using h5::Handle;

inline constexpr const char* kFormatName = "tandem-run";
inline constexpr std::int64_t kFormatVersion = 1;
inline constexpr hsize_t kStepChunkRows = 1024;
inline constexpr hsize_t kEvalChunkRows = 64;
inline constexpr size_t kOpChars = 32, kPassChars = 12, kProjectionChars = 12;

// ---- row types ---------------------------------------------------------------------------------

// One field of a row type: a member of the row's struct stored as a 64-bit integer, a double, a
// fixed-size NUL-padded string (`count` bytes) or an array of `count` integers or doubles.
struct Field {
    enum Kind { Int, Real, Text, Ints, Reals };
    const char* name;
    size_t offset;
    Kind kind;
    size_t count = 1;
};
// The compound type of the row with these fields: `file` for the file's (packed, little-endian),
// else the memory type (native, at the fields' offsets in a struct of `memory_size` bytes).
Handle compound_type(bool file, size_t memory_size, const std::vector<Field>& fields);
// The bytes a field takes in memory, and whether two rows of a type hold the same bytes in every field
// (padding between fields is not compared).
size_t field_bytes(const Field& f);
bool same_fields(const void* a, const void* b, const std::vector<Field>& fields);

// The rows observations are stored as (strings as fixed-size fields, h5py reads them as bytes).
struct FingerprintPod {
    std::int64_t update, micro_batch, layer;
    char op[kOpChars];
    char pass[kPassChars];
    std::int64_t count;
    double norm, mean, maxabs;
    double sketch[kFingerprintSketch];
};

struct AdapterNormPod {
    std::int64_t update, layer;
    char projection[kProjectionChars];
    double a_norm, b_norm, delta_norm;
};

struct LocalisedPod {
    std::int64_t update, micro_batch, layer;
    char op[kOpChars];
    char pass[kPassChars];
    std::int64_t depth;
    double rel_diff, norm_rel_diff, bound, ratio;
};

const std::vector<Field>& step_fields();  // StepRow's field list
const std::vector<Field>& eval_fields();  // EvalRow's field list
Handle step_type(bool file);       // StepRow: /legs/<leg>/steps
Handle eval_type(bool file);       // EvalRow: /legs/<leg>/eval
Handle paired_type(bool file);     // PairedPoint: /comparisons/<a>~<b>/<series>
Handle probe_row_type(bool file);  // FaultProbeRow: /faults/<fault>/search
Handle envelope_type(bool file);   // EnvelopePoint: /envelope/<stack>/<series>
Handle distance_type(bool file);   // DistancePoint: /distances/<a>~<b>/<name>
Handle f64_type(bool file);        // a plain double
Handle fingerprint_type(bool file);    // FingerprintPod: /legs/<leg>/fingerprints
Handle adapter_norm_type(bool file);   // AdapterNormPod: /legs/<leg>/adapter_norms
Handle probe_type(bool file);          // ProbeRow: /legs/<leg>/next_token
Handle localised_type(bool file);      // LocalisedPod: /localisation/<a>~<b>/points

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

// The tensor site a fingerprint row and a localised point both name (update, micro-batch, layer,
// op, pass), copied into its pod; `what` names the record in the error of a too-long name.
template <class Pod, class Row>
void put_site(Pod& pod, const Row& row, const std::string& what) {
    pod.update = row.update;
    pod.micro_batch = row.micro_batch;
    pod.layer = row.layer;
    put(pod.op, row.op, (what + " op").c_str());
    put(pod.pass, row.pass, (what + " pass").c_str());
}

// ---- paths and name rules ------------------------------------------------------------------------

std::string leg_path(const std::string& leg);
std::string comparison_path(const std::string& a, const std::string& b);
std::string distance_path(const std::string& a, const std::string& b);
std::string envelope_path(const std::string& stack);
std::string localisation_path(const std::string& a, const std::string& b);
void validate_comparison_pair(const std::string& a, const std::string& b);
void validate_series_name(const std::string& series);
void validate_fault_name(const std::string& f, const std::string& fault);
void validate_probe_device(const std::string& device);
void validate_direction(const std::string& name);

// ---- attributes ------------------------------------------------------------------------------------

std::string text_attr(const Attributes& a, const std::string& key);
std::int64_t int_attr(const Attributes& a, const std::string& key, std::int64_t fallback = 0);
double double_attr(const Attributes& a, const std::string& key, double fallback = -1);

// ---- records kept as attributes (/host, /legs/<leg>/timing, /legs/<leg>/memory) -------------------

// One attribute of a record: its name and the member it holds, written and read through one list so
// a field is named once. An absent attribute leaves the member's default.
template <class Record>
struct AttrField {
    const char* name;
    std::variant<double Record::*, std::int64_t Record::*, std::string Record::*> member;
};
const std::vector<AttrField<HostInfo>>& host_fields();  // all but built_with_cuda (a 0/1 integer)
const std::vector<AttrField<LegTiming>>& timing_fields();
const std::vector<AttrField<LegMemory>>& memory_fields();

template <class Record>
void put_fields(Attributes& a, const Record& record, const std::vector<AttrField<Record>>& fields) {
    for (const auto& f : fields) std::visit([&](auto member) { a[f.name] = record.*member; }, f.member);
}
// Reads the fields' attributes into `record` and removes them from `a`: what is left is the
// record's `extra` (keys a later version or another tool wrote).
template <class Record>
void take_fields(Attributes& a, Record& record, const std::vector<AttrField<Record>>& fields) {
    for (const auto& f : fields) {
        std::visit(
            [&](auto member) {
                auto& value = record.*member;
                using T = std::remove_reference_t<decltype(value)>;
                if constexpr (std::is_same_v<T, double>)
                    value = double_attr(a, f.name, value);
                else if constexpr (std::is_same_v<T, std::int64_t>)
                    value = int_attr(a, f.name, value);
                else
                    value = text_attr(a, f.name);
            },
            f.member);
        a.erase(f.name);
    }
}

// ---- file access -------------------------------------------------------------------------------------

// File access without HDF5's own flock: the writer locks its hidden copy itself, and the published
// file is never opened for writing.
Handle unlocked_file_access();
// HDF5's own file locking ("unable to lock file, errno = 11, ..."): another HDF5 program holds it.
bool is_lock_conflict(const std::string& detail);

// The names of the group at `path`'s members (legs, probes, comparisons, ...); empty when the group
// does not exist.
inline std::vector<std::string> child_names_at(const std::string& file_name, hid_t file, const std::string& path) {
    if (!h5::exists(file, path)) return {};
    Handle group = h5::open_group(file_name, file, path);
    return h5::child_names(file_name, group);
}

// A 1-D table of `Row`s read as `memory_type`, from row `first_row` on (a follower reading what was
// appended since it last looked); empty when the table does not exist or has no row from there.
template <class Row>
std::vector<Row> read_table(const std::string& file_name, hid_t file, const std::string& path, hid_t memory_type,
                            std::size_t first_row = 0) {
    if (!h5::exists(file, path)) return {};
    Handle dataset(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dataset.valid()) h5::fail(file_name, "cannot open " + path);
    const hsize_t total = h5::row_count(file_name, dataset);
    if (first_row >= total) return {};
    std::vector<Row> rows(total - first_row);
    h5::read_rows(file_name, dataset, memory_type, first_row, rows.size(), rows.data());
    return rows;
}

}  // namespace tandem::experiments::schema
