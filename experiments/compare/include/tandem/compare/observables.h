#pragma once
// The evaluation observables of two legs compared (docs/observables.md "Evaluation
// observables"): per evaluation, the adapter update norms |Delta W| = |B A| * scaling per layer and
// projection, and the probe set's next-token top-k, both from /legs/<leg>/adapter_norms and
// /legs/<leg>/next_token.
#include "tandem/store/run_file.h"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::experiments {

struct ObservablesRow {
    std::int64_t update = 0;
    std::int64_t slots = 0;              // (layer, projection) pairs both legs recorded
    double update_norm_a = 0, update_norm_b = 0;  // sqrt(sum over slots of |Delta W|^2): the adapter's whole update
    double max_delta_rel = 0;            // max over slots of | |dW|_a - |dW|_b | / max(|dW|_a, |dW|_b)
    std::string max_delta_at;            // "layer 1 down_proj"
    double max_factor_rel = 0;           // the same over |A| and |B|
    std::int64_t probes = 0;             // probes both legs recorded
    std::int64_t top1_agree = 0;         // probes whose most likely next token is the same
    double max_prob_diff = 0;            // max |p_a - p_b| over the ids in both legs' top-k
    // KL(p_b || p_a) of the probes' full next-token distributions (b: the reference side), from the
    // logits files legs/<leg>/next_token/update-<u>.f32 (written with `observe`); NaN when absent.
    double max_kl = NAN, mean_kl = NAN;
    std::string kl_error;                // why the KL is NaN although both files exist (one line)
};

struct ObservablesComparison {
    std::string leg_a, leg_b;
    std::vector<ObservablesRow> rows;    // one per evaluation both legs recorded, by update
};

// Empty rows when either leg has no observables.
ObservablesComparison compare_observables(const std::string& leg_a, const std::vector<AdapterNormRow>& norms_a,
                                          const std::vector<ProbeRow>& probes_a, const std::string& leg_b,
                                          const std::vector<AdapterNormRow>& norms_b, const std::vector<ProbeRow>& probes_b);
// Also reads the logits files next to run.h5 (the run folder) for the KL.
ObservablesComparison compare_observables(const RunFileReader& reader, const std::string& leg_a, const std::string& leg_b);
// KL(p || q) of each row of two float32 logits files [rows, vocab] (log-softmax in double): one value
// per row. Throws naming the files when their sizes differ or are not rows x vocab.
std::vector<double> probe_kl(const std::filesystem::path& p_logits, const std::filesystem::path& q_logits, std::int64_t rows);
// One leg's per-layer LoRA update norm over its evaluations (docs/observables.md: the divergence page's
// curves): |Delta W_layer| = sqrt(sum over the layer's adapted projections of |Delta W|^2), from
// /legs/<leg>/adapter_norms. Sorted by layer, points by update; a non-finite slot makes that
// evaluation's layer norm NaN (it is not dropped).
struct LayerUpdateNorms {
    std::string leg;
    std::int64_t layer = 0;
    std::vector<std::int64_t> updates;
    std::vector<double> norms;
};
std::vector<LayerUpdateNorms> layer_update_norms(const std::string& leg, const std::vector<AdapterNormRow>& rows);
// Every leg of the run that recorded adapter norms, legs sorted by name (RunFileReader::legs()).
std::vector<LayerUpdateNorms> layer_update_norms(const RunFileReader& reader);
// /comparisons/<a>~<b>/adapter_update_norm: the whole adapter's update norm per evaluation (a, b,
// a - b), with the largest per-slot relative difference, probe top-1 agreement and largest top-k
// probability difference as attributes. Nothing for a pair without rows.
void store_observables(RunFileWriter& w, const std::vector<ObservablesComparison>& cs);

}  // namespace tandem::experiments
