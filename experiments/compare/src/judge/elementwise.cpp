// Elementwise ops held to float32 rounding, per leg: the residual adds and the LoRA adds (judge/elementwise.h).
#include "tandem/compare/judge/elementwise.h"
#include "worst_check.h"

#include "tandem/float32.h"
#include "tandem/join.h"
#include "tandem/number_text.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace tandem::experiments {

namespace {

constexpr double kFloat64Epsilon = std::numeric_limits<double>::epsilon();

bool finite_summary(const FingerprintRow& r) {
    if (!std::isfinite(r.norm)) return false;
    for (double s : r.sketch)
        if (!std::isfinite(s)) return false;
    return true;
}

// The two adds of a decoder layer: (the operand that is not the layer's own projection, the
// projection, the result). The layer input of the first is resolved per layer (embed or the
// previous layer's mlp_residual).
struct Site {
    const char* projection;
    const char* result;
};
constexpr Site kSites[] = {{"o_proj", "attn_residual"}, {"down_proj", "mlp_residual"}};

}  // namespace

double residual_add_bound(const FingerprintRow& x, const FingerprintRow& b, const FingerprintRow& y) {
    // y's own float32 rounding (at most eps32/2 per element, doubled), and the float64 rounding of the
    // three sketches' sums of n terms each.
    return kFloat32Epsilon * y.norm + static_cast<double>(y.count) * kFloat64Epsilon * (x.norm + b.norm + y.norm);
}

double lora_add_bound(const FingerprintRow& base, const FingerprintRow& u, double scaling, int64_t rank,
                      const FingerprintRow& y) {
    // y's rounding as in a residual add, the rounding of scaling x u (exact for a power of two), and u
    // summed in another order: a leg may fold the scaling into the GEMM that sums u's rank products
    // (the CUDA engine's y += scaling t B^T) while its recorded u is summed apart, within rank x eps32
    // of |u| in the RMS sense the sketch reads.
    const double su = std::abs(scaling) * u.norm;
    return kFloat32Epsilon * (y.norm + su * (1.0 + static_cast<double>(rank))) +
           static_cast<double>(y.count) * kFloat64Epsilon * (base.norm + su + y.norm);
}

namespace {
// RMS over the sketch of |sketch(y) - sketch(x) - scaling x sketch(b)| over `bound`.
double scaled_add_ratio(const FingerprintRow& x, const FingerprintRow& b, double scaling, const FingerprintRow& y,
                        double bound) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (x.count != y.count || b.count != y.count) return inf;
    if (!finite_summary(x) || !finite_summary(b) || !finite_summary(y)) return inf;
    double sq = 0;
    for (size_t k = 0; k < y.sketch.size(); ++k) {
        const double d = y.sketch[k] - x.sketch[k] - scaling * b.sketch[k];
        sq += d * d;
    }
    const double rms = std::sqrt(sq / static_cast<double>(y.sketch.size()));
    if (rms == 0) return 0;
    return bound > 0 ? rms / bound : inf;
}
}  // namespace

double residual_add_ratio(const FingerprintRow& x, const FingerprintRow& b, const FingerprintRow& y) {
    return scaled_add_ratio(x, b, 1.0, y, residual_add_bound(x, b, y));
}

double lora_add_ratio(const FingerprintRow& base, const FingerprintRow& u, double scaling, int64_t rank,
                      const FingerprintRow& y) {
    return scaled_add_ratio(base, u, scaling, y, lora_add_bound(base, u, scaling, rank, y));
}

namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, std::string>;  // update, micro-batch, layer, op

// A leg's forward points by key, the (update, micro-batch) pairs that have any, and its layer count.
struct ForwardPoints {
    std::map<Key, const FingerprintRow*> rows;
    std::set<std::pair<int64_t, int64_t>> batches;
    int64_t layers = 0;
};
ForwardPoints forward_points(const std::vector<FingerprintRow>& fingerprints) {
    ForwardPoints f;
    for (const auto& r : fingerprints) {
        f.layers = std::max(f.layers, r.layer + 1);
        if (r.pass != "forward") continue;
        f.rows[{r.update, r.micro_batch, r.layer, r.op}] = &r;
        f.batches.emplace(r.update, r.micro_batch);
    }
    return f;
}

