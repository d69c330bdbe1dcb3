#pragma once
// The two distances that judge a pair of legs, side by side (docs/thresholds.md), and the verdict.
//
// Paired numerics distance (legs with the same seeds, shared dropout masks and a shared plan): at
// every paired evaluation, the relative difference of held-out CE |a - b| / |b| against a float32
// error-model bound
//     bound(u) = k * eps32 * C^(L+1) * sqrt(S) * sqrt(1 + u)
// (eps32 = 2^-23, C = 1.03 per layer as in TTrace, L layers, S = max_len, u the update); k is
// calibrated from measured clean pairs (kErrorModelK; the measurement is in docs/thresholds.md).
//
// Envelope distance (any pair, given a same-stack seed envelope): the leg's held-out CE in units of
// the envelope's spread, z(u) = (x(u) - mean(u)) / std(u), the band
// mean +- (c sqrt(1 + 1/N) std + bound |mean|) per evaluation (a prediction interval, c Student's t
// with N - 1 dof at a Sidak level over every per-update check of the pair: prediction_band_factor),
// and a two-sided test across evaluations: the leg's mean held-out CE after update 0 against the
// members' (a prediction t-test with N - 1 degrees of freedom; alpha: Thresholds::envelope_alpha). Two-sided: a leg that trains better than its
// stack's seeds allow computes something else just as surely as one that trains worse. The same
// distance judges the per-update training loss and pre-clip grad norm of an unpaired leg that shares
// the plan (series.h).
#include "tandem/compare/judge/envelope.h"
#include "tandem/spec/experiment.h"
#include "tandem/spec/gate_config.h"
#include "tandem/store/run_file.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

// The error model's constant, calibrated from measured clean paired runs of this project (engine
// legs differing only in their thread count, engine vs reference with shared masks and plan) as
// 4 x the largest observed ratio rel_diff / (eps32 C^(L+1) sqrt(S) sqrt(1+u)), rounded up:
// 4 x 0.437 = 1.75 -> 2 (scripts/calibrate-error-model, 2026-12-01; docs/thresholds.md). Was 0.1 when
// only generated (random) bases had been measured (largest 0.0242); the pretrained base the main job
// runs on (docs/decisions.md) rounds 18x more at update 0 (sharper logits).
inline constexpr double kErrorModelK = 2.0;
// Per-layer growth of the relative error (TTrace: C = 1.03).
inline constexpr double kErrorModelC = 1.03;
// The constants of the per-update series' bounds (judge/series.h): the same form as held-out CE's, k
// calibrated the same way (4 x the largest clean ratio, rounded up) from the training loss and the
// pre-clip grad norm of the same clean paired runs (scripts/calibrate-error-model, docs/thresholds.md
// "Per-update series"). The grad norm's is larger: the backward of a pretrained model differs more
// between two float32 stacks than its forward (docs/observables.md).
inline constexpr double kLossErrorModelK = 3.0;    // 4 x 0.719 (pretrained base, S 192, update 0) = 2.88 -> 3
inline constexpr double kGradNormErrorModelK = 28.0;  // 4 x 6.79 (pretrained base, seed 7, update 1) = 27.1 -> 28
// The family-wise false-alarm rate of the envelope's judgement of one pair (docs/thresholds.md section 3).
inline constexpr double kEnvelopeAlpha = 0.05;

struct ErrorModel {
    double k = kErrorModelK;
    double c = kErrorModelC;
    int64_t layers = 0;   // L: decoder layers of the model
    int64_t seq_len = 0;  // S: the experiment's max_len
    // The relative bound on |a - b| / |b| of held-out CE at the evaluation after `update` updates.
    double bound(int64_t update) const;
    std::string describe() const;  // "0.1 x eps32 x 1.03^(L+1) x sqrt(S) x sqrt(1+u), L 2, S 256"
};
// L from the experiment's model (named, inline, or a checkpoint's config.json: `run_folder`/base
// when the experiment's base path is gone); S = sequence.max_len.
ErrorModel error_model_for(const ExperimentSpec& spec, const std::filesystem::path& run_folder = {});
// The same, or nothing when the depth cannot be read (compare_legs then says why the paired distance
// does not apply, instead of the comparison failing).
std::optional<ErrorModel> error_model_or_none(const ExperimentSpec& spec, const std::filesystem::path& run_folder = {});

// Whether two legs of a run are paired: the same seeds (one run), shared dropout masks (or dropout
// 0) and a shared plan.
bool legs_are_paired(const ExperimentSpec& spec, const std::string& leg_a, const std::string& leg_b);

struct PairedDistance {
    bool applies = false;                 // the legs are paired
    std::vector<DistancePoint> points;    // per paired evaluation (see DistancePoint)
    double max_ratio = std::nan("");      // largest difference / bound
    int64_t max_ratio_update = -1;
    // The first point beyond the bound (or not finite): its update and ratio (-1 / NaN when none).
    int64_t first_beyond_update = -1;
    double first_beyond_ratio = std::nan("");
    bool within() const;                  // applies, some point, every ratio finite and <= 1
};
// `evals` as pair_evals gives them (a, b); the reference side b unless `reference_is_a`.
PairedDistance paired_distance(const std::vector<PairedPoint>& evals, const ErrorModel& model, bool reference_is_a);

// The band a value must stay in at one point of an envelope (also the live gate's).
struct Band {
    double low = 0, high = 0;
};
Band envelope_band(const EnvelopePoint& p, double sigma, double relative_floor);

