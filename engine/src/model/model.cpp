// Qwen3 + LoRA, written once over the backend seam (tandem/engine/backend.h): weight binding, the
// activation size table, staging of a call's inputs, forward, the fused LM-head cross-entropy over
// the supervised rows, and backward into the LoRA parameters (llm.c's gpt2_forward / gpt2_backward).
// Every op goes through `Backend`; this file includes no op implementation (checked below), so the
// CPU and CUDA engines run exactly this wiring.
#include "tandem/engine/model.h"

#include <algorithm>
#include <array>
#include <string>
#include <type_traits>

#include "tandem/engine/io.h"
#include "tandem/engine/rope.h"
#include "tandem/error.h"

#if defined(TANDEM_ENGINE_CPU_OPS_INCLUDED) || defined(TANDEM_KERNELS_OPS_INCLUDED)
#error "the wiring reaches ops only through tandem::engine::Backend (docs/engine.md, The backend seam)"
#endif

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
// Index of a projection in the adapter layout, the dropout keys and all_lora_targets().
enum Projection : int { QProj = 0, KProj = 1, VProj = 2, OProj = 3, GateProj = 4, UpProj = 5, DownProj = 6 };

// Frozen base weights of one decoder layer (backend addresses).
struct LayerWeights {
    const float* input_norm;                   // [C]
    const float* post_norm;                    // [C]
    const float* q_norm;                       // [D]
    const float* k_norm;                       // [D]
    std::array<const float*, kProjections> w;  // q [H*D,C] k,v [KV*D,C] o [C,H*D] gate,up [I,C] down [C,I]
};

// What a forward pass keeps for the backward, per decoder layer (backend addresses).
struct LayerActivations {
    float* ln1;        // [N,C] input_layernorm output
    float* ln1_rstd;   // [N]
    float* q_lin;      // [N,H*D] q_proj output (q_norm input)
    float* k_lin;      // [N,KV*D]
    float* v;          // [N,KV*D]
    float* qn_rstd;    // [N*H]
    float* kn_rstd;    // [N*KV]
    float* q;          // [N,H*D] normed + rotated
    float* k;          // [N,KV*D]
    float* att_cache;  // Backend::attention_cache_floats(B,T,H)
    float* att;        // [N,H*D] attention output (o_proj input)
    float* x_mid;      // [N,C] residual stream after the attention block
    float* ln2;        // [N,C]
    float* ln2_rstd;   // [N]
    float* gate;       // [N,I]
    float* up;         // [N,I]
    float* act;        // [N,I] silu(gate)*up (down_proj input)
    std::array<float*, kProjections> t;       // [N,r] A(dropout(x)) per adapted projection
    std::array<uint8_t*, kProjections> keep;  // [N,in] dropout masks (backends that keep them)
};

// Every buffer of the wiring. Sizes come from for_each_activation (the size table), and one backend
// allocation holds them all.
struct Activations {
    std::vector<LayerActivations> layers;
    std::vector<float*> residual;  // L+1 of [N,C]: residual[l] enters layer l, residual[L] the final norm
    float* proj_out;               // [N,C] o_proj / down_proj output before the residual add
    // backward
    float* dx;      // [N,C] gradient of the residual stream
    float* dln;     // [N,C] gradient of a layer norm's output (shared by the projections reading it)
    float* dact;    // [N,I]
    float* dgate;   // [N,I]
    float* dup;     // [N,I]
    float* datt;    // [N,H*D]
    float* dq;      // [N,H*D]
    float* dk;      // [N,KV*D]
    float* dv;      // [N,KV*D]
    float* dq_lin;  // [N,H*D]
    float* dk_lin;  // [N,KV*D]
    // LM head over the Ns supervised rows
    float* xs;       // [Ns,C] gathered residual rows
    float* hs;       // [Ns,C] final-norm output
    float* hs_rstd;  // [Ns]
    float* dh;       // [Ns,C]
    float* dxs;      // [Ns,C]
};

// Model dimensions the size table needs.
struct Dims {
    int64_t C, H, KV, D, I, L, r;
    std::array<bool, kProjections> adapted;
    std::array<int64_t, kProjections> in_dim;
};

// The shape of one micro-batch (or the capacity: the largest of each over a call).
struct Shape {
    int64_t B = 0, T = 0, N = 0, Ns = 0;  // sequences, padded length, tokens, supervised rows
    int64_t att_cache = 0;                // floats of one layer's attention cache
    bool keep_masks = false;              // dropout on and the backend keeps masks
};

