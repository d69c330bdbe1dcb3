#pragma once
// Elementwise ops held to float32 rounding, per leg (docs/thresholds.md "2c. Residual adds"). The
// fingerprints' bounds (localise.h) and the series' (series.h) are built for long reductions; an add
// is not one: given its two operands, y = fl(x + b) is fixed to one float32 rounding of y. Two legs'
// adds cannot be compared that closely (their operands already differ by the reductions before),
// but each leg's adds can be compared with its OWN operands, as the optimizer step is replayed on
// the leg's own operands (series.h OptimizerCheck). The fingerprints' sketch is linear in the tensor
// (docs/observables.md), so a leg that records the operands and the result of an add gives
//     d_k = sketch_k(y) - sketch_k(x) - sketch_k(b)          k = 0..15
// which is the sketch of y's rounding error, plus the float64 rounding of the three sketches:
//     bound = 1 x eps32 x |y| + n x eps64 x (|x| + |b| + |y|)        (n: the element count)
//     ratio = RMS_k |d_k| / bound
// A float32 add rounds each element by at most eps32/2 x |y_i|, so a clean add's ratio stays below
// about 0.5 (E d_k^2 = |rounding error|^2, at most (eps32/2)^2 |y|^2). The adds of a decoder layer:
//     attn_residual = (layer input) + o_proj      mlp_residual = attn_residual + down_proj
// with the layer input `embed` in layer 0 and the previous layer's mlp_residual after. peft's LoRA
// linear ends in one more add, PROJ = PROJ.base + scaling x PROJ.lora_B.out, checked the same way with
// the spec's scaling on u's sketch (lora_add_check): a leg that scales its adapter otherwise is off at
// the first update whose B is not zero.
#include "tandem/store/run_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::experiments {

// The bound of one sketch value of y = x + b (header comment); x, b, y: the three tensors' summaries.
double residual_add_bound(const FingerprintRow& x, const FingerprintRow& b, const FingerprintRow& y);
// RMS over the sketch of |sketch(y) - sketch(x) - sketch(b)| over the bound; 0 when the difference and
// the bound are both 0; +inf when the element counts differ or any summary value is not finite.
double residual_add_ratio(const FingerprintRow& x, const FingerprintRow& b, const FingerprintRow& y);

// peft's LoRA add, PROJ = PROJ.base + scaling x PROJ.lora_B.out (u = B A dropout(x), summed over `rank`
// products): the same check with the scaling applied to u's sketch, and a bound that also holds u's
// rounding when a leg sums it inside the GEMM that adds it (elementwise.cpp says how).
double lora_add_bound(const FingerprintRow& base, const FingerprintRow& u, double scaling, int64_t rank,
                      const FingerprintRow& y);
double lora_add_ratio(const FingerprintRow& base, const FingerprintRow& u, double scaling, int64_t rank,
                      const FingerprintRow& y);

// One leg's residual adds at every update it fingerprinted. Beyond 1 at any update: the leg's adds do
// not add up (its residual stream is not x + f(x)), paired or not: a self-check, not a comparison.
struct ResidualCheck {
    std::string leg;
    std::string kind = "residual add";  // or "LoRA add" (lora_add_check)
    bool recorded = false;            // the leg recorded forward fingerprints
    int64_t checked = 0;              // adds checked (update, micro-batch, layer, site)
    std::vector<int64_t> updates;     // the updates checked
    int64_t first_off_update = -1;    // the first update with an add beyond the bound; -1: none
    double ratio = 0;                 // that add's ratio (else the largest)
    int64_t layer = -1, micro_batch = -1;
    std::string op;                   // that add's result: "attn_residual", "mlp_residual"; a LoRA add's projection
    int64_t over = 0;                 // adds beyond the bound
    int64_t max_update = -1;
    double max_ratio = 0;
    // The points an add needs that the leg did not record ("o_proj", "down_proj", ...), sorted: those
    // adds are not checked, and say so (never passed silently).
    std::vector<std::string> missing;
    bool off() const { return first_off_update >= 0; }
    // "residual add of noisy at update 1: 26.8x its float32 bound (layer 0, attn_residual, micro-batch 0;
    // the leg's own fingerprints, sketch(y) against sketch(x) + sketch(b); 8 of 8 adds over)"
    std::string describe() const;
    // "noisy's residual adds not checked where it records no o_proj (forward) (2 others checked)" /
    // "noisy records no forward fingerprints: its residual adds are not checked"; "" when every add was
    // checked. A LoRA check says "LoRA adds" instead.
    std::string not_checked() const;
};
// The check of a leg's fingerprints (any order; other passes and ops are ignored).
ResidualCheck residual_check(const std::string& leg, const std::vector<FingerprintRow>& fingerprints);
// The LoRA adds of the adapted projections `targets` ("q_proj", ...) at the spec's scaling (as the leg
// multiplies by it: float32) and rank; kind "LoRA add", op the projection. A leg without
// PROJ.lora_B.out (an SDK older than the point) has them listed in `missing`.
ResidualCheck lora_add_check(const std::string& leg, const std::vector<FingerprintRow>& fingerprints,
                             const std::vector<std::string>& targets, double scaling, int64_t rank);

}  // namespace tandem::experiments
