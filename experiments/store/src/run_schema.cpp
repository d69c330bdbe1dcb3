// The run file's schema (run_schema.h): the row types' field lists, paths, name rules, attributes.
#include "run_schema.h"

#include "tandem/store/row_bits.h"

#include <algorithm>
#include <sstream>

namespace tandem::experiments::schema {

namespace {

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

}  // namespace

Handle compound_type(bool file, size_t memory_size, const std::vector<Field>& fields) {
    Handle type(H5Tcreate(H5T_COMPOUND, file ? 4096 : memory_size), H5Tclose);
    size_t packed = 0;
    for (const Field& f : fields) {
        Handle owned;
        hid_t t = -1;
        switch (f.kind) {
            case Field::Int: t = file ? H5T_STD_I64LE : H5T_NATIVE_INT64; break;
            case Field::Real: t = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE; break;
            case Field::Text: owned = fixed_string(f.count); break;
            case Field::Ints: owned = i64_array(f.count, file); break;
            case Field::Reals: owned = f64_array(f.count, file); break;
        }
        if (owned.valid()) t = owned;
        H5Tinsert(type, f.name, file ? packed : f.offset, t);
        packed += H5Tget_size(t);
    }
    if (file) H5Tset_size(type, packed);
    return type;
}

size_t field_bytes(const Field& f) {
    switch (f.kind) {
        case Field::Int: return sizeof(std::int64_t);
        case Field::Real: return sizeof(double);
        case Field::Text: return f.count;
        case Field::Ints: return f.count * sizeof(std::int64_t);
        case Field::Reals: return f.count * sizeof(double);
    }
    return 0;
}

bool same_fields(const void* a, const void* b, const std::vector<Field>& fields) {
    const auto* pa = static_cast<const unsigned char*>(a);
    const auto* pb = static_cast<const unsigned char*>(b);
    for (const Field& f : fields)
        if (std::memcmp(pa + f.offset, pb + f.offset, field_bytes(f)) != 0) return false;
    return true;
}

// The field lists. INT/REAL: one value; TEXT: a fixed-size string; INTS/REALS: an array.
#define INT(Row, m) Field{#m, offsetof(Row, m), Field::Int}
#define REAL(Row, m) Field{#m, offsetof(Row, m), Field::Real}
#define TEXT(Row, m, n) Field{#m, offsetof(Row, m), Field::Text, n}
#define INTS(Row, m, n) Field{#m, offsetof(Row, m), Field::Ints, n}
#define REALS(Row, m, n) Field{#m, offsetof(Row, m), Field::Reals, n}

// StepRow's and EvalRow's lists come from tandem/store/row_columns.h, in the rows' member order.
#define STEP_INT(m, ...) INT(StepRow, m),
#define STEP_REAL(m, ...) REAL(StepRow, m),
#define EVAL_INT(m, ...) INT(EvalRow, m),
#define EVAL_REAL(m, ...) REAL(EvalRow, m),
const std::vector<Field>& step_fields() {
    static const std::vector<Field> fields{TANDEM_STEP_ROW(STEP_INT, STEP_REAL, STEP_REAL)};
    return fields;
}
const std::vector<Field>& eval_fields() {
    static const std::vector<Field> fields{TANDEM_EVAL_ROW(EVAL_INT, EVAL_REAL, EVAL_REAL)};
    return fields;
}
#undef STEP_INT
#undef STEP_REAL
#undef EVAL_INT
#undef EVAL_REAL

Handle step_type(bool file) { return compound_type(file, sizeof(StepRow), step_fields()); }
Handle eval_type(bool file) { return compound_type(file, sizeof(EvalRow), eval_fields()); }

Handle paired_type(bool file) {
    return compound_type(file, sizeof(PairedPoint),
                         {INT(PairedPoint, update), REAL(PairedPoint, a), REAL(PairedPoint, b), REAL(PairedPoint, diff)});
}

Handle probe_row_type(bool file) {
    using R = FaultProbeRow;
    return compound_type(file, sizeof(R), {INT(R, step), REAL(R, size), INT(R, l1), INT(R, l2), INT(R, l3), INT(R, l4), INT(R, gate)});
}

Handle envelope_type(bool file) {
    using P = EnvelopePoint;
    return compound_type(file, sizeof(P), {INT(P, update), INT(P, n), REAL(P, min), REAL(P, max), REAL(P, mean), REAL(P, std),
                                           REAL(P, q05), REAL(P, q25), REAL(P, q50), REAL(P, q75), REAL(P, q95)});
}

Handle distance_type(bool file) {
    using P = DistancePoint;
    return compound_type(file, sizeof(P), {INT(P, update), REAL(P, value), REAL(P, reference), REAL(P, difference),
                                           REAL(P, scale), REAL(P, distance)});
}

Handle f64_type(bool file) { return Handle(H5Tcopy(file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE), H5Tclose); }

Handle fingerprint_type(bool file) {
    using P = FingerprintPod;
    return compound_type(file, sizeof(P), {INT(P, update), INT(P, micro_batch), INT(P, layer), TEXT(P, op, kOpChars),
                                           TEXT(P, pass, kPassChars), INT(P, count), REAL(P, norm), REAL(P, mean),
                                           REAL(P, maxabs), REALS(P, sketch, kFingerprintSketch)});
}

Handle adapter_norm_type(bool file) {
    using P = AdapterNormPod;
    return compound_type(file, sizeof(P), {INT(P, update), INT(P, layer), TEXT(P, projection, kProjectionChars),
                                           REAL(P, a_norm), REAL(P, b_norm), REAL(P, delta_norm)});
}

Handle probe_type(bool file) {
    using P = ProbeRow;
    return compound_type(file, sizeof(P), {INT(P, update), INT(P, probe), INT(P, record), INT(P, position),
                                           INTS(P, ids, kProbeTopK), REALS(P, probs, kProbeTopK)});
}

Handle localised_type(bool file) {
    using P = LocalisedPod;
    return compound_type(file, sizeof(P), {INT(P, update), INT(P, micro_batch), INT(P, layer), TEXT(P, op, kOpChars),
                                           TEXT(P, pass, kPassChars), INT(P, depth), REAL(P, rel_diff),
                                           REAL(P, norm_rel_diff), REAL(P, bound), REAL(P, ratio)});
}

#undef INT
#undef REAL
#undef TEXT
#undef INTS
#undef REALS

std::string localisation_path(const std::string& a, const std::string& b) { return "/localisation/" + a + "~" + b; }

void validate_fault_name(const std::string& f, const std::string& fault) {
    if (fault.empty() || fault == "matrix" || fault.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
        throw Error(f + ": fault name '" + fault + "' is not lower case letters, digits and '-'");
}

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

std::int64_t int_attr(const Attributes& a, const std::string& key, std::int64_t fallback) {
    auto it = a.find(key);
    if (it == a.end()) return fallback;
    if (const auto* i = std::get_if<std::int64_t>(&it->second)) return *i;
    if (const auto* d = std::get_if<double>(&it->second)) return static_cast<std::int64_t>(*d);
    return fallback;
}

double double_attr(const Attributes& a, const std::string& key, double fallback) {
    auto it = a.find(key);
    if (it == a.end()) return fallback;
    if (const auto* d = std::get_if<double>(&it->second)) return *d;
    if (const auto* i = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*i);
    return fallback;
}

const std::vector<AttrField<HostInfo>>& host_fields() {
    using H = HostInfo;
    static const std::vector<AttrField<H>> fields{
        {"cpu_model", &H::cpu_model}, {"logical_cores", &H::logical_cores}, {"physical_cores", &H::physical_cores},
        {"memory_total_bytes", &H::memory_total_bytes}, {"memory_available_bytes", &H::memory_available_bytes},
        {"llc_bytes", &H::llc_bytes}, {"os", &H::os}, {"kernel", &H::kernel}, {"machine", &H::machine},
        {"hostname", &H::hostname}, {"tandem_version", &H::tandem_version}};
    return fields;
}
const std::vector<AttrField<LegTiming>>& timing_fields() {
    using T = LegTiming;
    static const std::vector<AttrField<T>> fields{
        {"model_load_s", &T::model_load_s}, {"tokenize_s", &T::tokenize_s}, {"median_update_s", &T::median_update_s},
        {"window_first", &T::window_first}, {"window_last", &T::window_last}, {"tokens_per_s", &T::tokens_per_s},
        {"total_s", &T::total_s}};
    return fields;
}
const std::vector<AttrField<LegMemory>>& memory_fields() {
    static const std::vector<AttrField<LegMemory>> fields{{"peak_device_bytes", &LegMemory::peak_device_bytes},
                                                         {"peak_host_bytes", &LegMemory::peak_host_bytes}};
    return fields;
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

// HDF5's own file locking ("unable to lock file, errno = 11, ..."): another HDF5 program holds it.
// Match the whole phrase: other messages contain "lock" too ("sblock->base_addr" of a truncated file).
bool is_lock_conflict(const std::string& detail) {
    return detail.find("unable to lock file") != std::string::npos;
}

}  // namespace tandem::experiments::schema

namespace tandem::experiments {

bool same_bits(const StepRow& a, const StepRow& b) { return schema::same_fields(&a, &b, schema::step_fields()); }
bool same_bits(const EvalRow& a, const EvalRow& b) { return schema::same_fields(&a, &b, schema::eval_fields()); }

}  // namespace tandem::experiments

namespace tandem::experiments {

const char* check_level_name(CheckLevel level) {
    switch (level) {
        case CheckLevel::L1: return "l1";
        case CheckLevel::L2: return "l2";
        case CheckLevel::L3: return "l3";
        case CheckLevel::Settings: return "settings";
        case CheckLevel::Optimizer: return "optimizer";
    }
    return "?";
}

}  // namespace tandem::experiments
