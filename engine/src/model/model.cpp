// Qwen3 decoder + LoRA on the CPU: parameter binding, forward with activation cache, fused LM-head
// cross-entropy over the supervised positions only, and backward into the LoRA parameters.
// Every op is in ops.cpp; this file is the wiring (llm.c's gpt2_forward / gpt2_backward).
#include "tandem/engine/model.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "tandem/engine/io.h"
#include "tandem/engine/ops.h"
#include "tandem/error.h"

namespace tandem::engine {

AdapterLayout AdapterLayout::make(const Qwen3Config& c, const LoraConfig& lora) {
    AdapterLayout lay;
    const int64_t C = c.hidden_size, HD = c.num_attention_heads * c.head_dim, KVD = c.num_key_value_heads * c.head_dim,
                  I = c.intermediate_size, r = lora.rank;
    lay.in_dim = {C, C, C, HD, C, C, I};
    lay.out_dim = {HD, KVD, KVD, C, I, I, C};
    for (const auto& t : lora.targets) lay.adapted[size_t(projection_index(t.c_str()))] = true;
    lay.a_off.assign(size_t(c.num_hidden_layers), {});
    lay.b_off.assign(size_t(c.num_hidden_layers), {});
    int64_t off = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        for (int j = 0; j < kProjections; ++j) {
            const size_t J = size_t(j);
            lay.a_off[size_t(l)][J] = lay.b_off[size_t(l)][J] = -1;
            if (!lay.adapted[J]) continue;
            const std::string& target = all_lora_targets()[J];
            lay.a_off[size_t(l)][J] = off;
            lay.slots.push_back(AdapterSlot{peft_lora_name(l, target, 'A'), {r, lay.in_dim[J]}, off, l, j, true});
            off += r * lay.in_dim[J];
            lay.b_off[size_t(l)][J] = off;
            lay.slots.push_back(AdapterSlot{peft_lora_name(l, target, 'B'), {lay.out_dim[J], r}, off, l, j, false});
            off += lay.out_dim[J] * r;
        }
    }
    lay.num_params = off;
    return lay;
}

namespace {

constexpr int kProjections = AdapterLayout::kProjections;
const std::array<const char*, kProjections> kProjNames = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                          "gate_proj", "up_proj", "down_proj"};
enum Proj { Q = 0, K = 1, Vp = 2, O = 3, Gate = 4, Up = 5, Down = 6 };

// Frozen base weights of one decoder layer (pointers into the owned TensorMap).
struct LayerWeights {
    const float* input_norm;                 // [C]
    const float* post_norm;                  // [C]
    const float* q_norm;                     // [D]
    const float* k_norm;                     // [D]
    std::array<const float*, kProjections> w;  // q [H*D,C] k,v [KV*D,C] o [C,H*D] gate,up [I,C] down [C,I]
};

// Activation cache of one decoder layer for the current micro-batch (N = B*T).
struct LayerActs {
    std::vector<float> x_in;      // [N,C] residual stream entering the layer
    std::vector<float> ln1;       // [N,C]
    std::vector<float> ln1_rstd;  // [N]
    std::vector<float> q_lin;     // [N,H*D] q_proj output (q_norm input)
    std::vector<float> k_lin;     // [N,KV*D]
    std::vector<float> v;         // [N,KV*D]
    std::vector<float> qn_rstd;   // [N*H]
    std::vector<float> kn_rstd;   // [N*KV]
    std::vector<float> q;         // [N,H*D] normed + rotated
    std::vector<float> k;         // [N,KV*D]
    std::vector<float> probs;     // [B,H,T,T]
    std::vector<float> att;       // [N,H*D] attention output (o_proj input)
    std::vector<float> x_mid;     // [N,C] residual after attention
    std::vector<float> ln2;       // [N,C]
    std::vector<float> ln2_rstd;  // [N]
    std::vector<float> gate;      // [N,I]
    std::vector<float> up;        // [N,I]
    std::vector<float> act;       // [N,I] silu(gate)*up (down_proj input)
    std::array<std::vector<float>, kProjections> t;       // [N,r] A(dropout(x)) per adapted projection
    std::array<std::vector<uint8_t>, kProjections> keep;  // [N,in] dropout keep mask (empty = no dropout)
};

