// Causal grouped-query attention, float32, flash-attention style: no [T,T] score or probability
// matrix is ever materialised; the forward keeps a running max / sum per query row (online softmax)
// and caches only lse = m + log(l) per row; the backward recomputes probabilities tile by tile.
//
// Mask (the CPU op's): query i of sequence b attends to key j iff j <= i and j < lengths[b].
// Key 0 is always allowed, so every row's running max is finite after the first key tile.
//
// Two kernel versions per direction, chosen process-wide by set_attention_{forward,backward}_version
// until a device run has measured both (docs/engine-cuda.md): version 2 (this file, the default) and
// version 3 (attention_v3.cuh / attention_v3.cu, 64-row register tiles and cp.async). Both share the
// delta kernel below and the caller-visible contract of ops.h. FFMA on CUDA cores only: TF32 is
// forbidden, and Hopper has no float32 tensor-core path.
//
// Version 2:
//   forward   grid (query tiles of 16, B*H), 4 warps; a warp owns 4 query rows and scores them
//             together against a 32-key tile (K transposed in shared memory, stride 33), so each K
//             value feeds 4 FMAs; the warp reduces max/sum once per tile; lanes own D/32 output
//             columns and P.V reuses each V value for the 4 rows.
//   backward  delta[b,h,i] = dot(dout_i, out_i) (double); dq: grid (query tiles of 8, B*H), the
//             forward's loop with ds = p * (dp - delta); dk/dv: grid (key tiles of 8, B*KV), a warp
//             owns 2 key rows and loops over all query heads of its group and all query tiles at or
//             after the key (lane l = query l). No atomics: deterministic.
// Shared memory stays under the 48 KB static limit for D <= 128 (Qwen3: D = 128).
#include <cmath>
#include <string>
#include <vector>

#include "tandem/error.h"
#include "tandem/kernels/ops.h"
#include "attention_v3.h"
#include "common.cuh"

namespace tandem::kernels {

namespace {

// ---------------------------------------------------------------------------------------------
// kernels

constexpr int kWarps = 4;
constexpr int kKeyTile = 32;          // keys per tile = lanes
constexpr int kFwdRows = 16;          // query rows per forward block
constexpr int kBwdRows = 8;           // query rows (dq) / key rows (dk, dv) per backward block

// Forward, version 2: a warp scores its 4 query rows together so each K value read from shared
// memory serves 4 FMAs, queries are read as float4 broadcasts, and K is kept transposed (skT[d][key],
// stride 33: conflict-free both for the transposing store and for the lane-per-key loads). P.V
// likewise reuses each V value for the 4 rows.
template <int D>
__global__ void __launch_bounds__(kWarps * 32)
attention_forward_v2_kernel(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ q,
                            const float* __restrict__ k, const float* __restrict__ v,
                            const int32_t* __restrict__ lengths, int T, int H, int KV, float scale) {
    constexpr int DPL = D / 32;
    constexpr int RPW = kFwdRows / kWarps;
    __shared__ __align__(16) float sq[kFwdRows][D];
    __shared__ float skT[D][kKeyTile + 1];
    __shared__ float sv[kKeyTile][D];

    const int bh = blockIdx.y, b = bh / H, h = bh % H, g = h / (H / KV);
    const int i0 = blockIdx.x * kFwdRows;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int len = lengths[b];
    const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(KV) * D;
    const float* qb = q + int64_t(b) * T * q_stride + int64_t(h) * D;
    const float* kb = k + int64_t(b) * T * kv_stride + int64_t(g) * D;
    const float* vb = v + int64_t(b) * T * kv_stride + int64_t(g) * D;

    for (int idx = threadIdx.x; idx < kFwdRows * D; idx += blockDim.x) {
        const int r = idx / D, d = idx % D, i = i0 + r;
        sq[r][d] = i < T ? qb[int64_t(i) * q_stride + d] : 0.0f;
    }

    float acc[RPW][DPL];
    float m[RPW], l[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < DPL; ++c) acc[r][c] = 0.0f;
    }

