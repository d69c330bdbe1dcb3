// Evaluation observables of two legs compared (tandem/experiments/observables.h).
#include "tandem/experiments/observables.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace tandem::experiments {

namespace {
double rel(double a, double b) {
    const double s = std::max(std::fabs(a), std::fabs(b));
    if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
    return s == 0 ? 0.0 : std::fabs(a - b) / s;
}
}  // namespace

ObservablesComparison compare_observables(const std::string& leg_a, const std::vector<AdapterNormRow>& norms_a,
                                          const std::vector<ProbeRow>& probes_a, const std::string& leg_b,
                                          const std::vector<AdapterNormRow>& norms_b, const std::vector<ProbeRow>& probes_b) {
    ObservablesComparison out{leg_a, leg_b, {}};
    std::map<std::tuple<int64_t, int64_t, std::string>, const AdapterNormRow*> nb;
    for (const auto& r : norms_b) nb[{r.update, r.layer, r.projection}] = &r;
    std::map<std::pair<int64_t, int64_t>, const ProbeRow*> pb;
    for (const auto& r : probes_b) pb[{r.update, r.probe}] = &r;
    std::map<int64_t, ObservablesRow> rows;
    for (const auto& a : norms_a) {
        auto it = nb.find({a.update, a.layer, a.projection});
        if (it == nb.end()) continue;
        const AdapterNormRow& b = *it->second;
        ObservablesRow& row = rows[a.update];
        row.update = a.update;
        ++row.slots;
        row.update_norm_a += a.delta_norm * a.delta_norm;
        row.update_norm_b += b.delta_norm * b.delta_norm;
        const double d = rel(a.delta_norm, b.delta_norm);
        if (row.max_delta_at.empty() || !(d <= row.max_delta_rel)) {
            row.max_delta_rel = d;
            row.max_delta_at = "layer " + std::to_string(a.layer) + " " + a.projection;
        }
        row.max_factor_rel = std::max({row.max_factor_rel, rel(a.a_norm, b.a_norm), rel(a.b_norm, b.b_norm)});
    }
    for (auto& [u, row] : rows) {
        row.update_norm_a = std::sqrt(row.update_norm_a);
        row.update_norm_b = std::sqrt(row.update_norm_b);
    }
    for (const auto& a : probes_a) {
        auto it = pb.find({a.update, a.probe});
        if (it == pb.end()) continue;
        const ProbeRow& b = *it->second;
        ObservablesRow& row = rows[a.update];
        row.update = a.update;
        ++row.probes;
        if (a.ids[0] == b.ids[0]) ++row.top1_agree;
        for (size_t i = 0; i < a.ids.size(); ++i)
            for (size_t j = 0; j < b.ids.size(); ++j)
                if (a.ids[i] == b.ids[j]) {
                    const double d = std::fabs(a.probs[i] - b.probs[j]);
                    row.max_prob_diff = std::isfinite(d) ? std::max(row.max_prob_diff, d) : INFINITY;
                }
    }
    for (auto& [u, row] : rows) out.rows.push_back(row);
    return out;
}

ObservablesComparison compare_observables(const RunFileReader& reader, const std::string& leg_a, const std::string& leg_b) {
    return compare_observables(leg_a, reader.adapter_norms(leg_a), reader.next_token(leg_a), leg_b, reader.adapter_norms(leg_b),
                               reader.next_token(leg_b));
}

void store_observables(RunFileWriter& w, const std::vector<ObservablesComparison>& cs) {
    for (const auto& c : cs) {
        if (c.rows.empty()) continue;
        ComparisonSeries s;
        s.series = "adapter_update_norm";
        double max_delta = 0, max_p = 0;
        int64_t probes = 0, agree = 0;
        for (const auto& r : c.rows) {
            s.points.push_back(PairedPoint{r.update, r.update_norm_a, r.update_norm_b, r.update_norm_a - r.update_norm_b});
            max_delta = std::max(max_delta, r.max_delta_rel);
            max_p = std::max(max_p, r.max_prob_diff);
            probes += r.probes;
            agree += r.top1_agree;
        }
        s.summary = {{"max_slot_rel_diff", max_delta}, {"max_probe_prob_diff", max_p}, {"probes", probes},
                     {"probe_top1_agree", agree}};
        w.write_comparison(c.leg_a, c.leg_b, s);
    }
}

}  // namespace tandem::experiments
