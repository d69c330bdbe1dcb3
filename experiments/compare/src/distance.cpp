// The paired numerics distance (error-model bound), the envelope distance (z-scores, band, two-sided
// test) and the verdict names (docs/thresholds.md).
#include "tandem/compare/distance.h"
#include "tandem/float32.h"
#include "tandem/compare/metrics.h"
#include "tandem/compare/statistics.h"

#include "tandem/engine/io.h"
#include "tandem/error.h"
#include "tandem/number_text.h"
#include "tandem/spec/model.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

namespace tandem::experiments {
namespace fs = std::filesystem;

double ErrorModel::bound(int64_t update) const {
    return k * kFloat32Epsilon * std::pow(c, static_cast<double>(layers + 1)) * std::sqrt(static_cast<double>(seq_len)) *
           std::sqrt(1.0 + static_cast<double>(std::max<int64_t>(0, update)));
}

std::string ErrorModel::describe() const {
    char b[200];
    std::snprintf(b, sizeof b, "%g x eps32 x %g^(L+1) x sqrt(S) x sqrt(1+u), L %lld, S %lld", k, c,
                  static_cast<long long>(layers), static_cast<long long>(seq_len));
    return b;
}

ErrorModel error_model_for(const ExperimentSpec& spec, const fs::path& run_folder) {
    ErrorModel m;
    m.seq_len = spec.max_len;
    try {
        m.layers = model_config_of(spec).num_hidden_layers;
    } catch (const std::exception& e) {
        // A checkpoint base that is gone since the run: the run folder's copy (links) or config.
        if (run_folder.empty() || !fs::exists(run_folder / "base" / "config.json"))
            throw Error(std::string("error model: cannot read the model's depth: ") + e.what());
        m.layers = engine::read_hf_config(run_folder / "base").num_hidden_layers;
    }
    return m;
}

std::optional<ErrorModel> error_model_or_none(const ExperimentSpec& spec, const fs::path& run_folder) {
    try {
        return error_model_for(spec, run_folder);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

bool legs_are_paired(const ExperimentSpec& spec, const std::string& a, const std::string& b) {
    const bool dropout_matches = spec.lora_dropout == 0.0 ||
                                 (spec.leg_setting(a, "dropout_masks") == "shared" && spec.leg_setting(b, "dropout_masks") == "shared");
    return dropout_matches && spec.leg_setting(a, "plan") == "shared" && spec.leg_setting(b, "plan") == "shared";
}

bool PairedDistance::within() const {
    if (!applies || points.empty()) return false;
    for (const auto& p : points)
        if (!std::isfinite(p.distance) || p.distance > 1.0) return false;
    return true;
}

PairedDistance paired_distance(const std::vector<PairedPoint>& evals, const ErrorModel& model, bool reference_is_a) {
    PairedDistance d;
    d.applies = true;
    for (const auto& e : evals) {
        DistancePoint p;
        p.update = e.update;
        p.value = reference_is_a ? e.b : e.a;
        p.reference = reference_is_a ? e.a : e.b;
        const double denom = std::fabs(p.reference);
        p.difference = denom > 0 ? std::fabs(p.value - p.reference) / denom : std::nan("");
        p.scale = model.bound(e.update);
        p.distance = p.difference / p.scale;
        // A non-finite ratio (a NaN value, a zero reference) fails the bound: it is reported as the
        // largest, never skipped.
        const bool nonfinite_seen = d.max_ratio_update >= 0 && !std::isfinite(d.max_ratio);
        if (!nonfinite_seen && (d.max_ratio_update < 0 || !std::isfinite(p.distance) || p.distance > d.max_ratio)) {
            d.max_ratio = p.distance;
            d.max_ratio_update = p.update;
        }
        if (d.first_beyond_update < 0 && !(std::isfinite(p.distance) && p.distance <= 1.0)) {
            d.first_beyond_update = p.update;
            d.first_beyond_ratio = p.distance;
        }
        d.points.push_back(p);
    }
    return d;
}

Band envelope_band(const EnvelopePoint& p, double sigma, double relative_floor) {
    const double std = std::isfinite(p.std) ? p.std : 0.0;
    const double floor = relative_floor * std::fabs(p.mean);
    return {p.min - sigma * std - floor, p.max + sigma * std + floor};
}

namespace {

// Continued fraction of the incomplete beta function (modified Lentz).
double beta_continued_fraction(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    if (std::fabs(d) < tiny) d = tiny;
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= 300; ++m) {
        const double m2 = 2.0 * m;
        double aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 + aa * d;
        if (std::fabs(d) < tiny) d = tiny;
        c = 1.0 + aa / c;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        h *= d * c;
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 + aa * d;
        if (std::fabs(d) < tiny) d = tiny;
        c = 1.0 + aa / c;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        const double del = d * c;
        h *= del;
        if (std::fabs(del - 1.0) < 1e-15) break;
    }
    return h;
}

// Regularized incomplete beta I_x(a, b).
double incomplete_beta(double a, double b, double x) {
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    const double ln_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
    const double front = std::exp(ln_front);
    if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_continued_fraction(a, b, x) / a;
    return 1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b;
}

std::vector<double> finite_only(const std::vector<double>& v) {
    std::vector<double> out;
    for (double x : v)
        if (std::isfinite(x)) out.push_back(x);
    return out;
}

double sample_std(const std::vector<double>& v) {
    if (v.size() < 2) return 0;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / static_cast<double>(v.size() - 1));
}

}  // namespace

double student_t_sf(double t, double df) {
    if (std::isnan(t) || !(df > 0)) return std::nan("");
    if (std::isinf(t)) return t > 0 ? 0.0 : 1.0;
    const double tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t));  // P(T > |t|)
    return t >= 0 ? tail : 1.0 - tail;
}