// THE size table: every activation buffer and its element count for shape s. Called with
// f(slot, count) (slot: float*& or uint8_t*&) to size the block and again to point the slots into it.
template <class F>
void for_each_activation(const Dims& d, const Shape& s, Activations& a, F&& f) {
    const int64_t N = s.N, C = d.C, HD = d.H * d.D, KVD = d.KV * d.D, I = d.I;
    for (LayerActivations& x : a.layers) {
        f(x.ln1, N * C);
        f(x.ln1_rstd, N);
        f(x.q_lin, N * HD);
        f(x.k_lin, N * KVD);
        f(x.v, N * KVD);
        f(x.qn_rstd, N * d.H);
        f(x.kn_rstd, N * d.KV);
        f(x.q, N * HD);
        f(x.k, N * KVD);
        f(x.att_cache, s.att_cache);
        f(x.att, N * HD);
        f(x.x_mid, N * C);
        f(x.ln2, N * C);
        f(x.ln2_rstd, N);
        f(x.gate, N * I);
        f(x.up, N * I);
        f(x.act, N * I);
        for (int j = 0; j < kProjections; ++j) f(x.t[size_t(j)], d.adapted[size_t(j)] ? N * d.r : 0);
        for (int j = 0; j < kProjections; ++j)
            f(x.keep[size_t(j)], d.adapted[size_t(j)] && s.keep_masks ? N * d.in_dim[size_t(j)] : 0);
    }
    for (float*& x : a.residual) f(x, N * C);
    f(a.proj_out, N * C);
    f(a.dx, N * C);
    f(a.dln, N * C);
    f(a.dact, N * I);
    f(a.dgate, N * I);
    f(a.dup, N * I);
    f(a.datt, N * HD);
    f(a.dq, N * HD);
    f(a.dk, N * KVD);
    f(a.dv, N * KVD);
    f(a.dq_lin, N * HD);
    f(a.dk_lin, N * KVD);
    f(a.xs, s.Ns * C);
    f(a.hs, s.Ns * C);
    f(a.hs_rstd, s.Ns);
    f(a.dh, s.Ns * C);
    f(a.dxs, s.Ns * C);
}

// A call's inputs on the backend: per micro-batch, offsets into one int32 upload.
struct Staged {
    const int32_t* ids = nullptr;      // [B*T]
    const int32_t* lengths = nullptr;  // [B]
    const int32_t* rows = nullptr;     // [Ns] hidden row (b*T + t-1) of each label
    const int32_t* targets = nullptr;  // [Ns] label id
    Shape shape;
};

}  // namespace

struct Qwen3LoraModel::Impl {
    // Declared first, destroyed last: every Buffer below releases into it.
    std::shared_ptr<Backend> be;
    Qwen3Config cfg;
    LoraConfig lora;
    ModelOptions opts;
    int64_t C = 0, H = 0, KV = 0, D = 0, I = 0, V = 0, L = 0, r = 0;
    float scaling = 1.0f;
    double rms_eps = 0, rope_theta = 0;  // the config's, or a loading/config fault's (effective_config)
    AdapterLayout layout;

    // frozen base (backend addresses, owned by the backend)
    const float* embed = nullptr;       // [V,C]
    const float* lm_head = nullptr;     // [V,C] (== embed when tied)
    const float* final_norm = nullptr;  // [C]
    std::vector<LayerWeights> layers;

    // adapter
    Buffer<float> params, grads;
    Buffer<double> loss_sum;  // the running sum of token losses of the current call

    // activations (one allocation, grown to the largest shape seen) and the call's inputs
    Activations acts;
    Buffer<uint8_t> act_block;
    std::vector<int64_t> act_capacity;  // bytes per buffer, in for_each_activation order
    Buffer<int32_t> staged_block;
    Buffer<float> rope_cos, rope_sin;  // [rope_T, D]
    int64_t rope_T = 0;

    // the micro-batch in flight
    bool evaluating = false;  // inside evaluate(): the eval_without_adapter fault's step
    Shape shape;
    const int32_t* lengths = nullptr;
    std::vector<std::array<DropoutMask, kProjections>> masks;  // per layer: the forward's, reused by the backward

    // fingerprints (observe.h): called after each named step when set; the base projections x W^T
    // are computed into obs_base only then
    Observer* obs = nullptr;
    Buffer<float> obs_base;

    Dims dims() const { return Dims{C, H, KV, D, I, L, r, layout.adapted, layout.in_dim}; }

    // The projection whose adapter projection p runs with: itself, except k_proj under the
    // k_proj_uses_v_adapter fault (the step "adapter on the wrong projection").
    int adapter_of(int p) const { return p == KProj && opts.faults.k_proj_uses_v_adapter ? VProj : p; }
    // Whether the adapters run in this pass (not in evaluation under the eval_without_adapter fault).
    bool adapters_on() const { return !(evaluating && opts.faults.eval_without_adapter); }

    const float* lora_a(int64_t l, int p) const { return at(params, layout.a_off, l, p); }
    const float* lora_b(int64_t l, int p) const { return at(params, layout.b_off, l, p); }
    float* grad_lora_a(int64_t l, int p) { return at(grads, layout.a_off, l, p); }
    float* grad_lora_b(int64_t l, int p) { return at(grads, layout.b_off, l, p); }
    static float* at(const Buffer<float>& buf, const std::vector<std::array<int64_t, kProjections>>& off, int64_t l,
                     int p) {
        const int64_t o = off[size_t(l)][size_t(p)];
        return o < 0 ? nullptr : buf.get() + o;
    }

