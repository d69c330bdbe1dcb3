#pragma once
// The HDF5 run file (`run.h5`): everything a run measures. ONE writer (RunFileWriter) that every
// later piece extends, and one reader (RunFileReader) for the report and the GUI.
// The layout is documented precisely in docs/hdf5-layout.md; this header is its C++ face.
//
// Crash model (docs/hdf5-layout.md "Crash safety"): a writer never modifies the published file in
// place. RunFileWriter copies it to a hidden sibling (`.<name>.writing`), writes there, and commit()
// (or the destructor) closes, fsyncs and renames the copy over the published file, then fsyncs the
// folder. A writer killed at any moment leaves the previous complete file; readers (the GUI, h5py,
// h5dump) never see a half-written file and are never blocked by a writer. A copy costs O(file
// size) per commit, so commit per event batch (the runner: open a writer per batch), not per row.
// One writer per file at a time (an flock on the hidden copy; a second writer gets an error).
// Files use the earliest HDF5 file format, readable by every h5py / h5dump.
//
// Every function throws tandem::Error with a one-line message naming the file and object at fault.
#include "tandem/leg_name.h"  // validate_leg_name: legs are path components here
#include "tandem/measure/host_info.h"
#include "tandem/measure/probe_result.h"
#include "tandem/store/row_columns.h"  // the members of EvalRow and StepRow

#include <array>
#include <cstdint>
#include <limits>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace tandem::experiments {

// ---------------------------------------------------------------------------------------------
// Records

// A value of an HDF5 attribute as tandem writes them: int64, float64 or a UTF-8 string.
using AttrValue = std::variant<std::int64_t, double, std::string>;
using Attributes = std::map<std::string, AttrValue>;

// /experiment
struct ExperimentInfo {
    std::string name;            // experiment name ("clinical-tiny")
    std::string spec_json;       // the resolved spec, as in experiment.json's "spec" (< 60 KB)
    std::string spec_sha256;     // lowercase hex (docs/run-folder.md)
    std::string tandem_version;  // filled with TANDEM_VERSION when empty
    std::string run_id;          // the run folder's name, also the catalog's runs.id
    std::int64_t total_updates = -1;  // optimizer updates in the run's plan (-1: not recorded, older files)
    std::string base = {};       // where the base weights came from (prepare.json "base"); "" when unknown
    std::string base_sha256 = {};  // JSON object {"<file>": "<sha256 hex>"} of every file in base/; "" when unknown
    Attributes extra{};          // further /experiment attributes (asset digests, input warnings: PreparedRun::run_attributes)
};

// /legs/<leg>/eval and /legs/<leg>/steps — one row per evaluation and per optimizer update: their
// members are the lists in tandem/store/row_columns.h (docs/hdf5-layout.md, docs/leg-protocol.md).
#define TANDEM_ROW_MEMBER_INT(member, initial, absent) std::int64_t member = initial;
#define TANDEM_ROW_MEMBER_REAL(member, initial, ...) double member = initial;
struct EvalRow {
    TANDEM_EVAL_ROW(TANDEM_ROW_MEMBER_INT, TANDEM_ROW_MEMBER_REAL, TANDEM_ROW_MEMBER_REAL)
};
struct StepRow {
    TANDEM_STEP_ROW(TANDEM_ROW_MEMBER_INT, TANDEM_ROW_MEMBER_REAL, TANDEM_ROW_MEMBER_REAL)
};
#undef TANDEM_ROW_MEMBER_INT
#undef TANDEM_ROW_MEMBER_REAL

// /legs/<leg>/fingerprints — one row per recorded point (docs/observables.md): a compact summary of
// the tensor at (update, micro-batch, layer, op, pass).
inline constexpr int kFingerprintSketch = 16;
struct FingerprintRow {
    std::int64_t update = 0;
    std::int64_t micro_batch = 0;  // -1: the optimizer pass (after every micro-batch)
    std::int64_t layer = -1;       // -1: outside the decoder layers (tokens, labels, embed, final_norm, ce)
    std::string op;                // "q_proj.lora_A.out", "attention", ... (at most 31 bytes)
    std::string pass;              // "forward" | "backward" | "optimizer"
    std::int64_t count = 0;        // elements summarised
    double norm = 0, mean = 0, maxabs = 0;
    std::array<double, kFingerprintSketch> sketch{};
};

