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
// [min - 2 std - bound |mean|, max + 2 std + bound |mean|] per evaluation, and a one-sided test
// across evaluations like MLPerf's: the leg's mean held-out CE after update 0 against the members'
// (a prediction t-test with N - 1 degrees of freedom, alpha 0.05; "worse" = higher CE).
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

// float32 machine epsilon (2^-23).
inline constexpr double kFloat32Epsilon = 1.1920928955078125e-07;
// The error model's constant, calibrated from measured clean paired runs of this project (engine
// legs differing only in their thread count, engine vs reference with shared masks and plan) as
// 4 x the largest observed ratio rel_diff / (eps32 C^(L+1) sqrt(S) sqrt(1+u)), rounded up:
// 4 x 0.437 = 1.75 -> 2 (scripts/calibrate-error-model, 2026-12-01; docs/thresholds.md). Was 0.1 when
// only generated (random) bases had been measured (largest 0.0242); the pretrained base the main job
// runs on (docs/decisions.md) rounds 18x more at update 0 (sharper logits).
inline constexpr double kErrorModelK = 2.0;
// Per-layer growth of the relative error (TTrace: C = 1.03).
inline constexpr double kErrorModelC = 1.03;

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

struct EnvelopeDistance {
    bool available = false;               // an envelope judged the leg
    std::string why_unavailable;          // when not
    std::string stack;                    // the envelope's implementation
    std::string leg;                      // the leg judged
    int64_t members = 0;
    std::vector<DistancePoint> points;    // per evaluation with a spread (std > 0)
    double max_abs_z = std::nan("");
    int64_t max_abs_z_update = -1;
    std::vector<int64_t> outside_band;    // evaluations where the leg left the band
    double leg_mean = std::nan(""), members_mean = std::nan(""), members_std = std::nan("");
    double t = std::nan(""), p = std::nan("");
    int64_t df = 0;
    double alpha = 0.05;
    bool test_rejects() const { return std::isfinite(p) && p < alpha; }
    bool within() const { return available && !test_rejects() && outside_band.empty(); }
};
// z = (x - mean) / std of each evaluation with a spread above rounding (bound(u) |mean|), as the
// envelope distance and the workbench's z panel use them.
std::vector<DistancePoint> envelope_z_points(const std::vector<EvalRow>& evals, const SeedEnvelope& envelope, const ErrorModel& model);
// The leg's held-out CE (`evals`) against the envelope; `model` widens the band by the bound.
EnvelopeDistance envelope_distance(const std::string& leg, const std::vector<EvalRow>& evals, const SeedEnvelope& envelope,
                                   const ErrorModel& model);

enum class PairVerdict { Equivalent, WithinEnvelope, OutsideEnvelope, NotComparable };
// "equivalent", "numerically different but within the seed envelope", "outside the envelope",
// "not comparable"
const char* pair_verdict_name(PairVerdict v);
bool verdict_passes(PairVerdict v);  // equivalent or within the envelope

}  // namespace tandem::experiments
