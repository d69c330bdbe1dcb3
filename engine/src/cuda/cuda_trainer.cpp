// CudaTrainer: the CPU Trainer + Qwen3LoraModel (engine/src/model/{trainer,model}.cpp) on one CUDA
// device. Same wiring, same order of operations, device launchers from kernels/ops.h instead of the
// CPU ops. One stream per trainer; every launcher is asynchronous, and the host waits once per
// update (to read the loss and the grad norm) and once per evaluation.
#include "tandem/engine_cuda/cuda_trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <string>

#include "tandem/engine/dropout.h"
#include "tandem/engine/io.h"
#include "tandem/engine/ops.h"
#include "tandem/engine/optim.h"
#include "tandem/error.h"
#include "tandem/kernels/ops.h"

namespace tandem::engine::cuda {

namespace k = tandem::kernels;
using k::MemoryCategory;

bool device_available(std::string* reason) {
    const std::string why = k::no_device_reason();
    if (reason) *reason = why;
    return why.empty();
}

int parse_device(const std::string& name) {
    if (name.rfind("cuda:", 0) != 0 || name.size() == 5)
        throw Error("device '" + name + "' is not of the form cuda:N");
    int idx = 0;
    for (size_t i = 5; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') throw Error("device '" + name + "' is not of the form cuda:N");
        idx = idx * 10 + (name[i] - '0');
    }
    const int n = k::device_count_or_zero();
    if (idx >= n) throw Error("device '" + name + "': only " + std::to_string(n) + " CUDA device(s) present");
    return idx;
}

namespace {

constexpr int kProjections = AdapterLayout::kProjections;
const std::array<const char*, kProjections> kProjNames = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                          "gate_proj", "up_proj", "down_proj"};
enum Proj { Q = 0, K = 1, Vp = 2, O = 3, Gate = 4, Up = 5, Down = 6 };

template <class T>
using Buf = k::DeviceBuffer<T>;

struct LayerWeights {
    Buf<float> input_norm, post_norm, q_norm, k_norm;  // [C] [C] [D] [D]
    std::array<Buf<float>, kProjections> w;            // HF [out,in]
};

// Activation cache of one layer, sized for the current capacity (N tokens, B*H*T rows).
struct LayerActs {
    Buf<float> ln1, ln1_rstd, q_lin, k_lin, v, qn_rstd, kn_rstd, q, k, att, lse, x_mid, ln2, ln2_rstd, gate, up,
        act;
    std::array<Buf<float>, kProjections> t;  // [N,r]
};

}  // namespace

struct CudaTrainer::Impl {
    // ---- configuration
    int dev = 0;
    Qwen3Config cfg;
    LoraConfig lora;
    TrainOptions opts;
    int64_t C = 0, H = 0, KV = 0, D = 0, I = 0, V = 0, L = 0, r = 0;
    float scaling = 1.0f;
    std::array<bool, kProjections> adapted{};
    std::array<int64_t, kProjections> in_dim{}, out_dim{};
    std::vector<AdapterSlot> slots;
    std::vector<std::array<int64_t, kProjections>> a_off, b_off;
    int64_t n_params = 0;
    int64_t warmup = 0;

    // ---- device state (declaration order matters: see ~Impl)
    struct StreamOwner {
        cudaStream_t s = nullptr;
        ~StreamOwner() {
            if (s) (void)cudaStreamDestroy(s);
        }
    } stream_owner;
    cudaStream_t stream = nullptr;
    std::unique_ptr<k::DeviceAllocator> alloc;
    std::unique_ptr<k::BlasHandle> blas;
    Buf<float> embed, lm_head_own, final_norm;
    const float* lm_head = nullptr;
    std::vector<LayerWeights> layers;
    Buf<float> params, grads, adam_m, adam_v;
    Buf<int64_t> seg_offsets, seg_counts;
    int64_t max_segment = 0;
    Buf<double> norm_partials, norm_value, loss_acc;
    Buf<float> clip_coef;