void resize(std::vector<float>& v, int64_t n) { v.resize(static_cast<size_t>(n)); }

}  // namespace

struct Qwen3LoraModel::Impl {
    Qwen3Config cfg;
    LoraConfig lora;
    ModelOptions opts;
    TensorMap base;
    const float* embed = nullptr;    // [V,C]
    const float* lm_head = nullptr;  // [V,C] (== embed when tied)
    const float* final_norm = nullptr;
    std::vector<LayerWeights> layers;

    int64_t C, H, KV, D, I, V, L, r;
    float scaling;
    std::array<bool, kProjections> adapted{};
    std::array<int64_t, kProjections> in_dim{}, out_dim{};

    std::vector<AdapterSlot> slots;
    // per layer, per projection: offsets of A and B in params (-1 when not adapted)
    std::vector<std::array<int64_t, kProjections>> a_off, b_off;
    std::vector<float> params, grads;

    // caches
    std::vector<float> rope_cos, rope_sin;  // [Tmax, D]
    int64_t rope_T = 0;
    std::vector<LayerActs> acts;
    std::vector<float> x_final;  // [N,C]
    int64_t B = 0, T = 0, N = 0;
    const int32_t* lengths = nullptr;
    std::vector<int32_t> lengths_copy;

    const float* A(int64_t l, int p) const { return a_off[size_t(l)][size_t(p)] < 0 ? nullptr : params.data() + a_off[size_t(l)][size_t(p)]; }
    const float* Bm(int64_t l, int p) const { return b_off[size_t(l)][size_t(p)] < 0 ? nullptr : params.data() + b_off[size_t(l)][size_t(p)]; }
    float* dA(int64_t l, int p) { return a_off[size_t(l)][size_t(p)] < 0 ? nullptr : grads.data() + a_off[size_t(l)][size_t(p)]; }
    float* dB(int64_t l, int p) { return b_off[size_t(l)][size_t(p)] < 0 ? nullptr : grads.data() + b_off[size_t(l)][size_t(p)]; }

    const float* weight(const std::string& name, const std::vector<int64_t>& shape) const {
        auto it = base.find(name);
        if (it == base.end()) throw Error("base weights: tensor '" + name + "' is missing");
        if (it->second.shape != shape)
            throw Error("base weights: tensor '" + name + "' has shape " + shape_text(it->second.shape) +
                        ", expected " + shape_text(shape));
        return it->second.ptr();
    }

    void bind(TensorMap weights) {
        base = std::move(weights);
        C = cfg.hidden_size;
        H = cfg.num_attention_heads;
        KV = cfg.num_key_value_heads;
        D = cfg.head_dim;
        I = cfg.intermediate_size;
        V = cfg.vocab_size;
        L = cfg.num_hidden_layers;
        r = lora.rank;
        if (H % KV != 0) throw Error("Qwen3 config: num_attention_heads must be a multiple of num_key_value_heads");
        if (D % 2 != 0) throw Error("Qwen3 config: head_dim must be even (RoPE rotates halves)");
        if (r <= 0) throw Error("LoRA config: rank must be positive");
        scaling = static_cast<float>(lora.scaling());
        const AdapterLayout layout = AdapterLayout::make(cfg, lora);
        adapted = layout.adapted;
        in_dim = layout.in_dim;
        out_dim = layout.out_dim;

        embed = weight("model.embed_tokens.weight", {V, C});
        final_norm = weight("model.norm.weight", {C});
        lm_head = cfg.tie_word_embeddings ? embed : weight("lm_head.weight", {V, C});
        layers.resize(size_t(L));
        for (int64_t l = 0; l < L; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            LayerWeights& w = layers[size_t(l)];
            w.input_norm = weight(p + "input_layernorm.weight", {C});
            w.post_norm = weight(p + "post_attention_layernorm.weight", {C});
            w.q_norm = weight(p + "self_attn.q_norm.weight", {D});
            w.k_norm = weight(p + "self_attn.k_norm.weight", {D});
            for (int j = 0; j < kProjections; ++j)
                w.w[size_t(j)] = weight(hf_projection_name(l, kProjNames[size_t(j)]), {out_dim[size_t(j)], in_dim[size_t(j)]});
        }

        // LoRA parameters: one flat buffer in the shared layout (AdapterLayout).
        slots = layout.slots;
        a_off = layout.a_off;
        b_off = layout.b_off;
        params.assign(size_t(layout.num_params), 0.0f);
        grads.assign(size_t(layout.num_params), 0.0f);
        acts.resize(size_t(L));
    }

