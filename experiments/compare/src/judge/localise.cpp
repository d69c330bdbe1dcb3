// Localisation: alignment of two legs' fingerprints, per-point differences, the first point over
// its bound (tandem/compare/judge/localise.h, docs/observables.md).
#include "tandem/compare/judge/localise.h"

#include "tandem/number_text.h"


#include "tandem/engine/observe.h"
#include "tandem/error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>

namespace tandem::experiments {

namespace fs = std::filesystem;

double LocaliseBound::k(const std::string& pass) const {
    if (pass == "forward") return k_forward;
    if (pass == "backward") return k_backward;
    if (pass == "optimizer") return k_optimizer;
    return std::max({k_forward, k_backward, k_optimizer});
}

double LocaliseBound::bound(const std::string& op, const std::string& pass, std::int64_t depth, std::int64_t update) const {
    if (op == "tokens" || op == "labels") return kLocaliseDataBound;
    return k(pass) * eps * std::pow(c, static_cast<double>(depth)) * std::sqrt(1.0 + static_cast<double>(std::max<std::int64_t>(0, update)));
}

namespace {

using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::string, std::string>;  // update, mb, layer, op, pass

Key key_of(const FingerprintRow& r) { return {r.update, r.micro_batch, r.layer, r.op, r.pass}; }

bool finite_summary(const FingerprintRow& r) {
    if (!std::isfinite(r.norm) || !std::isfinite(r.mean) || !std::isfinite(r.maxabs)) return false;
    return std::all_of(r.sketch.begin(), r.sketch.end(), [](double v) { return std::isfinite(v); });
}

// value = max(rel, norm_rel) of localise.h; fills p.rel_diff and p.norm_rel_diff.
void difference(const FingerprintRow& a, const FingerprintRow& b, LocalisedPoint& p) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (a.count != b.count || !finite_summary(a) || !finite_summary(b)) {
        p.rel_diff = p.norm_rel_diff = inf;
        return;
    }
    const double scale = std::max(a.norm, b.norm);
    if (scale == 0) {  // both exactly zero
        p.rel_diff = p.norm_rel_diff = 0;
        return;
    }
    double d2 = 0;
    for (size_t k = 0; k < a.sketch.size(); ++k) d2 += (a.sketch[k] - b.sketch[k]) * (a.sketch[k] - b.sketch[k]);
    p.rel_diff = std::sqrt(d2) / (std::sqrt(static_cast<double>(a.sketch.size())) * scale);
    p.norm_rel_diff = std::fabs(a.norm - b.norm) / scale;
}


std::string point_name(const LocalisedPoint& p) {
    std::string s = "update " + std::to_string(p.update) + ", ";
    if (p.micro_batch >= 0) s += "micro-batch " + std::to_string(p.micro_batch) + ", ";
    s += p.layer >= 0 ? "layer " + std::to_string(p.layer) : std::string("outside the layers");
    return s + ", " + p.op + " (" + p.pass + ")";
}

}  // namespace

