// CpuBackend: the Backend seam (tandem/engine/backend.h) over the CPU ops (ops.cpp: OpenBLAS GEMMs and
// the fixed thread pool of parallel.cpp) and the optimizer pieces (optim.cpp). Backend memory is host
// memory; every op runs synchronously on the calling thread (plus the pool).
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "parallel.h"
#include "tandem/engine/backend.h"
#include "tandem/engine/ops.h"
#include "tandem/engine/optim.h"
#include "tandem/error.h"

namespace tandem::engine {

const char* op_name(Op op) {
    switch (op) {
#define TANDEM_OP_NAME(name, params, args) \
    case Op::name:                         \
        return #name;
        TANDEM_BACKEND_OPS(TANDEM_OP_NAME)
#undef TANDEM_OP_NAME
    }
    return "?";
}

namespace {

class CpuBackend final : public Backend {
public:
    CpuBackend() = default;

    std::string device() const override { return "cpu"; }
    std::string device_name() const override { return "cpu"; }
    std::string stack() const override { return "tandem engine (C++20, OpenBLAS)"; }

    void* allocate(size_t bytes, MemoryKind) override {
        constexpr size_t kAlign = 64;  // a cache line (and an AVX-512 vector)
        void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
        if (!p) throw Error("cpu backend: out of memory allocating " + std::to_string(bytes) + " bytes");
        return p;
    }
    void release(void* p) noexcept override { std::free(p); }
    void upload(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
    void download(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
    void fill_zero(void* dst, size_t bytes) override {
        if (bytes) std::memset(dst, 0, bytes);
    }
    const float* take_weight(Tensor&& t) override {
        weights_.push_back(std::move(t));  // a deque never moves its elements: the address stays valid
        return weights_.back().ptr();
    }
    int64_t attention_cache_floats(int64_t B, int64_t T, int64_t H) const override { return B * H * T * T; }
    bool keeps_dropout_masks() const override { return true; }
    // Bigger chunks amortise OpenBLAS's packing of the whole embedding (once per GEMM): sgemm at
    // Qwen3's head runs ~80 GFLOP/s per core at 256 rows and ~92 at 512-1024 (docs/engine.md).
    int64_t default_ce_token_chunk() const override { return 1024; }

    // ---- ops
    void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C,
                           int64_t V) override {
        ops::embedding_forward(out, ids, table, N, C, V);
    }
    void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int64_t rows, int64_t C,
                         double eps) override {
        ops::rmsnorm_forward(out, rstd, in, weight, rows, C, eps);
    }
    void rmsnorm_backward(float* din, float* dweight, const float* dout, const float* in, const float* weight,
                          const float* rstd, int64_t rows, int64_t C, bool accumulate_din) override {
        ops::rmsnorm_backward(din, dweight, dout, in, weight, rstd, rows, C, accumulate_din);
    }
    void rope_forward(float* out, const float* in, const float* cos, const float* sin, int64_t B, int64_t T,
                      int64_t H, int64_t D, RopePairing pairing) override {
        ops::rope_forward(out, in, cos, sin, B, T, H, D, pairing);
    }
    void rope_backward(float* din, const float* dout, const float* cos, const float* sin, int64_t B, int64_t T,
                       int64_t H, int64_t D, RopePairing pairing) override {
        ops::rope_backward(din, dout, cos, sin, B, T, H, D, pairing);
    }
    // cache = the softmax probabilities [B,H,T,T]
    void attention_forward(float* out, float* cache, const float* q, const float* k, const float* v,
                           const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                           KvHeadMapping kv_heads) override {
        ops::attention_forward(out, cache, q, k, v, lengths, B, T, H, KV, D, kv_heads);
    }
    void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* /*out: unused, the
                            probabilities are cached*/, const float* q, const float* k, const float* v,
                            const float* cache, const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV,
                            int64_t D, KvHeadMapping kv_heads) override {
        ops::attention_backward(dq, dk, dv, dout, q, k, v, cache, lengths, B, T, H, KV, D, kv_heads);
    }
    void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override {
        ops::swiglu_forward(out, gate, up, n);
    }
    void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                         int64_t n) override {
        ops::swiglu_backward(dgate, dup, dout, gate, up, n);
    }
    void lora_linear_forward(float* y, float* t, const float* x, const float* w, const float* a, const float* b,
                             const DropoutMask& dropout, float scaling, int64_t N, int64_t in, int64_t out,
                             int64_t r) override {
        ops::lora_linear_forward(y, t, x, w, a, b, forward_mask(dropout, a ? N * in : 0), dropout.scale, scaling, N,
                                 in, out, r);
    }
    void lora_linear_backward(float* dx, float* da, float* db, const float* dy, const float* x, const float* w,
                              const float* a, const float* b, const float* t, const DropoutMask& dropout, float scaling,
                              int64_t N, int64_t in, int64_t out, int64_t r, bool accumulate_dx, LoraBGrad b_grad) override {
        ops::lora_linear_backward(dx, da, db, dy, x, w, a, b, t, backward_mask(dropout, a ? N * in : 0),
                                  dropout.scale, scaling, N, in, out, r, accumulate_dx, b_grad);
    }
    void residual_add(float* out, const float* a, const float* b, int64_t n) override {
        detail::parallel_for_grain(n, 1 << 14, [&](int64_t b0, int64_t e0) {
            for (int64_t i = b0; i < e0; ++i) out[i] = a[i] + b[i];
        });
    }
    void gather_rows(float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C) override {
        for (int64_t j = 0; j < n_rows; ++j)
            std::memcpy(out + j * C, in + int64_t(rows[j]) * C, sizeof(float) * size_t(C));
    }
    void scatter_rows(float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C) override {
        for (int64_t j = 0; j < n_rows; ++j)
            std::memcpy(out + int64_t(rows[j]) * C, in + j * C, sizeof(float) * size_t(C));
    }
    void lm_head_cross_entropy(double* loss_sum, float* dh, const float* h, const float* emb, const int32_t* targets,
                               int64_t N, int64_t C, int64_t V, double grad_scale, int64_t token_chunk,
                               int64_t vocab_chunk) override {
        *loss_sum += ops::lm_head_cross_entropy(dh, h, emb, targets, N, C, V, grad_scale, token_chunk, vocab_chunk);
    }
    void linear_forward(float* y, const float* x, const float* w, int64_t N, int64_t K, int64_t M) override {
        ops::linear_forward(y, x, w, N, K, M);
    }
    void global_grad_norm(double* norm, float* clip_coef, const float* grad, const int64_t* offsets,
                          const int64_t* counts, int64_t n_segments, int64_t, double max_norm) override {
        std::vector<std::pair<int64_t, int64_t>> segments;
        for (int64_t s = 0; s < n_segments; ++s) segments.emplace_back(offsets[s], counts[s]);
        *norm = engine::global_grad_norm(grad, segments);
        *clip_coef = clip_coefficient(*norm, max_norm);
    }
    void clip_grad(float* grad, int64_t n, const float* clip_coef) override {
        const float coef = *clip_coef;
        for (int64_t i = 0; i < n; ++i) grad[i] = grad[i] * coef;
    }
    void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, double lr,
                    const AdamWOptions& options) override {
        engine::adamw_step(param, grad, m, v, n, step, lr, options);
    }

