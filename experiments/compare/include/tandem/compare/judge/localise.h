#pragma once
// Localisation (docs/observables.md "Localisation"): aligns two legs' fingerprints
// point by point, computes each point's relative difference, and names the first point of the chain
// (update, micro-batch, pass, position in the pass) whose difference exceeds the bound for its depth.
//
// Difference of a point recorded by both legs (summaries a and b, docs/observables.md):
//     rel      = |sketch_a - sketch_b| / (4 max(|X_a|, |X_b|))     (estimates |X_a - X_b| / |X|)
//     norm_rel = | |X_a| - |X_b| | / max(|X_a|, |X_b|)
//     value    = max(rel, norm_rel); 0 when both tensors are exactly zero; +inf when the element
//                counts differ or any summary value is non-finite
// Bound (the float32 error model of docs/thresholds.md, per depth instead of per model):
//     bound(pass, depth, u) = k_loc(pass) * eps32 * C^depth * sqrt(1 + u)   (data points tokens/labels: 1e-12)
// with depth = engine::chain_depth (layers between the point and the start of the chain) and one
// k_loc per pass (forward, backward, optimizer), each 4 x the largest value measured for that pass on
// clean paired runs of both clinical-tiny bases (docs/observables.md "Calibration of k_loc"): the
// backward and the first AdamW steps of a pretrained model differ ~100x more between two float32
// stacks than its forward (the head's p - onehot cancels where p is near 1), and one constant for all
// three would hide forward faults the forward's own bound catches.
#include "tandem/engine/observe.h"
#include "tandem/compare/observables.h"
#include "tandem/store/run_file.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// Calibrated: docs/observables.md "Calibration of k_loc" (scripts/calibrate-localise).
inline constexpr double kLocaliseKForward = 70;      // 4 x 16.6 (pretrained base, S 192)
inline constexpr double kLocaliseKBackward = 6000;   // 4 x 1477 (pretrained base, update 0)
inline constexpr double kLocaliseKOptimizer = 6900;  // 4 x 1703 (pretrained base, AdamW's first step)
inline constexpr double kLocaliseDataBound = 1e-12;  // tokens, labels: integers summarised in float64

struct LocaliseBound {
    double k_forward = kLocaliseKForward;
    double k_backward = kLocaliseKBackward;
    double k_optimizer = kLocaliseKOptimizer;
    double c = 1.03;                  // per-layer growth (docs/thresholds.md)
    double eps = 1.1920928955078125e-07;  // 2^-23
    double k(const std::string& pass) const;  // the pass's constant (an unknown pass: the largest)
    double bound(const std::string& op, const std::string& pass, std::int64_t depth, std::int64_t update) const;
};

struct Localisation {
    std::string leg_a, leg_b;
    std::int64_t num_layers = 0;
    std::vector<LocalisedPoint> points;  // every point both legs recorded, in chain order
    std::optional<size_t> first;         // index in points of the first whose ratio > 1 (or is not finite)
    size_t max_ratio_index = 0;          // the largest ratio (when points is not empty)
    size_t only_a = 0, only_b = 0;       // points one leg recorded and the other did not
    // The sites (op and pass) one leg recorded and the other did not, sorted: what localise could not
    // compare ("labels (forward)", "final_norm (backward)"). missing_in_a: sites b has and a lacks.
    std::vector<std::string> missing_in_a, missing_in_b;
    // "; mine records no fingerprints at labels (forward), ce (forward), ...: N points reference has
    // were not compared (the labels were consumed before the model's loss: a label smoother?)", "" when
    // both legs recorded the same sites.
    std::string blind_spots() const;
    size_t unknown = 0;                  // points with an op/pass not in the table (ignored)
    std::vector<std::int64_t> updates;   // updates both legs fingerprinted
    bool diverged() const { return first.has_value(); }
    // One line: "no divergence: ..." or "first divergence: update U, micro-batch M, layer L, OP (PASS): ...".
    std::string summary() const;
};

// Aligns a's and b's fingerprints (of one update when `update` is given).
Localisation localise(const std::vector<FingerprintRow>& a, const std::vector<FingerprintRow>& b, const std::string& leg_a,
                     const std::string& leg_b, std::optional<std::int64_t> update = {}, const LocaliseBound& bound = {});

// The report's localisations (docs/report.md) are add_localisations' (comparison.h): every pair whose
// verdict does not pass and whose two legs both recorded fingerprints.
// Stores each in run.h5 (/localisation/<a>~<b>).
void store_localisations(RunFileWriter& w, const std::vector<Localisation>& ls);

// The attributes stored with /localisation/<a>~<b> (summary, first point, bound constants).
Attributes localisation_attributes(const Localisation& l);

}  // namespace tandem::experiments