double student_t_isf(double q, double df) {
    if (!(q > 0 && q < 1) || !(df > 0)) return std::nan("");
    if (q == 0.5) return 0.0;
    if (q > 0.5) return -student_t_isf(1.0 - q, df);
    double lo = 0.0, hi = 1.0;
    while (student_t_sf(hi, df) > q) hi *= 2.0;  // sf falls from 0.5 to 0: bracket, then halve
    for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
        const double mid = 0.5 * (lo + hi);
        (student_t_sf(mid, df) > q ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
}

double prediction_band_factor(int64_t members, double family_alpha, int64_t checks) {
    if (members < 2 || checks < 1 || !(family_alpha > 0 && family_alpha < 1)) return std::nan("");
    const double n = static_cast<double>(members);
    // Sidak: 1 - (1 - alpha)^(1/M), as -expm1(log1p(-alpha) / M) to keep its digits at large M
    const double alpha_u = -std::expm1(std::log1p(-family_alpha) / static_cast<double>(checks));
    return student_t_isf(alpha_u / 2.0, n - 1.0) * std::sqrt(1.0 + 1.0 / n);
}

namespace {
bool outside_check(const BandCheck& c, double factor) {
    if (!std::isfinite(c.value)) return true;
    const double half = (c.std > 0 ? factor * c.std : 0.0) + c.floor;
    return std::fabs(c.value - c.mean) > half;
}
}  // namespace

void judge_bands(const std::vector<EnvelopeDistance*>& family, double family_alpha) {
    int64_t checks = 0;
    for (const auto* d : family)
        if (d && d->available)
            for (const auto& c : d->band_checks) checks += c.std > 0;
    std::map<int64_t, double> factor_at;  // by the point's member count
    for (auto* d : family) {
        if (!d || !d->available) continue;
        d->outside_band.clear();
        d->band_alpha = family_alpha;
        d->band_family = checks;
        d->band_factor = prediction_band_factor(d->members, family_alpha, std::max<int64_t>(checks, 1));
        d->worst_band_z = std::nan("");
        d->worst_band_update = -1;
        for (const auto& c : d->band_checks) {
            auto it = factor_at.find(c.n);
            if (it == factor_at.end()) it = factor_at.emplace(c.n, prediction_band_factor(c.n, family_alpha, std::max<int64_t>(checks, 1))).first;
            if (outside_check(c, it->second)) d->outside_band.push_back(c.update);
            if (c.std > 0 && c.n > 0) {
                const double t = std::fabs(c.value - c.mean) / c.std;  // in std units, as band_factor
                if (d->worst_band_update < 0 || !(t <= d->worst_band_z)) {
                    d->worst_band_z = t;
                    d->worst_band_update = c.update;
                }
            }
        }
    }
}

std::vector<DistancePoint> envelope_z_points(const std::vector<EvalRow>& evals, const SeedEnvelope& env, const ErrorModel& model) {
    std::vector<DistancePoint> out;
    for (const EvalRow& e : evals) {
        const EnvelopePoint* p = env.at("heldout_ce", e.update);
        if (!p || p->n < 2) continue;
        // No z where the members spread less than rounding can (update 0 when B starts at zero).
        if (!(p->std > model.bound(e.update) * std::fabs(p->mean))) continue;
        DistancePoint q;
        q.update = e.update;
        q.value = e.heldout_ce;
        q.reference = p->mean;
        q.difference = e.heldout_ce - p->mean;
        q.scale = p->std;
        q.distance = q.difference / q.scale;
        out.push_back(q);
    }
    return out;
}

bool prediction_test(EnvelopeDistance& d, double value, const std::vector<double>& all) {
    const std::vector<double> sample = finite_only(all);
    if (sample.size() < 2) {
        d.why_unavailable = "the " + d.stack + " seed envelope has " + std::to_string(sample.size()) +
                            " member(s) with a mean " + series_label(d.series) + "; the test needs at least 2";
        return false;
    }
    d.members_mean = mean(sample);
    d.members_std = sample_std(sample);
    if (!(d.members_std > 0)) {
        d.why_unavailable = "the " + d.stack + " seed envelope has zero spread in " + series_label(d.series) + " (its " +
                            std::to_string(sample.size()) + " members are identical: no seed varied?)";
        return false;
    }
    const double n = static_cast<double>(sample.size());
    d.leg_mean = value;
    d.df = static_cast<int64_t>(sample.size()) - 1;
    d.t = (value - d.members_mean) / (d.members_std * std::sqrt(1.0 + 1.0 / n));
    // two-sided; no finite mean: rejected
    d.p = std::isfinite(value) ? std::min(1.0, 2.0 * student_t_sf(std::fabs(d.t), static_cast<double>(d.df))) : 0.0;
    return true;
}

std::string EnvelopeDistance::effect() const {
    if (!available) return why_unavailable;
    return "|z| " + number_or_na(max_abs_z) + ", p " + number_or_na(p);
}

EnvelopeDistance envelope_distance(const std::string& leg, const std::vector<EvalRow>& evals, const SeedEnvelope& env,
                                   const ErrorModel& model) {
    EnvelopeDistance d;
    d.stack = env.implementation;
    d.leg = leg;
    d.members = env.members;
    if (!prediction_test(d, mean_heldout_after_start(evals), env.member_mean_ce)) return d;
    d.available = true;
    for (const EvalRow& e : evals) {
        const EnvelopePoint* p = env.at("heldout_ce", e.update);
        if (!p || p->n < 2) continue;
        d.band_checks.push_back({e.update, p->n, e.heldout_ce, p->mean, std::isfinite(p->std) ? p->std : 0.0,
                                 model.bound(e.update) * std::fabs(p->mean)});
    }
    judge_bands({&d}, kEnvelopeAlpha);  // alone; compare_l4 judges a pair's series as one family
    d.points = envelope_z_points(evals, env, model);
    for (const auto& q : d.points)
        if (std::isfinite(q.distance) && (d.max_abs_z_update < 0 || std::fabs(q.distance) > d.max_abs_z)) {
            d.max_abs_z = std::fabs(q.distance);
            d.max_abs_z_update = q.update;
        }
    return d;
}

EnvelopeDistance envelope_series_distance(const std::string& leg, const std::vector<StepRow>& steps, const std::string& series,
                                          const SeedEnvelope& env, const ErrorModel& model) {
    EnvelopeDistance d;
    d.series = series;
    d.stack = env.implementation;
    d.leg = leg;
    d.members = env.members;
    auto value_of = [&](const StepRow& s) { return series == "loss" ? s.loss : s.grad_norm; };
    if (!prediction_test(d, mean_step_series(steps, series), env.member_means(series))) return d;
    d.available = true;
    for (const StepRow& s : steps) {
        const EnvelopePoint* p = env.at(series, s.update);
        if (!p || p->n < 2) continue;
        const double x = value_of(s);
        d.band_checks.push_back({s.update, p->n, x, p->mean, std::isfinite(p->std) ? p->std : 0.0, model.bound(s.update) * std::fabs(p->mean)});
        if (!(p->std > model.bound(s.update) * std::fabs(p->mean))) continue;  // no spread above rounding: no z
        DistancePoint q;
        q.update = s.update;
        q.value = x;
        q.reference = p->mean;
        q.difference = x - p->mean;
        q.scale = p->std;
        q.distance = q.difference / q.scale;
        if (std::isfinite(q.distance) && (d.max_abs_z_update < 0 || std::fabs(q.distance) > d.max_abs_z)) {
            d.max_abs_z = std::fabs(q.distance);
            d.max_abs_z_update = q.update;
        }
        d.points.push_back(q);
    }
    judge_bands({&d}, kEnvelopeAlpha);  // alone; compare_l4 judges a pair's series as one family
    return d;
}

const char* pair_verdict_name(PairVerdict v) {
    switch (v) {
        case PairVerdict::Equivalent: return "equivalent";
        case PairVerdict::Different: return "different";
        case PairVerdict::WithinEnvelope: return "within the seed envelope";
        case PairVerdict::OutsideEnvelope: return "outside the seed envelope";
        case PairVerdict::NotJudged: return "not judged";
    }
    return "not judged";
}

const std::vector<std::string>& verdict_words() {
    static const std::vector<std::string> w = {"equivalent", "different", "within the seed envelope", "outside the seed envelope",
                                               "not judged", "incomplete"};
    return w;
}

bool verdict_passes(PairVerdict v) { return v == PairVerdict::Equivalent || v == PairVerdict::WithinEnvelope; }

}  // namespace tandem::experiments
