// CPU operators of the engine (see tandem/engine/ops.h for the contract of every function).
// Each op is a template instantiated for float (training) and double (finite-difference checks).
// GEMMs go to the GEMM library (gemm.h); row-wise loops go to the fixed thread pool in parallel.h. Per-row reductions
// (norms, softmax sums, CE) accumulate in double: torch accumulates float32 in its own (vectorised)
// order, so neither order reproduces the other bit for bit, and double keeps ours within a few ulp
// of the exact value, which is what the 1e-6 loss tolerance against the reference needs.
#include "tandem/engine/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "parallel.h"
#include "simd.h"
#include "tandem/error.h"

namespace tandem::engine::ops {
using detail::parallel_for;
using detail::parallel_for_grain;

namespace {

using blas::gemm;

// Rows per parallel chunk below which a row loop is not worth a thread hand-off.
constexpr int64_t kRowGrain = 16;

// The float instantiation on a CPU that runs the vector kernels, AVX-512 or AVX2 (simd.h: the same bits
// as the scalar loops, which the double instantiation and other CPUs run).
template <typename T>
bool use_simd() {
    if constexpr (std::is_same_v<T, float>) return simd::enabled();
    return false;
}

// Row groups of simd::kLanes rows: fn(first row, rows in the group) for [b, e).
template <class F>
void for_row_groups(int64_t b, int64_t e, F&& fn) {
    for (int64_t i = b; i < e; i += simd::kLanes) fn(i, int(std::min<int64_t>(simd::kLanes, e - i)));
}

// Scratch arrays of the ops, one per use that can be live at the same time.
enum class Scratch { CeLogits, Dropped, LoraU, LoraDu, LoraDt, LoraDxd, LoraTt, AttentionDs };

// A scratch array of at least n elements, reused by later calls on the same thread (contents
// unspecified). The CE's logits chunk is ~155 MB at Qwen3's vocabulary: allocating (and zeroing,
// and page-faulting) it and the LoRA temporaries on every call cost ~5 % of an update.
template <typename T, Scratch slot>
T* thread_scratch(size_t n) {
    thread_local std::vector<T> buf;
    if (buf.size() < n) {
        buf.clear();
        buf.shrink_to_fit();
        buf.resize(n);
    }
    return buf.data();
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// linear

template <typename T>
void linear_forward(T* y, const T* x, const T* w, int64_t N, int64_t K, int64_t M, T beta) {
    gemm(false, true, N, M, K, T(1), x, K, w, K, beta, y, M);
}
template <typename T>
void linear_backward_input(T* dx, const T* dy, const T* w, int64_t N, int64_t M, int64_t K, T beta) {
    gemm(false, false, N, K, M, T(1), dy, M, w, K, beta, dx, K);
}
template <typename T>
void linear_backward_weight(T* dw, const T* dy, const T* x, int64_t N, int64_t M, int64_t K) {
    gemm(true, false, M, K, N, T(1), dy, M, x, K, T(1), dw, K);
}

// ----------------------------------------------------------------------------------------------
// embedding

template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t C, int64_t vocab) {
    for (int64_t n = 0; n < N; ++n) {
        if (ids[n] < 0 || ids[n] >= vocab)
            throw Error("embedding: token id " + std::to_string(ids[n]) + " at position " + std::to_string(n) +
                        " outside [0, " + std::to_string(vocab) + ")");
    }
    parallel_for_grain(N, kRowGrain, [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) std::memcpy(out + n * C, table + int64_t(ids[n]) * C, sizeof(T) * C);
    });
}

// ----------------------------------------------------------------------------------------------
// RMSNorm

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* in, const T* weight, int64_t rows, int64_t C, double eps) {
    if (use_simd<T>()) {
        parallel_for_grain(rows, kRowGrain, [&](int64_t b, int64_t e) {
            for_row_groups(b, e, [&](int64_t n0, int count) {
                const float* x[simd::kLanes];
                int64_t len[simd::kLanes];
                double ss[simd::kLanes];
                for (int k = 0; k < count; ++k) x[k] = reinterpret_cast<const float*>(in + (n0 + k) * C), len[k] = C;
                simd::dot_rows(x, x, len, count, ss);
                for (int k = 0; k < count; ++k) {
                    const float var = float(ss[k] / double(C));
                    const float r = 1.0f / std::sqrt(var + float(eps));
                    rstd[n0 + k] = r;
                    simd::rmsnorm_apply(reinterpret_cast<float*>(out + (n0 + k) * C), x[k],
                                        reinterpret_cast<const float*>(weight), r, C);
                }
            });
        });
        return;
    }
    parallel_for_grain(rows, kRowGrain, [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) {
            const T* x = in + n * C;
            T* o = out + n * C;
            double ss = 0.0;
            for (int64_t c = 0; c < C; ++c) ss += double(x[c]) * double(x[c]);
            const T var = T(ss / double(C));
            const T r = T(1) / std::sqrt(var + T(eps));  // torch: rsqrt(variance + eps)
            rstd[n] = r;
            for (int64_t c = 0; c < C; ++c) o[c] = weight[c] * (x[c] * r);  // torch: weight * (x * rstd)
        }
    });
}