// /legs/<leg>/adapter_norms — at every evaluation, per layer and adapted projection: |A|, |B| and
// the update norm |Delta W| = |B A| * scaling (Frobenius norms).
struct AdapterNormRow {
    std::int64_t update = 0;
    std::int64_t layer = 0;
    std::string projection;        // "q_proj" ... "down_proj"
    double a_norm = 0, b_norm = 0, delta_norm = 0;
};

// /legs/<leg>/next_token — at every evaluation, the next-token distribution of each probe prompt: its
// kProbeTopK most likely ids (descending probability) and their probabilities.
inline constexpr int kProbeTopK = 32;
struct ProbeRow {
    std::int64_t update = 0;
    std::int64_t probe = 0;        // 0-based index in the probe set
    std::int64_t record = -1;      // index of the record in records.jsonl
    std::int64_t position = -1;    // token position whose next-token distribution this is
    std::array<std::int64_t, kProbeTopK> ids{};
    std::array<double, kProbeTopK> probs{};
};

// /legs/<leg>/timing attributes (docs/spec.md §Records). NaN / -1 mean "not measured"; unknown keys go in `extra`.
struct LegTiming {
    double model_load_s = -1;
    double tokenize_s = -1;
    double median_update_s = -1;       // median seconds per update over [window_first, window_last]
    std::int64_t window_first = -1;    // first update of the window (inclusive)
    std::int64_t window_last = -1;     // last update of the window (inclusive)
    double tokens_per_s = -1;          // trained (supervised) tokens per second
    double total_s = -1;               // wall time of the whole leg
    Attributes extra;
};

// /legs/<leg>/memory attributes (docs/spec.md §Records). -1 means "not measured".
struct LegMemory {
    std::int64_t peak_device_bytes = -1;
    std::int64_t peak_host_bytes = -1;
    Attributes extra;
};

// /comparisons/<legA>~<legB>/<series>: paired points of one series ("heldout_ce", "loss", ...).
struct PairedPoint {
    std::int64_t update = 0;
    double a = 0;     // legA's value
    double b = 0;     // legB's value
    double diff = 0;  // a - b
};

struct ComparisonSeries {
    std::string series;           // dataset name: "heldout_ce", "loss", "grad_norm", ...
    std::vector<PairedPoint> points;
    Attributes summary;           // mean_signed_diff, mean_abs_diff, max_abs_diff, sign_changes, ...
};

// /localisation/<legA>~<legB>/points — one row per point both legs recorded (docs/observables.md).
struct LocalisedPoint {
    std::int64_t update = 0, micro_batch = 0, layer = -1;
    std::string op, pass;
    std::int64_t depth = 0;      // chain depth (layers between the point and its pass's start)
    double rel_diff = 0;         // |sketch_a - sketch_b| / (4 |X_b|): estimates |X_a - X_b| / |X_b|
    double norm_rel_diff = 0;    // |norm_a - norm_b| / norm_b
    double bound = 0;            // the tolerance at this depth and update
    double ratio = 0;            // max(rel_diff, norm_rel_diff) / bound; > 1 = exceeds
};

// /envelope/<stack>/<series>: a seed envelope's statistics at one update (docs/hdf5-layout.md,
// docs/envelope.md). `std` is the sample standard deviation (ddof 1); quantiles are numpy's linear.
struct EnvelopePoint {
    std::int64_t update = 0;
    std::int64_t n = 0;          // members with a finite value here
    double min = 0, max = 0, mean = 0, std = 0;
    double q05 = 0, q25 = 0, q50 = 0, q75 = 0, q95 = 0;
};