    // ------------------------------------------------------------------------------------------
    // binding: shapes checked by name, then each tensor handed to the backend

    const float* take(TensorMap& base, const std::string& name, const std::vector<int64_t>& shape) {
        auto it = base.find(name);
        if (it == base.end()) throw Error("base weights: tensor '" + name + "' is missing");
        if (it->second.shape != shape)
            throw Error("base weights: tensor '" + name + "' has shape " + shape_text(it->second.shape) +
                        ", expected " + shape_text(shape));
        const float* p = be->take_weight(std::move(it->second));
        base.erase(it);
        return p;
    }

    void bind(TensorMap base) {
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
        be->check_supported(cfg);
        be->check_faults_supported(opts.faults);
        const Qwen3Config numerics = effective_config(cfg, opts.faults);  // loading/config faults, once
        rms_eps = numerics.rms_norm_eps;
        rope_theta = numerics.rope_theta;
        scaling = static_cast<float>(effective_lora_scaling(lora, opts.faults));
        layout = AdapterLayout::make(cfg, lora);
        if (opts.faults.k_proj_uses_v_adapter && !(layout.adapted[KProj] && layout.adapted[VProj]))
            throw Error("fault adapter-wrong-projection needs LoRA on both k_proj and v_proj");

        embed = take(base, "model.embed_tokens.weight", {V, C});
        final_norm = take(base, "model.norm.weight", {C});
        lm_head = cfg.tie_word_embeddings ? embed : take(base, "lm_head.weight", {V, C});
        layers.resize(size_t(L));
        for (int64_t l = 0; l < L; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            LayerWeights& w = layers[size_t(l)];
            w.input_norm = take(base, p + "input_layernorm.weight", {C});
            w.post_norm = take(base, p + "post_attention_layernorm.weight", {C});
            w.q_norm = take(base, p + "self_attn.q_norm.weight", {D});
            w.k_norm = take(base, p + "self_attn.k_norm.weight", {D});
            for (int j = 0; j < kProjections; ++j)
                w.w[size_t(j)] = take(base, hf_projection_name(l, all_lora_targets()[size_t(j)]),
                                      {layout.out_dim[size_t(j)], layout.in_dim[size_t(j)]});
        }

        params = Buffer<float>(*be, layout.num_params, MemoryKind::Adapter);
        grads = Buffer<float>(*be, layout.num_params, MemoryKind::Adapter);
        be->fill_zero(params.get(), params.bytes());
        be->fill_zero(grads.get(), grads.bytes());
        loss_sum = Buffer<double>(*be, 1, MemoryKind::Workspace);
        acts.layers.resize(size_t(L));
        acts.residual.resize(size_t(L + 1));
        masks.resize(size_t(L));
    }

    // ------------------------------------------------------------------------------------------
    // buffers

    // Grows the activation block so every buffer fits shape s (a no-op once the largest shape is seen).
    void ensure_activations(const Shape& s) {
        std::vector<int64_t> need;
        for_each_activation(dims(), s, acts, [&](auto*& slot, int64_t n) { need.push_back(n * int64_t(sizeof *slot)); });
        if (act_capacity.size() == need.size() &&
            std::equal(need.begin(), need.end(), act_capacity.begin(), [](int64_t a, int64_t b) { return a <= b; }))
            return;
        act_capacity.resize(need.size(), 0);
        constexpr int64_t kAlign = 256;  // bytes between buffers: vector and cuBLAS alignment
        int64_t total = 0;
        for (size_t i = 0; i < need.size(); ++i) {
            act_capacity[i] = std::max(act_capacity[i], need[i]);
            total += (act_capacity[i] + kAlign - 1) / kAlign * kAlign;
        }
        act_block.reset();  // release first: the backend may reuse the memory
        act_block = Buffer<uint8_t>(*be, total, MemoryKind::Activations);
        int64_t off = 0;
        size_t i = 0;
        for_each_activation(dims(), s, acts, [&](auto*& slot, int64_t) {
            using T = std::remove_reference_t<decltype(*slot)>;
            slot = act_capacity[i] > 0 ? reinterpret_cast<T*>(act_block.get() + off) : nullptr;
            off += (act_capacity[i] + kAlign - 1) / kAlign * kAlign;
            ++i;
        });
    }

    void ensure_rope(int64_t t) {
        if (t <= rope_T) return;
        std::vector<float> c(size_t(t * D)), s(size_t(t * D));
        ops::rope_tables(c.data(), s.data(), t, D, rope_theta);
        rope_cos = Buffer<float>(*be, t * D, MemoryKind::Workspace);
        rope_sin = Buffer<float>(*be, t * D, MemoryKind::Workspace);
        be->upload(rope_cos.get(), c.data(), c.size() * sizeof(float));
        be->upload(rope_sin.get(), s.data(), s.size() * sizeof(float));
        rope_T = t;
    }

