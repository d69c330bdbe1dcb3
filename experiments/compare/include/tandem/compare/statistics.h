#pragma once
// The statistics of a comparison (levels.h builds every level on these; docs/report.md).
//
// Statistics conventions (docs/report.md): differences are a - b (first leg minus second);
// dispersion is the population standard deviation of the differences (numpy's std, ddof = 0);
// percentiles are numpy's default (linear interpolation between closest ranks); a sign change is a
// pair of consecutive non-zero differences of opposite sign.
//
// Residuals in percent ("leg minus reference", docs/report.md): for every paired point,
// percent = 100 * (leg - reference) / |reference|. The reference side is the pair's second leg b
// (run order, as the differences), except when a is a reference-implementation leg and b is not:
// then a is the reference and the percent is 100 * (b - a) / |a|. A reference value of 0 (or a
// non-finite value) gives NaN, never a made-up number.
#include "tandem/store/run_file.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace tandem::experiments {

// Plain statistics of numbers, numpy's conventions (above).
double mean(const std::vector<double>& x);
double population_std(const std::vector<double>& x);
double percentile(std::vector<double> x, double q);  // q in [0, 100], numpy linear method
int64_t sign_changes(const std::vector<double>& diffs);

// The one summary of a paired series (L4's held-out CE, training loss and grad norm alike).
struct DiffStats {
    int64_t n = 0;
    double mean_signed = 0, mean_abs = 0, std = 0, max_abs = 0;
    int64_t max_abs_update = -1;
    int64_t sign_changes = 0;
    double mean_abs_rel = 0;  // mean |a-b| / mean |b|
};
DiffStats diff_stats(const std::vector<PairedPoint>& points);

// The one pairing of two series: the points at updates present in both (by update), in update
// order, a's value minus b's. NonFinite::Skip leaves out a row whose value is not finite (grad
// norms: a skipped non-finite update is reported by the completeness check, not as a difference).
enum class NonFinite { Keep, Skip };
template <class Row>
std::vector<PairedPoint> pair_series(const std::vector<Row>& a, const std::vector<Row>& b, double Row::*value,
                                     NonFinite non_finite = NonFinite::Keep);
// The three series L4 pairs.
inline std::vector<PairedPoint> pair_evals(const std::vector<EvalRow>& a, const std::vector<EvalRow>& b) {
    return pair_series(a, b, &EvalRow::heldout_ce);
}
inline std::vector<PairedPoint> pair_losses(const std::vector<StepRow>& a, const std::vector<StepRow>& b) {
    return pair_series(a, b, &StepRow::loss);
}
inline std::vector<PairedPoint> pair_grad_norms(const std::vector<StepRow>& a, const std::vector<StepRow>& b) {
    return pair_series(a, b, &StepRow::grad_norm, NonFinite::Skip);
}

struct PercentPoint {
    int64_t update = 0;
    double leg = 0, reference = 0;  // the two values, reference side as in the header comment
    double percent = 0;             // 100 * (leg - reference) / |reference|; NaN when reference is 0
};
struct PercentSeries {
    std::vector<PercentPoint> points;
    double max_abs = std::nan("");  // largest |percent| over the finite points (NaN when none)
    int64_t max_abs_update = -1;
};
// reference_is_a: the pair's first leg is the reference (see the comment at the top).
PercentSeries residual_percent(const std::vector<PairedPoint>& points, bool reference_is_a);

// The median-s/update window: the paper's updates 101-500 (first 100 discarded) when the run is long
// enough, else [n/5, n-1] (0-based, inclusive).
std::pair<int64_t, int64_t> timing_window(int64_t updates);

}  // namespace tandem::experiments
