// The FLOP formula of tandem/compare/flops.h. It follows the autograd graph: a tensor needs a
// gradient iff it depends on a trainable (LoRA) parameter, and a backward product is counted iff
// the gradient it produces is needed.
#include "tandem/compare/flops.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "tandem/legs/leg_protocol.h"
#include "tandem/compare/statistics.h"

namespace tandem::experiments {

FlopCount& FlopCount::operator+=(const FlopCount& o) {
    projections_forward += o.projections_forward;
    projections_backward += o.projections_backward;
    lora_forward += o.lora_forward;
    lora_backward += o.lora_backward;
    attention_forward += o.attention_forward;
    attention_backward += o.attention_backward;
    head_forward += o.head_forward;
    head_backward += o.head_backward;
    return *this;
}

namespace {

enum Projection { Q, K, V, O, Gate, Up, Down };

struct Counter {
    const engine::Qwen3Config& c;
    std::array<bool, 7> adapted{};
    double N = 0;  // tokens of the micro-batch (padded)
    double r = 0;
    bool backward = true;
    FlopCount f;

    // A projection [in -> out] whose input needs a gradient iff input_grad; returns whether its output does.
    bool projection(int j, double in, double out, bool input_grad) {
        f.projections_forward += 2 * N * in * out;
        if (backward && input_grad) f.projections_backward += 2 * N * in * out;  // dx = dy W
        if (!adapted[size_t(j)]) return input_grad;
        f.lora_forward += 2 * N * r * (in + out);  // t = xd A^T, u = t B^T
        if (backward) {
            f.lora_backward += 2 * N * out * r * 2;             // dB = du^T t, dt = du B
            f.lora_backward += 2 * N * r * in;                  // dA = dt^T xd
            if (input_grad) f.lora_backward += 2 * N * r * in;  // dx += dt A
        }
        return true;
    }
};

FlopCount count(const engine::Qwen3Config& c, const engine::LoraConfig& lora, const MicroBatchShape& mb, bool backward) {
    Counter k{c, {}, 0, 0, true, {}};
    for (const auto& t : lora.targets) {
        const auto& all = engine::all_lora_targets();
        const auto it = std::find(all.begin(), all.end(), t);
        if (it != all.end()) k.adapted[size_t(it - all.begin())] = true;
    }
    k.N = double(mb.batch) * double(mb.seq);
    k.r = double(lora.rank);
    k.backward = backward;
    const double C = double(c.hidden_size), HD = double(c.num_attention_heads * c.head_dim),
                 KVD = double(c.num_key_value_heads * c.head_dim), I = double(c.intermediate_size);
    const double scores = 2 * double(mb.batch) * double(c.num_attention_heads) * double(mb.seq) * double(mb.seq) *
                          double(c.head_dim);  // one product of the dense T x T scores over every query head
    bool stream = false;  // does the residual stream need a gradient (the embedding is frozen: not at layer 0)
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const bool q = k.projection(Q, C, HD, stream), kk = k.projection(K, C, KVD, stream),
                   v = k.projection(V, C, KVD, stream);
        k.f.attention_forward += 2 * scores;  // q k^T, P v
        if (backward) k.f.attention_backward += scores * (double(q) + double(kk) + double(q || kk) + double(v));  // dq dk dP dv
        const bool att = q || kk || v;
        const bool mid = k.projection(O, HD, C, att) || stream;
        const bool gate = k.projection(Gate, C, I, mid), up = k.projection(Up, C, I, mid);
        stream = k.projection(Down, I, C, gate || up) || mid;
    }
    const double head = 2 * double(mb.supervised) * C * double(c.vocab_size);
    k.f.head_forward += head;
    if (backward && stream) k.f.head_backward += head;  // dh = dlogits E (no dE: frozen)
    return k.f;
}

}  // namespace

FlopCount training_flops(const engine::Qwen3Config& config, const engine::LoraConfig& lora, const MicroBatchShape& mb) {
    return count(config, lora, mb, true);
}

FlopCount update_flops(const engine::Qwen3Config& config, const engine::LoraConfig& lora,
                       const std::vector<MicroBatchShape>& micro_batches) {
    FlopCount f;
    for (const auto& mb : micro_batches) f += count(config, lora, mb, true);
    return f;
}

FlopCount evaluation_flops(const engine::Qwen3Config& config, const engine::LoraConfig& lora,
                           const std::vector<MicroBatchShape>& micro_batches) {
    FlopCount f;
    for (const auto& mb : micro_batches) f += count(config, lora, mb, false);
    return f;
}

FlopFigures flop_figures(const LegTrace& trace, const std::vector<double>& update_flops, double peak_flops_per_s) {
    FlopFigures f;
    f.peak_flops_per_s = peak_flops_per_s > 0 ? peak_flops_per_s : -1;
    const auto [first, last] = timing_window(static_cast<int64_t>(trace.steps.size()));
    std::vector<double> per_update;
    double flops = 0, wall = 0;
    for (const auto& s : trace.steps) {
        if (s.update < first || s.update > last || s.update < 0 || size_t(s.update) >= update_flops.size()) continue;
        if (!std::isfinite(s.wall_s) || s.wall_s <= 0) continue;
        per_update.push_back(update_flops[size_t(s.update)]);
        flops += update_flops[size_t(s.update)];
        wall += s.wall_s;
    }
    if (per_update.empty()) return f;
    f.flops_per_update = percentile(per_update, 50);
    f.flops_per_s = flops / wall;
    if (f.peak_flops_per_s > 0) f.utilisation = f.flops_per_s / f.peak_flops_per_s;
    return f;
}

}  // namespace tandem::experiments