private:
    static void copy(void* dst, const void* src, size_t bytes) {
        if (bytes) std::memcpy(dst, src, bytes);
    }
    // The forward draws the mask of `elements` adapter inputs into d.keep (kept for the backward), or
    // into the scratch array when the caller gave none; nullptr when dropout is off.
    const uint8_t* forward_mask(const DropoutMask& d, int64_t elements) {
        if (!d.active || elements == 0) return nullptr;
        uint8_t* keep = d.keep ? d.keep : scratch(elements);
        fill_dropout_keep(keep, elements, d.key, d.first_index, d.p);
        return keep;
    }
    // The backward reads the forward's mask, or regenerates it (a pure function of its key).
    const uint8_t* backward_mask(const DropoutMask& d, int64_t elements) {
        if (!d.active || elements == 0) return nullptr;
        if (d.keep) return d.keep;
        uint8_t* keep = scratch(elements);
        fill_dropout_keep(keep, elements, d.key, d.first_index, d.p);
        return keep;
    }
    uint8_t* scratch(int64_t elements) {
        if (keep_.size() < size_t(elements)) keep_.resize(size_t(elements));
        return keep_.data();
    }

    std::deque<Tensor> weights_;
    std::vector<uint8_t> keep_;  // mask scratch for calls without DropoutMask::keep
};

}  // namespace

std::shared_ptr<Backend> make_cpu_backend(int threads) {
    ops::set_num_threads(threads);
    return std::make_shared<CpuBackend>();
}
std::shared_ptr<Backend> make_cpu_backend() { return std::make_shared<CpuBackend>(); }

}  // namespace tandem::engine