    void ensure_rope(int64_t t) {
        if (t <= rope_T) return;
        rope_cos.resize(size_t(t * D));
        rope_sin.resize(size_t(t * D));
        ops::rope_tables(rope_cos.data(), rope_sin.data(), t, D, cfg.rope_theta);
        rope_T = t;
    }

    // ------------------------------------------------------------------------------------------
    // forward: fills acts[] and x_final for the micro-batch.
    void forward(const MicroBatch& mb, const DropoutContext& dropout) {
        B = mb.batch;
        T = mb.seq;
        N = B * T;
        lengths_copy = mb.lengths;
        lengths = lengths_copy.data();
        ensure_rope(T);
        const bool drop = dropout.active();
        const float dscale = drop ? dropout_scale(dropout.p) : 1.0f;

        std::vector<float> x(size_t(N * C));
        ops::embedding_forward(x.data(), mb.ids.data(), embed, N, C, V);
        std::vector<float> tmp(size_t(N * C));
        for (int64_t l = 0; l < L; ++l) {
            const LayerWeights& w = layers[size_t(l)];
            LayerActs& a = acts[size_t(l)];
            resize(a.ln1, N * C);
            resize(a.ln1_rstd, N);
            resize(a.q_lin, N * H * D);
            resize(a.k_lin, N * KV * D);
            resize(a.v, N * KV * D);
            resize(a.qn_rstd, N * H);
            resize(a.kn_rstd, N * KV);
            resize(a.q, N * H * D);
            resize(a.k, N * KV * D);
            resize(a.probs, B * H * T * T);
            resize(a.att, N * H * D);
            resize(a.x_mid, N * C);
            resize(a.ln2, N * C);
            resize(a.ln2_rstd, N);
            resize(a.gate, N * I);
            resize(a.up, N * I);
            resize(a.act, N * I);
            for (int j = 0; j < kProjections; ++j) {
                if (!adapted[size_t(j)]) continue;
                resize(a.t[size_t(j)], N * r);
                auto& keep = a.keep[size_t(j)];
                if (!drop) {
                    keep.clear();
                    continue;
                }
                const int64_t n = N * in_dim[size_t(j)];
                keep.resize(size_t(n));
                if (dropout.mode == DropoutMode::Shared) {
                    fill_dropout_keep(keep.data(), n,
                                      shared_dropout_key(dropout.seed, dropout.update, dropout.micro_batch,
                                                         uint64_t(l), uint64_t(j)),
                                      0, dropout.p);
                } else {
                    if (!dropout.native_counter) throw Error("dropout: native mode needs a counter");
                    fill_dropout_keep(keep.data(), n, native_dropout_key(dropout.seed), *dropout.native_counter,
                                      dropout.p);
                    *dropout.native_counter += uint64_t(n);
                }
            }
            a.x_in = x;  // [N,C]

            auto proj = [&](int j, float* y, const float* in) {
                const auto& keep = a.keep[size_t(j)];
                ops::lora_linear_forward(y, adapted[size_t(j)] ? a.t[size_t(j)].data() : nullptr, in, w.w[size_t(j)],
                                         A(l, j), Bm(l, j), keep.empty() ? nullptr : keep.data(), dscale, scaling, N,
                                         in_dim[size_t(j)], out_dim[size_t(j)], r);
            };
            // attention block
            ops::rmsnorm_forward(a.ln1.data(), a.ln1_rstd.data(), x.data(), w.input_norm, N, C, cfg.rms_norm_eps);
            proj(Q, a.q_lin.data(), a.ln1.data());
            proj(K, a.k_lin.data(), a.ln1.data());
            proj(Vp, a.v.data(), a.ln1.data());
            ops::rmsnorm_forward(a.q.data(), a.qn_rstd.data(), a.q_lin.data(), w.q_norm, N * H, D, cfg.rms_norm_eps);
            ops::rmsnorm_forward(a.k.data(), a.kn_rstd.data(), a.k_lin.data(), w.k_norm, N * KV, D, cfg.rms_norm_eps);
            ops::rope_forward(a.q.data(), a.q.data(), rope_cos.data(), rope_sin.data(), B, T, H, D);
            ops::rope_forward(a.k.data(), a.k.data(), rope_cos.data(), rope_sin.data(), B, T, KV, D);
            ops::attention_forward(a.att.data(), a.probs.data(), a.q.data(), a.k.data(), a.v.data(), lengths, B, T, H,
                                   KV, D);
            proj(O, tmp.data(), a.att.data());
            for (int64_t i = 0; i < N * C; ++i) a.x_mid[size_t(i)] = x[size_t(i)] + tmp[size_t(i)];
            // MLP block
            ops::rmsnorm_forward(a.ln2.data(), a.ln2_rstd.data(), a.x_mid.data(), w.post_norm, N, C, cfg.rms_norm_eps);
            proj(Gate, a.gate.data(), a.ln2.data());
            proj(Up, a.up.data(), a.ln2.data());
            ops::swiglu_forward(a.act.data(), a.gate.data(), a.up.data(), N * I);
            proj(Down, tmp.data(), a.act.data());
            for (int64_t i = 0; i < N * C; ++i) x[size_t(i)] = a.x_mid[size_t(i)] + tmp[size_t(i)];
        }
        x_final = std::move(x);
    }

