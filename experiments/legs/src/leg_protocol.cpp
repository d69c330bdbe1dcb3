// Leg protocol: parsing events into a LegTrace, JSON forms of the checks, the engine leg's writer.
#include "tandem/legs/leg_protocol.h"

#include "tandem/error.h"
#include "tandem/sha256.h"

#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <limits>
#include <fstream>

namespace tandem::experiments {
namespace {

using nlohmann::json;

double num(const json& j, const char* key, double def) {
    auto it = j.find(key);
    if (it == j.end()) return def;
    return protocol_number_value(*it).value_or(def);
}
// An integer field; a float that is not an exact int64 (1e300, 2.5) is treated as absent rather
// than converted (the conversion would be undefined behaviour).
std::optional<int64_t> integer_value(const json& v) {
    if (v.is_number_unsigned()) {
        if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
        return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (!(d >= -9.2e18 && d <= 9.2e18) || d != std::trunc(d)) return std::nullopt;
        return static_cast<int64_t>(d);
    }
    return std::nullopt;
}
int64_t integer(const json& j, const char* key, int64_t def) {
    auto it = j.find(key);
    if (it == j.end()) return def;
    return integer_value(*it).value_or(def);
}
std::string text(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return "";
    return it->get<std::string>();
}
// A number field, NaN when absent or unreadable ("NaN", "Infinity", null: protocol_number_value).
double num_or_nan(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end()) return std::nan("");
    return protocol_number_value(*it).value_or(std::nan(""));
}

// Every non-finite float inside `j` replaced by its protocol string (EventWriter::emit).
void encode_non_finite(json& j) {
    if (j.is_number_float()) {
        if (!std::isfinite(j.get<double>())) j = protocol_number(j.get<double>());
    } else if (j.is_structured()) {
        for (auto& v : j) encode_non_finite(v);
    }
}

std::string clip_line(std::string_view line) {
    constexpr size_t kMax = 300;
    if (line.size() <= kMax) return std::string(line);
    return std::string(line.substr(0, kMax)) + "...(" + std::to_string(line.size()) + " bytes)";
}

TensorDigest digest_from_json(const json& d) {
    TensorDigest t;
    t.name = text(d, "name");
    t.kind = text(d, "kind");
    if (d.contains("shape") && d["shape"].is_array())
        for (const auto& s : d["shape"]) t.shape.push_back(integer_value(s).value_or(-1));
    t.sum = num_or_nan(d, "sum");
    t.sumsq = num_or_nan(d, "sumsq");
    t.maxabs = num_or_nan(d, "maxabs");
    t.sha256 = text(d, "sha256");
    return t;
}

// A step or eval event's fields, one per member of its row (tandem/store/row_columns.h): an absent
// integer is the list's `absent` value, an absent real NaN (cpu_s, say: the step-time flag then falls
// back to wall_s).
#define READ_INT(member, initial, absent) row.member = integer(j, #member, absent);
#define READ_REAL(member, ...) row.member = num_or_nan(j, #member);
StepRow step_row_from_json(const json& j) {
    StepRow row;
    TANDEM_STEP_ROW(READ_INT, READ_REAL, READ_REAL)
    return row;
}
EvalRow eval_row_from_json(const json& j) {
    EvalRow row;
    TANDEM_EVAL_ROW(READ_INT, READ_REAL, READ_REAL)
    return row;
}
#undef READ_INT
#undef READ_REAL

L3Record l3_record_from_json(const json& r) {
    L3Record x;
    x.index = integer(r, "index", -1);
    x.id = text(r, "id");
    if (r.contains("ids") && r["ids"].is_array())
        for (const auto& i : r["ids"]) {
            const auto id = integer_value(i);
            x.ids.push_back(id && *id >= 0 && *id <= INT32_MAX ? static_cast<int32_t>(*id) : -1);
        }
    x.boundary = integer(r, "boundary", -1);
    x.supervised_count = integer(r, "supervised_count", 0);
    x.full_length = integer(r, "full_length", static_cast<int64_t>(x.ids.size()));
    if (r.contains("truncated_at")) x.truncated_at = integer_value(r["truncated_at"]);
    x.text = text(r, "text");
    return x;
}

}  // namespace