template <typename T>
void rmsnorm_backward(T* din, T* dweight, const T* dout, const T* in, const T* weight, const T* rstd, int64_t rows,
                      int64_t C, bool accumulate_din) {
    // y_c = w_c x_c r, r = (mean(x^2)+eps)^-1/2  =>  dx_c = r w_c dy_c - x_c r^3 / C * sum_k w_k dy_k x_k
    if (use_simd<T>()) {
        parallel_for_grain(rows, kRowGrain, [&](int64_t b, int64_t e) {
            for_row_groups(b, e, [&](int64_t n0, int count) {
                const float *x[simd::kLanes], *dy[simd::kLanes];
                double dot[simd::kLanes];
                for (int k = 0; k < count; ++k) {
                    x[k] = reinterpret_cast<const float*>(in + (n0 + k) * C);
                    dy[k] = reinterpret_cast<const float*>(dout + (n0 + k) * C);
                }
                simd::dot3_rows(reinterpret_cast<const float*>(weight), dy, x, C, count, dot);
                for (int k = 0; k < count; ++k) {
                    const float r = float(rstd[n0 + k]);
                    const float kk = float(double(r) * double(r) * double(r) * dot[k] / double(C));
                    simd::rmsnorm_grad(reinterpret_cast<float*>(din + (n0 + k) * C), dy[k], x[k],
                                       reinterpret_cast<const float*>(weight), r, kk, C, accumulate_din);
                }
            });
        });
    } else {
    parallel_for_grain(rows, kRowGrain, [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) {
            const T* x = in + n * C;
            const T* dy = dout + n * C;
            T* dx = din + n * C;
            const T r = rstd[n];
            double dot = 0.0;
            for (int64_t c = 0; c < C; ++c) dot += double(weight[c]) * double(dy[c]) * double(x[c]);
            const T k = T(double(r) * double(r) * double(r) * dot / double(C));
            if (accumulate_din) {  // the residual stream's gradient: dx + (the same value as below)
                for (int64_t c = 0; c < C; ++c) dx[c] = dx[c] + (r * (weight[c] * dy[c]) - x[c] * k);
            } else {
                for (int64_t c = 0; c < C; ++c) dx[c] = r * (weight[c] * dy[c]) - x[c] * k;
            }
        }
    });
    }
    if (dweight) {  // serial over rows: a fixed summation order
        for (int64_t n = 0; n < rows; ++n)
            for (int64_t c = 0; c < C; ++c) dweight[c] += dout[n * C + c] * (in[n * C + c] * rstd[n]);
    }
}

// ----------------------------------------------------------------------------------------------
// RoPE

void rope_tables(float* cos, float* sin, int64_t T_, int64_t D, double theta) {
    // transformers: inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=float) / dim)), float32;
    // freqs = position.float() * inv_freq; emb = cat(freqs, freqs); cos(), sin() in float32.
    const int64_t half = D / 2;
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (int64_t j = 0; j < half; ++j) {
        const float exponent = float(2 * j) / float(D);
        inv_freq[size_t(j)] = 1.0f / std::pow(float(theta), exponent);
    }
    for (int64_t t = 0; t < T_; ++t) {
        for (int64_t j = 0; j < half; ++j) {
            const float a = float(t) * inv_freq[size_t(j)];
            cos[t * D + j] = cos[t * D + j + half] = std::cos(a);
            sin[t * D + j] = sin[t * D + j + half] = std::sin(a);
        }
    }
}

