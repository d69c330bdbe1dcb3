#pragma once
// Dropout masks on the LoRA adapter input.
//
// Both generators are counter-based (no hidden sequential state besides one counter), built on
// SplitMix64's finaliser, so any leg can reproduce them bit for bit. Full definition, with a
// reference Python implementation, in docs/engine.md and experiments/legs/shared_dropout.py.
//
//   mix64(z):   z += 0x9E3779B97F4A7C15
//               z  = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//               z  = (z ^ (z >> 27)) * 0x94D049BB133111EB
//               return z ^ (z >> 31)                       (all arithmetic mod 2^64)
//
// SHARED ("shared" masks, docs/spec.md §Recipe): the stream of (seed, update, micro_batch, layer, projection)
//   key = mix64(mix64(mix64(mix64(mix64(seed) ^ update) ^ micro_batch) ^ layer) ^ projection)
//   element i (flat row-major index into the [batch*seq, in_features] adapter input of that
//   micro-batch, padding positions included, seq = the micro-batch's padded length):
//   u_i  = (mix64(key ^ i) >> 40) * 2^-24        (top 24 bits -> float in [0,1), exact)
//   keep_i = u_i >= p;  xd_i = x_i * (keep_i ? float32(1/(1-p)) : 0)
//   update = 0-based optimizer update index, micro_batch = 0-based index within the update,
//   layer = 0-based decoder layer, projection = index in q,k,v,o,gate,up,down (0..6).
//
// NATIVE: same u/keep rule, element c of a running counter (saved in TrainerState):
//   u_c = (mix64(mix64(seed ^ 0x6E61746976650000) ^ c) >> 40) * 2^-24, the counter advancing over
//   every element drawn (layer-major, projections in the order above, then row-major).
#include <cstdint>

namespace tandem::engine {

uint64_t mix64(uint64_t z);

// Index of a projection in {q,k,v,o,gate,up,down}; throws tandem::Error for another name.
int projection_index(const char* name);

uint64_t shared_dropout_key(uint64_t seed, uint64_t update, uint64_t micro_batch, uint64_t layer,
                            uint64_t projection);
uint64_t native_dropout_key(uint64_t seed);

// keep[i] = 1 iff uniform(key, first_index + i) >= p, for i in [0, n).
void fill_dropout_keep(uint8_t* keep, int64_t n, uint64_t key, uint64_t first_index, double p);

// The float32 multiplier of kept elements: float(1 / (1 - p)).
inline float dropout_scale(double p) { return static_cast<float>(1.0 / (1.0 - p)); }

enum class DropoutMode { Off, Native, Shared };

// How one forward pass draws its masks.
struct DropoutContext {
    DropoutMode mode = DropoutMode::Off;
    double p = 0.0;
    uint64_t seed = 0;
    uint64_t update = 0;        // shared: optimizer update index
    uint64_t micro_batch = 0;   // shared: micro-batch index inside the update
    uint64_t* native_counter = nullptr;  // native: running element counter (advanced by the pass)
    bool active() const { return mode != DropoutMode::Off && p > 0.0; }
};

// The mask of one adapter input, as a pure function that every backend evaluates itself: element i
// of the flat [N, in] input is kept iff uniform(key, first_index + i) >= p, and kept elements are
// multiplied by `scale`. A backend that keeps masks (Backend::keeps_dropout_masks: the CPU) fills
// `keep` (N*in bytes of backend memory from the size table) in the forward and reads it back in the
// backward; CUDA regenerates the mask inside its kernels and leaves `keep` alone.
struct DropoutMask {
    bool active = false;
    uint64_t key = 0;
    uint64_t first_index = 0;
    double p = 0.0;
    float scale = 1.0f;
    uint8_t* keep = nullptr;
};

// The mask of projection `projection` of decoder layer `layer` over `elements` (= N * in) inputs in
// one forward pass: shared keys from (seed, update, micro_batch, layer, projection); native keys from
// the seed and the running counter, which this call advances by `elements`. Inactive when the
// context is (mode Off or p = 0). Called in layer-major, projection order (q..down) by the wiring.
DropoutMask dropout_mask(const DropoutContext& dropout, int64_t layer, int projection, int64_t elements);

}  // namespace tandem::engine