json protocol_number(double x) {
    if (std::isnan(x)) return "NaN";
    if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
    return x;
}

std::optional<double> protocol_number_value(const json& v) {
    if (v.is_number()) return v.get<double>();
    if (v.is_null()) return std::nan("");
    if (v.is_string()) {
        const auto& s = v.get_ref<const std::string&>();
        if (s == "NaN") return std::nan("");
        if (s == "Infinity") return std::numeric_limits<double>::infinity();
        if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    }
    return std::nullopt;
}

const char* event_kind_name(EventKind kind) {
    switch (kind) {
        case EventKind::Hello: return "hello";
        case EventKind::Resume: return "resume";
        case EventKind::L1: return "l1";
        case EventKind::L2: return "l2";
        case EventKind::L3: return "l3";
        case EventKind::Step: return "step";
        case EventKind::Eval: return "eval";
        case EventKind::Timing: return "timing";
        case EventKind::Memory: return "memory";
        case EventKind::Checkpoint: return "checkpoint";
        case EventKind::Done: return "done";
        case EventKind::Error: return "error";
        case EventKind::Fingerprints: return "fingerprints";
        case EventKind::Observables: return "observables";
        case EventKind::Settings: return "settings";
        case EventKind::OptimizerCheck: return "optimizer_check";
        case EventKind::Unknown: return "unknown";
        case EventKind::Malformed: return "malformed";
    }
    return "malformed";
}

namespace {
EventKind event_kind_of(const std::string& name) {
    for (EventKind k : {EventKind::Hello, EventKind::Resume, EventKind::L1, EventKind::L2, EventKind::L3, EventKind::Step,
                        EventKind::Eval, EventKind::Timing, EventKind::Memory, EventKind::Checkpoint, EventKind::Done,
                        EventKind::Error, EventKind::Fingerprints, EventKind::Observables, EventKind::Settings,
                        EventKind::OptimizerCheck})
        if (name == event_kind_name(k)) return k;
    return EventKind::Unknown;
}
}  // namespace

std::string LegTrace::implementation() const { return text(hello, "implementation"); }

std::optional<json> parse_event_line(std::string_view line, std::string* reason) {
    json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    auto why = [&](const char* r) -> std::optional<json> {
        if (reason) *reason = r;
        return std::nullopt;
    };
    if (j.is_discarded()) return why("not JSON");
    if (!j.is_object()) return why("not a JSON object");
    if (!j.contains("v") || !j["v"].is_number_integer()) return why("no protocol version \"v\"");
    if (j["v"].get<int>() != kLegProtocolVersion) return why("unsupported protocol version");
    if (!j.contains("event") || !j["event"].is_string()) return why("no \"event\" string");
    return j;
}

