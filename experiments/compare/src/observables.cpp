// Evaluation observables of two legs compared (tandem/compare/observables.h).
#include "tandem/compare/observables.h"

#include "tandem/error.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
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

std::vector<double> probe_kl(const std::filesystem::path& p_logits, const std::filesystem::path& q_logits, std::int64_t rows) {
    auto load = [&](const std::filesystem::path& f) {
        std::ifstream in(f, std::ios::binary);
        if (!in) throw Error(f.string() + ": cannot read the probe logits");
        std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (rows <= 0 || bytes.size() % (sizeof(float) * size_t(rows)) != 0)
            throw Error(f.string() + ": " + std::to_string(bytes.size()) + " bytes is not " + std::to_string(rows) +
                        " rows of float32 logits");
        std::vector<float> v(bytes.size() / sizeof(float));
        std::memcpy(v.data(), bytes.data(), bytes.size());
        return v;
    };
    const std::vector<float> p = load(p_logits), q = load(q_logits);
    if (p.size() != q.size())
        throw Error(p_logits.string() + " and " + q_logits.string() + ": probe logits of different sizes");
    const size_t V = p.size() / size_t(rows);
    auto log_softmax = [V](const float* z, std::vector<double>& out) {
        double m = -INFINITY;
        for (size_t i = 0; i < V; ++i) m = std::max(m, double(z[i]));
        double s = 0;
        for (size_t i = 0; i < V; ++i) s += std::exp(double(z[i]) - m);
        const double lse = m + std::log(s);
        out.resize(V);
        for (size_t i = 0; i < V; ++i) out[i] = double(z[i]) - lse;
    };
    std::vector<double> out, lp, lq;
    for (std::int64_t r = 0; r < rows; ++r) {
        log_softmax(p.data() + size_t(r) * V, lp);
        log_softmax(q.data() + size_t(r) * V, lq);
        double kl = 0;
        for (size_t i = 0; i < V; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
        out.push_back(std::max(0.0, kl));  // rounding can leave a tiny negative sum
    }
    return out;
}

ObservablesComparison compare_observables(const RunFileReader& reader, const std::string& leg_a, const std::string& leg_b) {
    ObservablesComparison c = compare_observables(leg_a, reader.adapter_norms(leg_a), reader.next_token(leg_a), leg_b,
                                                  reader.adapter_norms(leg_b), reader.next_token(leg_b));
    const std::filesystem::path folder = reader.path().parent_path();
    for (auto& row : c.rows) {
        const std::string name = "update-" + std::to_string(row.update) + ".f32";
        const auto fa = folder / "legs" / leg_a / "next_token" / name, fb = folder / "legs" / leg_b / "next_token" / name;
        if (row.probes <= 0 || !std::filesystem::exists(fa) || !std::filesystem::exists(fb)) continue;
        std::vector<double> kl;
        try {
            kl = probe_kl(fb, fa, row.probes);  // KL(reference side || leg)
        } catch (const Error& e) {  // a side observable: reported as not available, with the reason
            row.kl_error = e.what();
            continue;
        }
        row.max_kl = *std::max_element(kl.begin(), kl.end());
        double sum = 0;
        for (double x : kl) sum += x;
        row.mean_kl = sum / double(kl.size());
    }
    return c;
}

std::vector<LayerUpdateNorms> layer_update_norms(const std::string& leg, const std::vector<AdapterNormRow>& rows) {
    std::map<std::int64_t, std::map<std::int64_t, double>> sq;  // layer -> update -> sum of |dW|^2
    for (const auto& r : rows) sq[r.layer][r.update] += r.delta_norm * r.delta_norm;  // NaN stays NaN
    std::vector<LayerUpdateNorms> out;
    for (const auto& [layer, by_update] : sq) {
        LayerUpdateNorms s{leg, layer, {}, {}};
        for (const auto& [update, sum] : by_update) {
            s.updates.push_back(update);
            s.norms.push_back(std::sqrt(sum));
        }
        out.push_back(std::move(s));
    }
    return out;
}

std::vector<LayerUpdateNorms> layer_update_norms(const RunFileReader& reader) {
    std::vector<LayerUpdateNorms> out;
    for (const auto& leg : reader.legs())
        for (auto& s : layer_update_norms(leg, reader.adapter_norms(leg))) out.push_back(std::move(s));
    return out;
}

void store_observables(RunFileWriter& w, const std::vector<ObservablesComparison>& cs) {
    for (const auto& c : cs) {
        if (c.rows.empty()) continue;
        ComparisonSeries s;
        s.series = "adapter_update_norm";
        double max_delta = 0, max_p = 0, max_kl = NAN;
        int64_t probes = 0, agree = 0;
        for (const auto& r : c.rows) {
            s.points.push_back(PairedPoint{r.update, r.update_norm_a, r.update_norm_b, r.update_norm_a - r.update_norm_b});
            max_delta = std::max(max_delta, r.max_delta_rel);
            max_p = std::max(max_p, r.max_prob_diff);
            if (!std::isnan(r.max_kl)) max_kl = std::isnan(max_kl) ? r.max_kl : std::max(max_kl, r.max_kl);
            probes += r.probes;
            agree += r.top1_agree;
        }
        s.summary = {{"max_slot_rel_diff", max_delta}, {"max_probe_prob_diff", max_p}, {"probes", probes},
                     {"probe_top1_agree", agree}};
        if (!std::isnan(max_kl)) s.summary["max_probe_kl"] = max_kl;
        w.write_comparison(c.leg_a, c.leg_b, s);
        ComparisonSeries kl;  // per evaluation: a = the largest probe KL, b = the mean, diff = a - b
        kl.series = "probe_kl";
        for (const auto& r : c.rows)
            if (!std::isnan(r.max_kl)) kl.points.push_back(PairedPoint{r.update, r.max_kl, r.mean_kl, r.max_kl - r.mean_kl});
        if (!kl.points.empty()) {
            kl.summary = {{"max_kl", max_kl}, {"a", std::string("max over probes")}, {"b", std::string("mean over probes")}};
            w.write_comparison(c.leg_a, c.leg_b, kl);
        }
    }
}

}  // namespace tandem::experiments