Localisation localise(const std::vector<FingerprintRow>& a, const std::vector<FingerprintRow>& b, const std::string& leg_a,
                      const std::string& leg_b, std::optional<std::int64_t> update, const LocaliseBound& bound) {
    Localisation out;
    out.leg_a = leg_a;
    out.leg_b = leg_b;
    auto selected = [&](const FingerprintRow& r) { return !update || r.update == *update; };
    std::map<Key, const FingerprintRow*> in_b;
    for (const auto& r : b)
        if (selected(r)) in_b[key_of(r)] = &r;
    for (const auto& r : a) out.num_layers = std::max(out.num_layers, r.layer + 1);
    for (const auto& r : b) out.num_layers = std::max(out.num_layers, r.layer + 1);

    struct Aligned {
        std::tuple<std::int64_t, std::int64_t, int, std::int64_t> order;  // update, micro-batch (optimizer last), pass, position
        LocalisedPoint point;
    };
    std::vector<Aligned> aligned;
    std::map<Key, bool> matched;
    for (const auto& r : a) {
        if (!selected(r)) continue;
        const auto op = engine::observed_op_from_name(r.op);
        const auto pass = engine::pass_from_name(r.pass);
        const std::int64_t pos = op && pass ? engine::chain_position(r.layer, *op, *pass, out.num_layers) : -1;
        if (pos < 0) {
            ++out.unknown;
            continue;
        }
        auto it = in_b.find(key_of(r));
        if (it == in_b.end()) {
            ++out.only_a;
            out.missing_in_b.push_back(r.op + " (" + r.pass + ")");
            continue;
        }
        matched[key_of(r)] = true;
        Aligned x;
        LocalisedPoint& p = x.point;
        p.update = r.update;
        p.micro_batch = r.micro_batch;
        p.layer = r.layer;
        p.op = r.op;
        p.pass = r.pass;
        p.depth = engine::chain_depth(r.layer, *op, *pass, out.num_layers);
        difference(r, *it->second, p);
        p.bound = bound.bound(p.op, p.pass, p.depth, p.update);
        const double value = std::max(p.rel_diff, p.norm_rel_diff);
        p.ratio = value / p.bound;
        x.order = {r.update, r.micro_batch < 0 ? std::numeric_limits<std::int64_t>::max() : r.micro_batch,
                   static_cast<int>(*pass), pos};
        aligned.push_back(std::move(x));
    }
    for (const auto& [k, r] : in_b)
        if (!matched.count(k)) {
            const auto op = engine::observed_op_from_name(r->op);
            const auto pass = engine::pass_from_name(r->pass);
            if (op && pass && engine::chain_position(r->layer, *op, *pass, out.num_layers) >= 0) {
                ++out.only_b;
                out.missing_in_a.push_back(r->op + " (" + r->pass + ")");
            } else {
                ++out.unknown;
            }
        }
    for (auto* v : {&out.missing_in_a, &out.missing_in_b}) {
        std::sort(v->begin(), v->end());
        v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    std::sort(aligned.begin(), aligned.end(), [](const Aligned& x, const Aligned& y) { return x.order < y.order; });
    for (auto& x : aligned) {
        const LocalisedPoint& p = x.point;
        const size_t i = out.points.size();
        if (!out.first && !(p.ratio <= 1.0)) out.first = i;  // NaN / inf ratios exceed
        if (i == 0 || !(out.points[out.max_ratio_index].ratio >= p.ratio)) out.max_ratio_index = i;
        if (out.updates.empty() || out.updates.back() != p.update) out.updates.push_back(p.update);
        out.points.push_back(p);
    }
    return out;
}

std::string Localisation::blind_spots() const {
    std::string out;
    auto one = [&](const std::string& lacking, const std::string& having, const std::vector<std::string>& sites, size_t n) {
        if (sites.empty()) return;
        std::string list;
        for (size_t i = 0; i < sites.size() && i < 8; ++i) list += (i ? ", " : "") + sites[i];
        if (sites.size() > 8) list += ", +" + std::to_string(sites.size() - 8) + " more";
        out += "; " + lacking + " records no fingerprints at " + list + ": " + std::to_string(n) + " points " + having +
               " recorded were not compared";
        const bool labels = std::find(sites.begin(), sites.end(), "labels (forward)") != sites.end();
        const bool ce = std::find(sites.begin(), sites.end(), "ce (forward)") != sites.end();
        // A Trainer's label smoother (label_smoothing_factor) pops the labels before the model's forward,
        // so the model computes no loss of its own and the head's points are never seen.
        if (labels && ce) out += " (the labels were consumed before the model's loss: a label smoother, or a loss computed outside the model?)";
    };
    one(leg_a, leg_b, missing_in_a, only_b);
    one(leg_b, leg_a, missing_in_b, only_a);
    return out;
}

std::string Localisation::summary() const {
    const std::string pair = leg_a + " vs " + leg_b;
    if (points.empty()) return "no fingerprints both " + pair + " recorded: nothing localised" + blind_spots();
    if (first) {
        const LocalisedPoint& p = points[*first];
        return "first divergence (" + pair + "): " + point_name(p) + ": difference " +
               number_text(std::max(p.rel_diff, p.norm_rel_diff), "%.3g") + " > bound " + number_text(p.bound, "%.3g") + " (ratio " +
               number_text(p.ratio, "%.3g") + ", point " + std::to_string(*first + 1) + " of " + std::to_string(points.size()) + ")" +
               blind_spots();
    }
    const LocalisedPoint& m = points[max_ratio_index];
    std::string s = "no divergence (" + pair + "): all " + std::to_string(points.size()) + " points within their bounds " +
                    "(largest ratio " + number_text(m.ratio, "%.3g") + " at " + point_name(m) + ")";
    return s + blind_spots();
}

Attributes localisation_attributes(const Localisation& l) {
    Attributes a;
    a["summary"] = l.summary();
    a["diverged"] = static_cast<std::int64_t>(l.diverged() ? 1 : 0);
    a["points"] = static_cast<std::int64_t>(l.points.size());
    a["only_" + l.leg_a] = static_cast<std::int64_t>(l.only_a);
    a["only_" + l.leg_b] = static_cast<std::int64_t>(l.only_b);
    a["bound_k_forward"] = kLocaliseKForward;
    a["bound_k_backward"] = kLocaliseKBackward;
    a["bound_k_optimizer"] = kLocaliseKOptimizer;
    a["bound_c"] = LocaliseBound{}.c;
    if (l.first) {
        const LocalisedPoint& p = l.points[*l.first];
        a["first_index"] = static_cast<std::int64_t>(*l.first);
        a["first_update"] = p.update;
        a["first_micro_batch"] = p.micro_batch;
        a["first_layer"] = p.layer;
        a["first_op"] = p.op;
        a["first_pass"] = p.pass;
        a["first_ratio"] = p.ratio;
    }
    return a;
}

void store_localisations(RunFileWriter& w, const std::vector<Localisation>& ls) {
    for (const auto& l : ls) w.write_localisation(l.leg_a, l.leg_b, l.points, localisation_attributes(l));
}

}  // namespace tandem::experiments