void rope_tables(double* cos, double* sin, int64_t T_, int64_t D, double theta) {
    const int64_t half = D / 2;
    for (int64_t t = 0; t < T_; ++t) {
        for (int64_t j = 0; j < half; ++j) {
            const double a = double(t) / std::pow(theta, double(2 * j) / double(D));
            cos[t * D + j] = cos[t * D + j + half] = std::cos(a);
            sin[t * D + j] = sin[t * D + j + half] = std::sin(a);
        }
    }
}

namespace {
// The four RoPE loops in one walk over the (position, head) rows of D elements. A row's pairs are
// (i, i + half) rotated by angle i (transformers' rotate_half), or in the fault variant (2i, 2i+1)
// rotated by angle i (cos/sin[i] == cos/sin[i + half]); the backward rotates by minus the angle.
template <bool kBackward, typename T>
void rope_rotate(T* dst, const T* src, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D,
                 RopePairing pairing) {
    const int64_t half = D / 2;
    // the pairing is a compile-time constant inside the loops
    const auto rotate = [&](auto interleaved) {
        constexpr bool kInterleaved = decltype(interleaved)::value;
        parallel_for_grain(B * T_, kRowGrain, [&](int64_t b0, int64_t e0) {
            for (int64_t bt = b0; bt < e0; ++bt) {
                const int64_t t = bt % T_;
                const T* c = cos + t * D;
                const T* s = sin + t * D;
                for (int64_t h = 0; h < H; ++h) {
                    const T* x = src + (bt * H + h) * D;
                    T* y = dst + (bt * H + h) * D;
                    for (int64_t i = 0; i < half; ++i) {
                        // the pair's two elements, and the table index of the second one
                        const int64_t i1 = kInterleaved ? 2 * i : i, i2 = kInterleaved ? 2 * i + 1 : i + half;
                        const int64_t j = kInterleaved ? i : i + half;
                        const T x1 = x[i1], x2 = x[i2];
                        if constexpr (kBackward) {
                            y[i1] = x1 * c[i] + x2 * s[j];
                            y[i2] = x2 * c[j] - x1 * s[i];
                        } else {  // q*cos + rotate_half(q)*sin, rotate_half = cat(-x2, x1)
                            y[i1] = x1 * c[i] - x2 * s[i];
                            y[i2] = x2 * c[j] + x1 * s[j];
                        }
                    }
                }
            }
        });
    };
    if (pairing == RopePairing::Interleaved)
        rotate(std::true_type{});
    else
        rotate(std::false_type{});
}
}  // namespace

template <typename T>
void rope_forward(T* out, const T* in, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D,
                  RopePairing pairing) {
    rope_rotate<false>(out, in, cos, sin, B, T_, H, D, pairing);
}

template <typename T>
void rope_backward(T* din, const T* dout, const T* cos, const T* sin, int64_t B, int64_t T_, int64_t H, int64_t D,
                   RopePairing pairing) {
    rope_rotate<true>(din, dout, cos, sin, B, T_, H, D, pairing);
}

// ----------------------------------------------------------------------------------------------
// attention

namespace {
// Keys query i may see in a sequence of real length len: j < min(i + 1, len).
inline int64_t visible_keys(int64_t i, int64_t len) { return std::min(i + 1, len); }
}  // namespace

