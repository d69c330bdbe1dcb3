#pragma once
// The backend seam (docs/engine.md "The backend seam"): every op the Qwen3 + LoRA wiring (model.cpp) and the trainer core
// (trainer.cpp) need, listed ONCE in TANDEM_BACKEND_OPS below. From that one list come
//   - the pure virtual methods of `Backend` (a backend that lacks an op does not compile),
//   - the `Op` enum and op_name() (what the op-table test iterates and counts),
//   - any decorator that wraps a backend op by op (tests/engine/counting_backend.h).
// Backends: CpuBackend (make_cpu_backend: engine/src/model/ops.cpp + OpenBLAS + the thread pool)
// and CudaBackend (engine/src/cuda/: kernels/ + cuBLAS on one stream). The wiring is written once
// over this interface and reaches no op any other way.
//
// Contract of every op, on every backend (docs/engine.md "The backend seam"):
//   - float32, row-major; every pointer is BACKEND memory (host memory on the CPU, device memory on
//     CUDA) from Backend::allocate / take_weight; scalars are host values.
//   - ACTIVATION gradients are ASSIGNED (=) unless an op takes an accumulate flag (then += when set);
//     PARAMETER gradients ACCUMULATE (+=); a nullptr parameter gradient is not computed (frozen).
//   - `loss_sum` and `norm` outputs are backend scalars (double) the caller reads with download().
//   - ops are asynchronous where the backend is (CUDA: one stream, in order); download() waits.
//   - reductions have fixed partitions and orders: the same inputs give the same bits on the same
//     backend with the same thread count.
// Shape names: N tokens (= B*T), C hidden, H / KV query / key-value heads, D head_dim, r LoRA rank.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tandem/engine/config.h"
#include "tandem/engine/dropout.h"
#include "tandem/engine/faults.h"
#include "tandem/engine/optim.h"
#include "tandem/engine/tensor.h"
#include "tandem/pool_buffer.h"

