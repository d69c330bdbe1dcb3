// The gate's settings, the experiment file's `gate` object (tandem/spec/gate_config.h, docs/gate.md).
#include "tandem/spec/gate_config.h"

#include "tandem/error.h"

#include <cmath>
#include <variant>

#include <nlohmann/json.hpp>

namespace tandem::experiments {
using nlohmann::json;

const char* gate_action_name(GateAction a) {
    switch (a) {
        case GateAction::Warn: return "warn";
        case GateAction::Pause: return "pause";
        case GateAction::Stop: return "stop";
    }
    return "warn";
}

namespace {

// One setting of the `gate` object: its key, the member it sets (an action, a positive number or a
// positive count), and whether to_json writes it always or only when it differs from the default.
// Settings added after the first release are written only when set, so the spec hash of an
// experiment whose `gate` object predates them stays the same (a run folder prepared before still
// resumes). A new flag's settings are rows here (docs/architecture.md "Add a gate flag").
struct Setting {
    const char* key;
    std::variant<GateAction GateConfig::*, double GateConfig::*, int64_t GateConfig::*> member;
    bool always_written;
};

const std::vector<Setting>& settings() {
    using C = GateConfig;
    static const std::vector<Setting> s = {
        {"non_finite", &C::non_finite, true},
        {"step_time", &C::step_time, true},
        {"step_time_factor", &C::step_time_factor, true},
        {"step_time_min_excess_s", &C::step_time_min_excess_s, true},
        {"step_time_window", &C::step_time_window, true},
        {"step_time_min_history", &C::step_time_min_history, true},
        {"loss_spike", &C::loss_spike, true},
        {"loss_spike_sigma", &C::loss_spike_sigma, true},
        {"loss_spike_window", &C::loss_spike_window, true},
        {"loss_spike_min_history", &C::loss_spike_min_history, true},
        {"envelope", &C::envelope, false},
        {"envelope_band_sigma", &C::envelope_band_sigma, false},
        {"paired_bound", &C::paired_bound, false},
        {"stall", &C::stall, false},
        {"stall_seconds", &C::stall_seconds, false},
        {"stall_factor", &C::stall_factor, false},
        {"stall_floor_s", &C::stall_floor_s, false},
        {"stall_startup_s", &C::stall_startup_s, false},
        {"stall_stop_factor", &C::stall_stop_factor, false},
    };
    return s;
}

GateAction action_of(const json& v, const std::string& source, const std::string& field) {
    if (!v.is_string()) throw Error(source + ": field " + field + ": must be one of warn|pause|stop");
    const std::string s = v.get<std::string>();
    for (GateAction a : {GateAction::Warn, GateAction::Pause, GateAction::Stop})
        if (s == gate_action_name(a)) return a;
    throw Error(source + ": field " + field + ": must be one of warn|pause|stop, not '" + s + "'");
}

double positive(const json& v, const std::string& source, const std::string& field) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
        throw Error(source + ": field " + field + ": must be a positive number");
    return v.get<double>();
}

int64_t count(const json& v, const std::string& source, const std::string& field) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1) throw Error(source + ": field " + field + ": must be a positive integer");
    return v.get<int64_t>();
}

}  // namespace

GateConfig GateConfig::from_json(const json& j, const std::string& source) {
    GateConfig c;
    if (!j.is_object()) throw Error(source + ": field gate: must be an object (docs/gate.md)");
    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& k = it.key();
        const json& v = it.value();
        const std::string field = "gate." + k;
        const Setting* setting = nullptr;
        for (const auto& s : settings())
            if (k == s.key) setting = &s;
        if (!setting) throw Error(source + ": field " + field + ": unknown field");
        if (auto m = std::get_if<GateAction GateConfig::*>(&setting->member)) c.*(*m) = action_of(v, source, field);
        else if (auto d = std::get_if<double GateConfig::*>(&setting->member)) c.*(*d) = positive(v, source, field);
        else c.*std::get<int64_t GateConfig::*>(setting->member) = count(v, source, field);
    }
    if (c.stall_stop_factor < 1)  // the stop comes after the warning, never before it
        throw Error(source + ": field gate.stall_stop_factor: must be at least 1 (the stop follows the warning)");
    return c;
}

json GateConfig::to_json() const {
    const GateConfig d;
    json j = json::object();
    for (const auto& s : settings()) {
        if (auto m = std::get_if<GateAction GateConfig::*>(&s.member)) {
            if (s.always_written || this->*(*m) != d.*(*m)) j[s.key] = gate_action_name(this->*(*m));
        } else if (auto x = std::get_if<double GateConfig::*>(&s.member)) {
            if (s.always_written || this->*(*x) != d.*(*x)) j[s.key] = this->*(*x);
        } else {
            const auto n = std::get<int64_t GateConfig::*>(s.member);
            if (s.always_written || this->*n != d.*n) j[s.key] = this->*n;
        }
    }
    return j;
}

bool GateConfig::is_default() const { return to_json() == GateConfig{}.to_json(); }

}  // namespace tandem::experiments