// One (sequence, query head) of the forward: P = softmax(q k^T * scale + mask) (the cache), out = P v.
template <typename T>
void attention_forward_head(T* out, T* P, const T* qb, const T* kb, const T* vb, int64_t len, int64_t T_, int64_t H,
                            int64_t KV, int64_t D) {
    const T scale = T(1) / std::sqrt(T(D));
    // P[T,T] = q_bh @ k_b^T (strided views of [B,T,H,D] / [B,T,KV,D])
    gemm(false, true, T_, T_, D, T(1), qb, H * D, kb, KV * D, T(0), P, T_);
    if (use_simd<T>()) {
        for_row_groups(0, T_, [&](int64_t i0, int count) {
            float* row[simd::kLanes];
            int64_t nk[simd::kLanes];
            double sum[simd::kLanes];
            for (int k = 0; k < count; ++k) {
                row[k] = reinterpret_cast<float*>(P + (i0 + k) * T_);
                nk[k] = visible_keys(i0 + k, len);
                const float mx = simd::max_fold(row[k], nk[k], -std::numeric_limits<float>::infinity(), float(scale), true);
                simd::exp_minus(row[k], nk[k], mx);
            }
            simd::sum_rows(row, nk, count, sum);
            for (int k = 0; k < count; ++k) {
                simd::scale(row[k], nk[k], float(1.0 / sum[k]));
                std::fill(row[k] + nk[k], row[k] + T_, 0.0f);
            }
        });
    } else {
        for (int64_t i = 0; i < T_; ++i) {
            T* row = P + i * T_;
            const int64_t nk = visible_keys(i, len);
            T mx = -std::numeric_limits<T>::infinity();
            for (int64_t j = 0; j < nk; ++j) {
                row[j] = row[j] * scale;  // eager: (q @ k^T) * scaling
                mx = std::max(mx, row[j]);
            }
            double sum = 0.0;
            for (int64_t j = 0; j < nk; ++j) {
                row[j] = std::exp(row[j] - mx);
                sum += double(row[j]);
            }
            const T inv = T(1.0 / sum);
            for (int64_t j = 0; j < nk; ++j) row[j] *= inv;
            for (int64_t j = nk; j < T_; ++j) row[j] = T(0);
        }
    }
    // out_bh[T,D] = P @ v_b
    gemm(false, false, T_, D, T_, T(1), P, T_, vb, KV * D, T(0), out, H * D);
}

// One (sequence, query head) of the backward; dk, dv of its kv head accumulate (+=).
template <typename T>
void attention_backward_head(T* dq, T* dk, T* dv, const T* dout, const T* qb, const T* kb, const T* vb, const T* P,
                             int64_t len, int64_t T_, int64_t H, int64_t KV, int64_t D) {
    const T scale = T(1) / std::sqrt(T(D));
    T* const dS = thread_scratch<T, Scratch::AttentionDs>(static_cast<size_t>(T_ * T_));
    // dP[T,T] = dout_bh @ v_b^T
    gemm(false, true, T_, T_, D, T(1), dout, H * D, vb, KV * D, T(0), dS, T_);
    // dS = P * (dP - rowsum(P * dP)) * scale   (softmax backward, then the score scaling)
    if (use_simd<T>()) {
        for_row_groups(0, T_, [&](int64_t i0, int count) {
            float* row[simd::kLanes];
            const float* p[simd::kLanes];
            int64_t nk[simd::kLanes];
            double dot[simd::kLanes];
            for (int k = 0; k < count; ++k) {
                row[k] = reinterpret_cast<float*>(dS + (i0 + k) * T_);
                p[k] = reinterpret_cast<const float*>(P + (i0 + k) * T_);
                nk[k] = visible_keys(i0 + k, len);
            }
            simd::dot_rows(p, row, nk, count, dot);
            for (int k = 0; k < count; ++k) {
                simd::softmax_grad(row[k], p[k], float(dot[k]), float(scale), nk[k]);
                std::fill(row[k] + nk[k], row[k] + T_, 0.0f);
            }
        });
    } else {
        for (int64_t i = 0; i < T_; ++i) {
            T* row = dS + i * T_;
            const T* p = P + i * T_;
            const int64_t nk = visible_keys(i, len);
            double dot = 0.0;
            for (int64_t j = 0; j < nk; ++j) dot += double(p[j]) * double(row[j]);
            const T d = T(dot);
            for (int64_t j = 0; j < nk; ++j) row[j] = p[j] * (row[j] - d) * scale;
            for (int64_t j = nk; j < T_; ++j) row[j] = T(0);
        }
    }
    // dq_bh = dS @ k_b ; dk_b += dS^T @ q_bh ; dv_b += P^T @ dout_bh
    gemm(false, false, T_, D, T_, T(1), dS, T_, kb, KV * D, T(0), dq, H * D);
    gemm(true, false, T_, D, T_, T(1), dS, T_, qb, H * D, T(1), dk, KV * D);
    gemm(true, false, T_, D, T_, T(1), P, T_, dout, H * D, T(1), dv, KV * D);
}