EventKind apply_event_line(LegTrace& t, std::string_view line) {
    ++t.lines;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (line.empty()) return EventKind::Malformed;
    std::string reason;
    auto parsed = parse_event_line(line, &reason);
    if (!parsed) {
        t.malformed.push_back("line " + std::to_string(t.lines) + ": " + reason + ": " + clip_line(line));
        return EventKind::Malformed;
    }
    const json& j = *parsed;
    const std::string name = j["event"].get<std::string>();
    const EventKind kind = event_kind_of(name);
    try {
        switch (kind) {
        case EventKind::Hello:
            t.hello = j;
            break;
        case EventKind::L1:
            t.l1_ce = num_or_nan(j, "heldout_ce");
            t.l1_tokens = integer(j, "tokens", 0);
            break;
        case EventKind::L2:
            t.has_l2 = true;
            t.l2.clear();
            if (j.contains("tensors") && j["tensors"].is_array())
                for (const auto& d : j["tensors"]) t.l2.push_back(digest_from_json(d));
            break;
        case EventKind::L3:
            t.has_l3 = true;
            t.l3.clear();
            t.l3_template = text(j, "template");
            t.l3_max_len = integer(j, "max_len", 0);
            if (j.contains("records") && j["records"].is_array())
                for (const auto& r : j["records"]) t.l3.push_back(l3_record_from_json(r));
            break;
        case EventKind::Step: {
            const StepRow s = step_row_from_json(j);
            while (!t.steps.empty() && t.steps.back().update >= s.update) {
                t.steps.pop_back();
                t.step_input_tokens.pop_back();
            }
            t.steps.push_back(s);
            t.step_input_tokens.push_back(integer(j, "input_tokens", -1));
            break;
        }
        case EventKind::Eval: {
            const EvalRow e = eval_row_from_json(j);
            while (!t.evals.empty() && t.evals.back().update >= e.update) t.evals.pop_back();
            t.evals.push_back(e);
            break;
        }
        case EventKind::Timing:
            t.model_load_s = num(j, "model_load_s", t.model_load_s);
            t.tokenize_s = num(j, "tokenize_s", t.tokenize_s);
            t.setup_s = num(j, "setup_s", t.setup_s);
            t.train_s = num(j, "train_s", t.train_s);
            t.total_s = num(j, "total_s", t.total_s);
            break;
        case EventKind::Memory:
            t.peak_host_bytes = std::max(t.peak_host_bytes, integer(j, "peak_host_rss_bytes", -1));
            t.peak_device_bytes = std::max(t.peak_device_bytes, integer(j, "peak_device_bytes", -1));
            break;
        case EventKind::Checkpoint:
            t.checkpoints.emplace_back(integer(j, "update", -1), text(j, "path"));
            break;
        case EventKind::Resume:
            ++t.resumes;
            t.done = false;
            t.error.reset();
            break;
        case EventKind::Done:
            t.done = true;
            break;
        case EventKind::Error:
            t.error = text(j, "message");
            break;
        case EventKind::Fingerprints: {
            std::vector<FingerprintRow> rows = parse_fingerprints_event(j);
            const int64_t u = integer(j, "update", -1);
            // a resumed leg repeats updates: the latest attempt replaces what it repeats
            std::erase_if(t.fingerprints, [&](const FingerprintRow& r) { return r.update >= u; });
            t.fingerprints.insert(t.fingerprints.end(), rows.begin(), rows.end());
            ++t.observation_events;
            break;
        }
        case EventKind::Observables: {
            std::vector<AdapterNormRow> norms;
            std::vector<ProbeRow> probes;
            parse_observables_event(j, norms, probes);
            const int64_t u = integer(j, "update", -1);
            std::erase_if(t.adapter_norms, [&](const AdapterNormRow& r) { return r.update >= u; });
            std::erase_if(t.probes, [&](const ProbeRow& r) { return r.update >= u; });
            t.adapter_norms.insert(t.adapter_norms.end(), norms.begin(), norms.end());
            t.probes.insert(t.probes.end(), probes.begin(), probes.end());
            ++t.observation_events;
            break;
        }
        case EventKind::Settings: {
            // kept as sent (minus the envelope fields); its fields are read by the judge, which names
            // what it cannot read
            json s = j;
            for (const char* k : {"v", "event", "t"}) s.erase(k);
            if (!s.contains("groups") || !s["groups"].is_array()) throw Error("field 'groups' must be a list");
            t.settings = std::move(s);
            break;
        }
        case EventKind::OptimizerCheck: {
            if (!j.contains("update") || !j["update"].is_number_integer()) throw Error("field 'update' must be an integer");
            const int64_t u = j["update"].get<int64_t>();
            if (!protocol_number_value(j.value("max_ratio", json())))
                throw Error("field 'max_ratio' must be a number");
            json c = j;
            for (const char* k : {"v", "event", "t"}) c.erase(k);
            json kept = json::array();
            for (auto& x : t.optimizer_checks)
                if (x.value("update", int64_t{-1}) < u) kept.push_back(x);
            kept.push_back(std::move(c));
            t.optimizer_checks = std::move(kept);
            break;
        }
        case EventKind::Unknown:  // ignored (forward compatibility)
        case EventKind::Malformed:
            break;
        }
    } catch (const std::exception& e) {
        t.malformed.push_back("line " + std::to_string(t.lines) + ": bad " + name + " event (" + e.what() +
                              "): " + clip_line(line));
        return EventKind::Malformed;
    }
    return kind;
}