    // Uploads ids, lengths and supervised rows/targets of every micro-batch (validated by the caller)
    // at once, and sizes the activations for the largest of them.
    std::vector<Staged> stage(const std::vector<MicroBatch>& mbs, bool dropout) {
        const bool keep_masks = dropout && be->keeps_dropout_masks();
        std::vector<int32_t> host;
        std::vector<std::array<size_t, 4>> offs;
        std::vector<Staged> out(mbs.size());
        Shape cap;
        for (size_t i = 0; i < mbs.size(); ++i) {
            const MicroBatch& mb = mbs[i];
            std::array<size_t, 4> o{};
            o[0] = host.size();
            host.insert(host.end(), mb.ids.begin(), mb.ids.end());
            o[1] = host.size();
            host.insert(host.end(), mb.lengths.begin(), mb.lengths.end());
            // supervised rows: hidden at (b, t-1) predicts ids[b, t] for every label (b, t), in (b, t) order
            // (the label_shift fault: t - 0 or t - 2; a label with no such row is dropped)
            const int64_t shift = opts.faults.label_shift == LabelShift::None ? 0
                                  : opts.faults.label_shift == LabelShift::Two ? 2 : 1;
            o[2] = host.size();
            std::vector<int32_t> targets;
            for (int64_t b = 0; b < mb.batch; ++b)
                for (int64_t t = 1; t < mb.seq; ++t)
                    if (mb.supervised[size_t(b * mb.seq + t)] && t - shift >= 0) {
                        host.push_back(static_cast<int32_t>(b * mb.seq + t - shift));
                        targets.push_back(mb.ids[size_t(b * mb.seq + t)]);
                    }
            o[3] = host.size();
            host.insert(host.end(), targets.begin(), targets.end());
            offs.push_back(o);
            Shape& s = out[i].shape;
            s.B = mb.batch;
            s.T = mb.seq;
            s.N = mb.batch * mb.seq;
            s.Ns = static_cast<int64_t>(targets.size());
            s.att_cache = be->attention_cache_floats(s.B, s.T, H);
            s.keep_masks = keep_masks;
            cap.N = std::max(cap.N, s.N);
            cap.Ns = std::max(cap.Ns, s.Ns);
            cap.att_cache = std::max(cap.att_cache, s.att_cache);
            cap.T = std::max(cap.T, s.T);
            cap.keep_masks = keep_masks;
        }
        if (int64_t(host.size()) > staged_block.size())
            staged_block = Buffer<int32_t>(*be, int64_t(host.size()), MemoryKind::Workspace);
        be->upload(staged_block.get(), host.data(), host.size() * sizeof(int32_t));
        for (size_t i = 0; i < mbs.size(); ++i) {
            out[i].ids = staged_block.get() + offs[i][0];
            out[i].lengths = staged_block.get() + offs[i][1];
            out[i].rows = staged_block.get() + offs[i][2];
            out[i].targets = staged_block.get() + offs[i][3];
        }
        ensure_activations(cap);
        ensure_rope(cap.T);
        return out;
    }

    // ------------------------------------------------------------------------------------------
    // fingerprints: what the observer sees after a named step (nothing runs when obs is null)

    void note(int64_t l, ObservedOp op, Pass p, const float* x, int64_t width) {
        if (obs) obs->observe(l, op, p, x, shape.N, width, Rows::Tokens);
    }
    // A LoRA linear's forward: its frozen part x W^T alone, A dropout(x), B A dropout(x) (the adapter's
    // output before the scaling, recomputed as lora_linear_forward computes it: t B^T), and its output.
    void note_projection(int64_t l, int j, const float* input, const float* y, const float* t, const float* lora_b) {
        if (!obs) return;
        const size_t J = size_t(j);
        const int64_t N = shape.N, in = layout.in_dim[J], out = layout.out_dim[J];
        if (obs_base.size() < N * out) obs_base = Buffer<float>(*be, N * out, MemoryKind::Workspace);
        be->linear_forward(obs_base.get(), input, layers[size_t(l)].w[J], N, in, out);
        note(l, projection_op(j, ProjectionPart::Base), Pass::Forward, obs_base.get(), out);
        if (layout.adapted[J] && t) {
            note(l, projection_op(j, ProjectionPart::LoraAOut), Pass::Forward, t, r);
            be->linear_forward(obs_base.get(), t, lora_b, N, r, out);
            note(l, projection_op(j, ProjectionPart::LoraBOut), Pass::Forward, obs_base.get(), out);
        }
        note(l, projection_op(j, ProjectionPart::Out), Pass::Forward, y, out);
    }
    // A LoRA linear's backward: its parameters' gradients, accumulated over the update so far.
    void note_lora_grads(int64_t l, int j) {
        const size_t J = size_t(j);
        if (!obs || !layout.adapted[J]) return;
        obs->observe(l, projection_op(j, ProjectionPart::LoraA), Pass::Backward, grad_lora_a(l, j), r, layout.in_dim[J], Rows::All);
        obs->observe(l, projection_op(j, ProjectionPart::LoraB), Pass::Backward, grad_lora_b(l, j), layout.out_dim[J], r, Rows::All);
    }

