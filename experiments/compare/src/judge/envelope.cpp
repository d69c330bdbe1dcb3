// The seed envelope: statistics over member runs, run.h5 and catalog storage (docs/envelope.md);
// `tandem envelope`, which runs the members, is studies/src/envelope_run.cpp.
#include "tandem/compare/judge/envelope.h"

#include "tandem/error.h"
#include "tandem/join.h"
#include "tandem/compare/statistics.h"
#include "tandem/store/catalog.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<EnvelopePoint>& SeedEnvelope::series(const std::string& name) const {
    if (name == "heldout_ce") return heldout_ce;
    if (name == "loss") return loss;
    if (name == "grad_norm") return grad_norm;
    throw Error("unknown envelope series '" + name + "' (heldout_ce, loss, grad_norm)");
}

const EnvelopePoint* SeedEnvelope::at(const std::string& name, int64_t update) const {
    const auto& s = series(name);
    auto it = std::lower_bound(s.begin(), s.end(), update, [](const EnvelopePoint& p, int64_t u) { return p.update < u; });
    return it != s.end() && it->update == update ? &*it : nullptr;
}

const std::vector<double>& SeedEnvelope::member_means(const std::string& name) const {
    if (name == "heldout_ce") return member_mean_ce;
    if (name == "loss") return member_mean_loss;
    if (name == "grad_norm") return member_mean_grad_norm;
    throw Error("unknown envelope series '" + name + "' (heldout_ce, loss, grad_norm)");
}

bool SeedEnvelope::varies(const std::string& seed) const { return std::find(vary.begin(), vary.end(), seed) != vary.end(); }

namespace {

const std::vector<std::string> kSeries = {"heldout_ce", "loss", "grad_norm"};

// Statistics of one point over the members' finite values.
EnvelopePoint point_of(int64_t update, std::vector<double> v) {
    EnvelopePoint p;
    p.update = update;
    v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
    p.n = static_cast<int64_t>(v.size());
    if (v.empty()) {
        p.min = p.max = p.mean = p.std = p.q05 = p.q25 = p.q50 = p.q75 = p.q95 = std::nan("");
        return p;
    }
    p.min = *std::min_element(v.begin(), v.end());
    p.max = *std::max_element(v.begin(), v.end());
    if (p.min == p.max) {  // identical members: exactly zero width (a summed mean could be off by an ulp)
        p.mean = p.std = p.q05 = p.q25 = p.q50 = p.q75 = p.q95 = p.min;
        p.std = 0.0;
        return p;
    }
    p.mean = mean(v);
    double s = 0;
    for (double x : v) s += (x - p.mean) * (x - p.mean);
    p.std = v.size() > 1 ? std::sqrt(s / static_cast<double>(v.size() - 1)) : 0.0;
    p.q05 = percentile(v, 5);
    p.q25 = percentile(v, 25);
    p.q50 = percentile(v, 50);
    p.q75 = percentile(v, 75);
    p.q95 = percentile(v, 95);
    return p;
}

std::vector<EnvelopePoint> series_over(const std::vector<EnvelopeMember>& members,
                                       const std::function<void(const EnvelopeMember&, std::map<int64_t, std::vector<double>>&)>& take) {
    std::map<int64_t, std::vector<double>> by_update;
    for (const auto& m : members) take(m, by_update);
    std::vector<EnvelopePoint> out;
    for (auto& [u, v] : by_update) out.push_back(point_of(u, std::move(v)));
    return out;
}

std::string text_attr(const Attributes& a, const std::string& k) {
    auto it = a.find(k);
    if (it == a.end()) return "";
    if (auto s = std::get_if<std::string>(&it->second)) return *s;
    return "";
}

int64_t int_attr(const Attributes& a, const std::string& k) {
    auto it = a.find(k);
    if (it == a.end()) return 0;
    if (auto v = std::get_if<int64_t>(&it->second)) return *v;
    return 0;
}

}  // namespace

double mean_heldout_after_start(const std::vector<EvalRow>& evals) {
    std::vector<double> v;
    for (const auto& e : evals)
        if (e.update > 0) v.push_back(e.heldout_ce);
    return v.empty() ? std::nan("") : mean(v);
}