LegTrace read_events_file(const std::filesystem::path& path) {
    LegTrace t;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) apply_event_line(t, line);
    return t;
}

json l1_to_json(const LegTrace& t) {
    json j{{"tokens", t.l1_tokens}};
    j["heldout_ce"] = t.l1_ce ? protocol_number(*t.l1_ce) : json(nullptr);  // null: no l1 event
    return j;
}

json l2_to_json(const LegTrace& t) {
    json arr = json::array();
    for (const auto& d : t.l2)
        arr.push_back({{"name", d.name}, {"kind", d.kind}, {"shape", d.shape}, {"sum", protocol_number(d.sum)},
                       {"sumsq", protocol_number(d.sumsq)}, {"maxabs", protocol_number(d.maxabs)}, {"sha256", d.sha256}});
    return json{{"tensors", arr}};
}

json l3_to_json(const LegTrace& t) {
    json arr = json::array();
    for (const auto& r : t.l3) {
        json x{{"index", r.index}, {"id", r.id}, {"ids", r.ids}, {"boundary", r.boundary},
               {"supervised_count", r.supervised_count}, {"full_length", r.full_length}, {"text", r.text}};
        x["truncated_at"] = r.truncated_at ? json(*r.truncated_at) : json(nullptr);
        arr.push_back(std::move(x));
    }
    return json{{"template", t.l3_template}, {"max_len", t.l3_max_len}, {"records", arr}};
}

void l1_from_json(LegTrace& t, const json& j) {
    // null: no L1 value (and what files written before the explicit "NaN" form hold for a NaN).
    if (j.contains("heldout_ce") && !j["heldout_ce"].is_null()) t.l1_ce = protocol_number_value(j["heldout_ce"]);
    t.l1_tokens = integer(j, "tokens", 0);
}
void l2_from_json(LegTrace& t, const json& j) {
    t.has_l2 = true;
    t.l2.clear();
    if (j.contains("tensors"))
        for (const auto& d : j["tensors"]) t.l2.push_back(digest_from_json(d));
}
void l3_from_json(LegTrace& t, const json& j) {
    t.has_l3 = true;
    t.l3.clear();
    t.l3_template = text(j, "template");
    t.l3_max_len = integer(j, "max_len", 0);
    if (j.contains("records"))
        for (const auto& r : j["records"]) t.l3.push_back(l3_record_from_json(r));
}

