// Counter-based dropout masks (definition in tandem/engine/dropout.h and docs/engine.md; the Python
// twin is sdk/python/tandem_leg/torch/shared_dropout.py).
#include "tandem/engine/dropout.h"

#include <cstring>
#include <string>

#include "parallel.h"
#include "simd.h"
#include "tandem/error.h"

namespace tandem::engine {

uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

int projection_index(const char* name) {
    static const char* const names[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    for (int i = 0; i < 7; ++i)
        if (std::strcmp(name, names[i]) == 0) return i;
    throw Error(std::string("LoRA target '") + name +
                "' is not a Qwen3 projection (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
}

uint64_t shared_dropout_key(uint64_t seed, uint64_t update, uint64_t micro_batch, uint64_t layer,
                            uint64_t projection) {
    uint64_t k = mix64(seed);
    k = mix64(k ^ update);
    k = mix64(k ^ micro_batch);
    k = mix64(k ^ layer);
    return mix64(k ^ projection);
}

uint64_t native_dropout_key(uint64_t seed) { return mix64(seed ^ 0x6E61746976650000ULL); }

void fill_dropout_keep(uint8_t* keep, int64_t n, uint64_t key, uint64_t first_index, double p) {
    if (simd::enabled()) {  // the same integers, 8 at a time (simd.h)
        detail::parallel_for_grain(n, 1 << 15, [&](int64_t b, int64_t e) {
            simd::fill_dropout_keep(keep + b, e - b, key, first_index + static_cast<uint64_t>(b), p);
        });
        return;
    }
    detail::parallel_for_grain(n, 1 << 15, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            const uint64_t r = mix64(key ^ (first_index + static_cast<uint64_t>(i)));
            const double u = static_cast<double>(r >> 40) * (1.0 / 16777216.0);  // top 24 bits, exact
            keep[i] = u >= p ? 1 : 0;
        }
    });
}

DropoutMask dropout_mask(const DropoutContext& dc, int64_t layer, int projection, int64_t elements) {
    DropoutMask m;
    if (!dc.active()) return m;
    m.active = true;
    m.p = dc.p;
    m.scale = dropout_scale(dc.p);
    if (dc.mode == DropoutMode::Shared) {
        m.key = shared_dropout_key(dc.seed, dc.update, dc.micro_batch, uint64_t(layer), uint64_t(projection));
        m.first_index = 0;
    } else {
        if (!dc.native_counter) throw Error("dropout: native mode needs a counter");
        m.key = native_dropout_key(dc.seed);
        m.first_index = *dc.native_counter;
        *dc.native_counter += uint64_t(elements);
    }
    return m;
}

}  // namespace tandem::engine