// /distances/<legA>~<legB>/<name>: one distance of a pair at one evaluation (docs/thresholds.md).
// numerics: value = the leg's held-out CE, reference = the reference side's, difference = relative
// difference, scale = the error-model bound, distance = difference / scale.
// envelope: value = the leg's held-out CE, reference = the envelope's mean, difference = value - mean,
// scale = the envelope's std, distance = z.
struct DistancePoint {
    std::int64_t update = 0;
    double value = 0, reference = 0, difference = 0, scale = 0, distance = 0;
};

// /faults/<fault>/search: one probe of a fault's size search (docs/faults.md); 1 = the level caught it.
struct FaultProbeRow {
    std::int64_t step = 0;   // 0-based probe number of this fault
    double size = 0;
    std::int64_t l1 = 0, l2 = 0, l3 = 0, l4 = 0, gate = 0;
};

// /faults/<fault>: one fault of a `tandem faults` run.
struct FaultGroup {
    std::string fault;       // catalogue name (lower case, digits, '-')
    Attributes attributes;   // leg, size, the levels that fired, first updates, held-out CE differences
    std::vector<FaultProbeRow> probes;  // --size-search only
};

// The check levels stored per leg: /legs/<leg>/checks/<level>.
// Settings: the leg's optimizer settings as it reported them (docs/leg-protocol.md "settings").
// Optimizer: the leg's optimizer_check events (its steps replayed with the spec's AdamW), a JSON list.
enum class CheckLevel { L1, L2, L3, Settings, Optimizer };
const char* check_level_name(CheckLevel level);  // "l1", "l2", "l3", "settings", "optimizer"

// ---------------------------------------------------------------------------------------------
// Writer

class RunFileWriter {
public:
    // Starts a write session on `path`, which is created (the folder must exist) on first commit
    // when absent. An existing file that is not HDF5 is refused and left untouched.
    explicit RunFileWriter(const std::filesystem::path& path);
    // Commits what was written unless a write call threw (then the session's changes are dropped
    // and the published file stays as it was). Never throws.
    ~RunFileWriter();
    RunFileWriter(const RunFileWriter&) = delete;
    RunFileWriter& operator=(const RunFileWriter&) = delete;
    RunFileWriter(RunFileWriter&&) noexcept;
    RunFileWriter& operator=(RunFileWriter&&) noexcept;

    const std::filesystem::path& path() const { return path_; }

    // /host and /experiment attributes (replaced when written again).
    void write_host(const HostInfo& host);
    void write_experiment(const ExperimentInfo& experiment);

    // /probes/<device>: replaced when the device was probed before in this file.
    void write_probe(const ProbeResult& probe);

    // /legs/<leg>: created on first use. Leg names: [A-Za-z0-9_.+-], 1..64 characters, not "." or "..".
    void create_leg(const std::string& leg, const Attributes& attributes = {});  // implementation, device, ...
    void set_leg_attributes(const std::string& leg, const Attributes& attributes);  // merged
    void append_steps(const std::string& leg, const std::vector<StepRow>& rows);
    void append_eval(const std::string& leg, const std::vector<EvalRow>& rows);
    // The whole series replaced by `rows` (the runner rebuilding a leg's history from its events).
    void replace_steps(const std::string& leg, const std::vector<StepRow>& rows);
    void replace_eval(const std::string& leg, const std::vector<EvalRow>& rows);
    void write_timing(const std::string& leg, const LegTiming& timing);
    void write_memory(const std::string& leg, const LegMemory& memory);
    // A check result as JSON text (a scalar UTF-8 string dataset; replaced when written again).
    void write_check(const std::string& leg, CheckLevel level, const std::string& json);
    // /legs/<leg>/flags: the live gate's flags as a JSON array (docs/gate.md; replaced when written again).
    void write_flags(const std::string& leg, const std::string& json);
    // /legs/<leg>/fingerprints, /adapter_norms, /next_token (docs/observables.md): the whole table replaced
    // by `rows` (the runner keeps them equal to the leg's events).
    void replace_fingerprints(const std::string& leg, const std::vector<FingerprintRow>& rows);
    void replace_adapter_norms(const std::string& leg, const std::vector<AdapterNormRow>& rows);
    void replace_next_token(const std::string& leg, const std::vector<ProbeRow>& rows);
    // /localisation/<legA>~<legB> (docs/observables.md): its points table and attributes, replaced.
    void write_localisation(const std::string& leg_a, const std::string& leg_b,
                            const std::vector<LocalisedPoint>& points, const Attributes& attributes);

