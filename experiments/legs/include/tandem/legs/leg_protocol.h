#pragma once
// The leg protocol (docs/leg-protocol.md): a leg writes one JSON object per line to stdout, every
// object with "v" (protocol version, 1) and "event" (hello, l1, l2, l3, step, eval, timing, memory,
// checkpoint, resume, done, error, fingerprints, observables). Unknown fields and unknown events are ignored; a malformed line
// is kept (with its content) in LegTrace::malformed and never throws.
//
// LegTrace is everything one leg said, accumulated event by event. A resumed leg repeats updates
// after its checkpoint: a step/eval for update u replaces every earlier entry with update >= u, so
// the trace holds the trajectory of the latest attempt.
#include "tandem/store/run_file.h"  // StepRow, EvalRow

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::experiments {

inline constexpr int kLegProtocolVersion = 1;

// The event kinds of protocol version 1 (docs/leg-protocol.md). `Unknown`: a well-formed event of a
// kind this version does not know (ignored, forward compatibility); `Malformed`: not an event at all.
enum class EventKind {
    Hello, Resume, L1, L2, L3, Step, Eval, Timing, Memory, Checkpoint, Done, Error, Fingerprints, Observables,
    Settings, OptimizerCheck, Unknown, Malformed
};
// "hello", "step", "settings", ... as on the wire; "unknown" / "malformed" for the last two.
const char* event_kind_name(EventKind kind);

// Non-finite numbers on the wire (JSON has none): the strings "NaN", "Infinity", "-Infinity"
// (Python's float() and JavaScript's Number() read them back). Readers also take null as NaN:
// events.jsonl files written before the explicit form wrote every non-finite number as null.
nlohmann::json protocol_number(double x);
// A protocol number field's value: a JSON number, one of the three strings, or null (NaN);
// nullopt for anything else (absent, another string, an object ...).
std::optional<double> protocol_number_value(const nlohmann::json& v);

struct TensorDigest {
    std::string name;   // HF / peft file name
    std::string kind;   // "base" | "adapter"
    std::vector<int64_t> shape;
    double sum = 0, sumsq = 0, maxabs = 0;
    std::string sha256;  // of the float32 little-endian bytes, row-major
};

struct L3Record {
    int64_t index = 0;                 // into records.jsonl
    std::string id;
    std::vector<int32_t> ids;          // after truncation
    int64_t boundary = -1;             // first supervised token (untruncated)
    int64_t supervised_count = 0;      // after truncation
    int64_t full_length = 0;           // before truncation
    std::optional<int64_t> truncated_at;  // kept tokens when truncated
    std::string text;                  // the rendered full text
};

struct LegTrace {
    nlohmann::json hello = nlohmann::json::object();  // the last hello (implementation, stack, versions, ...)
    std::optional<double> l1_ce;
    int64_t l1_tokens = 0;
    bool has_l2 = false;
    std::vector<TensorDigest> l2;
    bool has_l3 = false;
    std::string l3_template;
    int64_t l3_max_len = 0;
    std::vector<L3Record> l3;
    // The optimizer as the leg built it (the `settings` event, before update 0): judged against the spec
    // (judge/series.h settings_differences); absent when the leg does not report it.
    std::optional<nlohmann::json> settings;
    // The leg's optimizer steps replayed with the spec's AdamW (`optimizer_check` events, by update; a
    // resumed leg's repeat replaces): judged per update (judge/series.h optimizer_check).
    nlohmann::json optimizer_checks = nlohmann::json::array();
    std::vector<StepRow> steps;
    std::vector<EvalRow> evals;
    std::vector<int64_t> step_input_tokens;  // parallel to steps (non-padding tokens), -1 when absent
    // docs/observables.md: fingerprints of the observed updates; per-evaluation adapter norms and probes.
    std::vector<FingerprintRow> fingerprints;
    std::vector<AdapterNormRow> adapter_norms;
    std::vector<ProbeRow> probes;
    int64_t observation_events = 0;  // fingerprints + observables events applied (a change counter)
    double model_load_s = -1, tokenize_s = -1, setup_s = -1, train_s = -1, total_s = -1;
    int64_t peak_host_bytes = -1, peak_device_bytes = -1;
    std::vector<std::pair<int64_t, std::string>> checkpoints;  // (update, path relative to run)
    int resumes = 0;
    bool done = false;
    std::optional<std::string> error;
    std::vector<std::string> malformed;  // "line N: <reason>: <content>"
    int64_t lines = 0;

    std::string implementation() const;  // hello["implementation"] or ""
};

// Parses one line; nullopt (with `reason`) when it is not a protocol event object.
std::optional<nlohmann::json> parse_event_line(std::string_view line, std::string* reason);

// Applies one line to the trace; returns the event kind, Malformed when the line was not an event
// (it is then recorded in trace.malformed; a blank line is Malformed without being recorded).
// Never throws.
EventKind apply_event_line(LegTrace& trace, std::string_view line);

// Replays a whole events.jsonl (missing file: empty trace).
LegTrace read_events_file(const std::filesystem::path& path);

// JSON forms stored in the run file's /legs/<leg>/checks/{l1,l2,l3} and read back by the report.
nlohmann::json l1_to_json(const LegTrace& t);
nlohmann::json l2_to_json(const LegTrace& t);
nlohmann::json l3_to_json(const LegTrace& t);
void l1_from_json(LegTrace& t, const nlohmann::json& j);
void l2_from_json(LegTrace& t, const nlohmann::json& j);
void l3_from_json(LegTrace& t, const nlohmann::json& j);

// Writes events (for the C++ engine leg): one line, flushed.
class EventWriter {
public:
    explicit EventWriter(std::FILE* out = stdout) : out_(out) {}
    void emit(const std::string& event, nlohmann::json fields);
    // Several events in ONE write (a step and the error it causes): a runner that stops the leg as
    // soon as it reads the first one still finds the second in the pipe.
    void emit_together(std::vector<std::pair<std::string, nlohmann::json>> events);
private:
    std::string line(const std::string& event, nlohmann::json fields) const;
    std::FILE* out_;
};

// The protocol's JSON of one update's fingerprints and of one evaluation's observables (the engine leg
// writes them; parse_* read them back, throwing tandem::Error naming the field that is wrong).
nlohmann::json fingerprints_event(int64_t update, const std::vector<FingerprintRow>& points);
std::vector<FingerprintRow> parse_fingerprints_event(const nlohmann::json& event);
nlohmann::json observables_event(int64_t update, const std::vector<AdapterNormRow>& norms, const std::vector<ProbeRow>& probes);
void parse_observables_event(const nlohmann::json& event, std::vector<AdapterNormRow>& norms, std::vector<ProbeRow>& probes);

// L2 digest of a float32 tensor (sum, sum of squares, max |x| in float64; sha256 of the LE bytes).
TensorDigest digest_tensor(const std::string& name, const std::string& kind, const std::vector<int64_t>& shape,
                           const float* data, size_t count);

}  // namespace tandem::experiments