    const int last_row = min(i0 + kFwdRows, T) - 1;
    const int last_key = min(last_row, len - 1);
    for (int j0 = 0; j0 <= last_key; j0 += kKeyTile) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < kKeyTile * D; idx += blockDim.x) {
            const int r = idx / D, d = idx % D, j = j0 + r;
            const bool in = j < T;
            skT[d][r] = in ? kb[int64_t(j) * kv_stride + d] : 0.0f;
            sv[r][d] = in ? vb[int64_t(j) * kv_stride + d] : 0.0f;
        }
        __syncthreads();
        // scores of the warp's RPW rows against key j0 + lane
        float s[RPW];
#pragma unroll
        for (int r = 0; r < RPW; ++r) s[r] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < D; d += 4) {
            const float k0 = skT[d][lane], k1 = skT[d + 1][lane], k2 = skT[d + 2][lane], k3 = skT[d + 3][lane];
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
                const float4 q4 = *reinterpret_cast<const float4*>(&sq[warp * RPW + r][d]);
                s[r] += q4.x * k0 + q4.y * k1 + q4.z * k2 + q4.w * k3;
            }
        }
        const int j = j0 + lane;
        float p[RPW];
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
            const int i = i0 + warp * RPW + r;
            const bool valid = j <= i && j < len;  // rows i >= T: harmless (never written)
            const float sc = valid ? s[r] * scale : -INFINITY;
            const float m_new = fmaxf(m[r], detail::warp_max(sc));  // finite: key 0 is in tile 0
            p[r] = valid ? expf(sc - m_new) : 0.0f;
            const float corr = expf(m[r] - m_new);
            l[r] = l[r] * corr + detail::warp_sum(p[r]);
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < DPL; ++c) acc[r][c] *= corr;
        }
        for (int jj = 0; jj < kKeyTile; ++jj) {
            float pj[RPW];
#pragma unroll
            for (int r = 0; r < RPW; ++r) pj[r] = __shfl_sync(0xffffffffu, p[r], jj);
#pragma unroll
            for (int c = 0; c < DPL; ++c) {
                const float vv = sv[jj][lane + 32 * c];
#pragma unroll
                for (int r = 0; r < RPW; ++r) acc[r][c] += pj[r] * vv;
            }
        }
    }

#pragma unroll
    for (int r = 0; r < RPW; ++r) {
        const int i = i0 + warp * RPW + r;
        if (i >= T) continue;
        const float inv = 1.0f / l[r];
        float* o = out + (int64_t(b) * T + i) * q_stride + int64_t(h) * D;
#pragma unroll
        for (int c = 0; c < DPL; ++c) o[lane + 32 * c] = acc[r][c] * inv;
        if (lane == 0) lse[(int64_t(b) * H + h) * T + i] = m[r] + logf(l[r]);
    }
}

// delta[b,h,i] = sum_d dout[b,i,h,d] * out[b,i,h,d]; one warp per (b, i, h) row, double accumulation.
__global__ void attention_delta_kernel(float* __restrict__ delta, const float* __restrict__ dout,
                                       const float* __restrict__ out, int64_t rows, int T, int H, int D) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);  // (b*T + i)*H + h
    if (row >= rows) return;
    const float* a = dout + row * D;
    const float* o = out + row * D;
    double s = 0.0;
    for (int d = lane; d < D; d += 32) s += double(a[d]) * double(o[d]);
    s = detail::warp_sum(s);
    const int64_t h = row % H, bi = row / H, i = bi % T, b = bi / T;
    if (lane == 0) delta[(b * H + h) * T + i] = static_cast<float>(s);
}