namespace tandem::engine {

// X(name, (parameters), (arguments)) — one line per op: the ONLY list of ops.
#define TANDEM_BACKEND_OPS(X)                                                                                       \
    /* out[N,C] = table[ids[n], :] (frozen: no backward) */                                                         \
    X(embedding_forward, (float* out, const int32_t* ids, const float* table, int64_t N, int64_t C, int64_t V),     \
      (out, ids, table, N, C, V))                                                                                   \
    /* HF Qwen3RMSNorm: rstd[rows] = 1/sqrt(mean(in^2) + eps), out[rows,C] = weight * (in * rstd) */                \
    X(rmsnorm_forward,                                                                                              \
      (float* out, float* rstd, const float* in, const float* weight, int64_t rows, int64_t C, double eps),         \
      (out, rstd, in, weight, rows, C, eps))                                                                        \
    /* din (= , or += when accumulate_din), dweight[C] (+=, nullable) */                                            \
    X(rmsnorm_backward,                                                                                             \
      (float* din, float* dweight, const float* dout, const float* in, const float* weight, const float* rstd,      \
       int64_t rows, int64_t C, bool accumulate_din),                                                               \
      (din, dweight, dout, in, weight, rstd, rows, C, accumulate_din))                                              \
    /* RoPE on [B,T,H,D] with host-computed cos/sin [T,D] tables; out may alias in. pairing: rotate-half      \
       (transformers), or the Interleaved fault variant (faults.h) */                                             \
    X(rope_forward,                                                                                                 \
      (float* out, const float* in, const float* cos, const float* sin, int64_t B, int64_t T, int64_t H, int64_t D, \
       RopePairing pairing),                                                                                        \
      (out, in, cos, sin, B, T, H, D, pairing))                                                                     \
    X(rope_backward,                                                                                                \
      (float* din, const float* dout, const float* cos, const float* sin, int64_t B, int64_t T, int64_t H,          \
       int64_t D, RopePairing pairing),                                                                             \
      (din, dout, cos, sin, B, T, H, D, pairing))                                                                   \
    /* causal GQA attention, right padding (key j visible to query i iff j <= i and j < lengths[b]);             \
       cache: attention_cache_floats(B,T,H) floats of the backend's choice (CPU: probabilities, CUDA: lse);     \
       kv_heads: query head h reads kv head h / (H/KV), or h % KV (the Modulo fault variant, faults.h) */        \
    X(attention_forward,                                                                                            \
      (float* out, float* cache, const float* q, const float* k, const float* v, const int32_t* lengths,            \
       int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, KvHeadMapping kv_heads),                             \
      (out, cache, q, k, v, lengths, B, T, H, KV, D, kv_heads))                                                     \
    /* dq[B,T,H,D], dk, dv[B,T,KV,D] (=); out is the forward's output */                                            \
    X(attention_backward,                                                                                           \
      (float* dq, float* dk, float* dv, const float* dout, const float* out, const float* q, const float* k,        \
       const float* v, const float* cache, const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV,     \
       int64_t D, KvHeadMapping kv_heads),                                                                          \
      (dq, dk, dv, dout, out, q, k, v, cache, lengths, B, T, H, KV, D, kv_heads))                                   \
    /* out[n] = silu(gate) * up */                                                                                  \
    X(swiglu_forward, (float* out, const float* gate, const float* up, int64_t n), (out, gate, up, n))              \
    X(swiglu_backward, (float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n), \
      (dgate, dup, dout, gate, up, n))                                                                              \
    /* peft's LoRA linear: y[N,out] = x W^T + (B (A dropout(x))) * scaling, t[N,r] = A dropout(x) (cache);        \
       a == nullptr: plain linear (t unused) */                                                                     \
    X(lora_linear_forward,                                                                                          \
      (float* y, float* t, const float* x, const float* w, const float* a, const float* b,                          \
       const DropoutMask& dropout, float scaling, int64_t N, int64_t in, int64_t out, int64_t r),                   \
      (y, t, x, w, a, b, dropout, scaling, N, in, out, r))                                                          \
    /* dx[N,in] (= , or += when accumulate_dx), da[r,in], db[out,r] (+=, nullable); W is frozen.                  \
       b_grad: Correct, or the TransposedOperand fault variant of dB (faults.h) */                                 \
    X(lora_linear_backward,                                                                                         \
      (float* dx, float* da, float* db, const float* dy, const float* x, const float* w, const float* a,            \
       const float* b, const float* t, const DropoutMask& dropout, float scaling, int64_t N, int64_t in,            \
       int64_t out, int64_t r, bool accumulate_dx, LoraBGrad b_grad),                                               \
      (dx, da, db, dy, x, w, a, b, t, dropout, scaling, N, in, out, r, accumulate_dx, b_grad))                      \
    /* out[n] = a[n] + b[n] (the residual stream); out may alias a */                                               \
    X(residual_add, (float* out, const float* a, const float* b, int64_t n), (out, a, b, n))                        \
    /* out[j,:] = in[rows[j],:] */                                                                                  \
    X(gather_rows, (float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C),                   \
      (out, in, rows, n_rows, C))                                                                                   \
    /* out[rows[j],:] = in[j,:]; other rows untouched */                                                            \
    X(scatter_rows, (float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C),                  \
      (out, in, rows, n_rows, C))                                                                                   \
    /* tied LM head + cross-entropy: loss_sum[0] += sum_n (logsumexp(h[n] emb^T) - h[n].emb[targets[n]]) (double); \
       dh[N,C] (=, nullable) = grad_scale * (softmax - onehot) emb; chunked over token_chunk rows (and           \
       vocab_chunk vocabulary rows where the backend supports it), <= 0 = all */                                   \
    X(lm_head_cross_entropy,                                                                                        \
      (double* loss_sum, float* dh, const float* h, const float* emb, const int32_t* targets, int64_t N, int64_t C, \
       int64_t V, double grad_scale, int64_t token_chunk, int64_t vocab_chunk),                                     \
      (loss_sum, dh, h, emb, targets, N, C, V, grad_scale, token_chunk, vocab_chunk))                               \
    /* y[N,M] = x[N,K] w[M,K]^T (the materialised logits of Qwen3LoraModel::logits) */                             \
    X(linear_forward, (float* y, const float* x, const float* w, int64_t N, int64_t K, int64_t M),                  \
      (y, x, w, N, K, M))                                                                                           \
    /* norm[0] = sqrt(sum over segments of (sum of squares of the segment, double)); segments are                 \
       [offsets[s], offsets[s] + counts[s]) of grad, in order; clip_coef[0] = min(1, float(max_norm) /             \
       (float(norm) + 1e-6f)) (torch.nn.utils.clip_grad_norm_) */                                                   \
    X(global_grad_norm,                                                                                             \
      (double* norm, float* clip_coef, const float* grad, const int64_t* offsets, const int64_t* counts,            \
       int64_t n_segments, int64_t max_count, double max_norm),                                                     \
      (norm, clip_coef, grad, offsets, counts, n_segments, max_count, max_norm))                                    \
    /* grad[i] *= clip_coef[0] */                                                                                   \
    X(clip_grad, (float* grad, int64_t n, const float* clip_coef), (grad, n, clip_coef))                            \
    /* one torch.optim.AdamW step (optim.h adamw_step; its fault variants are AdamWOptions fields); step is       \
       1-based after the increment */                                                                              \
    X(adamw_step,                                                                                                   \
      (float* param, const float* grad, float* m, float* v, int64_t n, int64_t step, double lr,                     \
       const AdamWOptions& options),                                                                                \
      (param, grad, m, v, n, step, lr, options))

enum class Op : int {
#define TANDEM_OP_ENUM(name, params, args) name,
    TANDEM_BACKEND_OPS(TANDEM_OP_ENUM)
#undef TANDEM_OP_ENUM
};
#define TANDEM_OP_COUNT(name, params, args) +1
inline constexpr int kOpCount = 0 TANDEM_BACKEND_OPS(TANDEM_OP_COUNT);
#undef TANDEM_OP_COUNT
const char* op_name(Op op);

// What an allocation holds (the CUDA backend accounts memory per kind; docs/engine-cuda.md).
enum class MemoryKind : int { Weights = 0, Adapter = 1, Activations = 2, Workspace = 3 };

class Backend {
public:
    virtual ~Backend() = default;