// Checks one add y = x (+) b when the leg recorded all three points (else names the missing ones):
// ratio(x, b, y) against 1, kept in c as the first off add or the largest.
template <class Ratio>
void check_add(ResidualCheck& c, const ForwardPoints& f, const Key (&keys)[3], const std::string& label, Ratio ratio,
               std::set<std::string>& missing, std::set<int64_t>& updates) {
    const FingerprintRow* rows[3] = {nullptr, nullptr, nullptr};
    bool complete = true;
    for (int i = 0; i < 3; ++i) {
        const auto it = f.rows.find(keys[i]);
        if (it == f.rows.end()) {
            missing.insert(std::get<3>(keys[i]));
            complete = false;
        } else {
            rows[i] = it->second;
        }
    }
    if (!complete) return;
    const int64_t u = std::get<0>(keys[2]);
    const double r = ratio(*rows[0], *rows[1], *rows[2]);
    ++c.checked;
    updates.insert(u);
    const bool off = !(r <= 1.0);  // NaN and inf are off
    c.over += off;
    auto take = [&] {
        c.ratio = r;
        c.layer = std::get<2>(keys[2]);
        c.micro_batch = std::get<1>(keys[2]);
        c.op = label;
    };
    // batches are checked in (update, micro-batch) order: the first off add is the earliest
    note_ratio(c, u, r, off, take);
}

void finish(ResidualCheck& c, const std::set<std::string>& missing, const std::set<int64_t>& updates) {
    c.updates.assign(updates.begin(), updates.end());
    c.missing.assign(missing.begin(), missing.end());
}

}  // namespace

ResidualCheck residual_check(const std::string& leg, const std::vector<FingerprintRow>& fingerprints) {
    ResidualCheck c;
    c.leg = leg;
    const ForwardPoints f = forward_points(fingerprints);
    c.recorded = !f.rows.empty();
    std::set<std::string> missing;
    std::set<int64_t> updates;
    if (c.recorded && f.layers == 0)  // forward points, none in a decoder layer
        missing = {"attn_residual", "down_proj", "mlp_residual", "o_proj"};
    for (const auto& [u, mb] : f.batches)
        for (int64_t l = 0; l < f.layers; ++l)
            for (const Site& s : kSites) {
                const bool first = std::string(s.projection) == "o_proj";
                const Key x_key = first ? (l == 0 ? Key{u, mb, -1, "embed"} : Key{u, mb, l - 1, "mlp_residual"})
                                        : Key{u, mb, l, "attn_residual"};
                const Key keys[3] = {x_key, {u, mb, l, s.projection}, {u, mb, l, s.result}};
                check_add(c, f, keys, s.result, residual_add_ratio, missing, updates);
            }
    finish(c, missing, updates);
    return c;
}

ResidualCheck lora_add_check(const std::string& leg, const std::vector<FingerprintRow>& fingerprints,
                             const std::vector<std::string>& targets, double scaling, int64_t rank) {
    ResidualCheck c;
    c.leg = leg;
    c.kind = "LoRA add";
    const ForwardPoints f = forward_points(fingerprints);
    c.recorded = !f.rows.empty();
    std::set<std::string> missing;
    std::set<int64_t> updates;
    if (c.recorded && f.layers == 0)
        for (const auto& t : targets) missing.insert(t + ".lora_B.out");
    auto ratio = [&](const FingerprintRow& base, const FingerprintRow& u, const FingerprintRow& y) {
        return lora_add_ratio(base, u, scaling, rank, y);
    };
    for (const auto& [u, mb] : f.batches)
        for (int64_t l = 0; l < f.layers; ++l)
            for (const auto& t : targets) {
                const Key keys[3] = {{u, mb, l, t + ".base"}, {u, mb, l, t + ".lora_B.out"}, {u, mb, l, t}};
                check_add(c, f, keys, t, ratio, missing, updates);
            }
    finish(c, missing, updates);
    return c;
}

std::string ResidualCheck::describe() const {
    const int64_t u = off() ? first_off_update : max_update;
    const bool lora = kind == "LoRA add";
    std::string s = kind + " of " + leg + " at update " + std::to_string(u) + ": " + number_or_na(ratio) +
                    "x its float32 bound (layer " + std::to_string(layer) + ", " + op + ", micro-batch " +
                    std::to_string(micro_batch) + "; the leg's own fingerprints, " +
                    (lora ? "sketch(" + op + ") against sketch(" + op + ".base) + scaling x sketch(" + op + ".lora_B.out)"
                          : std::string("sketch(y) against sketch(x) + sketch(b)")) +
                    "; " + std::to_string(over) + " of " + std::to_string(checked) + " adds over)";
    if (off() && max_update != first_off_update) s += " (largest " + number_or_na(max_ratio) + "x at update " + std::to_string(max_update) + ")";
    return s;
}

std::string ResidualCheck::not_checked() const {
    if (!recorded) return leg + " records no forward fingerprints: its " + kind + "s are not checked";
    if (missing.empty()) return "";
    std::vector<std::string> sites;
    for (const auto& m : missing) sites.push_back(m + " (forward)");
    return leg + "'s " + kind + "s not checked where it records no " + join(sites, ", ") +
           (checked > 0 ? " (" + std::to_string(checked) + " others checked)" : "");
}

}  // namespace tandem::experiments