std::string EventWriter::line(const std::string& event, json fields) const {
    json j = json::object();
    j["v"] = kLegProtocolVersion;
    j["event"] = event;
    j["t"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    encode_non_finite(fields);  // nlohmann would write NaN as null: say it explicitly
    for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = it.value();
    return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

void EventWriter::emit(const std::string& event, json fields) {
    const std::string text = line(event, std::move(fields));
    std::fwrite(text.data(), 1, text.size(), out_);
    std::fflush(out_);
}

void EventWriter::emit_together(std::vector<std::pair<std::string, json>> events) {
    std::string text;
    for (auto& [event, fields] : events) text += line(event, std::move(fields));
    // One fwrite into an empty stdio buffer of at least BUFSIZ: one write(2) while the lines fit.
    std::fflush(out_);
    std::fwrite(text.data(), 1, text.size(), out_);
    std::fflush(out_);
}

namespace {
[[noreturn]] void bad_field(const std::string& event, const std::string& field, const std::string& what) {
    throw Error(event + " event: field " + field + ": " + what);
}
int64_t need_int(const json& j, const char* key, const std::string& where) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) bad_field(where, key, "must be an integer");
    return it->get<int64_t>();
}
// A number: finite, or "NaN" / "Infinity" / "-Infinity" (protocol_number; null, as older legs wrote
// a non-finite value, reads as NaN).
double need_num(const json& j, const char* key, const std::string& where) {
    auto it = j.find(key);
    if (it == j.end()) bad_field(where, key, "is required");
    if (it->is_null()) return std::nan("");
    const auto v = protocol_number_value(*it);
    if (!v) bad_field(where, key, "must be a number, \"NaN\", \"Infinity\" or \"-Infinity\"");
    return *v;
}
std::string need_text(const json& j, const char* key, const std::string& where) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) bad_field(where, key, "must be a string");
    return it->get<std::string>();
}
json num_or_null(double x) { return protocol_number(x); }  // non-finite spelled out (docs/leg-protocol.md)
}  // namespace

json fingerprints_event(int64_t update, const std::vector<FingerprintRow>& points) {
    json arr = json::array();
    for (const auto& p : points) {
        json sk = json::array();
        for (double v : p.sketch) sk.push_back(num_or_null(v));
        arr.push_back({{"micro_batch", p.micro_batch}, {"layer", p.layer}, {"op", p.op}, {"pass", p.pass},
                       {"count", p.count}, {"norm", num_or_null(p.norm)}, {"mean", num_or_null(p.mean)},
                       {"maxabs", num_or_null(p.maxabs)}, {"sketch", sk}});
    }
    return json{{"update", update}, {"points", arr}};
}

std::vector<FingerprintRow> parse_fingerprints_event(const json& j) {
    const int64_t update = need_int(j, "update", "fingerprints");
    auto pts = j.find("points");
    if (pts == j.end() || !pts->is_array()) bad_field("fingerprints", "points", "must be a list");
    std::vector<FingerprintRow> out;
    for (size_t i = 0; i < pts->size(); ++i) {
        const json& p = (*pts)[i];
        const std::string where = "fingerprints (update " + std::to_string(update) + ", point " + std::to_string(i) + ")";
        if (!p.is_object()) bad_field(where, "points", "must be objects");
        FingerprintRow r;
        r.update = update;
        r.micro_batch = need_int(p, "micro_batch", where);
        r.layer = need_int(p, "layer", where);
        r.op = need_text(p, "op", where);
        r.pass = need_text(p, "pass", where);
        if (r.op.empty() || r.op.size() > 31) bad_field(where, "op", "must be 1..31 characters");
        if (r.pass != "forward" && r.pass != "backward" && r.pass != "optimizer")
            bad_field(where, "pass", "must be forward, backward or optimizer, not '" + r.pass + "'");
        r.count = need_int(p, "count", where);
        r.norm = need_num(p, "norm", where);
        r.mean = need_num(p, "mean", where);
        r.maxabs = need_num(p, "maxabs", where);
        auto sk = p.find("sketch");
        if (sk == p.end() || !sk->is_array() || sk->size() != kFingerprintSketch)
            bad_field(where, "sketch", "must be a list of " + std::to_string(kFingerprintSketch) + " numbers");
        for (size_t k = 0; k < kFingerprintSketch; ++k) {
            const json& v = (*sk)[k];
            const auto x = v.is_null() ? std::optional<double>(std::nan("")) : protocol_number_value(v);
            if (!x) bad_field(where, "sketch", "must be numbers (\"NaN\" / \"Infinity\" for non-finite)");
            r.sketch[k] = *x;
        }
        out.push_back(std::move(r));
    }
    return out;
}