    // ------------------------------------------------------------------------------------------
    // forward: fills acts and residual[L] for one staged micro-batch

    void forward(const Staged& in, const DropoutContext& dropout) {
        shape = in.shape;
        lengths = in.lengths;
        const int64_t B = shape.B, T = shape.T, N = shape.N;
        const double eps = rms_eps;
        const FaultConfig& f = opts.faults;
        const bool adapters = adapters_on();
        Backend& b = *be;
        b.embedding_forward(acts.residual[0], in.ids, embed, N, C, V);
        note(-1, ObservedOp::Embed, Pass::Forward, acts.residual[0], C);
        for (int64_t l = 0; l < L; ++l) {
            const LayerWeights& w = layers[size_t(l)];
            LayerActivations& a = acts.layers[size_t(l)];
            // dropout keys of the layer, projections in order (the native counter advances here)
            for (int j = 0; j < kProjections; ++j) {
                DropoutMask& m = masks[size_t(l)][size_t(j)];
                m = layout.adapted[size_t(j)] ? dropout_mask(dropout, l, j, N * layout.in_dim[size_t(j)]) : DropoutMask{};
                if (m.active) m.keep = a.keep[size_t(j)];  // nullptr unless the backend keeps masks
            }
            const float* x = acts.residual[size_t(l)];
            auto proj = [&](int j, float* y, const float* input) {
                const size_t J = size_t(j);
                const int src = adapter_of(j);
                const bool lora = adapters && layout.adapted[size_t(src)];
                b.lora_linear_forward(y, lora ? a.t[J] : nullptr, input, w.w[J], lora ? lora_a(l, src) : nullptr,
                                      lora ? lora_b(l, src) : nullptr, masks[size_t(l)][J], scaling, N,
                                      layout.in_dim[J], layout.out_dim[J], r);
                note_projection(l, j, input, y, lora ? a.t[J] : nullptr, lora ? lora_b(l, src) : nullptr);
            };
            // attention block: x_mid = x + o_proj(attention(rope(norm(q)), rope(norm(k)), v))
            b.rmsnorm_forward(a.ln1, a.ln1_rstd, x, w.input_norm, N, C, eps);
            note(l, ObservedOp::InputNorm, Pass::Forward, a.ln1, C);
            proj(QProj, a.q_lin, a.ln1);
            proj(KProj, a.k_lin, a.ln1);
            proj(VProj, a.v, a.ln1);
            if (f.skip_qk_norm) {  // fault: q_proj / k_proj outputs go to RoPE unnormalised
                note(l, ObservedOp::QNorm, Pass::Forward, a.q_lin, H * D);  // the (skipped) norm step's output
                note(l, ObservedOp::KNorm, Pass::Forward, a.k_lin, KV * D);
                b.rope_forward(a.q, a.q_lin, rope_cos.get(), rope_sin.get(), B, T, H, D, f.rope_pairing);
                b.rope_forward(a.k, a.k_lin, rope_cos.get(), rope_sin.get(), B, T, KV, D, f.rope_pairing);
            } else {
                b.rmsnorm_forward(a.q, a.qn_rstd, a.q_lin, w.q_norm, N * H, D, eps);
                note(l, ObservedOp::QNorm, Pass::Forward, a.q, H * D);
                b.rmsnorm_forward(a.k, a.kn_rstd, a.k_lin, w.k_norm, N * KV, D, eps);
                note(l, ObservedOp::KNorm, Pass::Forward, a.k, KV * D);
                b.rope_forward(a.q, a.q, rope_cos.get(), rope_sin.get(), B, T, H, D, f.rope_pairing);
                b.rope_forward(a.k, a.k, rope_cos.get(), rope_sin.get(), B, T, KV, D, f.rope_pairing);
            }
            note(l, ObservedOp::QRope, Pass::Forward, a.q, H * D);
            note(l, ObservedOp::KRope, Pass::Forward, a.k, KV * D);
            b.attention_forward(a.att, a.att_cache, a.q, a.k, a.v, lengths, B, T, H, KV, D, f.kv_heads);
            note(l, ObservedOp::Attention, Pass::Forward, a.att, H * D);
            proj(OProj, acts.proj_out, a.att);
            b.residual_add(a.x_mid, x, acts.proj_out, N * C);
            note(l, ObservedOp::AttnResidual, Pass::Forward, a.x_mid, C);
            // MLP block: x_out = x_mid + down_proj(silu(gate_proj(norm)) * up_proj(norm))
            b.rmsnorm_forward(a.ln2, a.ln2_rstd, a.x_mid, w.post_norm, N, C, eps);
            note(l, ObservedOp::PostNorm, Pass::Forward, a.ln2, C);
            proj(GateProj, a.gate, a.ln2);
            proj(UpProj, a.up, a.ln2);
            b.swiglu_forward(a.act, a.gate, a.up, N * I);
            note(l, ObservedOp::MlpAct, Pass::Forward, a.act, I);
            proj(DownProj, acts.proj_out, a.act);
            b.residual_add(acts.residual[size_t(l + 1)], a.x_mid, acts.proj_out, N * C);
            note(l, ObservedOp::MlpResidual, Pass::Forward, acts.residual[size_t(l + 1)], C);
        }
    }