    // /comparisons/<legA>~<legB>/<series> (replaced when written again) and the group's attributes.
    void write_comparison(const std::string& leg_a, const std::string& leg_b, const ComparisonSeries& series);
    void set_comparison_attributes(const std::string& leg_a, const std::string& leg_b, const Attributes& attributes);

    // /envelope/<stack>: a seed envelope (replaced as a whole when written again): the group's
    // attributes, and per series (heldout_ce, loss, grad_norm) its statistics per update.
    void remove_envelope(const std::string& stack);
    void set_envelope_attributes(const std::string& stack, const Attributes& attributes);
    void write_envelope_series(const std::string& stack, const std::string& series, const std::vector<EnvelopePoint>& points);
    // /envelope/<stack>/member_mean_ce: per member, its mean held-out CE over the evaluations after update 0.
    void write_envelope_values(const std::string& stack, const std::string& name, const std::vector<double>& values);
    // /envelope/<stack>/members/<member>/{steps,eval}: a member run's series, as /legs/<leg>/ holds them.
    void write_envelope_member(const std::string& stack, const std::string& member, const std::vector<StepRow>& steps,
                               const std::vector<EvalRow>& evals, const Attributes& attributes);
    // /distances/<legA>~<legB>/<name> (replaced when written again) and the group's attributes.
    void write_distance(const std::string& leg_a, const std::string& leg_b, const std::string& name,
                        const std::vector<DistancePoint>& points, const Attributes& attributes);
    void set_distance_attributes(const std::string& leg_a, const std::string& leg_b, const Attributes& attributes);
    // /faults (replaced when written again): the group's attributes, the whole matrix as JSON text
    // (/faults/matrix, what the report reads) and one group per fault (what h5py users read).
    void write_faults(const Attributes& attributes, const std::string& matrix_json, const std::vector<FaultGroup>& faults);

    // Publishes everything written so far (atomic rename, fsynced). The writer stays usable: the
    // next write call starts a new copy. flush() is the same as commit().
    void commit();
    void flush() { commit(); }

    // Bytes the last session copied from the published file to start its working copy: 0 when it
    // started from the previous version instead (docs/hdf5-layout.md "Commit cost"). For tests.
    std::int64_t last_copied_bytes() const { return last_copied_bytes_; }

private:
    void ensure_open();
    bool reopen_previous_version();
    void discard() noexcept;
    void forget_previous_version() noexcept;
    template <class F>
    void guarded(F&& write);
    // Appends `rows` to the leg's table of their type (steps or eval), emptied first when `replace`.
    template <class Row>
    void write_rows(const std::string& leg, const std::vector<Row>& rows, bool replace);
    std::filesystem::path path_;
    std::filesystem::path temp_path_;
    std::filesystem::path spare_path_;  // the version published before the last commit (hard link)
    std::int64_t file_ = -1;  // hid_t of the hidden copy, -1 between sessions
    int lock_fd_ = -1;        // flock on the hidden copy while a session is open
    bool failed_ = false;     // a write threw: the session must not be committed
    // Double buffering: the writes of the last committed session, replayed onto the previous version
    // (spare_path_) to bring it up to the published one, so a session costs O(its rows), not a copy of
    // the whole file. Valid only while the published file is the one this writer committed.
    std::vector<std::function<void()>> session_writes_, last_session_writes_;
    std::uint64_t published_ino_ = 0, spare_ino_ = 0;
    std::int64_t last_copied_bytes_ = 0;
    bool replaying_ = false;
};

// ---------------------------------------------------------------------------------------------
// Reader

