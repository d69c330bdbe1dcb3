// Elementwise ops held to float32 rounding, per leg: the residual adds (judge/elementwise.h).
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

double residual_add_ratio(const FingerprintRow& x, const FingerprintRow& b, const FingerprintRow& y) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (x.count != y.count || b.count != y.count) return inf;
    if (!finite_summary(x) || !finite_summary(b) || !finite_summary(y)) return inf;
    double sq = 0;
    for (size_t k = 0; k < y.sketch.size(); ++k) {
        const double d = y.sketch[k] - x.sketch[k] - b.sketch[k];
        sq += d * d;
    }
    const double rms = std::sqrt(sq / static_cast<double>(y.sketch.size()));
    const double bound = residual_add_bound(x, b, y);
    if (rms == 0) return 0;
    return bound > 0 ? rms / bound : inf;
}

ResidualCheck residual_check(const std::string& leg, const std::vector<FingerprintRow>& fingerprints) {
    ResidualCheck c;
    c.leg = leg;
    using Key = std::tuple<int64_t, int64_t, int64_t, std::string>;  // update, micro-batch, layer, op
    std::map<Key, const FingerprintRow*> forward;
    std::set<std::pair<int64_t, int64_t>> batches;  // (update, micro-batch) with forward points
    int64_t layers = 0;
    for (const auto& r : fingerprints) {
        layers = std::max(layers, r.layer + 1);
        if (r.pass != "forward") continue;
        forward[{r.update, r.micro_batch, r.layer, r.op}] = &r;
        batches.emplace(r.update, r.micro_batch);
    }
    c.recorded = !forward.empty();
    std::set<std::string> missing;
    std::set<int64_t> updates;
    if (c.recorded && layers == 0)  // forward points, none in a decoder layer
        missing = {"attn_residual", "down_proj", "mlp_residual", "o_proj"};
    for (const auto& batch : batches) {
        const int64_t u = batch.first, mb = batch.second;
        for (int64_t l = 0; l < layers; ++l) {
            for (const Site& s : kSites) {
                const bool first = std::string(s.projection) == "o_proj";
                const Key x_key = first ? (l == 0 ? Key{u, mb, -1, "embed"} : Key{u, mb, l - 1, "mlp_residual"})
                                        : Key{u, mb, l, "attn_residual"};
                const Key keys[] = {x_key, {u, mb, l, s.projection}, {u, mb, l, s.result}};
                const FingerprintRow* rows[3] = {nullptr, nullptr, nullptr};
                bool complete = true;
                for (int i = 0; i < 3; ++i) {
                    const auto it = forward.find(keys[i]);
                    if (it == forward.end()) {
                        missing.insert(std::get<3>(keys[i]));
                        complete = false;
                    } else {
                        rows[i] = it->second;
                    }
                }
                if (!complete) continue;
                const double r = residual_add_ratio(*rows[0], *rows[1], *rows[2]);
                ++c.checked;
                updates.insert(u);
                const bool off = !(r <= 1.0);  // NaN and inf are off
                c.over += off;
                auto take = [&] {
                    c.ratio = r;
                    c.layer = l;
                    c.micro_batch = mb;
                    c.op = s.result;
                };
                // batches are in (update, micro-batch) order: the first off add is the earliest
                note_ratio(c, u, r, off, take);
            }
        }
    }
    c.updates.assign(updates.begin(), updates.end());
    c.missing.assign(missing.begin(), missing.end());
    return c;
}

std::string ResidualCheck::describe() const {
    const int64_t u = off() ? first_off_update : max_update;
    std::string s = "residual add of " + leg + " at update " + std::to_string(u) + ": " + number_or_na(ratio) +
                    "x its float32 bound (layer " + std::to_string(layer) + ", " + op + ", micro-batch " +
                    std::to_string(micro_batch) + "; the leg's own fingerprints, sketch(y) against sketch(x) + sketch(b); " +
                    std::to_string(over) + " of " + std::to_string(checked) + " adds over)";
    if (off() && max_update != first_off_update) s += " (largest " + number_or_na(max_ratio) + "x at update " + std::to_string(max_update) + ")";
    return s;
}

std::string ResidualCheck::not_checked() const {
    if (!recorded) return leg + " records no forward fingerprints: its residual adds are not checked";
    if (missing.empty()) return "";
    std::vector<std::string> sites;
    for (const auto& m : missing) sites.push_back(m + " (forward)");
    return leg + "'s residual adds not checked where it records no " + join(sites, ", ") +
           (checked > 0 ? " (" + std::to_string(checked) + " others checked)" : "");
}

}  // namespace tandem::experiments