    // ------------------------------------------------------------------------------------------
    // backward from d(x_final) [N,C] into the LoRA gradients.
    void backward(std::vector<float> dx) {
        std::vector<float> dtmp(size_t(N * C));
        std::vector<float> dact(size_t(N * I)), dgate(size_t(N * I)), dup(size_t(N * I));
        std::vector<float> datt(size_t(N * H * D)), dq(size_t(N * H * D)), dk(size_t(N * KV * D)),
            dv(size_t(N * KV * D)), dq_lin(size_t(N * H * D)), dk_lin(size_t(N * KV * D));
        std::vector<float> dln(size_t(N * C));
        for (int64_t l = L - 1; l >= 0; --l) {
            const LayerWeights& w = layers[size_t(l)];
            LayerActs& a = acts[size_t(l)];
            auto proj_back = [&](int j, float* din, const float* dy, const float* in, bool accumulate) {
                const auto& keep = a.keep[size_t(j)];
                ops::lora_linear_backward(din, dA(l, j), dB(l, j), dy, in, w.w[size_t(j)], A(l, j), Bm(l, j),
                                          adapted[size_t(j)] ? a.t[size_t(j)].data() : nullptr,
                                          keep.empty() ? nullptr : keep.data(), keep_scale, scaling, N,
                                          in_dim[size_t(j)], out_dim[size_t(j)], r, accumulate);
            };
            // MLP block: x_out = x_mid + down(act)
            proj_back(Down, dact.data(), dx.data(), a.act.data(), false);
            ops::swiglu_backward(dgate.data(), dup.data(), dact.data(), a.gate.data(), a.up.data(), N * I);
            proj_back(Gate, dln.data(), dgate.data(), a.ln2.data(), false);
            proj_back(Up, dln.data(), dup.data(), a.ln2.data(), true);
            ops::rmsnorm_backward(dtmp.data(), static_cast<float*>(nullptr), dln.data(), a.x_mid.data(), w.post_norm,
                                  a.ln2_rstd.data(), N, C);
            for (int64_t i = 0; i < N * C; ++i) dx[size_t(i)] += dtmp[size_t(i)];  // dx is now d(x_mid)
            // attention block: x_mid = x_in + o(att)
            proj_back(O, datt.data(), dx.data(), a.att.data(), false);
            ops::attention_backward(dq.data(), dk.data(), dv.data(), datt.data(), a.q.data(), a.k.data(), a.v.data(),
                                    a.probs.data(), lengths, B, T, H, KV, D);
            ops::rope_backward(dq.data(), dq.data(), rope_cos.data(), rope_sin.data(), B, T, H, D);
            ops::rope_backward(dk.data(), dk.data(), rope_cos.data(), rope_sin.data(), B, T, KV, D);
            ops::rmsnorm_backward(dq_lin.data(), static_cast<float*>(nullptr), dq.data(), a.q_lin.data(), w.q_norm,
                                  a.qn_rstd.data(), N * H, D);
            ops::rmsnorm_backward(dk_lin.data(), static_cast<float*>(nullptr), dk.data(), a.k_lin.data(), w.k_norm,
                                  a.kn_rstd.data(), N * KV, D);
            proj_back(Q, dln.data(), dq_lin.data(), a.ln1.data(), false);
            proj_back(K, dln.data(), dk_lin.data(), a.ln1.data(), true);
            proj_back(Vp, dln.data(), dv.data(), a.ln1.data(), true);
            ops::rmsnorm_backward(dtmp.data(), static_cast<float*>(nullptr), dln.data(), a.x_in.data(), w.input_norm,
                                  a.ln1_rstd.data(), N, C);
            for (int64_t i = 0; i < N * C; ++i) dx[size_t(i)] += dtmp[size_t(i)];  // dx is now d(x_in)
        }
    }
    float keep_scale = 1.0f;  // dropout multiplier of the last forward (1 when no dropout)

