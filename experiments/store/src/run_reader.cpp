// The HDF5 run file's reader (tandem/store/run_file.h; layout docs/hdf5-layout.md, schema run_schema.h).
#include "tandem/store/run_file.h"

#include "run_schema.h"
#include "tandem/join.h"  // split_list
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
using namespace schema;

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
    Attributes a = attributes("/host");
    HostInfo h;
    take_fields(a, h, host_fields());
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
    for (const auto& device : child_names_at(path_.string(), file_, "/probes")) {
        const Attributes a = attributes("/probes/" + device);
        ProbeResult p;
        p.device = text_attr(a, "device");
        if (p.device.empty()) p.device = device;
        p.device_name = text_attr(a, "device_name");
        p.bytes = int_attr(a, "bytes");
        p.memory_available_bytes = int_attr(a, "memory_available_bytes", 0);
        p.repeats = static_cast<std::int32_t>(int_attr(a, "repeats"));
        p.warmup = static_cast<std::int32_t>(int_attr(a, "warmup"));
        p.method = text_attr(a, "method");
        p.timestamp = text_attr(a, "timestamp");
        p.pcie_link = text_attr(a, "pcie_link");
        p.pcie_source = text_attr(a, "pcie_source");
        for (const auto& name : split_list(text_attr(a, "directions")))
            p.directions.push_back({name, int_attr(a, "bytes_counted_" + name), double_attr(a, "best_s_" + name),
                                    double_attr(a, "median_s_" + name), double_attr(a, "gbps_" + name)});
        for (const auto& t : split_list(text_attr(a, "sgemm_threads"))) {
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
    return child_names_at(path_.string(), file_, "/legs");
}

Attributes RunFileReader::leg_attributes(const std::string& leg) const {
    validate_leg_name(leg);
    return attributes(leg_path(leg));
}

std::vector<StepRow> RunFileReader::steps(const std::string& leg) const { return steps(leg, 0); }
std::vector<EvalRow> RunFileReader::eval(const std::string& leg) const { return eval(leg, 0); }

std::vector<StepRow> RunFileReader::steps(const std::string& leg, std::size_t first_row) const {
    validate_leg_name(leg);
    return read_table<StepRow>(path_.string(), file_, leg_path(leg) + "/steps", step_type(false), first_row);
}

std::vector<EvalRow> RunFileReader::eval(const std::string& leg, std::size_t first_row) const {
    validate_leg_name(leg);
    return read_table<EvalRow>(path_.string(), file_, leg_path(leg) + "/eval", eval_type(false), first_row);
}

template <class Record, class Fields>
std::optional<Record> RunFileReader::leg_record(const std::string& leg, const std::string& name, const Fields& fields) const {
    validate_leg_name(leg);
    const std::string path = leg_path(leg) + "/" + name;
    if (!h5::exists(file_, path)) return std::nullopt;
    Attributes a = attributes(path);
    Record r;
    take_fields(a, r, fields);
    r.extra = std::move(a);
    return r;
}

std::optional<LegTiming> RunFileReader::timing(const std::string& leg) const {
    return leg_record<LegTiming>(leg, "timing", timing_fields());
}

std::optional<LegMemory> RunFileReader::memory(const std::string& leg) const {
    return leg_record<LegMemory>(leg, "memory", memory_fields());
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

namespace {
// The leg pairs of "<legA>~<legB>" group names (/comparisons, /localisation); other names are skipped.
std::vector<std::pair<std::string, std::string>> leg_pairs(const std::vector<std::string>& names) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& name : names)
        if (const auto tilde = name.find('~'); tilde != std::string::npos)
            out.emplace_back(name.substr(0, tilde), name.substr(tilde + 1));
    return out;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> RunFileReader::comparisons() const {
    return leg_pairs(child_names_at(path_.string(), file_, "/comparisons"));
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


std::vector<std::string> RunFileReader::envelope_stacks() const {
    return child_names_at(path_.string(), file_, "/envelope");
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
    return child_names_at(path_.string(), file_, path);
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

// ---- fingerprints, evaluation observables and localisations (docs/observables.md) -----------------

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
    return leg_pairs(child_names_at(path_.string(), file_, "/localisation"));
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