json observables_event(int64_t update, const std::vector<AdapterNormRow>& norms, const std::vector<ProbeRow>& probes) {
    json a = json::array(), p = json::array();
    for (const auto& n : norms)
        a.push_back({{"layer", n.layer}, {"projection", n.projection}, {"a_norm", num_or_null(n.a_norm)},
                     {"b_norm", num_or_null(n.b_norm)}, {"delta_norm", num_or_null(n.delta_norm)}});
    for (const auto& r : probes) {
        json probs = json::array();
        for (double v : r.probs) probs.push_back(num_or_null(v));
        p.push_back({{"probe", r.probe}, {"record", r.record}, {"position", r.position}, {"ids", r.ids}, {"probs", probs}});
    }
    return json{{"update", update}, {"adapter", a}, {"probes", p}};
}

namespace {
// Calls each(item, where) for every item of the observables event's list `key` (absent: none);
// `where` names the update and the list in errors.
template <class Each>
void for_each_observed(const json& j, const char* key, int64_t update, Each&& each) {
    auto list = j.find(key);
    if (list == j.end()) return;
    if (!list->is_array()) bad_field("observables", key, "must be a list");
    const std::string where = "observables (update " + std::to_string(update) + ", " + key + ")";
    for (const auto& x : *list) each(x, where);
}
}  // namespace

void parse_observables_event(const json& j, std::vector<AdapterNormRow>& norms, std::vector<ProbeRow>& probes) {
    const int64_t update = need_int(j, "update", "observables");
    for_each_observed(j, "adapter", update, [&](const json& x, const std::string& where) {
        AdapterNormRow r;
        r.update = update;
        r.layer = need_int(x, "layer", where);
        r.projection = need_text(x, "projection", where);
        if (r.projection.size() > 11) bad_field(where, "projection", "must be a projection name (q_proj ... down_proj)");
        r.a_norm = need_num(x, "a_norm", where);
        r.b_norm = need_num(x, "b_norm", where);
        r.delta_norm = need_num(x, "delta_norm", where);
        norms.push_back(std::move(r));
    });
    for_each_observed(j, "probes", update, [&](const json& x, const std::string& where) {
        ProbeRow r;
        r.update = update;
        r.probe = need_int(x, "probe", where);
        r.record = need_int(x, "record", where);
        r.position = need_int(x, "position", where);
        auto ids = x.find("ids");
        auto pr = x.find("probs");
        if (ids == x.end() || !ids->is_array() || ids->size() != kProbeTopK)
            bad_field(where, "ids", "must be a list of " + std::to_string(kProbeTopK) + " token ids");
        if (pr == x.end() || !pr->is_array() || pr->size() != kProbeTopK)
            bad_field(where, "probs", "must be a list of " + std::to_string(kProbeTopK) + " probabilities");
        for (size_t k = 0; k < kProbeTopK; ++k) {
            if (!(*ids)[k].is_number_integer()) bad_field(where, "ids", "must be integers");
            r.ids[k] = (*ids)[k].get<int64_t>();
            r.probs[k] = protocol_number_value((*pr)[k]).value_or(std::nan(""));
        }
        probes.push_back(std::move(r));
    });
}

TensorDigest digest_tensor(const std::string& name, const std::string& kind, const std::vector<int64_t>& shape,
                           const float* data, size_t count) {
    static_assert(std::endian::native == std::endian::little, "digests hash little-endian float32 bytes");
    TensorDigest d;
    d.name = name;
    d.kind = kind;
    d.shape = shape;
    double s = 0, ss = 0, m = 0;
    for (size_t i = 0; i < count; ++i) {
        double x = data[i];
        s += x;
        ss += x * x;
        m = std::isnan(x) || std::isnan(m) ? std::nan("") : std::max(m, std::fabs(x));  // NaN propagates, as numpy's max does
    }
    d.sum = s;
    d.sumsq = ss;
    d.maxabs = m;
    d.sha256 = sha256_hex(data, count * sizeof(float));
    return d;
}

}  // namespace tandem::experiments
