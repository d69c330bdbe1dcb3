// The fault matrix as plain values and JSON (fault_matrix.h).
#include "tandem/spec/fault_matrix.h"
#include "tandem/strict_json.h"

#include "tandem/error.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace tandem::experiments {
using nlohmann::json;

const std::vector<std::string>& fault_matrix_levels() {
    static const std::vector<std::string> l = {"L1", "L2", "L3", "L4", "gate"};
    return l;
}

namespace {

size_t level_index(const std::string& level) {
    const auto& l = fault_matrix_levels();
    const auto it = std::find(l.begin(), l.end(), level);
    if (it == l.end()) throw Error("fault matrix: unknown level '" + level + "'");
    return static_cast<size_t>(it - l.begin());
}

template <class T>
json opt(const std::optional<T>& v) {
    if (!v) return nullptr;
    if constexpr (std::is_floating_point_v<T>) {
        if (!std::isfinite(*v)) return nullptr;
    }
    return *v;
}

template <class T>
std::optional<T> opt_from(const json& j, const char* key) {
    if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
    return j.at(key).get<T>();
}

json row_to_json(const FaultRow& r) {
    json first = json::object();
    for (size_t i = 0; i < fault_matrix_levels().size(); ++i)
        first[fault_matrix_levels()[i]] = i < r.first_update.size() ? opt(r.first_update[i]) : json(nullptr);
    json probes = json::array();
    for (const auto& p : r.probes) probes.push_back({{"leg", p.leg}, {"size", p.size}, {"caught_by", p.caught_by}});
    json searches = json::array();
    for (const auto& s : r.searches)
        searches.push_back({{"level", s.level}, {"smallest_detected", opt(s.smallest_detected)},
                            {"largest_missed", opt(s.largest_missed)}, {"steps", s.steps}});
    return {{"fault", r.fault},          {"leg", r.leg},
            {"category", r.category},    {"size", opt(r.size)},
            {"expected", r.expected},    {"status", r.status},
            {"first_update", first},     {"flags", r.flags},
            {"no_effect", r.no_effect},  {"not_applicable", r.not_applicable},
            {"end_update", opt(r.end_update)}, {"ce_leg", opt(r.ce_leg)},
            {"ce_reference", opt(r.ce_reference)}, {"ce_diff_abs", opt(r.ce_diff_abs)},
            {"ce_diff_rel", opt(r.ce_diff_rel)},   {"ce_diff_clean_units", opt(r.ce_diff_clean_units)},
            {"probes", probes},          {"searches", searches}};
}

FaultRow row_from_json(const json& j) {
    FaultRow r;
    r.fault = j.at("fault").get<std::string>();
    r.leg = j.at("leg").get<std::string>();
    r.category = j.value("category", std::string());
    r.size = opt_from<double>(j, "size");
    r.expected = j.value("expected", std::vector<std::string>{});
    r.status = j.value("status", std::string());
    r.first_update.assign(fault_matrix_levels().size(), std::nullopt);
    const json& first = j.at("first_update");
    for (size_t i = 0; i < fault_matrix_levels().size(); ++i)
        r.first_update[i] = opt_from<int64_t>(first, fault_matrix_levels()[i].c_str());
    r.flags = j.value("flags", std::vector<std::string>{});
    r.no_effect = j.value("no_effect", std::string());
    r.not_applicable = j.value("not_applicable", std::string());
    r.end_update = opt_from<int64_t>(j, "end_update");
    r.ce_leg = opt_from<double>(j, "ce_leg");
    r.ce_reference = opt_from<double>(j, "ce_reference");
    r.ce_diff_abs = opt_from<double>(j, "ce_diff_abs");
    r.ce_diff_rel = opt_from<double>(j, "ce_diff_rel");
    r.ce_diff_clean_units = opt_from<double>(j, "ce_diff_clean_units");
    for (const auto& p : j.value("probes", json::array()))
        r.probes.push_back({p.at("leg").get<std::string>(), p.at("size").get<double>(),
                            p.at("caught_by").get<std::vector<std::string>>()});
    for (const auto& s : j.value("searches", json::array()))
        r.searches.push_back({s.at("level").get<std::string>(), opt_from<double>(s, "smallest_detected"),
                              opt_from<double>(s, "largest_missed"), s.value("steps", int64_t{0})});
    return r;
}

}  // namespace

std::string FaultRow::outcome() const {
    if (!not_applicable.empty()) return "not applicable";
    if (status != "finished") return "leg failed";
    if (!no_effect.empty()) return "no effect";
    return caught() ? "caught" : "not caught";
}

bool FaultRow::fired(const std::string& level) const {
    const size_t i = level_index(level);
    return i < first_update.size() && first_update[i].has_value();
}

std::vector<std::string> FaultRow::caught_by() const {
    std::vector<std::string> out;
    for (const auto& l : fault_matrix_levels())
        if (fired(l)) out.push_back(l);
    return out;
}

std::optional<int64_t> FaultRow::first_caught() const {
    std::optional<int64_t> best;
    for (const auto& u : first_update)
        if (u && (!best || *u < *best)) best = u;
    return best;
}

const FaultRow* FaultMatrix::row(const std::string& fault) const {
    for (const auto& r : rows)
        if (r.fault == fault) return &r;
    return nullptr;
}

json fault_matrix_to_json(const FaultMatrix& m) {
    json rows = json::array();
    for (const auto& r : m.rows) rows.push_back(row_to_json(r));
    return {{"reference_leg", m.reference_leg}, {"clean_leg", m.clean_leg}, {"clean", row_to_json(m.clean)},
            {"rows", rows}, {"l1_threshold", m.l1_threshold}, {"l4_threshold", m.l4_threshold},
            {"eval_interval", m.eval_interval}, {"updates", m.updates}, {"size_search", m.size_search}};
}

FaultMatrix fault_matrix_from_json(const json& j) {
    try {
        FaultMatrix m;
        m.reference_leg = j.at("reference_leg").get<std::string>();
        m.clean_leg = j.at("clean_leg").get<std::string>();
        m.clean = row_from_json(j.at("clean"));
        for (const auto& r : j.at("rows")) m.rows.push_back(row_from_json(r));
        m.l1_threshold = j.value("l1_threshold", 0.0);
        m.l4_threshold = j.value("l4_threshold", 0.0);
        m.eval_interval = j.value("eval_interval", int64_t{0});
        m.updates = j.value("updates", int64_t{0});
        m.size_search = j.value("size_search", false);
        return m;
    } catch (const json::exception& e) {
        throw Error("fault matrix: not a valid /faults/matrix record (" + tandem::json_error_text(e) + ")");
    }
}

}  // namespace tandem::experiments