    // ---- activations / workspace (capacity-managed)
    int64_t cap_N = 0, cap_BHT = 0, cap_rows = 0, rope_T = 0;
    std::vector<LayerActs> acts;
    std::vector<Buf<float>> residual;  // L+1 buffers [N,C]: residual[l] enters layer l
    Buf<float> tmp, xd, dt, dx, dtmp, dln, dact, dgate, dup, datt, dq, dk, dv, dq_lin, dk_lin, delta;
    Buf<float> rope_cos, rope_sin;
    // Token ids, lengths, supervised row indices and targets of every micro-batch of one call,
    // uploaded once per train_update / evaluate (one synchronous copy while the device is idle), so
    // no host<->device synchronisation happens between micro-batches.
    struct Staged {
        const int32_t* ids = nullptr;      // [B*T]
        const int32_t* lengths = nullptr;  // [B]
        const int32_t* rows = nullptr;     // [n_sup] hidden row (b*T + t-1) of each label
        const int32_t* targets = nullptr;  // [n_sup] label id
        int64_t n_sup = 0;
    };
    Buf<int32_t> staged;
    Buf<float> xs, hs, hs_rstd, dh, dxs, ce_work;
    Buf<double> losses;
    int64_t cap_ce_chunk = 0;
    int64_t B = 0, T = 0, N = 0;
    uint64_t native_counter = 0;
    int64_t step = 0;

    // Members are destroyed in reverse order of declaration: every buffer (they release into the
    // allocator), then the cuBLAS handle, the allocator (frees its blocks), and the stream last.
    ~Impl() = default;

    template <class T>
    Buf<T> make(int64_t count, MemoryCategory c) {
        return Buf<T>(*alloc, static_cast<size_t>(std::max<int64_t>(count, 1)), c);
    }

    Buf<float> upload(const Tensor& t, MemoryCategory c) {
        Buf<float> b = make<float>(t.numel(), c);
        k::copy_to_device(b.get(), t.ptr(), size_t(t.numel()), stream);
        return b;
    }

    Buf<float> take_weight(TensorMap& base, const std::string& name, const std::vector<int64_t>& shape) {
        auto it = base.find(name);
        if (it == base.end()) throw Error("base weights: tensor '" + name + "' is missing");
        if (it->second.shape != shape)
            throw Error("base weights: tensor '" + name + "' has shape " + shape_text(it->second.shape) +
                        ", expected " + shape_text(shape));
        Buf<float> b = upload(it->second, MemoryCategory::Weights);
        CUDA_CHECK(cudaStreamSynchronize(stream));  // the host copy may go now
        base.erase(it);
        return b;
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
        if (D != 32 && D != 64 && D != 128)
            throw Error("CUDA engine: head_dim " + std::to_string(D) + " not supported (32, 64 or 128)");
        if (r <= 0) throw Error("LoRA config: rank must be positive");
        scaling = static_cast<float>(lora.scaling());
        const AdapterLayout layout = AdapterLayout::make(cfg, lora);
        adapted = layout.adapted;
        in_dim = layout.in_dim;
        out_dim = layout.out_dim;

        embed = take_weight(base, "model.embed_tokens.weight", {V, C});
        final_norm = take_weight(base, "model.norm.weight", {C});
        if (cfg.tie_word_embeddings) {
            lm_head = embed.get();
        } else {
            lm_head_own = take_weight(base, "lm_head.weight", {V, C});
            lm_head = lm_head_own.get();
        }
        layers.resize(size_t(L));
        for (int64_t l = 0; l < L; ++l) {
            const std::string p = "model.layers." + std::to_string(l) + ".";
            LayerWeights& w = layers[size_t(l)];
            w.input_norm = take_weight(base, p + "input_layernorm.weight", {C});
            w.post_norm = take_weight(base, p + "post_attention_layernorm.weight", {C});
            w.q_norm = take_weight(base, p + "self_attn.q_norm.weight", {D});
            w.k_norm = take_weight(base, p + "self_attn.k_norm.weight", {D});
            for (int j = 0; j < kProjections; ++j)
                w.w[size_t(j)] = take_weight(base, hf_projection_name(l, kProjNames[size_t(j)]), {out_dim[size_t(j)], in_dim[size_t(j)]});
        }

        // LoRA layout: the CPU model's (AdapterLayout), so checkpoints cross backends unchanged.
        slots = layout.slots;
        a_off = layout.a_off;
        b_off = layout.b_off;
        const int64_t off = n_params = layout.num_params;
        params = make<float>(off, MemoryCategory::AdapterOptimizer);
        grads = make<float>(off, MemoryCategory::AdapterOptimizer);
        adam_m = make<float>(off, MemoryCategory::AdapterOptimizer);
        adam_v = make<float>(off, MemoryCategory::AdapterOptimizer);
        for (Buf<float>* b : {&params, &grads, &adam_m, &adam_v})
            CUDA_CHECK(cudaMemsetAsync(b->get(), 0, b->bytes(), stream));

        std::vector<int64_t> offs, counts;
        for (const auto& s : slots) {
            offs.push_back(s.offset);
            counts.push_back(Tensor::count(s.shape));
            max_segment = std::max(max_segment, counts.back());
        }
        const int64_t nseg = static_cast<int64_t>(slots.size());
        seg_offsets = make<int64_t>(nseg, MemoryCategory::Workspace);
        seg_counts = make<int64_t>(nseg, MemoryCategory::Workspace);
        if (nseg > 0) {
            CUDA_CHECK(cudaMemcpyAsync(seg_offsets.get(), offs.data(), sizeof(int64_t) * offs.size(),
                                       cudaMemcpyHostToDevice, stream));
            CUDA_CHECK(cudaMemcpyAsync(seg_counts.get(), counts.data(), sizeof(int64_t) * counts.size(),
                                       cudaMemcpyHostToDevice, stream));
        }
        norm_partials = make<double>(k::global_norm_partials(max_segment, nseg), MemoryCategory::Workspace);
        norm_value = make<double>(1, MemoryCategory::Workspace);
        loss_acc = make<double>(1, MemoryCategory::Workspace);
        clip_coef = make<float>(1, MemoryCategory::Workspace);
        acts.resize(size_t(L));
        residual.resize(size_t(L + 1));
        CUDA_CHECK(cudaStreamSynchronize(stream));  // host vectors above go out of scope
    }

