#pragma once
#define TANDEM_KERNELS_OPS_INCLUDED 1  // engine/src/model/model.cpp refuses to compile with it
// Device launchers of tandem's Qwen3 + LoRA engine: what the engine's CUDA backend
// (engine/src/cuda/cuda_backend.cpp) calls to implement each op of the backend seam
// (engine/include/tandem/engine/backend.h — the op contract lives there), plus the pieces the ops
// need (GEMM glue, dropout masks, per-row losses). Every pointer is DEVICE memory unless the comment
// says host; every call is asynchronous on `stream` unless it says it synchronises. Launchers take
// their workspace explicitly; the backend owns it.
//
// Conventions (row-major, as the CPU ops):
//   - N = B*T tokens, C hidden, H query heads, KV key/value heads, D head_dim.
//   - ACTIVATION gradients are ASSIGNED (=) unless the function says it accumulates; PARAMETER
//     gradients ACCUMULATE (+=); a nullptr parameter gradient is not computed (frozen).
//   - float32 only; GEMMs through cuBLAS in CUBLAS_DEFAULT_MATH (no TF32, docs/spec.md §Recipe).
//   - Reductions are deterministic (fixed partitions, no float atomics): the same inputs give the
//     same bits on the same device, so bit-identical resume is testable on the GPU too.
// Differences from the CPU ops, by design:
//   - attention does NOT cache probs[B,H,T,T]; it caches the row log-sum-exp lse[B,H,T] and the
//     backward recomputes probabilities tile by tile (flash-attention style).
//   - the LoRA dropout mask is never stored: it is a pure function of (key, element index) and is
//     regenerated in the backward pass.
//   - RoPE takes the cos/sin tables as device arrays computed ON THE HOST by
//     tandem::engine::ops::rope_tables, so both backends rotate with bit-identical tables.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tandem/kernels/element_ops.h"

namespace tandem::kernels {

// ----------------------------------------------------------------------------------------------
// GEMM (matmul.cu). Same semantics as the CPU linear_* wrappers.
// y[N,M] = alpha * x[N,K] @ w[M,K]^T + beta * y
void linear_forward(cublasHandle_t h, float* y, const float* x, const float* w, int64_t N, int64_t K, int64_t M,
                    float beta = 0.0f, float alpha = 1.0f);
// dx[N,K] = alpha * dy[N,M] @ w[M,K] + beta * dx
void linear_backward_input(cublasHandle_t h, float* dx, const float* dy, const float* w, int64_t N, int64_t M,
                           int64_t K, float beta = 0.0f, float alpha = 1.0f);
// dw[M,K] += alpha * dy[N,M]^T @ x[N,K]
void linear_backward_weight(cublasHandle_t h, float* dw, const float* dy, const float* x, int64_t N, int64_t M,
                            int64_t K, float alpha = 1.0f);
// Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C, op(A) [M,K], op(B) [K,N]: the one cuBLAS call.
void gemm_rm(cublasHandle_t h, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const float* A, const float* B, float beta, float* C);

// ----------------------------------------------------------------------------------------------
// elementwise helpers (elementwise.cu)
void add_inplace(float* y, const float* x, int64_t n, cudaStream_t stream);          // y += x
void fill(float* y, float value, int64_t n, cudaStream_t stream);
// out[j,:] = in[rows[j],:] for j < n_rows (rows are host-built index lists uploaded by the caller;
// the embedding lookup is gather_rows(out, table, ids, N, C): the table is frozen, no backward)
void gather_rows(float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C, cudaStream_t stream);
// out[rows[j],:] = in[j,:]; other rows of out untouched
void scatter_rows(float* out, const float* in, const int32_t* rows, int64_t n_rows, int64_t C, cudaStream_t stream);

// ----------------------------------------------------------------------------------------------
// RMSNorm (rmsnorm.cu), HF Qwen3RMSNorm; mean of squares accumulated in double as on the CPU.
// out[rows,C], rstd[rows], in[rows,C], weight[C]
void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int64_t rows, int64_t C,
                     double eps, cudaStream_t stream);
// din[rows,C] (= , or += when accumulate_din), dweight[C] (+=, nullable: frozen)
void rmsnorm_backward(float* din, float* dweight, const float* dout, const float* in, const float* weight,
                      const float* rstd, int64_t rows, int64_t C, cudaStream_t stream, bool accumulate_din = false);

// ----------------------------------------------------------------------------------------------
// RoPE (rope.cu), rotate-half. cos/sin [T,D] device copies of engine::ops::rope_tables.
// out may alias in; din may alias dout.
void rope_forward(float* out, const float* in, const float* cos, const float* sin, int64_t B, int64_t T,
                  int64_t H, int64_t D, cudaStream_t stream);
void rope_backward(float* din, const float* dout, const float* cos, const float* sin, int64_t B, int64_t T,
                   int64_t H, int64_t D, cudaStream_t stream);

// ----------------------------------------------------------------------------------------------
// Causal GQA attention with right padding (attention.cu; the kernels: attention.cuh), the CPU op's
// mask: query i of sequence b attends to key j iff j <= i and j < lengths[b]. scale = 1/sqrt(D).
// Tiled, online softmax; lse[B,H,T] (natural-log log-sum-exp of the scaled scores per query row) is
// the only cache.
// D is 32, 64 or 128 (Qwen3: 128; tests: 32, 64); every pointer 16-byte aligned.
// out[B,T,H,D], lse[B,H,T], q[B,T,H,D], k,v[B,T,KV,D], lengths[B] (device)
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                       cudaStream_t stream);
// dq[B,T,H,D] (=), dk, dv[B,T,KV,D] (=). workspace: B*H*T floats (row dot(dout, out)).
// Deterministic: dq by query rows, dk/dv by key rows, no atomics.
void attention_backward(float* dq, float* dk, float* dv, float* workspace, const float* dout, const float* out,
                        const float* q, const float* k, const float* v, const float* lse, const int32_t* lengths,
                        int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, cudaStream_t stream);