// Backward, version 2: dq and dk/dv with the forward's tiling. K and V (dq) or Q and dO (dk/dv) are
// stored transposed with stride 33, which serves both the lane-per-key (lane-per-query) scoring
// loads and the lane-per-column accumulation loads without bank conflicts; each shared value feeds
// one FMA per row of the warp.
template <int D>
__global__ void __launch_bounds__(kWarps * 32)
attention_backward_dq_v2_kernel(float* __restrict__ dq, const float* __restrict__ dout, const float* __restrict__ q,
                                const float* __restrict__ k, const float* __restrict__ v,
                                const float* __restrict__ lse, const float* __restrict__ delta,
                                const int32_t* __restrict__ lengths, int T, int H, int KV, float scale) {
    constexpr int DPL = D / 32;
    constexpr int RPW = kBwdRows / kWarps;
    __shared__ __align__(16) float sq[kBwdRows][D];
    __shared__ __align__(16) float sdo[kBwdRows][D];
    __shared__ float skT[D][kKeyTile + 1];
    __shared__ float svT[D][kKeyTile + 1];

    const int bh = blockIdx.y, b = bh / H, h = bh % H, g = h / (H / KV);
    const int i0 = blockIdx.x * kBwdRows;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int len = lengths[b];
    const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(KV) * D;
    const float* qb = q + int64_t(b) * T * q_stride + int64_t(h) * D;
    const float* dob = dout + int64_t(b) * T * q_stride + int64_t(h) * D;
    const float* kb = k + int64_t(b) * T * kv_stride + int64_t(g) * D;
    const float* vb = v + int64_t(b) * T * kv_stride + int64_t(g) * D;
    const float* lse_b = lse + (int64_t(b) * H + h) * T;
    const float* delta_b = delta + (int64_t(b) * H + h) * T;

    for (int idx = threadIdx.x; idx < kBwdRows * D; idx += blockDim.x) {
        const int r = idx / D, d = idx % D, i = i0 + r;
        sq[r][d] = i < T ? qb[int64_t(i) * q_stride + d] : 0.0f;
        sdo[r][d] = i < T ? dob[int64_t(i) * q_stride + d] : 0.0f;
    }
    float acc[RPW][DPL];
    float row_lse[RPW], row_delta[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
        const int i = i0 + warp * RPW + r;
        row_lse[r] = i < T ? lse_b[i] : 0.0f;
        row_delta[r] = i < T ? delta_b[i] : 0.0f;
#pragma unroll
        for (int c = 0; c < DPL; ++c) acc[r][c] = 0.0f;
    }

    const int last_row = min(i0 + kBwdRows, T) - 1;
    const int last_key = min(last_row, len - 1);
    for (int j0 = 0; j0 <= last_key; j0 += kKeyTile) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < kKeyTile * D; idx += blockDim.x) {
            const int r = idx / D, d = idx % D, j = j0 + r;
            const bool in = j < T;
            skT[d][r] = in ? kb[int64_t(j) * kv_stride + d] : 0.0f;
            svT[d][r] = in ? vb[int64_t(j) * kv_stride + d] : 0.0f;
        }
        __syncthreads();
        float s[RPW], dp[RPW];
#pragma unroll
        for (int r = 0; r < RPW; ++r) s[r] = dp[r] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < D; d += 4) {
            const float k0 = skT[d][lane], k1 = skT[d + 1][lane], k2 = skT[d + 2][lane], k3 = skT[d + 3][lane];
            const float v0 = svT[d][lane], v1 = svT[d + 1][lane], v2 = svT[d + 2][lane], v3 = svT[d + 3][lane];
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
                const float4 q4 = *reinterpret_cast<const float4*>(&sq[warp * RPW + r][d]);
                const float4 o4 = *reinterpret_cast<const float4*>(&sdo[warp * RPW + r][d]);
                s[r] += q4.x * k0 + q4.y * k1 + q4.z * k2 + q4.w * k3;
                dp[r] += o4.x * v0 + o4.y * v1 + o4.z * v2 + o4.w * v3;
            }
        }
        const int j = j0 + lane;
        float ds[RPW];