    // ---- what it is (the engine leg's hello event)
    virtual std::string device() const = 0;       // "cpu", "cuda:0"
    virtual std::string device_name() const = 0;  // "cpu", "NVIDIA H200"
    virtual std::string stack() const = 0;        // "tandem engine (C++20, OpenBLAS)", ...
    // Peak bytes of device memory in use, or -1 for a backend computing in host memory.
    virtual int64_t peak_device_bytes() const { return -1; }

    // ---- memory
    virtual void* allocate(size_t bytes, MemoryKind kind) = 0;  // throws tandem::Error when out of memory
    virtual void release(void* p) noexcept = 0;                 // nullptr: no-op
    virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;    // host_src reusable on return
    virtual void download(void* host_dst, const void* src, size_t bytes) = 0;  // waits for pending ops
    virtual void fill_zero(void* dst, size_t bytes) = 0;
    // A frozen tensor for the backend's lifetime: the CPU keeps the host buffer (no copy), CUDA
    // uploads it and drops the host copy. Returns its backend address.
    virtual const float* take_weight(Tensor&& t) = 0;

    // Floats of the attention cache attention_forward fills for a [B,T,H] query block.
    virtual int64_t attention_cache_floats(int64_t B, int64_t T, int64_t H) const = 0;
    // Supervised rows per lm_head_cross_entropy chunk when ModelOptions::ce_token_chunk is -1.
    virtual int64_t default_ce_token_chunk() const { return 256; }
    // True when lora_linear_forward stores an active mask in DropoutMask::keep for the backward
    // (the wiring then gives it N*in bytes per adapted projection and layer).
    virtual bool keeps_dropout_masks() const { return false; }
    // Throws tandem::Error naming what this backend cannot run (CUDA: head_dim not 32, 64 or 128),
    // so a model fails when it is built, not at its first forward.
    virtual void check_supported(const Qwen3Config&) const {}
    // Throws tandem::Error naming a fault (faults.h) this backend has no op variant for (CUDA: every
    // op-variant fault), so a faulty model fails when it is built.
    virtual void check_faults_supported(const FaultConfig&) const {}

    // ---- the ops (TANDEM_BACKEND_OPS)
#define TANDEM_OP_VIRTUAL(name, params, args) virtual void name params = 0;
    TANDEM_BACKEND_OPS(TANDEM_OP_VIRTUAL)
#undef TANDEM_OP_VIRTUAL
};

// An owning typed allocation on a backend (move-only; tandem/pool_buffer.h). The backend must outlive it.
template <class T>
using Buffer = PoolBuffer<T, Backend, MemoryKind>;

// The CPU backend. With `threads`, sets the engine's thread count (ops::set_num_threads; <= 0: all
// cores); without, leaves it as it is. The count is process-wide (one pool, one OpenBLAS).
std::shared_ptr<Backend> make_cpu_backend(int threads);
std::shared_ptr<Backend> make_cpu_backend();

}  // namespace tandem::engine