class RunFileReader {
public:
    // Opens read-only. Another HDF5 program holding the file locked is waited for up to `wait_s`
    // seconds (tandem's own writer never locks the published file). A reader sees the file as it
    // was when opened; reopen to see later commits.
    explicit RunFileReader(const std::filesystem::path& path, double wait_s = 5.0);
    ~RunFileReader();
    RunFileReader(const RunFileReader&) = delete;
    RunFileReader& operator=(const RunFileReader&) = delete;
    RunFileReader(RunFileReader&&) noexcept;
    RunFileReader& operator=(RunFileReader&&) noexcept;

    const std::filesystem::path& path() const { return path_; }

    std::optional<HostInfo> host() const;
    std::optional<ExperimentInfo> experiment() const;
    std::vector<ProbeResult> probes() const;            // sorted by device name
    std::vector<std::string> legs() const;              // sorted
    Attributes leg_attributes(const std::string& leg) const;
    std::vector<StepRow> steps(const std::string& leg) const;  // empty when none
    std::vector<EvalRow> eval(const std::string& leg) const;
    // Only the rows from index `first_row` on (empty when there are none): what a follower reads
    // after a commit, without reading the rows it already has.
    std::vector<StepRow> steps(const std::string& leg, std::size_t first_row) const;
    std::vector<EvalRow> eval(const std::string& leg, std::size_t first_row) const;
    std::optional<LegTiming> timing(const std::string& leg) const;
    std::optional<LegMemory> memory(const std::string& leg) const;
    std::optional<std::string> check(const std::string& leg, CheckLevel level) const;
    std::optional<std::string> flags(const std::string& leg) const;  // JSON array text
    std::vector<FingerprintRow> fingerprints(const std::string& leg) const;  // empty when none
    std::vector<AdapterNormRow> adapter_norms(const std::string& leg) const;
    std::vector<ProbeRow> next_token(const std::string& leg) const;  // the probe set's next-token rows
    // /localisation/<legA>~<legB>: pairs stored, and one pair's points and attributes.
    std::vector<std::pair<std::string, std::string>> localisations() const;
    std::vector<LocalisedPoint> localisation_points(const std::string& leg_a, const std::string& leg_b) const;
    std::optional<std::string> fault_matrix() const;  // /faults/matrix (JSON text); nullopt: not a faults run
    std::vector<FaultProbeRow> fault_probes(const std::string& fault) const;  // /faults/<fault>/search
    std::vector<std::pair<std::string, std::string>> comparisons() const;  // (legA, legB) pairs
    Attributes comparison_attributes(const std::string& leg_a, const std::string& leg_b) const;
    std::vector<ComparisonSeries> comparison_series(const std::string& leg_a, const std::string& leg_b) const;

    // Seed envelopes stored in the file (/envelope/<stack>), sorted; their series and members.
    std::vector<std::string> envelope_stacks() const;
    std::vector<EnvelopePoint> envelope_series(const std::string& stack, const std::string& series) const;
    std::vector<double> envelope_values(const std::string& stack, const std::string& name) const;
    std::vector<std::string> envelope_members(const std::string& stack) const;
    std::vector<StepRow> envelope_member_steps(const std::string& stack, const std::string& member) const;
    std::vector<EvalRow> envelope_member_eval(const std::string& stack, const std::string& member) const;
    // /distances/<legA>~<legB>/<name>; empty when absent.
    std::vector<DistancePoint> distance(const std::string& leg_a, const std::string& leg_b, const std::string& name) const;

    // Any object's attributes by HDF5 path ("/host", "/legs/engine/timing"); empty when absent.
    Attributes attributes(const std::string& object_path) const;

private:
    // timing() and memory(): /legs/<leg>/<name>'s attributes into a Record (what `fields` do not
    // know goes in its `extra`); nullopt when the leg has no such group.
    template <class Record, class Fields>
    std::optional<Record> leg_record(const std::string& leg, const std::string& name, const Fields& fields) const;

    std::filesystem::path path_;
    std::int64_t file_ = -1;  // hid_t
};

}  // namespace tandem::experiments