double mean_step_series(const std::vector<StepRow>& steps, const std::string& series) {
    std::vector<double> v;
    for (const auto& s : steps) v.push_back(series == "loss" ? s.loss : s.grad_norm);
    return v.empty() ? std::nan("") : mean(v);
}

SeedEnvelope compute_envelope(const std::vector<EnvelopeMember>& members) {
    SeedEnvelope e;
    e.members = static_cast<int64_t>(members.size());
    e.heldout_ce = series_over(members, [](const EnvelopeMember& m, auto& by) {
        for (const auto& r : m.evals) by[r.update].push_back(r.heldout_ce);
    });
    e.loss = series_over(members, [](const EnvelopeMember& m, auto& by) {
        for (const auto& r : m.steps) by[r.update].push_back(r.loss);
    });
    e.grad_norm = series_over(members, [](const EnvelopeMember& m, auto& by) {
        for (const auto& r : m.steps) by[r.update].push_back(r.grad_norm);
    });
    for (const auto& m : members) {
        e.member_mean_ce.push_back(mean_heldout_after_start(m.evals));
        e.member_mean_loss.push_back(mean_step_series(m.steps, "loss"));
        e.member_mean_grad_norm.push_back(mean_step_series(m.steps, "grad_norm"));
    }
    return e;
}

std::vector<BandPoint> envelope_band_points(const SeedEnvelope& e, const std::string& series, double sigma) {
    std::vector<BandPoint> out;
    for (const auto& p : e.series(series)) {
        if (p.n < 1 || !std::isfinite(p.mean)) continue;
        const double sd = std::isfinite(p.std) ? p.std : 0.0;
        out.push_back({p.update, p.min, p.max, p.mean - sigma * sd, p.mean + sigma * sd});
    }
    return out;
}

const SeedEnvelope* pick_envelope(const std::vector<SeedEnvelope>& envelopes, const std::string& implementation) {
    for (const auto& e : envelopes)
        if (e.implementation == "reference") return &e;
    for (const auto& e : envelopes)
        if (e.implementation == implementation) return &e;
    return nullptr;
}

void write_envelope(RunFileWriter& w, const SeedEnvelope& e, const std::vector<EnvelopeMember>* members) {
    w.remove_envelope(e.implementation);
    w.set_envelope_attributes(e.implementation, {{"key", e.key},
                                                 {"experiment", e.experiment},
                                                 {"implementation", e.implementation},
                                                 {"vary", join(e.vary, ",")},
                                                 {"members", e.members},
                                                 {"created_at", e.created_at},
                                                 {"source", e.source},
                                                 {"std_ddof", int64_t{1}}});
    for (const auto& s : kSeries) w.write_envelope_series(e.implementation, s, e.series(s));
    w.write_envelope_values(e.implementation, "member_mean_ce", e.member_mean_ce);
    w.write_envelope_values(e.implementation, "member_mean_loss", e.member_mean_loss);
    w.write_envelope_values(e.implementation, "member_mean_grad_norm", e.member_mean_grad_norm);
    if (members)
        for (const auto& m : *members)
            w.write_envelope_member(e.implementation, m.name, m.steps, m.evals, {{"run_id", m.run_id}, {"seeds", m.seeds.dump()}});
}

std::vector<SeedEnvelope> read_envelopes(const RunFileReader& r) {
    std::vector<SeedEnvelope> out;
    for (const auto& stack : r.envelope_stacks()) {
        SeedEnvelope e;
        const Attributes a = r.attributes("/envelope/" + stack);
        e.implementation = stack;
        e.key = text_attr(a, "key");
        e.experiment = text_attr(a, "experiment");
        e.vary = split_list(text_attr(a, "vary"));
        e.members = int_attr(a, "members");
        e.created_at = text_attr(a, "created_at");
        e.source = text_attr(a, "source");
        e.heldout_ce = r.envelope_series(stack, "heldout_ce");
        e.loss = r.envelope_series(stack, "loss");
        e.grad_norm = r.envelope_series(stack, "grad_norm");
        e.member_mean_ce = r.envelope_values(stack, "member_mean_ce");
        e.member_mean_loss = r.envelope_values(stack, "member_mean_loss");  // empty in an older file
        e.member_mean_grad_norm = r.envelope_values(stack, "member_mean_grad_norm");
        out.push_back(std::move(e));
    }
    return out;
}