#pragma unroll
        for (int r = 0; r < RPW; ++r) {
            const int i = i0 + warp * RPW + r;
            const bool valid = j <= i && j < len;
            const float p = valid ? expf(s[r] * scale - row_lse[r]) : 0.0f;
            ds[r] = p * (dp[r] - row_delta[r]) * scale;
        }
        for (int jj = 0; jj < kKeyTile; ++jj) {
            float dsj[RPW];
#pragma unroll
            for (int r = 0; r < RPW; ++r) dsj[r] = __shfl_sync(0xffffffffu, ds[r], jj);
#pragma unroll
            for (int c = 0; c < DPL; ++c) {
                const float kv = skT[lane + 32 * c][jj];
#pragma unroll
                for (int r = 0; r < RPW; ++r) acc[r][c] += dsj[r] * kv;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
        const int i = i0 + warp * RPW + r;
        if (i >= T) continue;
        float* o = dq + (int64_t(b) * T + i) * q_stride + int64_t(h) * D;
#pragma unroll
        for (int c = 0; c < DPL; ++c) o[lane + 32 * c] = acc[r][c];
    }
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32)
attention_backward_dkv_v2_kernel(float* __restrict__ dk, float* __restrict__ dv, const float* __restrict__ dout,
                                 const float* __restrict__ q, const float* __restrict__ k,
                                 const float* __restrict__ v, const float* __restrict__ lse,
                                 const float* __restrict__ delta, const int32_t* __restrict__ lengths, int T, int H,
                                 int KV, float scale) {
    constexpr int DPL = D / 32;
    constexpr int RPW = kBwdRows / kWarps;
    __shared__ __align__(16) float sk[kBwdRows][D];
    __shared__ __align__(16) float sv[kBwdRows][D];
    __shared__ float sqT[D][kKeyTile + 1];
    __shared__ float sdoT[D][kKeyTile + 1];
    __shared__ float slse[kKeyTile], sdelta[kKeyTile];

    const int bg = blockIdx.y, b = bg / KV, g = bg % KV, group = H / KV;
    const int j0 = blockIdx.x * kBwdRows;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int len = lengths[b];
    const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(KV) * D;
    const float* kb = k + int64_t(b) * T * kv_stride + int64_t(g) * D;
    const float* vb = v + int64_t(b) * T * kv_stride + int64_t(g) * D;

    for (int idx = threadIdx.x; idx < kBwdRows * D; idx += blockDim.x) {
        const int r = idx / D, d = idx % D, j = j0 + r;
        sk[r][d] = j < T ? kb[int64_t(j) * kv_stride + d] : 0.0f;
        sv[r][d] = j < T ? vb[int64_t(j) * kv_stride + d] : 0.0f;
    }
    float acc_k[RPW][DPL], acc_v[RPW][DPL];
#pragma unroll
    for (int r = 0; r < RPW; ++r)
#pragma unroll
        for (int c = 0; c < DPL; ++c) acc_k[r][c] = acc_v[r][c] = 0.0f;

    const bool any_key = j0 < len;  // keys >= len are attended by nobody: zero gradients
    for (int hh = 0; any_key && hh < group; ++hh) {
        const int h = g * group + hh;
        const float* qb = q + int64_t(b) * T * q_stride + int64_t(h) * D;
        const float* dob = dout + int64_t(b) * T * q_stride + int64_t(h) * D;
        const float* lse_b = lse + (int64_t(b) * H + h) * T;
        const float* delta_b = delta + (int64_t(b) * H + h) * T;
        for (int q0 = (j0 / kKeyTile) * kKeyTile; q0 < T; q0 += kKeyTile) {
            __syncthreads();
            for (int idx = threadIdx.x; idx < kKeyTile * D; idx += blockDim.x) {
                const int r = idx / D, d = idx % D, i = q0 + r;
                sqT[d][r] = i < T ? qb[int64_t(i) * q_stride + d] : 0.0f;
                sdoT[d][r] = i < T ? dob[int64_t(i) * q_stride + d] : 0.0f;
            }
            if (threadIdx.x < kKeyTile) {
                const int i = q0 + threadIdx.x;
                slse[threadIdx.x] = i < T ? lse_b[i] : 0.0f;
                sdelta[threadIdx.x] = i < T ? delta_b[i] : 0.0f;
            }
            __syncthreads();
            float s[RPW], dp[RPW];
#pragma unroll
            for (int r = 0; r < RPW; ++r) s[r] = dp[r] = 0.0f;
#pragma unroll 2
            for (int d = 0; d < D; d += 4) {
                const float q0v = sqT[d][lane], q1v = sqT[d + 1][lane], q2v = sqT[d + 2][lane], q3v = sqT[d + 3][lane];
                const float o0 = sdoT[d][lane], o1 = sdoT[d + 1][lane], o2 = sdoT[d + 2][lane], o3 = sdoT[d + 3][lane];
#pragma unroll
                for (int r = 0; r < RPW; ++r) {
                    const float4 k4 = *reinterpret_cast<const float4*>(&sk[warp * RPW + r][d]);
                    const float4 v4 = *reinterpret_cast<const float4*>(&sv[warp * RPW + r][d]);
                    s[r] += q0v * k4.x + q1v * k4.y + q2v * k4.z + q3v * k4.w;
                    dp[r] += o0 * v4.x + o1 * v4.y + o2 * v4.z + o3 * v4.w;
                }
            }
            const int i = q0 + lane;
            float p[RPW], ds[RPW];
#pragma unroll
            for (int r = 0; r < RPW; ++r) {
                const int j = j0 + warp * RPW + r;
                const bool valid = i < T && j <= i && j < len;
                p[r] = valid ? expf(s[r] * scale - slse[lane]) : 0.0f;
                ds[r] = p[r] * (dp[r] - sdelta[lane]) * scale;
            }
            for (int ii = 0; ii < kKeyTile; ++ii) {
                float pi[RPW], dsi[RPW];
#pragma unroll
                for (int r = 0; r < RPW; ++r) {
                    pi[r] = __shfl_sync(0xffffffffu, p[r], ii);
                    dsi[r] = __shfl_sync(0xffffffffu, ds[r], ii);
                }
#pragma unroll
                for (int c = 0; c < DPL; ++c) {
                    const float qv = sqT[lane + 32 * c][ii], ov = sdoT[lane + 32 * c][ii];
#pragma unroll
                    for (int r = 0; r < RPW; ++r) {
                        acc_v[r][c] += pi[r] * ov;
                        acc_k[r][c] += dsi[r] * qv;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
        const int j = j0 + warp * RPW + r;
        if (j >= T) continue;
        float* ok = dk + (int64_t(b) * T + j) * kv_stride + int64_t(g) * D;
        float* ov = dv + (int64_t(b) * T + j) * kv_stride + int64_t(g) * D;
#pragma unroll
        for (int c = 0; c < DPL; ++c) {
            ok[lane + 32 * c] = acc_k[r][c];
            ov[lane + 32 * c] = acc_v[r][c];
        }
    }
}

void check_shapes(int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D) {
    if (D != 32 && D != 64 && D != 128)
        throw tandem::Error("attention (CUDA): head_dim " + std::to_string(D) + " not supported (32, 64 or 128)");
    if (KV <= 0 || H % KV != 0)
        throw tandem::Error("attention (CUDA): heads " + std::to_string(H) + " not a multiple of kv heads " + std::to_string(KV));
    if (B * H > 65535 || B * KV > 65535 || T > (int64_t(1) << 30))
        throw tandem::Error("attention (CUDA): batch*heads or sequence too large for the grid");
}


int g_forward_version = 2;
int g_backward_version = 2;

void check_version(int version, const char* direction) {
    if (version != 2 && version != 3)
        throw tandem::Error(std::string("attention (CUDA): ") + direction + " kernel version " +
                            std::to_string(version) + " (2 or 3)");
}

template <int D>
void forward_v2(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* lengths,
                int64_t B, int64_t T, int64_t H, int64_t KV, cudaStream_t stream) {
    const dim3 grid(detail::ceil_div(T, kFwdRows), static_cast<unsigned>(B * H));
    const float scale = 1.0f / std::sqrt(float(D));
    attention_forward_v2_kernel<D><<<grid, kWarps * 32, 0, stream>>>(out, lse, q, k, v, lengths, int(T), int(H),
                                                                     int(KV), scale);
    CUDA_CHECK_LAUNCH();
}

template <int D>
void backward_v2(float* dq, float* dk, float* dv, const float* delta, const float* dout, const float* q,
                 const float* k, const float* v, const float* lse, const int32_t* lengths, int64_t B, int64_t T,
                 int64_t H, int64_t KV, cudaStream_t stream) {
    const float scale = 1.0f / std::sqrt(float(D));
    const dim3 grid_q(detail::ceil_div(T, kBwdRows), static_cast<unsigned>(B * H));
    const dim3 grid_kv(detail::ceil_div(T, kBwdRows), static_cast<unsigned>(B * KV));
    attention_backward_dq_v2_kernel<D><<<grid_q, kWarps * 32, 0, stream>>>(dq, dout, q, k, v, lse, delta, lengths,
                                                                           int(T), int(H), int(KV), scale);
    CUDA_CHECK_LAUNCH();
    attention_backward_dkv_v2_kernel<D><<<grid_kv, kWarps * 32, 0, stream>>>(dk, dv, dout, q, k, v, lse, delta,
                                                                             lengths, int(T), int(H), int(KV), scale);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers

void set_attention_forward_version(int version) {
    check_version(version, "forward");
    g_forward_version = version;
}
int attention_forward_version() { return g_forward_version; }

void set_attention_backward_version(int version) {
    check_version(version, "backward");
    g_backward_version = version;
}
int attention_backward_version() { return g_backward_version; }

std::vector<int> attention_kernel_versions() { return {2, 3}; }

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* lengths, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                       cudaStream_t stream) {
    if (B <= 0 || T <= 0) return;
    check_shapes(B, T, H, KV, D);
    if (g_forward_version == 3) {
        attention_v3::forward(out, lse, q, k, v, lengths, B, T, H, KV, D, stream);
        return;
    }
    switch (D) {
        case 32: forward_v2<32>(out, lse, q, k, v, lengths, B, T, H, KV, stream); break;
        case 64: forward_v2<64>(out, lse, q, k, v, lengths, B, T, H, KV, stream); break;
        default: forward_v2<128>(out, lse, q, k, v, lengths, B, T, H, KV, stream); break;
    }
}

void attention_backward(float* dq, float* dk, float* dv, float* workspace, const float* dout, const float* out,
                        const float* q, const float* k, const float* v, const float* lse, const int32_t* lengths,
                        int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D, cudaStream_t stream) {
    if (B <= 0 || T <= 0) return;
    check_shapes(B, T, H, KV, D);
    const int64_t rows = B * T * H;
    attention_delta_kernel<<<detail::ceil_div(rows, kWarps), kWarps * 32, 0, stream>>>(workspace, dout, out, rows,
                                                                                       int(T), int(H), int(D));
    CUDA_CHECK_LAUNCH();
    if (g_backward_version == 3) {
        attention_v3::backward(dq, dk, dv, workspace, dout, q, k, v, lse, lengths, B, T, H, KV, D, stream);
        return;
    }
    switch (D) {
        case 32: backward_v2<32>(dq, dk, dv, workspace, dout, q, k, v, lse, lengths, B, T, H, KV, stream); break;
        case 64: backward_v2<64>(dq, dk, dv, workspace, dout, q, k, v, lse, lengths, B, T, H, KV, stream); break;
        default: backward_v2<128>(dq, dk, dv, workspace, dout, q, k, v, lse, lengths, B, T, H, KV, stream); break;
    }
}

}  // namespace tandem::kernels