template <typename T>
void attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, const int32_t* lengths, int64_t B,
                       int64_t T_, int64_t H, int64_t KV, int64_t D, KvHeadMapping kv_heads) {
    const int64_t rep = H / KV;
    blas::SerialGemm serial;
    // one task per (sequence, query head); each writes its own P and output columns
    parallel_for(B * H, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t b = t / H, h = t % H;
            // repeat_kv: query head h reads key/value head h / n_rep (h % KV: the Modulo fault variant)
            const int64_t kvh = kv_heads == KvHeadMapping::Modulo ? h % KV : h / rep;
            attention_forward_head(out + (b * T_ * H + h) * D, probs + (b * H + h) * T_ * T_, q + (b * T_ * H + h) * D,
                                   k + (b * T_ * KV + kvh) * D, v + (b * T_ * KV + kvh) * D, int64_t(lengths[b]), T_, H, KV, D);
        }
    });
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* probs,
                        const int32_t* lengths, int64_t B, int64_t T_, int64_t H, int64_t KV, int64_t D,
                        KvHeadMapping kv_heads) {
    const int64_t rep = H / KV;
    std::fill(dk, dk + B * T_ * KV * D, T(0));
    std::fill(dv, dv + B * T_ * KV * D, T(0));
    blas::SerialGemm serial;
    // one task per (sequence, kv head): the query heads reading it accumulate into its dk, dv in
    // ascending order, as the serial loop over heads did
    parallel_for(B * KV, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t b = t / KV, kvh = t % KV;
            for (int64_t h = 0; h < H; ++h) {
                if ((kv_heads == KvHeadMapping::Modulo ? h % KV : h / rep) != kvh) continue;
                const int64_t qoff = (b * T_ * H + h) * D, kvoff = (b * T_ * KV + kvh) * D;
                attention_backward_head(dq + qoff, dk + kvoff, dv + kvoff, dout + qoff, q + qoff, k + kvoff, v + kvoff,
                                        probs + (b * H + h) * T_ * T_, int64_t(lengths[b]), T_, H, KV, D);
            }
        }
    });
}

// ----------------------------------------------------------------------------------------------
// SiLU gate

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
    if (use_simd<T>()) {
        parallel_for_grain(n, 4096, [&](int64_t b, int64_t e) {
            simd::swiglu_forward(reinterpret_cast<float*>(out) + b, reinterpret_cast<const float*>(gate) + b,
                                 reinterpret_cast<const float*>(up) + b, e - b);
        });
        return;
    }
    parallel_for_grain(n, 4096, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            const T g = gate[i];
            out[i] = (g / (T(1) + std::exp(-g))) * up[i];  // torch: silu(gate) * up
        }
    });
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
    if (use_simd<T>()) {
        parallel_for_grain(n, 4096, [&](int64_t b, int64_t e) {
            simd::swiglu_backward(reinterpret_cast<float*>(dgate) + b, reinterpret_cast<float*>(dup) + b,
                                  reinterpret_cast<const float*>(dout) + b, reinterpret_cast<const float*>(gate) + b,
                                  reinterpret_cast<const float*>(up) + b, e - b);
        });
        return;
    }
    parallel_for_grain(n, 4096, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            const T g = gate[i];
            const T sig = T(1) / (T(1) + std::exp(-g));
            const T silu = g * sig;
            dup[i] = dout[i] * silu;
            dgate[i] = dout[i] * up[i] * (sig * (T(1) + g * (T(1) - sig)));
        }
    });
}

// ----------------------------------------------------------------------------------------------
// LoRA linear

namespace {
template <typename T>
void apply_dropout(T* xd, const T* x, const uint8_t* keep, T scale, int64_t n) {
    parallel_for_grain(n, 1 << 14, [&](int64_t b, int64_t e) {
        if (use_simd<T>())
            simd::apply_dropout(reinterpret_cast<float*>(xd) + b, reinterpret_cast<const float*>(x) + b, keep + b, float(scale), e - b);
        else
            for (int64_t i = b; i < e; ++i) xd[i] = keep[i] ? x[i] * scale : T(0);
    });
}
}  // namespace