    // LM head over the supervised rows of residual[L]: adds the sum of their token losses to loss_sum;
    // when grad_scale != 0 leaves d(residual[L]) in acts.dx.
    void head(const Staged& in, double grad_scale) {
        const int64_t N = shape.N, Ns = shape.Ns;
        const bool want_grad = grad_scale != 0.0;
        Backend& b = *be;
        if (want_grad) b.fill_zero(acts.dx, sizeof(float) * size_t(N * C));
        if (Ns == 0) return;
        b.gather_rows(acts.xs, acts.residual[size_t(L)], in.rows, Ns, C);
        b.rmsnorm_forward(acts.hs, acts.hs_rstd, acts.xs, final_norm, Ns, C, rms_eps);
        const double loss_before = obs ? read_loss_sum() : 0.0;
        b.lm_head_cross_entropy(loss_sum.get(), want_grad ? acts.dh : nullptr, acts.hs, lm_head, in.targets, Ns, C, V,
                                grad_scale, opts.ce_token_chunk < 0 ? b.default_ce_token_chunk() : opts.ce_token_chunk,
                                opts.ce_vocab_chunk);
        if (obs) {
            obs->observe(-1, ObservedOp::FinalNorm, Pass::Forward, acts.hs, Ns, C, Rows::All);
            obs->observe_value(-1, ObservedOp::Ce, Pass::Forward, read_loss_sum() - loss_before);
        }
        if (!want_grad) return;
        if (obs) obs->observe(-1, ObservedOp::FinalNorm, Pass::Backward, acts.dh, Ns, C, Rows::All);
        b.rmsnorm_backward(acts.dxs, nullptr, acts.dh, acts.xs, final_norm, acts.hs_rstd, Ns, C, false);
        b.scatter_rows(acts.dx, acts.dxs, in.rows, Ns, C);  // each row is a distinct position
    }

    // backward from acts.dx = d(residual[L]) into the LoRA gradients (+=)
    void backward() {
        const int64_t B = shape.B, T = shape.T, N = shape.N;
        const FaultConfig& f = opts.faults;
        Backend& b = *be;
        Activations& g = acts;
        for (int64_t l = L - 1; l >= 0; --l) {
            const LayerWeights& w = layers[size_t(l)];
            LayerActivations& a = acts.layers[size_t(l)];
            auto proj_back = [&](int j, float* din, const float* dy, const float* input, bool accumulate) {
                const size_t J = size_t(j);
                const int src = adapter_of(j);
                b.lora_linear_backward(din, grad_lora_a(l, src), grad_lora_b(l, src), dy, input, w.w[J], lora_a(l, src),
                                       lora_b(l, src), layout.adapted[size_t(src)] ? a.t[J] : nullptr,
                                       masks[size_t(l)][J], scaling, N, layout.in_dim[J], layout.out_dim[J], r,
                                       accumulate, f.lora_b_grad);
                note_lora_grads(l, j);
            };
            const Pass bwd = Pass::Backward;
            note(l, ObservedOp::MlpResidual, bwd, g.dx, C);  // the gradient entering the layer
            // MLP block; the post-attention norm's input gradient adds into dx = d(x_mid)
            proj_back(DownProj, g.dact, g.dx, a.act, false);
            note(l, ObservedOp::MlpAct, bwd, g.dact, I);
            b.swiglu_backward(g.dgate, g.dup, g.dact, a.gate, a.up, N * I);
            note(l, projection_op(GateProj, ProjectionPart::Out), bwd, g.dgate, I);
            note(l, projection_op(UpProj, ProjectionPart::Out), bwd, g.dup, I);
            proj_back(GateProj, g.dln, g.dgate, a.ln2, false);
            proj_back(UpProj, g.dln, g.dup, a.ln2, true);
            note(l, ObservedOp::PostNorm, bwd, g.dln, C);
            b.rmsnorm_backward(g.dx, nullptr, g.dln, a.x_mid, w.post_norm, a.ln2_rstd, N, C, true);
            note(l, ObservedOp::AttnResidual, bwd, g.dx, C);
            // attention block; the input norm's input gradient adds into dx = d(x_in)
            proj_back(OProj, g.datt, g.dx, a.att, false);
            note(l, ObservedOp::Attention, bwd, g.datt, H * D);
            b.attention_backward(g.dq, g.dk, g.dv, g.datt, a.att, a.q, a.k, a.v, a.att_cache, lengths, B, T, H, KV, D,
                                 f.kv_heads);
            note(l, ObservedOp::QRope, bwd, g.dq, H * D);
            note(l, ObservedOp::KRope, bwd, g.dk, KV * D);
            note(l, projection_op(VProj, ProjectionPart::Out), bwd, g.dv, KV * D);
            if (f.skip_qk_norm) {  // fault: no q/k norm between the projections and RoPE
                b.rope_backward(g.dq_lin, g.dq, rope_cos.get(), rope_sin.get(), B, T, H, D, f.rope_pairing);
                b.rope_backward(g.dk_lin, g.dk, rope_cos.get(), rope_sin.get(), B, T, KV, D, f.rope_pairing);
                note(l, ObservedOp::QNorm, bwd, g.dq_lin, H * D);  // the (skipped) norm step passes it through
                note(l, ObservedOp::KNorm, bwd, g.dk_lin, KV * D);
            } else {
                b.rope_backward(g.dq, g.dq, rope_cos.get(), rope_sin.get(), B, T, H, D, f.rope_pairing);
                note(l, ObservedOp::QNorm, bwd, g.dq, H * D);
                b.rope_backward(g.dk, g.dk, rope_cos.get(), rope_sin.get(), B, T, KV, D, f.rope_pairing);
                note(l, ObservedOp::KNorm, bwd, g.dk, KV * D);
                b.rmsnorm_backward(g.dq_lin, nullptr, g.dq, a.q_lin, w.q_norm, a.qn_rstd, N * H, D, false);
                b.rmsnorm_backward(g.dk_lin, nullptr, g.dk, a.k_lin, w.k_norm, a.kn_rstd, N * KV, D, false);
            }
            note(l, projection_op(QProj, ProjectionPart::Out), bwd, g.dq_lin, H * D);
            note(l, projection_op(KProj, ProjectionPart::Out), bwd, g.dk_lin, KV * D);
            proj_back(QProj, g.dln, g.dq_lin, a.ln1, false);
            proj_back(KProj, g.dln, g.dk_lin, a.ln1, true);
            proj_back(VProj, g.dln, g.dv, a.ln1, true);
            note(l, ObservedOp::InputNorm, bwd, g.dln, C);
            b.rmsnorm_backward(g.dx, nullptr, g.dln, acts.residual[size_t(l)], w.input_norm, a.ln1_rstd, N, C, true);
        }
        note(-1, ObservedOp::Embed, Pass::Backward, g.dx, C);  // the gradient leaving layer 0
    }