    // ------------------------------------------------------------------------------------------
    // supervised rows: hidden at (b, t-1) predicts ids[b, t] for every label (b, t), in (b, t) order.
    void gather_supervised(const MicroBatch& mb, std::vector<int64_t>& rows, std::vector<int32_t>& targets) const {
        rows.clear();
        targets.clear();
        for (int64_t b = 0; b < mb.batch; ++b)
            for (int64_t t = 1; t < mb.seq; ++t)
                if (mb.supervised[size_t(b * mb.seq + t)]) {
                    rows.push_back(b * mb.seq + t - 1);
                    targets.push_back(mb.ids[size_t(b * mb.seq + t)]);
                }
    }

    // CE over the supervised rows of x_final; when grad_scale != 0 returns d(x_final) in dx.
    double head_loss(const MicroBatch& mb, double grad_scale, std::vector<float>* dx) {
        std::vector<int64_t> rows;
        std::vector<int32_t> targets;
        gather_supervised(mb, rows, targets);
        const int64_t Ns = static_cast<int64_t>(rows.size());
        if (dx) dx->assign(size_t(N * C), 0.0f);
        if (Ns == 0) return 0.0;
        std::vector<float> xs(size_t(Ns * C)), hs(size_t(Ns * C)), rstd(static_cast<size_t>(Ns));
        for (int64_t i = 0; i < Ns; ++i)
            std::memcpy(xs.data() + i * C, x_final.data() + rows[size_t(i)] * C, sizeof(float) * size_t(C));
        ops::rmsnorm_forward(hs.data(), rstd.data(), xs.data(), final_norm, Ns, C, cfg.rms_norm_eps);
        std::vector<float> dh;
        if (dx) dh.resize(size_t(Ns * C));
        const double loss = ops::lm_head_cross_entropy(dx ? dh.data() : static_cast<float*>(nullptr), hs.data(),
                                                       lm_head, targets.data(), Ns, C, V, grad_scale,
                                                       opts.ce_token_chunk, opts.ce_vocab_chunk);
        if (dx) {
            std::vector<float> dxs(size_t(Ns * C));
            ops::rmsnorm_backward(dxs.data(), static_cast<float*>(nullptr), dh.data(), xs.data(), final_norm,
                                  rstd.data(), Ns, C);
            for (int64_t i = 0; i < Ns; ++i)  // each row is a distinct position: plain copy
                std::memcpy(dx->data() + rows[size_t(i)] * C, dxs.data() + i * C, sizeof(float) * size_t(C));
        }
        return loss;
    }
};

// ------------------------------------------------------------------------------------------------

Qwen3LoraModel::Qwen3LoraModel(const Qwen3Config& config, TensorMap base_weights, const LoraConfig& lora,
                               ModelOptions options)
    : impl_(std::make_unique<Impl>()) {
    impl_->cfg = config;
    impl_->lora = lora;
    impl_->opts = options;
    impl_->bind(std::move(base_weights));
}
Qwen3LoraModel::~Qwen3LoraModel() = default;
Qwen3LoraModel::Qwen3LoraModel(Qwen3LoraModel&&) noexcept = default;
Qwen3LoraModel& Qwen3LoraModel::operator=(Qwen3LoraModel&&) noexcept = default;