template <typename T>
void lora_linear_forward(T* y, T* t, const T* x, const T* w, const T* a, const T* b, const uint8_t* keep,
                         T dropout_scale, T scaling, int64_t N, int64_t in, int64_t out, int64_t r) {
    linear_forward(y, x, w, N, in, out);
    if (!a) return;
    const T* xd = x;
    if (keep) {
        T* dropped = thread_scratch<T, Scratch::Dropped>(static_cast<size_t>(N * in));
        apply_dropout(dropped, x, keep, dropout_scale, N * in);
        xd = dropped;
    }
    linear_forward(t, xd, a, N, in, r);  // t = lora_A(dropout(x))
    T* const u = thread_scratch<T, Scratch::LoraU>(static_cast<size_t>(N * out));
    linear_forward(u, t, b, N, r, out);  // u = lora_B(t)
    parallel_for_grain(N * out, 1 << 14, [&](int64_t b0, int64_t e0) {
        for (int64_t i = b0; i < e0; ++i) y[i] = y[i] + u[i] * scaling;  // result + u * scaling
    });
}

template <typename T>
void lora_linear_backward(T* dx, T* da, T* db, const T* dy, const T* x, const T* w, const T* a, const T* b,
                          const T* t, const uint8_t* keep, T dropout_scale, T scaling, int64_t N, int64_t in,
                          int64_t out, int64_t r, bool accumulate_dx, LoraBGrad b_grad) {
    linear_backward_input(dx, dy, w, N, out, in, accumulate_dx ? T(1) : T(0));  // dx (+)= dy W
    if (!a) return;
    T* const du = thread_scratch<T, Scratch::LoraDu>(static_cast<size_t>(N * out));
    parallel_for_grain(N * out, 1 << 14, [&](int64_t b0, int64_t e0) {
        for (int64_t i = b0; i < e0; ++i) du[i] = dy[i] * scaling;
    });
    if (db && b_grad == LoraBGrad::TransposedOperand) {
        // fault variant: t's storage read as its transpose's, t'[n,k] = t[k*N + n]
        T* const tt = thread_scratch<T, Scratch::LoraTt>(static_cast<size_t>(N * r));
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < r; ++k) tt[n * r + k] = t[k * N + n];
        linear_backward_weight(db, du, tt, N, out, r);
    } else if (db) {
        linear_backward_weight(db, du, t, N, out, r);  // dB += du^T t
    }
    T* const dt = thread_scratch<T, Scratch::LoraDt>(static_cast<size_t>(N * r));
    linear_backward_input(dt, du, b, N, out, r);  // dt = du B
    const T* xd = x;
    if (keep) {
        T* dropped = thread_scratch<T, Scratch::Dropped>(static_cast<size_t>(N * in));
        apply_dropout(dropped, x, keep, dropout_scale, N * in);
        xd = dropped;
    }
    if (da) linear_backward_weight(da, dt, xd, N, r, in);  // dA += dt^T xd
    if (!keep) {
        linear_backward_input(dx, dt, a, N, r, in, T(1));  // dx += dt A
    } else {
        T* const dxd = thread_scratch<T, Scratch::LoraDxd>(static_cast<size_t>(N * in));
        linear_backward_input(dxd, dt, a, N, r, in);
        parallel_for_grain(N * in, 1 << 14, [&](int64_t b0, int64_t e0) {
            if (use_simd<T>())
                simd::add_dropped(reinterpret_cast<float*>(dx) + b0, reinterpret_cast<const float*>(dxd) + b0, keep + b0,
                                  float(dropout_scale), e0 - b0);
            else
                for (int64_t i = b0; i < e0; ++i) dx[i] += keep[i] ? dxd[i] * dropout_scale : T(0);
        });
    }
}

// ----------------------------------------------------------------------------------------------
// fused LM head + cross-entropy