    double read_loss_sum() {
        double v = 0.0;
        be->download(&v, loss_sum.get(), sizeof v);
        return v;
    }

    // host <-> backend copies of the flat adapter layout
    TensorMap to_map(const Buffer<float>& buf) const {
        std::vector<float> host(size_t(layout.num_params));
        be->download(host.data(), buf.get(), host.size() * sizeof(float));
        TensorMap out;
        for (const auto& s : layout.slots) {
            Tensor t(s.shape);
            std::copy(host.begin() + s.offset, host.begin() + s.offset + t.numel(), t.data.begin());
            out.emplace(s.name, std::move(t));
        }
        return out;
    }
};

// ------------------------------------------------------------------------------------------------

Qwen3LoraModel::Qwen3LoraModel(const Qwen3Config& config, TensorMap base_weights, const LoraConfig& lora,
                               ModelOptions options, std::shared_ptr<Backend> backend)
    : impl_(std::make_unique<Impl>()) {
    impl_->be = backend ? std::move(backend) : make_cpu_backend();
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
const std::vector<AdapterSlot>& Qwen3LoraModel::adapter_slots() const { return impl_->layout.slots; }
int64_t Qwen3LoraModel::num_trainable() const { return impl_->layout.num_params; }
float* Qwen3LoraModel::params() { return impl_->params.get(); }
const float* Qwen3LoraModel::params() const { return impl_->params.get(); }
float* Qwen3LoraModel::grads() { return impl_->grads.get(); }
const float* Qwen3LoraModel::grads() const { return impl_->grads.get(); }
void Qwen3LoraModel::zero_grads() { impl_->be->fill_zero(impl_->grads.get(), impl_->grads.bytes()); }
Backend& Qwen3LoraModel::backend() const { return *impl_->be; }

void Qwen3LoraModel::load_adapter(const TensorMap& peft_tensors) {
    const auto& slots = impl_->layout.slots;
    for (const auto& slot : slots) {
        auto it = peft_tensors.find(slot.name);
        if (it == peft_tensors.end()) throw Error("adapter: tensor '" + slot.name + "' is missing");
        if (it->second.shape != slot.shape)
            throw Error("adapter: tensor '" + slot.name + "' has shape " + shape_text(it->second.shape) +
                        ", expected " + shape_text(slot.shape));
    }
    if (peft_tensors.size() != slots.size()) {
        for (const auto& [name, t] : peft_tensors) {
            const bool known =
                std::any_of(slots.begin(), slots.end(), [&](const AdapterSlot& s) { return s.name == name; });
            if (!known) throw Error("adapter: unexpected tensor '" + name + "' (not a target of this LoRA config)");
        }
    }
    std::vector<float> host(size_t(impl_->layout.num_params));
    for (const auto& slot : slots) {
        const Tensor& t = peft_tensors.at(slot.name);
        std::copy(t.data.begin(), t.data.end(), host.begin() + slot.offset);
    }
    impl_->be->upload(impl_->params.get(), host.data(), host.size() * sizeof(float));
}

TensorMap Qwen3LoraModel::adapter_tensors() const { return impl_->to_map(impl_->params); }
TensorMap Qwen3LoraModel::adapter_gradients() const { return impl_->to_map(impl_->grads); }

double Qwen3LoraModel::accumulate(const std::vector<MicroBatch>& micro_batches,
                                  const std::function<DropoutContext(size_t)>& dropout, double grad_scale) {
    Impl& m = *impl_;
    for (const auto& mb : micro_batches) mb.validate(m.V);
    bool any_dropout = false;
    for (size_t i = 0; i < micro_batches.size(); ++i) any_dropout = any_dropout || dropout(i).active();
    const std::vector<Staged> staged = m.stage(micro_batches, any_dropout);
    m.be->fill_zero(m.loss_sum.get(), sizeof(double));
    for (size_t i = 0; i < staged.size(); ++i) {
        if (m.obs) m.obs->begin_micro_batch(i, micro_batches[i]);
        m.forward(staged[i], dropout(i));
        m.head(staged[i], grad_scale);
        if (grad_scale != 0.0) m.backward();
    }
    return m.read_loss_sum();
}

double Qwen3LoraModel::evaluate(const std::vector<MicroBatch>& micro_batches,
                                const std::function<DropoutContext(size_t)>& dropout) {
    struct Evaluating {  // the flag is cleared however accumulate() ends
        bool& flag;
        explicit Evaluating(bool& f) : flag(f) { flag = true; }
        ~Evaluating() { flag = false; }
    } scope(impl_->evaluating);
    return accumulate(micro_batches, dropout, 0.0);
}

double Qwen3LoraModel::forward_backward(const MicroBatch& mb, const DropoutContext& dropout, double grad_scale) {
    return accumulate({mb}, [&](size_t) { return dropout; }, grad_scale);
}

double Qwen3LoraModel::loss_sum(const MicroBatch& mb) {
    return accumulate({mb}, [](size_t) { return DropoutContext{}; }, 0.0);
}

void Qwen3LoraModel::set_observer(Observer* observer) { impl_->obs = observer; }

std::vector<float> Qwen3LoraModel::logits_at(const MicroBatch& mb, const std::vector<int32_t>& rows) {
    Impl& m = *impl_;
    mb.validate(m.V);
    for (int32_t row : rows)
        if (row < 0 || row >= mb.batch * mb.seq)
            throw Error("logits_at: row " + std::to_string(row) + " outside the micro-batch's " +
                        std::to_string(mb.batch * mb.seq) + " positions");
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n == 0) return {};
    Observer* obs = m.obs;
    m.obs = nullptr;  // the probe set is not a training step
    const std::vector<Staged> staged = m.stage({mb}, false);
    m.forward(staged[0], DropoutContext{});
    m.obs = obs;
    Backend& b = *m.be;
    Buffer<int32_t> idx(b, n, MemoryKind::Workspace);
    b.upload(idx.get(), rows.data(), rows.size() * sizeof(int32_t));
    Buffer<float> x(b, n * m.C, MemoryKind::Workspace), h(b, n * m.C, MemoryKind::Workspace),
        rstd(b, n, MemoryKind::Workspace), out(b, n * m.V, MemoryKind::Workspace);
    b.gather_rows(x.get(), m.acts.residual[size_t(m.L)], idx.get(), n, m.C);
    b.rmsnorm_forward(h.get(), rstd.get(), x.get(), m.final_norm, n, m.C, m.cfg.rms_norm_eps);
    b.linear_forward(out.get(), h.get(), m.lm_head, n, m.C, m.V);
    std::vector<float> host(size_t(n * m.V));
    b.download(host.data(), out.get(), host.size() * sizeof(float));
    return host;
}

std::vector<float> Qwen3LoraModel::logits(const MicroBatch& mb) {
    Impl& m = *impl_;
    mb.validate(m.V);
    const std::vector<Staged> staged = m.stage({mb}, false);
    Observer* obs = m.obs;
    m.obs = nullptr;
    m.forward(staged[0], DropoutContext{});
    m.obs = obs;
    const int64_t N = m.shape.N;
    Backend& b = *m.be;
    Buffer<float> h(b, N * m.C, MemoryKind::Workspace), rstd(b, N, MemoryKind::Workspace),
        out(b, N * m.V, MemoryKind::Workspace);
    b.rmsnorm_forward(h.get(), rstd.get(), m.acts.residual[size_t(m.L)], m.final_norm, N, m.C, m.rms_eps);
    b.linear_forward(out.get(), h.get(), m.lm_head, N, m.C, m.V);
    std::vector<float> host(size_t(N * m.V));
    b.download(host.data(), out.get(), host.size() * sizeof(float));
    return host;
}

}  // namespace tandem::engine