    const float* A(int64_t l, int p) const { return a_off[size_t(l)][size_t(p)] < 0 ? nullptr : params.get() + a_off[size_t(l)][size_t(p)]; }
    const float* Bm(int64_t l, int p) const { return b_off[size_t(l)][size_t(p)] < 0 ? nullptr : params.get() + b_off[size_t(l)][size_t(p)]; }
    float* dA(int64_t l, int p) { return a_off[size_t(l)][size_t(p)] < 0 ? nullptr : grads.get() + a_off[size_t(l)][size_t(p)]; }
    float* dB(int64_t l, int p) { return b_off[size_t(l)][size_t(p)] < 0 ? nullptr : grads.get() + b_off[size_t(l)][size_t(p)]; }

    // ------------------------------------------------------------------------------------------
    // capacity: (re)allocate activations when a micro-batch is larger than any before
    void ensure_capacity(int64_t b, int64_t t) {
        const int64_t n = b * t, bht = b * H * t;
        if (t > rope_T) {
            std::vector<float> c(size_t(t * D)), s(size_t(t * D));
            ops::rope_tables(c.data(), s.data(), t, D, cfg.rope_theta);
            rope_cos = make<float>(t * D, MemoryCategory::Workspace);
            rope_sin = make<float>(t * D, MemoryCategory::Workspace);
            k::copy_to_device(rope_cos.get(), c.data(), c.size(), stream);
            k::copy_to_device(rope_sin.get(), s.data(), s.size(), stream);
            CUDA_CHECK(cudaStreamSynchronize(stream));
            rope_T = t;
        }
        if (n <= cap_N && bht <= cap_BHT && b <= cap_rows) return;
        cap_N = std::max(cap_N, n);
        cap_BHT = std::max(cap_BHT, bht);
        cap_rows = std::max(cap_rows, b);
        const int64_t Nn = cap_N, HD = H * D, KD = KV * D;
        const auto act = MemoryCategory::Activations, ws = MemoryCategory::Workspace;
        for (auto& a : acts) {
            a = LayerActs{};  // release before allocating (the cache reuses the blocks)
            a.ln1 = make<float>(Nn * C, act);
            a.ln1_rstd = make<float>(Nn, act);
            a.q_lin = make<float>(Nn * HD, act);
            a.k_lin = make<float>(Nn * KD, act);
            a.v = make<float>(Nn * KD, act);
            a.qn_rstd = make<float>(Nn * H, act);
            a.kn_rstd = make<float>(Nn * KV, act);
            a.q = make<float>(Nn * HD, act);
            a.k = make<float>(Nn * KD, act);
            a.att = make<float>(Nn * HD, act);
            a.lse = make<float>(cap_BHT, act);
            a.x_mid = make<float>(Nn * C, act);
            a.ln2 = make<float>(Nn * C, act);
            a.ln2_rstd = make<float>(Nn, act);
            a.gate = make<float>(Nn * I, act);
            a.up = make<float>(Nn * I, act);
            a.act = make<float>(Nn * I, act);
            for (int j = 0; j < kProjections; ++j)
                if (adapted[size_t(j)]) a.t[size_t(j)] = make<float>(Nn * r, act);
        }
        for (auto& x : residual) x = make<float>(Nn * C, act);
        const int64_t max_in = std::max({C, HD, I});
        tmp = make<float>(Nn * C, ws);
        xd = make<float>(Nn * max_in, ws);
        dt = make<float>(Nn * r, ws);
        dx = make<float>(Nn * C, ws);
        dtmp = make<float>(Nn * C, ws);
        dln = make<float>(Nn * C, ws);
        dact = make<float>(Nn * I, ws);
        dgate = make<float>(Nn * I, ws);
        dup = make<float>(Nn * I, ws);
        datt = make<float>(Nn * HD, ws);
        dq = make<float>(Nn * HD, ws);
        dk = make<float>(Nn * KD, ws);
        dv = make<float>(Nn * KD, ws);
        dq_lin = make<float>(Nn * HD, ws);
        dk_lin = make<float>(Nn * KD, ws);
        delta = make<float>(cap_BHT, ws);
        xs = make<float>(Nn * C, ws);
        hs = make<float>(Nn * C, ws);
        hs_rstd = make<float>(Nn, ws);
        dh = make<float>(Nn * C, ws);
        dxs = make<float>(Nn * C, ws);
        losses = make<double>(Nn, ws);
        const int64_t chunk = std::min<int64_t>(opts.model.ce_token_chunk > 0 ? opts.model.ce_token_chunk : Nn, Nn);
        if (chunk > cap_ce_chunk) {
            ce_work = make<float>(chunk * V, ws);
            cap_ce_chunk = chunk;
        }
    }