const Qwen3Config& Qwen3LoraModel::config() const { return impl_->cfg; }
const LoraConfig& Qwen3LoraModel::lora() const { return impl_->lora; }
const std::vector<AdapterSlot>& Qwen3LoraModel::adapter_slots() const { return impl_->slots; }
int64_t Qwen3LoraModel::num_trainable() const { return static_cast<int64_t>(impl_->params.size()); }
float* Qwen3LoraModel::params() { return impl_->params.data(); }
const float* Qwen3LoraModel::params() const { return impl_->params.data(); }
float* Qwen3LoraModel::grads() { return impl_->grads.data(); }
const float* Qwen3LoraModel::grads() const { return impl_->grads.data(); }
void Qwen3LoraModel::zero_grads() { std::fill(impl_->grads.begin(), impl_->grads.end(), 0.0f); }

void Qwen3LoraModel::load_adapter(const TensorMap& peft_tensors) {
    for (const auto& slot : impl_->slots) {
        auto it = peft_tensors.find(slot.name);
        if (it == peft_tensors.end()) throw Error("adapter: tensor '" + slot.name + "' is missing");
        if (it->second.shape != slot.shape)
            throw Error("adapter: tensor '" + slot.name + "' has shape " + shape_text(it->second.shape) +
                        ", expected " + shape_text(slot.shape));
    }
    if (peft_tensors.size() != impl_->slots.size()) {
        for (const auto& [name, t] : peft_tensors) {
            const bool known = std::any_of(impl_->slots.begin(), impl_->slots.end(),
                                           [&](const AdapterSlot& s) { return s.name == name; });
            if (!known) throw Error("adapter: unexpected tensor '" + name + "' (not a target of this LoRA config)");
        }
    }
    for (const auto& slot : impl_->slots) {
        const Tensor& t = peft_tensors.at(slot.name);
        std::copy(t.data.begin(), t.data.end(), impl_->params.begin() + slot.offset);
    }
}

namespace {
TensorMap slots_to_map(const std::vector<AdapterSlot>& slots, const std::vector<float>& buf) {
    TensorMap out;
    for (const auto& s : slots) {
        Tensor t(s.shape);
        std::copy(buf.begin() + s.offset, buf.begin() + s.offset + t.numel(), t.data.begin());
        out.emplace(s.name, std::move(t));
    }
    return out;
}
}  // namespace

TensorMap Qwen3LoraModel::adapter_tensors() const { return slots_to_map(impl_->slots, impl_->params); }
TensorMap Qwen3LoraModel::adapter_gradients() const { return slots_to_map(impl_->slots, impl_->grads); }

double Qwen3LoraModel::forward_backward(const MicroBatch& mb, const DropoutContext& dropout, double grad_scale) {
    mb.validate(impl_->V);
    impl_->keep_scale = dropout.active() ? dropout_scale(dropout.p) : 1.0f;
    impl_->forward(mb, dropout);
    if (grad_scale == 0.0) return impl_->head_loss(mb, 0.0, nullptr);
    std::vector<float> dx;
    const double loss = impl_->head_loss(mb, grad_scale, &dx);
    impl_->backward(std::move(dx));
    return loss;
}

double Qwen3LoraModel::loss_sum(const MicroBatch& mb) {
    mb.validate(impl_->V);
    impl_->forward(mb, DropoutContext{});
    return impl_->head_loss(mb, 0.0, nullptr);
}

std::vector<float> Qwen3LoraModel::logits(const MicroBatch& mb) {
    mb.validate(impl_->V);
    Impl& m = *impl_;
    m.forward(mb, DropoutContext{});
    std::vector<float> h(size_t(m.N * m.C));
    std::vector<float> rstd(static_cast<size_t>(m.N));
    ops::rmsnorm_forward(h.data(), rstd.data(), m.x_final.data(), m.final_norm, m.N, m.C, m.cfg.rms_norm_eps);
    std::vector<float> out(size_t(m.N * m.V));
    ops::linear_forward(out.data(), h.data(), m.lm_head, m.N, m.C, m.V);
    return out;
}

}  // namespace tandem::engine