template <typename T>
double lm_head_cross_entropy(T* dh, const T* h, const T* emb, const int32_t* targets, int64_t N, int64_t C,
                             int64_t V, double grad_scale, int64_t token_chunk, int64_t vocab_chunk) {
    for (int64_t n = 0; n < N; ++n) {
        if (targets[n] < 0 || targets[n] >= V)
            throw Error("cross-entropy: target id " + std::to_string(targets[n]) + " outside [0, " +
                        std::to_string(V) + ")");
    }
    if (token_chunk <= 0 || token_chunk > N) token_chunk = std::max<int64_t>(1, N);
    if (vocab_chunk <= 0 || vocab_chunk > V) vocab_chunk = V;
    const bool single_pass = vocab_chunk == V;
    T* const logits = thread_scratch<T, Scratch::CeLogits>(static_cast<size_t>(token_chunk * vocab_chunk));  // one chunk's logits
    std::vector<double> row_max(static_cast<size_t>(token_chunk)), row_sum(static_cast<size_t>(token_chunk)),
        row_lse(static_cast<size_t>(token_chunk)), target_logit(static_cast<size_t>(token_chunk));
    const T gs = T(grad_scale);
    double total = 0.0;

    for (int64_t n0 = 0; n0 < N; n0 += token_chunk) {
        const int64_t nt = std::min(token_chunk, N - n0);
        const T* hc = h + n0 * C;
        std::fill(row_max.begin(), row_max.end(), -std::numeric_limits<double>::infinity());
        std::fill(row_sum.begin(), row_sum.end(), 0.0);
        if (single_pass) {
            // one GEMM per token chunk: the logits row is overwritten by exp(l - max) in pass 1 and
            // turned into the gradient in place (no second exp, no recomputation)
            gemm(false, true, nt, V, C, T(1), hc, C, emb, C, T(0), logits, V);
            if (use_simd<T>()) {
                parallel_for_grain(nt, 1, [&](int64_t r0, int64_t r1) {
                    for_row_groups(r0, r1, [&](int64_t i0, int count) {
                        float* row[simd::kLanes];
                        float mx[simd::kLanes];
                        double sum[simd::kLanes];
                        for (int k = 0; k < count; ++k) {
                            row[k] = reinterpret_cast<float*>(logits + (i0 + k) * V);
                            mx[k] = simd::max_fold(row[k], V, row[k][0], 1.0f, false);
                            target_logit[size_t(i0 + k)] = double(row[k][targets[n0 + i0 + k]]);
                        }
                        simd::exp_sum_rows(row, V, mx, count, sum);
                        for (int k = 0; k < count; ++k) {
                            row_max[size_t(i0 + k)] = double(mx[k]);
                            row_sum[size_t(i0 + k)] = sum[k];
                            if (dh) {
                                simd::scale(row[k], V, float(grad_scale / sum[k]));
                                row[k][targets[n0 + i0 + k]] -= float(gs);
                            }
                        }
                    });
                });
            } else {
            parallel_for_grain(nt, 1, [&](int64_t r0, int64_t r1) {
                for (int64_t i = r0; i < r1; ++i) {
                    T* row = logits + i * V;
                    const int64_t tg = targets[n0 + i];
                    T mx = row[0];
                    for (int64_t j = 1; j < V; ++j) mx = std::max(mx, row[j]);
                    target_logit[size_t(i)] = double(row[tg]);
                    double s = 0.0;
                    for (int64_t j = 0; j < V; ++j) {
                        row[j] = std::exp(row[j] - mx);
                        s += double(row[j]);
                    }
                    row_max[size_t(i)] = double(mx);
                    row_sum[size_t(i)] = s;
                    if (dh) {
                        const T k = T(grad_scale / s);  // softmax * grad_scale
                        for (int64_t j = 0; j < V; ++j) row[j] *= k;
                        row[tg] -= gs;
                    }
                }
            });
            }
            for (int64_t i = 0; i < nt; ++i)
                total += row_max[size_t(i)] + std::log(row_sum[size_t(i)]) - target_logit[size_t(i)];
            if (dh) gemm(false, false, nt, C, V, T(1), logits, V, emb, C, T(0), dh + n0 * C, C);
            continue;
        }
        // pass 1: online max / sum-exp per token over the vocabulary chunks
        for (int64_t v0 = 0; v0 < V; v0 += vocab_chunk) {
            const int64_t vc = std::min(vocab_chunk, V - v0);
            gemm(false, true, nt, vc, C, T(1), hc, C, emb + v0 * C, C, T(0), logits, vc);
            parallel_for_grain(nt, 1, [&](int64_t r0, int64_t r1) {
                for (int64_t i = r0; i < r1; ++i) {
                    const T* row = logits + i * vc;
                    T mx = row[0];
                    for (int64_t j = 1; j < vc; ++j) mx = std::max(mx, row[j]);
                    double chunk = 0.0;
                    for (int64_t j = 0; j < vc; ++j) chunk += double(std::exp(row[j] - mx));
                    // merge with the running (max, sum): both maxima are T values, so exact
                    const double m_new = std::max(row_max[size_t(i)], double(mx));
                    row_sum[size_t(i)] = row_sum[size_t(i)] * std::exp(row_max[size_t(i)] - m_new) +
                                         chunk * std::exp(double(mx) - m_new);
                    row_max[size_t(i)] = m_new;
                    const int64_t tg = targets[n0 + i];
                    if (tg >= v0 && tg < v0 + vc) target_logit[size_t(i)] = double(row[tg - v0]);
                }
            });
        }
        for (int64_t i = 0; i < nt; ++i) {
            row_lse[size_t(i)] = row_max[size_t(i)] + std::log(row_sum[size_t(i)]);
            total += row_lse[size_t(i)] - target_logit[size_t(i)];  // token order: a fixed summation order
        }
        if (!dh) continue;
        // pass 2: recompute each logits chunk; dlogits = grad_scale * (softmax - onehot); dh += dlogits @ emb
        for (int64_t v0 = 0; v0 < V; v0 += vocab_chunk) {
            const int64_t vc = std::min(vocab_chunk, V - v0);
            gemm(false, true, nt, vc, C, T(1), hc, C, emb + v0 * C, C, T(0), logits, vc);
            parallel_for_grain(nt, 1, [&](int64_t r0, int64_t r1) {
                for (int64_t i = r0; i < r1; ++i) {
                    T* row = logits + i * vc;
                    const T lse = T(row_lse[size_t(i)]);
                    for (int64_t j = 0; j < vc; ++j) row[j] = std::exp(row[j] - lse) * gs;
                    const int64_t tg = targets[n0 + i];
                    if (tg >= v0 && tg < v0 + vc) row[tg - v0] -= gs;
                }
            });
            gemm(false, false, nt, C, vc, T(1), logits, vc, emb + v0 * C, C, v0 == 0 ? T(0) : T(1),
                 dh + n0 * C, C);
        }
    }
    return total;
}