void store_envelope(Catalog& catalog, const SeedEnvelope& e) {
    EnvelopeRecord r;
    r.spec_key = e.key;
    r.experiment = e.experiment;
    r.implementation = e.implementation;
    r.members = e.members;
    r.vary = join(e.vary, ",");
    json mm = json::array();
    for (double x : e.member_mean_ce) mm.push_back(std::isfinite(x) ? json(x) : json(nullptr));
    r.member_mean_ce = mm.dump();
    json series = json::object();
    for (const char* name : {"loss", "grad_norm"}) {
        json v = json::array();
        for (double x : e.member_means(name)) v.push_back(std::isfinite(x) ? json(x) : json(nullptr));
        series[name] = v;
    }
    r.member_means = series.dump();
    r.run_file = e.source;
    r.created_at = e.created_at;
    r.hostname = collect_host_info().hostname;
    for (const auto& s : kSeries)
        for (const auto& p : e.series(s)) r.points.emplace_back(s, p);
    catalog.add_envelope(r);
}

std::vector<SeedEnvelope> find_envelopes(const Catalog& catalog, const std::string& key) {
    std::vector<SeedEnvelope> out;
    std::set<std::string> seen;
    for (const auto& r : catalog.envelopes(key)) {  // newest first: the first of each stack wins
        if (!seen.insert(r.implementation).second) continue;
        SeedEnvelope e;
        e.key = r.spec_key;
        e.experiment = r.experiment;
        e.implementation = r.implementation;
        e.members = r.members;
        e.vary = split_list(r.vary);
        e.created_at = r.created_at;
        e.source = r.run_file;
        try {
            for (const auto& x : json::parse(r.member_mean_ce)) e.member_mean_ce.push_back(x.is_number() ? x.get<double>() : std::nan(""));
        } catch (const json::exception&) {
            throw Error(catalog.path().string() + ": envelope " + std::to_string(r.id) + ": member_mean_ce is not a JSON array");
        }
        try {  // {"loss": [...], "grad_norm": [...]}; "{}" for an envelope stored before they were kept
            const json m = json::parse(r.member_means);
            for (const char* name : {"loss", "grad_norm"}) {
                auto& out_v = std::string(name) == "loss" ? e.member_mean_loss : e.member_mean_grad_norm;
                if (m.contains(name))
                    for (const auto& x : m.at(name)) out_v.push_back(x.is_number() ? x.get<double>() : std::nan(""));
            }
        } catch (const json::exception&) {
            throw Error(catalog.path().string() + ": envelope " + std::to_string(r.id) + ": member_means is not a JSON object of arrays");
        }
        for (const auto& [series, p] : r.points) {
            if (series == "heldout_ce") e.heldout_ce.push_back(p);
            else if (series == "loss") e.loss.push_back(p);
            else if (series == "grad_norm") e.grad_norm.push_back(p);
        }
        out.push_back(std::move(e));
    }
    return out;
}

void EnvelopeSearch::look_in_run_file(const RunFileReader& reader) {
    if (!envelopes.empty()) return;  // an earlier place held them
    places.push_back("the run file");
    for (auto& e : read_envelopes(reader))
        if (e.key == key) envelopes.push_back(std::move(e));
}

void EnvelopeSearch::look_in_catalog(const fs::path& catalog) {
    if (!envelopes.empty()) return;
    std::error_code ec;
    if (!fs::exists(catalog, ec)) return;  // nothing looked in (never created); the CLI notes a named one missing
    look_in_catalog(Catalog(catalog));
}

void EnvelopeSearch::look_in_catalog(const Catalog& catalog) {
    if (!envelopes.empty()) return;
    places.push_back("the catalog " + catalog.path().string());
    envelopes = find_envelopes(catalog, key);
}

}  // namespace tandem::experiments