// ----------------------------------------------------------------------------------------------
// SiLU gate (swiglu.cu): out = silu(gate) * up, silu(x) = x / (1 + exp(-x)).  all [n]
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n,
                     cudaStream_t stream);

// ----------------------------------------------------------------------------------------------
// LoRA dropout (dropout.cu): engine/include/tandem/engine/dropout.h's generator, same integer
// arithmetic: keep_i = (mix64(key ^ (first_index + i)) >> 40) >= ceil(p * 2^24).
// (mix64 and dropout_keep live in element_ops.h, shared with host tests.)
// u >= p with u = m * 2^-24 exactly, m = top 24 bits: m >= ceil(p * 2^24) (p * 2^24 is exact in double).
uint32_t dropout_threshold(double p);
// keep[i] (uint8) for i < n, the CPU's fill_dropout_keep (tests compare the two bit for bit).
void dropout_keep_mask(uint8_t* keep, int64_t n, uint64_t key, uint64_t first_index, double p, cudaStream_t stream);
// xd[i] = keep_i ? x[i] * scale : 0 with the mask regenerated from (key, first_index + i).
void dropout_apply(float* xd, const float* x, int64_t n, uint64_t key, uint64_t first_index, double p, float scale,
                   cudaStream_t stream);

// ----------------------------------------------------------------------------------------------
// LoRA linear (lora.cu), peft's order: y = x W^T + (B (A xd)) * scaling. a == nullptr: plain linear.
// x[N,in], w[out,in], a[r,in], b[out,r], xd[N,in] (workspace: dropout(x); ignored when no dropout —
// then x itself is the adapter input), t[N,r] (cache: A xd), y[N,out].
struct DropoutSpec {
    bool active = false;
    uint64_t key = 0;
    uint64_t first_index = 0;
    double p = 0.0;
    float scale = 1.0f;
};
void lora_linear_forward(cublasHandle_t h, cudaStream_t stream, float* y, float* t, float* xd, const float* x,
                         const float* w, const float* a, const float* b, const DropoutSpec& dropout, float scaling,
                         int64_t N, int64_t in, int64_t out, int64_t r);
// dx[N,in] (= or += when accumulate_dx), da[r,in], db[out,r] (+=), dt workspace [N,r], xd workspace
// [N,in] (regenerated when dropout is active).
void lora_linear_backward(cublasHandle_t h, cudaStream_t stream, float* dx, float* da, float* db, float* dt, float* xd,
                          const float* dy, const float* x, const float* w, const float* a, const float* b,
                          const float* t, const DropoutSpec& dropout, float scaling, int64_t N, int64_t in,
                          int64_t out, int64_t r, bool accumulate_dx);

// ----------------------------------------------------------------------------------------------
// LM head + cross-entropy (cross_entropy.cu), chunked over tokens: at most token_chunk x V logits
// exist at once (workspace). Per token n: loss_n = logsumexp(h[n] . emb^T) - logit[targets[n]].
// losses[N] (device, per-token loss in double), dh[N,C] (=, nullable) = grad_scale * (softmax - onehot) @ emb.
// workspace: token_chunk * V floats. token_chunk <= 0 means all N rows at once.
void lm_head_cross_entropy(cublasHandle_t h, cudaStream_t stream, double* losses, float* dh, float* workspace,
                           const float* hidden, const float* emb, const int32_t* targets, int64_t N, int64_t C,
                           int64_t V, float grad_scale, int64_t token_chunk);
// acc[0] += sum_n losses[n] in double, one block, fixed order (deterministic).
void sum_losses(double* acc, const double* losses, int64_t n, cudaStream_t stream);

// ----------------------------------------------------------------------------------------------
// Optimizer (adamw.cu, global_norm.cu). Scalars are computed on the host exactly as the CPU's
// adamw_step does (double, then rounded to float where it applies them in float).
// AdamWScalars and the per-element update (adamw_element) live in element_ops.h.
AdamWScalars adamw_scalars(int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay);
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWScalars& s,
                cudaStream_t stream);
// Global L2 norm over segments [offset, count] of grad (host arrays of n_segments pairs are uploaded
// by the caller into seg_offsets/seg_counts, device int64). Deterministic two-pass reduction in double:
// pass 1 — each block sums squares of a fixed slice of one segment; pass 2 — one block sums the slices
// per segment, then over segments, then sqrt. Writes norm[0] (double, device)
// and coef[0] = min(1, float(max_norm) / (float(norm) + 1e-6f)) (float, device).
// partials: workspace of global_norm_partials(total) doubles.
int64_t global_norm_partials(int64_t max_segment_count, int64_t n_segments);
void global_grad_norm(double* norm, float* coef, double* partials, const float* grad, const int64_t* seg_offsets,
                      const int64_t* seg_counts, int64_t n_segments, int64_t max_segment_count, double max_norm,
                      cudaStream_t stream);
// grad[i] *= coef[0] (coef read on the device: no host round trip between norm and clip).
void clip_grad(float* grad, int64_t n, const float* coef, cudaStream_t stream);

}  // namespace tandem::kernels