// Student's t distribution: P(T > t) for `df` degrees of freedom (regularized incomplete beta).
double student_t_sf(double t, double df);
// Its quantile: the t with P(T > t) = q (0 < q < 1), by bisection on student_t_sf.
double student_t_isf(double q, double df);

// The calibrated per-update band of an unpaired leg (docs/thresholds.md section 3, "band per update"):
// a new clean member's deviation from the envelope mean over the N members' sample std, divided by
// sqrt(1 + 1/N), follows Student's t with N - 1 dof; `checks` such deviations are judged in a pair, so
// each is held to the Sidak level 1 - (1 - alpha)^(1/checks), two-sided: the band is
// mean +- c sqrt(1 + 1/N) std, c = student_t_isf(alpha_u / 2, N - 1). Returns c sqrt(1 + 1/N).
double prediction_band_factor(int64_t members, double family_alpha, int64_t checks);
// One per-update value of the leg against the envelope point of its update.
struct BandCheck {
    int64_t update = 0;
    int64_t n = 0;             // the envelope's members at this point
    double value = 0, mean = 0, std = 0;
    double floor = 0;          // bound(u) |mean|: rounding, where the members do not spread
};

struct EnvelopeDistance {
    std::string series = "heldout_ce";    // what is judged: heldout_ce | loss | grad_norm
    bool available = false;               // an envelope judged the leg
    std::string why_unavailable;          // when not
    std::string stack;                    // the envelope's implementation
    std::string leg;                      // the leg judged
    int64_t members = 0;
    std::vector<DistancePoint> points;    // per evaluation with a spread (std > 0)
    double max_abs_z = std::nan("");
    int64_t max_abs_z_update = -1;
    std::vector<int64_t> outside_band;    // evaluations where the leg left the band
    std::vector<BandCheck> band_checks;   // every value judged by a band (outside_band: those outside)
    double band_alpha = std::nan("");     // the family-wise alpha of the bands this distance was judged with
    int64_t band_family = 0;              // the per-update checks that share it (with spread, std > 0)
    double band_factor = std::nan("");    // c sqrt(1 + 1/N) of the pair's family at N = members
    double worst_band_z = std::nan("");   // the largest |value - mean| / std over checks with spread (vs band_factor)
    int64_t worst_band_update = -1;
    // The two-sided prediction t-test: the leg's mean of the series (held-out CE: over the
    // evaluations after update 0; loss, grad norm: over every update) against the members' means.
    double leg_mean = std::nan(""), members_mean = std::nan(""), members_std = std::nan("");
    double t = std::nan(""), p = std::nan("");  // p two-sided: P(|T| > |t|)
    int64_t df = 0;
    double alpha = 0.05;
    bool test_rejects() const { return std::isfinite(p) && p < alpha; }
    bool within() const { return available && !test_rejects() && outside_band.empty(); }
    // "|z| 2.94, p 0.187" (the size of a difference in seed noise), or why there is none.
    std::string effect() const;
};
// z = (x - mean) / std of each evaluation with a spread above rounding (bound(u) |mean|), as the
// envelope distance and the workbench's z panel use them.
std::vector<DistancePoint> envelope_z_points(const std::vector<EvalRow>& evals, const SeedEnvelope& envelope, const ErrorModel& model);
// The leg's held-out CE (`evals`) against the envelope; `model` widens the band by the bound.
EnvelopeDistance envelope_distance(const std::string& leg, const std::vector<EvalRow>& evals, const SeedEnvelope& envelope,
                                   const ErrorModel& model);
// The leg's per-update `series` (loss | grad_norm) against the envelope's series of the same name:
// z and band per update, the two-sided test over the mean of every update; `model` (the series' own
// bound) widens the band.
EnvelopeDistance envelope_series_distance(const std::string& leg, const std::vector<StepRow>& steps, const std::string& series,
                                          const SeedEnvelope& envelope, const ErrorModel& model);
// The two-sided prediction t-test of one value against a sample (N - 1 degrees of freedom): fills
// d's members_mean, members_std, t, df, p; false (with d.why_unavailable) when the sample cannot.
bool prediction_test(EnvelopeDistance& d, double value, const std::vector<double>& sample);
// Judges the band checks of every distance of one pair as one family at `family_alpha` (Sidak over the
// checks with spread; a check without spread is held to its floor alone): fills outside_band,
// band_alpha, band_family, band_factor, worst_band_z.
void judge_bands(const std::vector<EnvelopeDistance*>& family, double family_alpha);

// The verdict of a pair (docs/thresholds.md "The verdict"):
//   equivalent               paired, within the bound everywhere (every series)
//   different                a level L1-L3 failed, a value is not finite, the lr is off the spec's
//                            schedule, or a paired pair exceeded a bound
//   within the seed envelope unpaired (native masks or plan, an imported leg), within the envelope
//   outside the seed envelope unpaired, outside a band of the envelope or a two-sided test rejects
//   not judged               unpaired and no envelope to judge with (the reason says how to build one)
enum class PairVerdict { Equivalent, Different, WithinEnvelope, OutsideEnvelope, NotJudged };
const char* pair_verdict_name(PairVerdict v);
// Every word a verdict line can start with: the five above and "incomplete" (a run's legs lack data).
const std::vector<std::string>& verdict_words();
bool verdict_passes(PairVerdict v);  // equivalent or within the seed envelope

}  // namespace tandem::experiments