    k::DropoutSpec dropout_for(const DropoutContext& dc, int64_t l, int j) {
        k::DropoutSpec s;
        if (!dc.active() || !adapted[size_t(j)]) return s;
        s.active = true;
        s.p = dc.p;
        s.scale = dropout_scale(dc.p);
        const int64_t n = N * in_dim[size_t(j)];
        if (dc.mode == DropoutMode::Shared) {
            s.key = shared_dropout_key(dc.seed, dc.update, dc.micro_batch, uint64_t(l), uint64_t(j));
            s.first_index = 0;
        } else {
            if (!dc.native_counter) throw Error("dropout: native mode needs a counter");
            s.key = native_dropout_key(dc.seed);
            s.first_index = *dc.native_counter;
            *dc.native_counter += uint64_t(n);
        }
        return s;
    }

    // ------------------------------------------------------------------------------------------
    // forward: the CPU model's forward(); fills acts and residual[L]. Dropout specs are kept per
    // (layer, projection) for the backward.
    std::vector<std::array<k::DropoutSpec, kProjections>> drop_specs;
    const int32_t* lengths_d = nullptr;  // the current micro-batch's lengths (inside `staged`)

    // Uploads the inputs of all micro-batches (validated by the caller) in one copy.
    std::vector<Staged> stage(const std::vector<MicroBatch>& mbs) {
        std::vector<int32_t> host;
        std::vector<std::array<size_t, 4>> offs;
        std::vector<int64_t> n_sup;
        for (const auto& mb : mbs) {
            std::array<size_t, 4> o{};
            o[0] = host.size();
            host.insert(host.end(), mb.ids.begin(), mb.ids.end());
            o[1] = host.size();
            host.insert(host.end(), mb.lengths.begin(), mb.lengths.end());
            o[2] = host.size();
            std::vector<int32_t> targets;
            for (int64_t b = 0; b < mb.batch; ++b)
                for (int64_t t = 1; t < mb.seq; ++t)
                    if (mb.supervised[size_t(b * mb.seq + t)]) {
                        host.push_back(static_cast<int32_t>(b * mb.seq + t - 1));
                        targets.push_back(mb.ids[size_t(b * mb.seq + t)]);
                    }
            o[3] = host.size();
            host.insert(host.end(), targets.begin(), targets.end());
            offs.push_back(o);
            n_sup.push_back(static_cast<int64_t>(targets.size()));
        }
        if (host.size() > staged.size()) staged = make<int32_t>(static_cast<int64_t>(host.size()), MemoryCategory::Workspace);
        if (!host.empty())
            CUDA_CHECK(cudaMemcpyAsync(staged.get(), host.data(), sizeof(int32_t) * host.size(), cudaMemcpyHostToDevice,
                                       stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` goes out of scope
        std::vector<Staged> out;
        for (size_t i = 0; i < mbs.size(); ++i) {
            Staged st;
            st.ids = staged.get() + offs[i][0];
            st.lengths = staged.get() + offs[i][1];
            st.rows = staged.get() + offs[i][2];
            st.targets = staged.get() + offs[i][3];
            st.n_sup = n_sup[i];
            out.push_back(st);
        }
        return out;
    }

    void forward(const MicroBatch& mb, const Staged& in, const DropoutContext& dropout) {
        B = mb.batch;
        T = mb.seq;
        N = B * T;
        ensure_capacity(B, T);
        lengths_d = in.lengths;
        cublasHandle_t h = blas->get();
        drop_specs.assign(size_t(L), {});
        k::embedding_forward(residual[0].get(), in.ids, embed.get(), N, C, V, stream);
        const double eps = cfg.rms_norm_eps;
        for (int64_t l = 0; l < L; ++l) {
            const LayerWeights& w = layers[size_t(l)];
            LayerActs& a = acts[size_t(l)];
            for (int j = 0; j < kProjections; ++j) drop_specs[size_t(l)][size_t(j)] = dropout_for(dropout, l, j);
            const float* x = residual[size_t(l)].get();
            auto proj = [&](int j, float* y, const float* in) {
                k::lora_linear_forward(h, stream, y, adapted[size_t(j)] ? a.t[size_t(j)].get() : nullptr, xd.get(), in,
                                       w.w[size_t(j)].get(), A(l, j), Bm(l, j), drop_specs[size_t(l)][size_t(j)], scaling,
                                       N, in_dim[size_t(j)], out_dim[size_t(j)], r);
            };
            k::rmsnorm_forward(a.ln1.get(), a.ln1_rstd.get(), x, w.input_norm.get(), N, C, eps, stream);
            proj(Q, a.q_lin.get(), a.ln1.get());
            proj(K, a.k_lin.get(), a.ln1.get());
            proj(Vp, a.v.get(), a.ln1.get());
            k::rmsnorm_forward(a.q.get(), a.qn_rstd.get(), a.q_lin.get(), w.q_norm.get(), N * H, D, eps, stream);
            k::rmsnorm_forward(a.k.get(), a.kn_rstd.get(), a.k_lin.get(), w.k_norm.get(), N * KV, D, eps, stream);
            k::rope_forward(a.q.get(), a.q.get(), rope_cos.get(), rope_sin.get(), B, T, H, D, stream);
            k::rope_forward(a.k.get(), a.k.get(), rope_cos.get(), rope_sin.get(), B, T, KV, D, stream);
            k::attention_forward(a.att.get(), a.lse.get(), a.q.get(), a.k.get(), a.v.get(), lengths_d, B, T, H,
                                 KV, D, stream);
            proj(O, tmp.get(), a.att.get());
            CUDA_CHECK(cudaMemcpyAsync(a.x_mid.get(), x, sizeof(float) * size_t(N * C), cudaMemcpyDeviceToDevice, stream));
            k::add_inplace(a.x_mid.get(), tmp.get(), N * C, stream);
            k::rmsnorm_forward(a.ln2.get(), a.ln2_rstd.get(), a.x_mid.get(), w.post_norm.get(), N, C, eps, stream);
            proj(Gate, a.gate.get(), a.ln2.get());
            proj(Up, a.up.get(), a.ln2.get());
            k::swiglu_forward(a.act.get(), a.gate.get(), a.up.get(), N * I, stream);
            proj(Down, tmp.get(), a.act.get());
            float* x_out = residual[size_t(l + 1)].get();
            CUDA_CHECK(cudaMemcpyAsync(x_out, a.x_mid.get(), sizeof(float) * size_t(N * C), cudaMemcpyDeviceToDevice,
                                       stream));
            k::add_inplace(x_out, tmp.get(), N * C, stream);
        }
    }

    // ------------------------------------------------------------------------------------------
    // backward from dx = d(residual[L]) into the LoRA gradients (the CPU model's backward()).
    void backward() {
        cublasHandle_t h = blas->get();
        for (int64_t l = L - 1; l >= 0; --l) {
            const LayerWeights& w = layers[size_t(l)];
            LayerActs& a = acts[size_t(l)];
            auto proj_back = [&](int j, float* din, const float* dy, const float* in, bool accumulate) {
                k::lora_linear_backward(h, stream, din, dA(l, j), dB(l, j), dt.get(), xd.get(), dy, in,
                                        w.w[size_t(j)].get(), A(l, j), Bm(l, j),
                                        adapted[size_t(j)] ? a.t[size_t(j)].get() : nullptr,
                                        drop_specs[size_t(l)][size_t(j)], scaling, N, in_dim[size_t(j)],
                                        out_dim[size_t(j)], r, accumulate);
            };
            // MLP block
            proj_back(Down, dact.get(), dx.get(), a.act.get(), false);
            k::swiglu_backward(dgate.get(), dup.get(), dact.get(), a.gate.get(), a.up.get(), N * I, stream);
            proj_back(Gate, dln.get(), dgate.get(), a.ln2.get(), false);
            proj_back(Up, dln.get(), dup.get(), a.ln2.get(), true);
            // dx += rmsnorm'(dln): accumulate straight into the residual gradient
            k::rmsnorm_backward(dx.get(), nullptr, dln.get(), a.x_mid.get(), w.post_norm.get(), a.ln2_rstd.get(), N, C,
                                stream, /*accumulate_din=*/true);
            // attention block
            proj_back(O, datt.get(), dx.get(), a.att.get(), false);
            k::attention_backward(dq.get(), dk.get(), dv.get(), delta.get(), datt.get(), a.att.get(), a.q.get(),
                                  a.k.get(), a.v.get(), a.lse.get(), lengths_d, B, T, H, KV, D, stream);
            k::rope_backward(dq.get(), dq.get(), rope_cos.get(), rope_sin.get(), B, T, H, D, stream);
            k::rope_backward(dk.get(), dk.get(), rope_cos.get(), rope_sin.get(), B, T, KV, D, stream);
            k::rmsnorm_backward(dq_lin.get(), nullptr, dq.get(), a.q_lin.get(), w.q_norm.get(), a.qn_rstd.get(), N * H,
                                D, stream);
            k::rmsnorm_backward(dk_lin.get(), nullptr, dk.get(), a.k_lin.get(), w.k_norm.get(), a.kn_rstd.get(),
                                N * KV, D, stream);
            proj_back(Q, dln.get(), dq_lin.get(), a.ln1.get(), false);
            proj_back(K, dln.get(), dk_lin.get(), a.ln1.get(), true);
            proj_back(Vp, dln.get(), dv.get(), a.ln1.get(), true);
            k::rmsnorm_backward(dx.get(), nullptr, dln.get(), residual[size_t(l)].get(), w.input_norm.get(),
                                a.ln1_rstd.get(), N, C, stream, /*accumulate_din=*/true);
        }
    }

    // ------------------------------------------------------------------------------------------
    // LM head over the supervised rows (hidden at (b, t-1) predicts ids[b, t]); adds the sum of
    // token losses to loss_acc on the device; when grad_scale != 0 leaves d(residual[L]) in dx.
    int64_t head(const Staged& in, double grad_scale) {
        const int64_t Ns = in.n_sup;
        const bool want_grad = grad_scale != 0.0;
        if (want_grad) CUDA_CHECK(cudaMemsetAsync(dx.get(), 0, sizeof(float) * size_t(N * C), stream));
        if (Ns == 0) return 0;
        k::gather_rows(xs.get(), residual[size_t(L)].get(), in.rows, Ns, C, stream);
        k::rmsnorm_forward(hs.get(), hs_rstd.get(), xs.get(), final_norm.get(), Ns, C, cfg.rms_norm_eps, stream);
        k::lm_head_cross_entropy(blas->get(), stream, losses.get(), want_grad ? dh.get() : nullptr, ce_work.get(),
                                 hs.get(), lm_head, in.targets, Ns, C, V, static_cast<float>(grad_scale), cap_ce_chunk);
        k::sum_losses(loss_acc.get(), losses.get(), Ns, stream);
        if (want_grad) {
            k::rmsnorm_backward(dxs.get(), nullptr, dh.get(), xs.get(), final_norm.get(), hs_rstd.get(), Ns, C, stream);
            k::scatter_rows(dx.get(), dxs.get(), in.rows, Ns, C, stream);
        }
        return Ns;
    }

    double read_loss_acc() {
        double v = 0.0;
        CUDA_CHECK(cudaMemcpyAsync(&v, loss_acc.get(), sizeof(double), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return v;
    }
    void zero_loss_acc() { CUDA_CHECK(cudaMemsetAsync(loss_acc.get(), 0, sizeof(double), stream)); }

    TensorMap download(const Buf<float>& buf) const {
        std::vector<float> host(static_cast<size_t>(n_params));
        if (n_params > 0) k::copy_to_host(host.data(), buf.get(), host.size(), stream);
        TensorMap out;
        for (const auto& s : slots) {
            Tensor t(s.shape);
            std::copy(host.begin() + s.offset, host.begin() + s.offset + t.numel(), t.data.begin());
            out.emplace(s.name, std::move(t));
        }
        return out;
    }

    void upload_map(const TensorMap& map, Buf<float>& buf, const char* what) {
        if (map.size() != slots.size())
            throw Error(std::string("trainer state: ") + what + " has " + std::to_string(map.size()) +
                        " tensors, expected " + std::to_string(slots.size()));
        std::vector<float> host(static_cast<size_t>(n_params));
        for (const auto& s : slots) {
            auto it = map.find(s.name);
            if (it == map.end()) throw Error(std::string(what) + ": tensor '" + s.name + "' is missing");
            if (it->second.shape != s.shape)
                throw Error(std::string(what) + ": tensor '" + s.name + "' has shape " + shape_text(it->second.shape) +
                            ", expected " + shape_text(s.shape));
            std::copy(it->second.data.begin(), it->second.data.end(), host.begin() + s.offset);
        }
        if (n_params > 0) {
            k::copy_to_device(buf.get(), host.data(), host.size(), stream);
            CUDA_CHECK(cudaStreamSynchronize(stream));
        }
    }
};

// ------------------------------------------------------------------------------------------------

CudaTrainer::CudaTrainer() : impl_(std::make_unique<Impl>()) {}
CudaTrainer::~CudaTrainer() = default;
CudaTrainer::CudaTrainer(CudaTrainer&&) noexcept = default;
CudaTrainer& CudaTrainer::operator=(CudaTrainer&&) noexcept = default;

CudaTrainer CudaTrainer::create(int device, const Qwen3Config& config, TensorMap base_weights, const LoraConfig& lora,
                                TrainOptions options) {
    if (options.total_updates < 1) throw Error("trainer: total_updates must be >= 1");
    if (lora.dropout < 0.0 || lora.dropout >= 1.0)
        throw Error("trainer: LoRA dropout " + std::to_string(lora.dropout) + " outside [0, 1)");
    const int n = k::device_count_or_zero();
    if (device < 0 || device >= n)
        throw Error("CUDA engine: device cuda:" + std::to_string(device) + " not present (" + std::to_string(n) +
                    " device(s); " + k::no_device_reason() + ")");
    CudaTrainer t;
    Impl& s = *t.impl_;
    s.dev = device;
    s.cfg = config;
    s.lora = lora;
    s.opts = options;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream_owner.s, cudaStreamNonBlocking));
    s.stream = s.stream_owner.s;
    s.alloc = std::make_unique<k::DeviceAllocator>(device);
    s.blas = std::make_unique<k::BlasHandle>(s.stream);
    s.bind(std::move(base_weights));
    s.warmup = options.warmup_updates >= 0 ? options.warmup_updates
                                           : warmup_updates(options.warmup_ratio, options.total_updates);
    return t;
}

void CudaTrainer::load_adapter(const TensorMap& peft_tensors) {
    for (const auto& [name, t] : peft_tensors) {
        const bool known = std::any_of(impl_->slots.begin(), impl_->slots.end(),
                                       [&](const AdapterSlot& s) { return s.name == name; });
        if (!known) throw Error("adapter: unexpected tensor '" + name + "' (not a target of this LoRA config)");
    }
    CUDA_CHECK(cudaSetDevice(impl_->dev));
    impl_->upload_map(peft_tensors, impl_->params, "adapter");
}

TensorMap CudaTrainer::adapter_tensors() const { return impl_->download(impl_->params); }
TensorMap CudaTrainer::adapter_gradients() const { return impl_->download(impl_->grads); }
const std::vector<AdapterSlot>& CudaTrainer::adapter_slots() const { return impl_->slots; }
int64_t CudaTrainer::step() const { return impl_->step; }
const TrainOptions& CudaTrainer::options() const { return impl_->opts; }
int CudaTrainer::device() const { return impl_->dev; }
kernels::MemoryReport CudaTrainer::memory_report() const { return impl_->alloc->report(); }
void CudaTrainer::reset_peak_memory() { impl_->alloc->reset_peak(); }

double CudaTrainer::lr_for_update(int64_t t) const {
    return cosine_with_warmup_lr(impl_->opts.lr, t, impl_->warmup, impl_->opts.total_updates);
}

void CudaTrainer::zero_grads() {
    CUDA_CHECK(cudaSetDevice(impl_->dev));
    CUDA_CHECK(cudaMemsetAsync(impl_->grads.get(), 0, impl_->grads.bytes(), impl_->stream));
}

double CudaTrainer::forward_backward(const MicroBatch& mb, const DropoutContext& dropout, double grad_scale) {
    Impl& s = *impl_;
    mb.validate(s.V);
    CUDA_CHECK(cudaSetDevice(s.dev));
    const std::vector<MicroBatch> one{mb};
    const auto staged = s.stage(one);
    s.zero_loss_acc();
    s.forward(mb, staged[0], dropout);
    s.head(staged[0], grad_scale);
    if (grad_scale != 0.0) s.backward();
    return s.read_loss_acc();
}

double CudaTrainer::loss_sum(const MicroBatch& mb) {
    Impl& s = *impl_;
    mb.validate(s.V);
    CUDA_CHECK(cudaSetDevice(s.dev));
    const std::vector<MicroBatch> one{mb};
    const auto staged = s.stage(one);
    s.zero_loss_acc();
    s.forward(mb, staged[0], DropoutContext{});
    s.head(staged[0], 0.0);
    return s.read_loss_acc();
}

UpdateMetrics CudaTrainer::train_update(const std::vector<MicroBatch>& micro_batches) {
    const auto start = std::chrono::steady_clock::now();
    Impl& s = *impl_;
    CUDA_CHECK(cudaSetDevice(s.dev));
    int64_t supervised = 0;
    for (const auto& mb : micro_batches) supervised += mb.validate(s.V);
    if (supervised == 0) throw Error("trainer: update " + std::to_string(s.step) + " has no supervised token");
    const double grad_scale = 1.0 / static_cast<double>(supervised);
    const auto staged = s.stage(micro_batches);

    CUDA_CHECK(cudaMemsetAsync(s.grads.get(), 0, s.grads.bytes(), s.stream));
    s.zero_loss_acc();
    for (size_t i = 0; i < micro_batches.size(); ++i) {
        DropoutContext dc;
        dc.mode = s.opts.dropout_mode;
        dc.p = s.lora.dropout;
        dc.seed = s.opts.seed;
        dc.update = static_cast<uint64_t>(s.step);
        dc.micro_batch = i;
        dc.native_counter = &s.native_counter;
        s.forward(micro_batches[i], staged[i], dc);
        s.head(staged[i], grad_scale);
        s.backward();
    }

    k::global_grad_norm(s.norm_value.get(), s.clip_coef.get(), s.norm_partials.get(), s.grads.get(),
                        s.seg_offsets.get(), s.seg_counts.get(), static_cast<int64_t>(s.slots.size()), s.max_segment,
                        s.opts.max_grad_norm, s.stream);
    k::clip_grad(s.grads.get(), s.n_params, s.clip_coef.get(), s.stream);
    UpdateMetrics out;
    out.update = s.step;
    out.supervised_tokens = supervised;
    out.lr = lr_for_update(s.step);
    ++s.step;  // torch increments the step before the bias corrections
    const AdamWOptions& o = s.opts.adamw;
    k::adamw_step(s.params.get(), s.grads.get(), s.adam_m.get(), s.adam_v.get(), s.n_params,
                  k::adamw_scalars(s.step, out.lr, o.beta1, o.beta2, o.eps, o.weight_decay), s.stream);
    double norm = 0.0;
    CUDA_CHECK(cudaMemcpyAsync(&norm, s.norm_value.get(), sizeof(double), cudaMemcpyDeviceToHost, s.stream));
    out.loss = s.read_loss_acc() / static_cast<double>(supervised);  // synchronises the stream
    out.grad_norm = norm;
    out.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
}

EvalResult CudaTrainer::evaluate(const std::vector<MicroBatch>& micro_batches) {
    Impl& s = *impl_;
    CUDA_CHECK(cudaSetDevice(s.dev));
    EvalResult r;
    for (const auto& mb : micro_batches) r.supervised_tokens += mb.validate(s.V);
    const auto staged = s.stage(micro_batches);
    s.zero_loss_acc();
    for (size_t i = 0; i < micro_batches.size(); ++i) {
        s.forward(micro_batches[i], staged[i], DropoutContext{});
        s.head(staged[i], 0.0);
    }
    if (r.supervised_tokens == 0) throw Error("evaluate: the held-out batches have no supervised token");
    r.loss_sum = s.read_loss_acc();
    r.loss = r.loss_sum / static_cast<double>(r.supervised_tokens);
    return r;
}

TrainerState CudaTrainer::state() const {
    CUDA_CHECK(cudaSetDevice(impl_->dev));
    TrainerState st;
    st.adapter = impl_->download(impl_->params);
    st.adam_m = impl_->download(impl_->adam_m);
    st.adam_v = impl_->download(impl_->adam_v);
    st.step = impl_->step;
    st.native_rng_counter = impl_->native_counter;
    st.seed = impl_->opts.seed;
    return st;
}

void CudaTrainer::restore(const TrainerState& st) {
    Impl& s = *impl_;
    if (st.seed != s.opts.seed)
        throw Error("trainer state: seed " + std::to_string(st.seed) + " differs from the run's seed " +
                    std::to_string(s.opts.seed));
    if (st.step < 0) throw Error("trainer state: negative step");
    CUDA_CHECK(cudaSetDevice(s.dev));
    s.upload_map(st.adapter, s.params, "adapter");
    s.upload_map(st.adam_m, s.adam_m, "adam_m");
    s.upload_map(st.adam_v, s.adam_v, "adam_v");
    s.step = st.step;
    s.native_counter = st.native_rng_counter;
}

}  // namespace tandem::engine::cuda