// ----------------------------------------------------------------------------------------------
// explicit instantiations

#define TANDEM_OPS_INSTANTIATE(T)                                                                                  \
    template void linear_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, T);                         \
    template void linear_backward_input<T>(T*, const T*, const T*, int64_t, int64_t, int64_t, T);                  \
    template void linear_backward_weight<T>(T*, const T*, const T*, int64_t, int64_t, int64_t);                    \
    template void embedding_forward<T>(T*, const int32_t*, const T*, int64_t, int64_t, int64_t);                   \
    template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double);                        \
    template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t, bool);     \
    template void rope_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,            \
                                  RopePairing);                                                                    \
    template void rope_backward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,           \
                                   RopePairing);                                                                   \
    template void attention_forward<T>(T*, T*, const T*, const T*, const T*, const int32_t*, int64_t, int64_t,     \
                                       int64_t, int64_t, int64_t, KvHeadMapping);                                  \
    template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,              \
                                        const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t,               \
                                        KvHeadMapping);                                                            \
    template void swiglu_forward<T>(T*, const T*, const T*, int64_t);                                              \
    template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, int64_t);                               \
    template void lora_linear_forward<T>(T*, T*, const T*, const T*, const T*, const T*, const uint8_t*, T, T,     \
                                         int64_t, int64_t, int64_t, int64_t);                                      \
    template void lora_linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,  \
                                          const uint8_t*, T, T, int64_t, int64_t, int64_t, int64_t, bool,          \
                                          LoraBGrad);                                                              \
    template double lm_head_cross_entropy<T>(T*, const T*, const T*, const int32_t*, int64_t, int64_t, int64_t,    \
                                             double, int64_t, int64_t);

TANDEM_OPS_INSTANTIATE(float)
TANDEM_OPS_INSTANTIATE(double)

}  // namespace tandem::engine::ops
