#pragma once
#define TANDEM_ENGINE_CPU_OPS_INCLUDED 1  // model.cpp refuses to compile with it: the wiring uses Backend only
// CPU operators of tandem's Qwen3 + LoRA engine, written the llm.c way: every layer is a pair of free
// functions on raw pointers with explicit dimensions, `op_forward(out, cache..., in..., dims)` and
// `op_backward(din..., dparam..., dout, cache..., dims)`.
//
// Conventions (all row-major):
//   - N = B*T tokens of a micro-batch, C = hidden size, H query heads, KV key/value heads, D head_dim.
//   - forward caches what backward needs (rstd, attention probabilities, LoRA intermediates).
//   - backward: ACTIVATION gradients are ASSIGNED (=) unless a function says it accumulates;
//     PARAMETER gradients ACCUMULATE (+=) so gradient accumulation over micro-batches is free.
//     A parameter-gradient pointer may be nullptr for a frozen parameter: that gradient is then not
//     computed at all (the base model is frozen; we never spend a GEMM on dW).
//   - Every op is a template instantiated for float (the engine) and double (the float64
//     finite-difference checks in tests/engine/); both run the same code.
//   - Reductions are ordered and thread partitions are fixed, so results are bit-reproducible for a
//     given thread count (needed for bit-identical resume).
#include <cstdint>

#include "tandem/engine/rope.h"

namespace tandem::engine::ops {

// ----------------------------------------------------------------------------------------------
// threads: one fixed-size pool for the non-GEMM loops, plus OpenBLAS's own threads for GEMMs.
// n <= 0 means "hardware concurrency". Affects only speed, never which numbers come out for a given n.
void set_num_threads(int n);
int num_threads();

// ----------------------------------------------------------------------------------------------
// GEMM wrappers (OpenBLAS sgemm / dgemm).
// y[N,M] = x[N,K] @ w[M,K]^T (+ beta * y)             -- nn.Linear forward
template <typename T>
void linear_forward(T* y, const T* x, const T* w, int64_t N, int64_t K, int64_t M, T beta = T(0));
// dx[N,K] = dy[N,M] @ w[M,K] (+ beta * dx)             -- input gradient of nn.Linear
template <typename T>
void linear_backward_input(T* dx, const T* dy, const T* w, int64_t N, int64_t M, int64_t K, T beta = T(0));
// dw[M,K] += dy[N,M]^T @ x[N,K]                        -- weight gradient (accumulates)
template <typename T>
void linear_backward_weight(T* dw, const T* dy, const T* x, int64_t N, int64_t M, int64_t K);

// ----------------------------------------------------------------------------------------------
// embedding: out[N,C] = table[ids[n], :]. Frozen in LoRA training, so no backward.
template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t C, int64_t vocab);

// ----------------------------------------------------------------------------------------------
// RMSNorm (HF Qwen3RMSNorm): rstd = 1/sqrt(mean(x^2) + eps), out = weight * (x * rstd).
// The mean is accumulated in double and rounded to T (torch accumulates in float32 with a
// different order; double makes ours the better-rounded one). Used for the layer norms (rows = N,
// C = hidden) and for q_norm / k_norm (rows = N*heads, C = head_dim).
// out[rows,C], rstd[rows], in[rows,C], weight[C]
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* in, const T* weight, int64_t rows, int64_t C, double eps);
// din[rows,C] (=, or += when accumulate_din: the residual stream adds the norm's input gradient),
// dweight[C] (+=, nullable), dout[rows,C]
template <typename T>
void rmsnorm_backward(T* din, T* dweight, const T* dout, const T* in, const T* weight, const T* rstd,
                      int64_t rows, int64_t C, bool accumulate_din = false);

// ----------------------------------------------------------------------------------------------
// RoPE, rotate-half convention; the tables (rope_tables) are in rope.h.
// out[B,T,H,D] = x*cos + rotate_half(x)*sin; in[B,T,H,D]. out may alias in.
template <typename T>
void rope_forward(T* out, const T* in, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D);
// din[B,T,H,D] (=); din may alias dout.
template <typename T>
void rope_backward(T* din, const T* dout, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D);

// ----------------------------------------------------------------------------------------------
// Grouped-query causal attention with right padding. Query i of sequence b attends to key j iff
// j <= i and j < lengths[b] (transformers' causal mask AND the padding mask). scale = 1/sqrt(D).
// out[B,T,H,D], probs[B,H,T,T] (cache; masked entries are 0), q[B,T,H,D], k,v[B,T,KV,D], lengths[B]
template <typename T>
void attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, const int32_t* lengths,
                       int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D);
// dq[B,T,H,D] (=), dk,dv[B,T,KV,D] (=), dout[B,T,H,D]
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* probs,
                        const int32_t* lengths, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D);

// ----------------------------------------------------------------------------------------------
// SiLU-gated MLP core: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)).   all [n]
template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n);
// dgate, dup (=)
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

// ----------------------------------------------------------------------------------------------
// Linear with a LoRA adapter, peft's order of operations:
//   y = x W^T + (B (A xd)) * scaling,  xd = dropout(x) = x * keep * dropout_scale
// x[N,in], w[out,in], a[r,in], b[out,r], keep[N,in] (nullptr = no dropout), t[N,r] (cache: A xd),
// y[N,out]. a == nullptr means "no adapter on this projection" (plain linear).
template <typename T>
void lora_linear_forward(T* y, T* t, const T* x, const T* w, const T* a, const T* b, const uint8_t* keep,
                         T dropout_scale, T scaling, int64_t N, int64_t in, int64_t out, int64_t r);
// dx[N,in]: ASSIGNED when accumulate_dx is false, ACCUMULATED (+=) when true (q/k/v and gate/up
// share one input). da[r,in], db[out,r] (+=; nullable = frozen). dw is never computed (frozen base).
template <typename T>
void lora_linear_backward(T* dx, T* da, T* db, const T* dy, const T* x, const T* w, const T* a, const T* b,
                          const T* t, const uint8_t* keep, T dropout_scale, T scaling, int64_t N, int64_t in,
                          int64_t out, int64_t r, bool accumulate_dx);

// ----------------------------------------------------------------------------------------------
// Cross-entropy fused with the (tied) LM head, chunked over tokens AND vocabulary so at most
// token_chunk x vocab_chunk logits exist at once (never the micro-batch's full logits matrix).
//   logits[n, v] = h[n,:] . emb[v,:];  loss_n = logsumexp(logits[n]) - logits[n, target[n]]
// Returns sum_n loss_n (double accumulation). If dh != nullptr, also dh[N,C] (=) =
// grad_scale * (softmax(logits[n]) - onehot(target[n])) @ emb. Frozen head: no d(emb).
// When vocab_chunk >= V logits are computed once per token chunk; otherwise a first pass finds
// max / sum-exp per token and the backward pass recomputes each logits chunk (one extra GEMM).
// h[N,C], emb[V,C], targets[N] in [0,V), chunk sizes <= 0 mean "all".
template <typename T>
double lm_head_cross_entropy(T* dh, const T* h, const T* emb, const int32_t* targets, int64_t N, int64_t C,
                             int64_t V, double grad_scale, int64_t token_chunk, int64_t vocab_chunk);

}  // namespace tandem::engine::ops
