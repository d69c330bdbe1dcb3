// Causal GQA attention's kernels: 64-row register-tiled blocks, float32 FFMA (no TF32, no atomics).
// The kernels live in this header so that tests/gpu/test_attention_emulated.cpp can run the very
// same source on the host (TANDEM_KERNEL_EMULATION: threads become fibers, cp.async becomes a
// deferred copy), which checks the index arithmetic, the masks and the barrier placement without a
// GPU. attention.cu launches them (and computes the backward's delta = rowsum(dout * out)).
//
// Mask (the CPU op's): query i of sequence b attends to key j iff j <= i and j < lengths[b]. Key 0
// is always visible (lengths >= 1), so every query row, padded or not, has a finite row maximum.
//
// Common shape of the three kernels: groups of 128 threads = 4 warps (forward and dq blocks are one
// group, dk/dv blocks two: see dkv_kernel); a group works on a tile of 64 "rows" (queries in the
// forward and dq, keys in dk/dv), 16 per warp; its lanes are lane = rg * 8 + cg, and
// a thread owns rows warp * 16 + rg + 4 r (r < 4) and columns cg + 8 m (m < BK / 8) of every
// 64 x BK score tile (BK = 64 keys in the forward, 32 keys in dq, 32 queries in dk/dv).
//   - scores: s[r][m] = A[row r] . B[column m] over D from two shared-memory tiles; per 4 dims a
//     thread reads 4 + BK/8 float4 values for 4 * BK/2 FMAs;
//   - row statistics: reductions over the 8 lanes of one rg (xor shuffles 1, 2, 4: a fixed tree);
//   - staging: the thread writes its score-derived values to a warp-private [BK][16] buffer, so the
//     second product (P V, dS K, P^T dO, dS^T Q) needs only __syncwarp, no block barrier;
//   - accumulation: the thread owns 4 rows x D/8 columns of the output tile (float4 chunks
//     cg + 8 c of each row), summing over the BK staged columns in ascending order.
// Shared-memory tiles hold D floats per row with the 16-byte chunk index XOR-swizzled by row & 7:
// the row-wise (cp.async) writes and the column-strided float4 reads are both free of bank
// conflicts, and no padding is needed (the forward uses 112 KB, dq 104 KB: two blocks per H100/H200
// SM; dk/dv 160 KB: one 8-warp block).
// Loads: cp.async (16 bytes, .cg: through L2 only) with zero fill for rows past the sequence end.
// Each kernel streams two tiles through one buffer each, staggered so that one loads while the
// other is in use (forward: V(t) loads during Q K(t)^T, K(t+1) during P V(t)); each block barrier of
// a step both publishes the tile just waited for and frees the buffer about to be refilled.
// Determinism: every sum has one fixed order (no atomics, no reductions across blocks).
#pragma once

#include <cmath>
#include <cstdint>

#ifndef TANDEM_KERNEL_EMULATION  // else the includer has defined the primitives (tests/gpu/kernel_emulation.h)
#include <cuda_runtime.h>
#endif

namespace tandem::kernels::attention {

#ifndef TANDEM_KERNEL_EMULATION
// ---------------------------------------------------------------------------------------------
// device primitives (the emulation header defines the same names for the host)

__device__ __forceinline__ int thread_index() { return int(threadIdx.x); }
__device__ __forceinline__ int block_x() { return int(blockIdx.x); }
__device__ __forceinline__ int block_y() { return int(blockIdx.y); }
__device__ __forceinline__ void block_sync() { __syncthreads(); }
__device__ __forceinline__ void warp_sync() { __syncwarp(); }
__device__ __forceinline__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ float madd(float a, float b, float c) { return fmaf(a, b, c); }

// 16 bytes global -> shared, asynchronous; fill == false writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, bool fill) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int src_bytes = fill ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}
#define TANDEM_ATTN_GLOBAL __global__
#define TANDEM_ATTN_DEVICE __device__ __forceinline__
#define TANDEM_ATTN_BOUNDS(threads, blocks_per_sm) __launch_bounds__(threads, blocks_per_sm)
#define TANDEM_ATTN_SMEM(name) extern __shared__ __align__(16) float name[]
#endif

constexpr int kThreads = 128;     // forward and dq: 4 warps
constexpr int kDkvThreads = 256;  // dk/dv: two groups of 4 warps
constexpr int kRows = 64;         // rows of the block's tile, 16 per warp
constexpr int kFwdKeys = 64;      // forward: keys per tile
constexpr int kDqKeys = 32;       // dq: keys per tile
constexpr int kDkvQueries = 32;   // dk/dv: queries per tile
constexpr int kStage = 16;        // floats per staged column (the warp's 16 rows)

// Shared-memory floats of each kernel (dynamic shared memory; the launcher opts in above 48 KB).
template <int D>
constexpr int forward_smem_floats() { return (kRows + 2 * kFwdKeys) * D + 4 * kFwdKeys * kStage; }
template <int D>
constexpr int dq_smem_floats() { return (2 * kRows + 2 * kDqKeys) * D + 4 * kDqKeys * kStage; }
template <int D>
constexpr int dkv_smem_floats() { return (2 * kRows + 4 * kDkvQueries) * D + 2 * 8 * kDkvQueries * kStage; }

// Query rows per block (heads x positions = 64): the block takes `heads` query heads of one kv group
// (they read the same K/V tiles) and 64 / heads positions. heads = the largest power of two <= 8
// dividing the group size H / KV.
inline int heads_per_block(int group) {
    int hb = 1;
    while (hb < 8 && group % (2 * hb) == 0) hb *= 2;
    return hb;
}

// Launch geometry (the launcher and the emulated test use the same): grid.x, grid.y of the query
// kernels (forward, dq: blockIdx.x = (b, kv group, head block), blockIdx.y = position block) and of
// the key kernel (dk/dv: blockIdx.x = (b, kv head), blockIdx.y = 64-key block).
struct Grid {
    int64_t x, y;
    int heads;  // query heads per block (query kernels)
};
inline Grid query_grid(int64_t B, int64_t T, int64_t H, int64_t KV) {
    const int heads = heads_per_block(int(H / KV));
    const int64_t per_head = kRows / heads;
    return {B * H / heads, (T + per_head - 1) / per_head, heads};
}
inline Grid key_grid(int64_t B, int64_t T, int64_t KV) { return {B * KV, (T + kRows - 1) / kRows, 0}; }

// Float offset of (row, 16-byte chunk) in a swizzled tile of D floats per row.
template <int D>
TANDEM_ATTN_DEVICE int swz(int row, int chunk) {
    return row * D + ((chunk ^ (row & 7)) << 2);
}

// Copies `rows` rows of D floats into a swizzled tile, issued by `threads` threads of which the caller
// is number `me`. Tile row r = hh * per_head + p reads position first + p of head hh:
// src + hh * head_stride + (first + p) * pos_stride; positions >= limit are zero-filled (nothing is
// read for them).
template <int D>
TANDEM_ATTN_DEVICE void load_rows(float* tile, const float* src, int rows, int per_head, int first, int limit,
                                  int64_t head_stride, int64_t pos_stride, int me, int threads) {
    constexpr int chunks = D / 4;
    for (int idx = me; idx < rows * chunks; idx += threads) {
        const int r = idx / chunks, c = idx % chunks;
        const int hh = r / per_head, pos = first + (r - hh * per_head);
        const bool in = pos < limit;
        const float* g = src + hh * head_stride + int64_t(in ? pos : 0) * pos_stride + c * 4;
        cp_async16(tile + swz<D>(r, c), g, in);
    }
}

// s[r][m] = sum_d A[a0 + rg + 4r][d] * B[cg + 8m][d], d ascending (A, B swizzled tiles).
template <int D, int TK>
TANDEM_ATTN_DEVICE void score_tile(float (&s)[4][TK], const float* A, int a0, const float* B, int rg, int cg) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int m = 0; m < TK; ++m) s[r][m] = 0.0f;
    // rows a0 + rg + 4r with a0 % 8 == 0: row & 7 = rg ^ (4 * (r & 1)); columns cg + 8m: & 7 = cg
    const float* arow[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) arow[r] = A + (a0 + rg + 4 * r) * D;
    const float* bcol = B + cg * D;
#pragma unroll 4
    for (int c = 0; c < D / 4; ++c) {
        const int oa = (c ^ rg) << 2, ob = (c ^ cg) << 2;
        float4 a[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = *reinterpret_cast<const float4*>(arow[r] + ((r & 1) ? (oa ^ 16) : oa));
#pragma unroll
        for (int m = 0; m < TK; ++m) {
            const float4 bv = *reinterpret_cast<const float4*>(bcol + 8 * m * D + ob);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                s[r][m] = madd(a[r].x, bv.x, s[r][m]);
                s[r][m] = madd(a[r].y, bv.y, s[r][m]);
                s[r][m] = madd(a[r].z, bv.z, s[r][m]);
                s[r][m] = madd(a[r].w, bv.w, s[r][m]);
            }
        }
    }
}

// The warp-private staging buffer st[BK][16]: st[col * 16 + rg * 4 + r] = x[r][m], col = cg + 8m.
template <int TK>
TANDEM_ATTN_DEVICE void stage(float* st, const float (&x)[4][TK], int rg, int cg) {
#pragma unroll
    for (int m = 0; m < TK; ++m)
        *reinterpret_cast<float4*>(st + (cg + 8 * m) * kStage + rg * 4) = make_float4(x[0][m], x[1][m], x[2][m], x[3][m]);
}

// acc[r][c] += sum_{j < BK} st[j][rg * 4 + r] * B[j][chunk cg + 8c], j ascending (B swizzled).
template <int D, int BK>
TANDEM_ATTN_DEVICE void accumulate(float4 (&acc)[4][D / 32], const float* st, const float* B, int rg, int cg) {
#pragma unroll 8
    for (int j = 0; j < BK; ++j) {
        const float4 p = *reinterpret_cast<const float4*>(st + j * kStage + rg * 4);
        const float pr[4] = {p.x, p.y, p.z, p.w};
        const float* brow = B + j * D + ((cg ^ (j & 7)) << 2);  // chunk (cg + 8c) ^ (j & 7) = (cg ^ (j & 7)) + 8c
#pragma unroll
        for (int c = 0; c < D / 32; ++c) {
            const float4 bv = *reinterpret_cast<const float4*>(brow + 32 * c);
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                acc[r][c].x = madd(pr[r], bv.x, acc[r][c].x);
                acc[r][c].y = madd(pr[r], bv.y, acc[r][c].y);
                acc[r][c].z = madd(pr[r], bv.z, acc[r][c].z);
                acc[r][c].w = madd(pr[r], bv.w, acc[r][c].w);
            }
        }
    }
}

template <int D>
TANDEM_ATTN_DEVICE void zero(float4 (&acc)[4][D / 32]) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < D / 32; ++c) acc[r][c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// Sum over the 8 lanes of a row group; the xor tree gives every lane the same bits.
TANDEM_ATTN_DEVICE float row_sum(float v) {
    v += shfl_xor(v, 1);
    v += shfl_xor(v, 2);
    v += shfl_xor(v, 4);
    return v;
}
TANDEM_ATTN_DEVICE float row_max(float v) {
    v = fmaxf(v, shfl_xor(v, 1));
    v = fmaxf(v, shfl_xor(v, 2));
    v = fmaxf(v, shfl_xor(v, 4));
    return v;
}

// Where a query block sits, and this thread's four rows in it: blockIdx.x = (b, kv group, head block),
// blockIdx.y = query block counted from the end (the blocks with the most keys start first). Row r of
// the tile is head h0 + r / per_head, position i0 + r % per_head.
struct QueryBlock {
    int b, g, h0, per_head, i0, len;
    int64_t q_at, kv_at;  // float offsets of (b, position 0, head h0) in q and of (b, 0, g) in k, v
    int head[4], pos[4];  // this thread's rows warp * 16 + rg + 4r
    int last_key;         // the last key any row of the block sees
};
template <int D>
TANDEM_ATTN_DEVICE QueryBlock query_block(const int32_t* lengths, int T, int H, int KV, int heads, int warp, int rg) {
    QueryBlock qb;
    qb.per_head = kRows / heads;
    const int blocks_per_group = (H / KV) / heads, x = block_x();
    qb.b = x / (KV * blocks_per_group);
    const int rest = x % (KV * blocks_per_group);
    qb.g = rest / blocks_per_group;
    qb.h0 = qb.g * (H / KV) + (rest % blocks_per_group) * heads;
    const int n_pos_blocks = (T + qb.per_head - 1) / qb.per_head;
    qb.i0 = (n_pos_blocks - 1 - block_y()) * qb.per_head;
    qb.len = lengths[qb.b];
    qb.q_at = int64_t(qb.b) * T * H * D + int64_t(qb.h0) * D;
    qb.kv_at = int64_t(qb.b) * T * KV * D + int64_t(qb.g) * D;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int row = warp * 16 + rg + 4 * r;
        qb.head[r] = qb.h0 + row / qb.per_head;
        qb.pos[r] = qb.i0 + row % qb.per_head;
    }
    const int last_pos = (qb.i0 + qb.per_head < T ? qb.i0 + qb.per_head : T) - 1;
    qb.last_key = last_pos < qb.len - 1 ? last_pos : qb.len - 1;
    return qb;
}

// ---------------------------------------------------------------------------------------------
// kernels

// out[B,T,H,D], lse[B,H,T] = m + log(l) of the scaled scores (natural log), online softmax.
template <int D>
TANDEM_ATTN_GLOBAL void TANDEM_ATTN_BOUNDS(kThreads, 2) forward_kernel(
    float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ q, const float* __restrict__ k,
    const float* __restrict__ v, const int32_t* __restrict__ lengths, int T, int H, int KV, int heads, float scale) {
    constexpr int BK = kFwdKeys, TK = BK / 8, DC = D / 32;
    TANDEM_ATTN_SMEM(smem);
    float* sq = smem;                  // [64][D]
    float* sk = sq + kRows * D;        // [BK][D]
    float* sv = sk + BK * D;           // [BK][D]
    const int tid = thread_index(), warp = tid >> 5, lane = tid & 31, rg = lane >> 3, cg = lane & 7;
    float* sp = sv + BK * D + warp * BK * kStage;  // this warp's [BK][16]

    const QueryBlock qb = query_block<D>(lengths, T, H, KV, heads, warp, rg);
    const int len = qb.len;
    const int64_t q_pos = int64_t(H) * D, kv_pos = int64_t(KV) * D;
    const float *qbase = q + qb.q_at, *kbase = k + qb.kv_at, *vbase = v + qb.kv_at;
    const int tiles = qb.last_key / BK + 1;

    load_rows<D>(sq, qbase, kRows, qb.per_head, qb.i0, T, D, q_pos, tid, kThreads);
    load_rows<D>(sk, kbase, BK, BK, 0, T, 0, kv_pos, tid, kThreads);
    cp_async_commit();

    float m[4], l[4];
    float4 acc[4][DC];
    zero<D>(acc);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }

    for (int t = 0; t < tiles; ++t) {
        const int j0 = t * BK;
        cp_async_wait<0>();
        block_sync();  // K(t) (and Q) visible; every warp is done with V(t-1) and its staging buffer
        load_rows<D>(sv, vbase, BK, BK, j0, T, 0, kv_pos, tid, kThreads);
        cp_async_commit();

        float s[4][TK];
        score_tile<D, TK>(s, sq, warp * 16, sk, rg, cg);
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int mm = 0; mm < TK; ++mm) {
                const int j = j0 + cg + 8 * mm;
                const bool valid = j <= qb.pos[r] && j < len;
                s[r][mm] = valid ? s[r][mm] * scale : -INFINITY;
                mx = fmaxf(mx, s[r][mm]);
            }
            const float m_new = fmaxf(m[r], row_max(mx));
            // a row with no visible key yet keeps l = 0 and acc = 0: subtract 0, not -inf (NaN)
            const float ref = m_new == -INFINITY ? 0.0f : m_new;
            const float corr = expf(m[r] - ref);
            float psum = 0.0f;
#pragma unroll
            for (int mm = 0; mm < TK; ++mm) {
                s[r][mm] = s[r][mm] == -INFINITY ? 0.0f : expf(s[r][mm] - ref);
                psum += s[r][mm];
            }
            l[r] = l[r] * corr + psum;  // this lane's share of the row sum; reduced once at the end
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < DC; ++c) {
                acc[r][c].x *= corr;
                acc[r][c].y *= corr;
                acc[r][c].z *= corr;
                acc[r][c].w *= corr;
            }
        }
        stage<TK>(sp, s, rg, cg);
        warp_sync();

        cp_async_wait<0>();
        block_sync();  // V(t) visible; every warp is done with K(t)
        if (t + 1 < tiles) load_rows<D>(sk, kbase, BK, BK, j0 + BK, T, 0, kv_pos, tid, kThreads);
        cp_async_commit();
        accumulate<D, BK>(acc, sp, sv, rg, cg);
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const float lt = row_sum(l[r]);
        if (qb.pos[r] >= T) continue;
        const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        float* o = out + (int64_t(qb.b) * T + qb.pos[r]) * q_pos + int64_t(qb.head[r]) * D;
#pragma unroll
        for (int c = 0; c < DC; ++c)
            *reinterpret_cast<float4*>(o + (cg + 8 * c) * 4) =
                make_float4(acc[r][c].x * inv, acc[r][c].y * inv, acc[r][c].z * inv, acc[r][c].w * inv);
        if (cg == 0) lse[(int64_t(qb.b) * H + qb.head[r]) * T + qb.pos[r]] = m[r] + logf(lt);
    }
}

// dq[B,T,H,D] (=): dq_i = sum_j ds_ij k_j, ds = p (dp - delta) scale, p recomputed from lse.
template <int D>
TANDEM_ATTN_GLOBAL void TANDEM_ATTN_BOUNDS(kThreads, 2) dq_kernel(
    float* __restrict__ dq, const float* __restrict__ dout, const float* __restrict__ q, const float* __restrict__ k,
    const float* __restrict__ v, const float* __restrict__ lse, const float* __restrict__ delta,
    const int32_t* __restrict__ lengths, int T, int H, int KV, int heads, float scale) {
    constexpr int BK = kDqKeys, TK = BK / 8, DC = D / 32;
    TANDEM_ATTN_SMEM(smem);
    float* sq = smem;              // [64][D]
    float* so = sq + kRows * D;    // dout [64][D]
    float* sk = so + kRows * D;    // [BK][D]
    float* sv = sk + BK * D;       // [BK][D]
    const int tid = thread_index(), warp = tid >> 5, lane = tid & 31, rg = lane >> 3, cg = lane & 7;
    float* sds = sv + BK * D + warp * BK * kStage;

    const QueryBlock qb = query_block<D>(lengths, T, H, KV, heads, warp, rg);
    const int len = qb.len;
    const int64_t q_pos = int64_t(H) * D, kv_pos = int64_t(KV) * D;
    const float *qbase = q + qb.q_at, *obase = dout + qb.q_at, *kbase = k + qb.kv_at, *vbase = v + qb.kv_at;
    const int tiles = qb.last_key / BK + 1;
    float row_lse[4], row_delta[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int64_t at = (int64_t(qb.b) * H + qb.head[r]) * T + qb.pos[r];
        row_lse[r] = qb.pos[r] < T ? lse[at] : 0.0f;
        row_delta[r] = qb.pos[r] < T ? delta[at] : 0.0f;
    }

    load_rows<D>(sq, qbase, kRows, qb.per_head, qb.i0, T, D, q_pos, tid, kThreads);
    load_rows<D>(so, obase, kRows, qb.per_head, qb.i0, T, D, q_pos, tid, kThreads);
    load_rows<D>(sv, vbase, BK, BK, 0, T, 0, kv_pos, tid, kThreads);
    cp_async_commit();

    float4 acc[4][DC];
    zero<D>(acc);
    for (int t = 0; t < tiles; ++t) {
        const int j0 = t * BK;
        cp_async_wait<0>();
        block_sync();  // V(t) (and Q, dout) visible; every warp is done with K(t-1)
        load_rows<D>(sk, kbase, BK, BK, j0, T, 0, kv_pos, tid, kThreads);
        cp_async_commit();

        float dp[4][TK];
        score_tile<D, TK>(dp, so, warp * 16, sv, rg, cg);

        cp_async_wait<0>();
        block_sync();  // K(t) visible; every warp is done with V(t)
        if (t + 1 < tiles) load_rows<D>(sv, vbase, BK, BK, j0 + BK, T, 0, kv_pos, tid, kThreads);
        cp_async_commit();

        float s[4][TK];
        score_tile<D, TK>(s, sq, warp * 16, sk, rg, cg);
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int mm = 0; mm < TK; ++mm) {
                const int j = j0 + cg + 8 * mm;
                const bool valid = qb.pos[r] < T && j <= qb.pos[r] && j < len;
                const float p = valid ? expf(s[r][mm] * scale - row_lse[r]) : 0.0f;
                s[r][mm] = p * (dp[r][mm] - row_delta[r]) * scale;
            }
        stage<TK>(sds, s, rg, cg);
        warp_sync();
        accumulate<D, BK>(acc, sds, sk, rg, cg);
    }
    cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 4; ++r) {
        if (qb.pos[r] >= T) continue;
        float* o = dq + (int64_t(qb.b) * T + qb.pos[r]) * q_pos + int64_t(qb.head[r]) * D;
#pragma unroll
        for (int c = 0; c < DC; ++c) *reinterpret_cast<float4*>(o + (cg + 8 * c) * 4) = acc[r][c];
    }
}

// dk, dv[B,T,KV,D] (=): blockIdx.x = (b, kv head g), blockIdx.y = 64-key block. The block walks the
// group's query heads in order and, for each, the 32-query tiles from its first key on (steps s):
// dv_j = sum_i p_ij dout_i, dk_j = sum_i ds_ij q_i. Two groups of 4 warps take the even and the odd
// steps (each with its own q/dout buffers, both on the block's K, V tiles), which halves the longest
// block's path (the first key block sees every query); at the end the odd group's sums are added to
// the even group's (even + odd: a fixed order).
template <int D>
TANDEM_ATTN_GLOBAL void TANDEM_ATTN_BOUNDS(kDkvThreads, 1) dkv_kernel(
    float* __restrict__ dk, float* __restrict__ dv, const float* __restrict__ dout, const float* __restrict__ q,
    const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ lse,
    const float* __restrict__ delta, const int32_t* __restrict__ lengths, int T, int H, int KV, float scale) {
    constexpr int BQ = kDkvQueries, TK = BQ / 8, DC = D / 32;
    TANDEM_ATTN_SMEM(smem);
    const int tid = thread_index(), warp = tid >> 5, lane = tid & 31, rg = lane >> 3, cg = lane & 7;
    const int group = warp >> 2, wg = warp & 3, gtid = tid & (kThreads - 1);
    float* sk = smem;                                  // [64][D]
    float* sv = sk + kRows * D;                        // [64][D]
    float* sq = sv + kRows * D + group * 2 * BQ * D;   // this group's q [BQ][D]
    float* so = sq + BQ * D;                           // this group's dout [BQ][D]
    float* sp = sv + kRows * D + 4 * BQ * D + warp * 2 * BQ * kStage;  // this warp's p [BQ][16]
    float* sds = sp + BQ * kStage;                                     // and ds [BQ][16]

    const int b = block_x() / KV, g = block_x() % KV, group_heads = H / KV;
    const int j0 = block_y() * kRows;
    const int len = lengths[b];
    const int64_t q_pos = int64_t(H) * D, kv_pos = int64_t(KV) * D;
    const float* kbase = k + int64_t(b) * T * kv_pos + int64_t(g) * D;
    const float* vbase = v + int64_t(b) * T * kv_pos + int64_t(g) * D;
    // keys >= len are visible to no query: their gradients stay zero and the block has no steps
    const int tiles_per_head = j0 < len ? (T - j0 + BQ - 1) / BQ : 0;
    const int steps = group_heads * tiles_per_head, rounds = (steps + 1) / 2;
    auto step_head = [&](int s) { return g * group_heads + s / tiles_per_head; };
    auto step_first = [&](int s) { return j0 + (s % tiles_per_head) * BQ; };
    auto load_queries = [&](float* tile, const float* src, int s) {
        if (s >= steps) return;
        load_rows<D>(tile, src + int64_t(b) * T * q_pos + int64_t(step_head(s)) * D, BQ, BQ, step_first(s), T, 0,
                     q_pos, gtid, kThreads);
    };

    int key[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) key[r] = j0 + wg * 16 + rg + 4 * r;

    // groups in flight at the top of a round: {dout(s)}, {q(s)} (oldest first), s = 2 round + group
    load_rows<D>(sk, kbase, kRows, kRows, j0, T, 0, kv_pos, tid, kDkvThreads);
    load_rows<D>(sv, vbase, kRows, kRows, j0, T, 0, kv_pos, tid, kDkvThreads);
    load_queries(so, dout, group);
    cp_async_commit();
    load_queries(sq, q, group);
    cp_async_commit();

    float4 acc_k[4][DC], acc_v[4][DC];
    zero<D>(acc_k);
    zero<D>(acc_v);
    for (int round = 0; round < rounds; ++round) {
        const int s = 2 * round + group;
        const bool active = s < steps;  // the odd group idles in the last round of an odd step count
        const int h = active ? step_head(s) : 0, i0 = active ? step_first(s) : 0;
        float col_lse[TK], col_delta[TK];
#pragma unroll
        for (int mm = 0; mm < TK; ++mm) {
            const int i = i0 + cg + 8 * mm;
            const int64_t at = (int64_t(b) * H + h) * T + i;
            col_lse[mm] = active && i < T ? lse[at] : 0.0f;
            col_delta[mm] = active && i < T ? delta[at] : 0.0f;
        }
        float dp[4][TK], sc[4][TK];
        cp_async_wait<1>();
        block_sync();  // dout(s) (and K, V) visible
        if (active) score_tile<D, TK>(dp, sv, wg * 16, so, rg, cg);

        cp_async_wait<0>();
        block_sync();  // q(s) visible
        if (active) {
            score_tile<D, TK>(sc, sk, wg * 16, sq, rg, cg);
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int mm = 0; mm < TK; ++mm) {
                    const int i = i0 + cg + 8 * mm;
                    const bool valid = i < T && key[r] <= i && key[r] < len;
                    const float p = valid ? expf(sc[r][mm] * scale - col_lse[mm]) : 0.0f;
                    sc[r][mm] = p;
                    dp[r][mm] = p * (dp[r][mm] - col_delta[mm]) * scale;
                }
            stage<TK>(sp, sc, rg, cg);
            stage<TK>(sds, dp, rg, cg);
            warp_sync();
            accumulate<D, BQ>(acc_v, sp, so, rg, cg);
        }

        block_sync();  // every warp is done with dout(s)
        load_queries(so, dout, s + 2);
        cp_async_commit();
        if (active) accumulate<D, BQ>(acc_k, sds, sq, rg, cg);

        block_sync();  // every warp is done with q(s) (and its staging buffers)
        load_queries(sq, q, s + 2);
        cp_async_commit();
    }
    cp_async_wait<0>();

    // the odd group hands its sums over through the (now idle) q/dout buffers: [64][D] dk, [64][D] dv
    float* hand_k = sv + kRows * D;
    float* hand_v = hand_k + kRows * D;
    block_sync();  // every thread's copies have landed and every q/dout read is done
    if (group == 1) {
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int c = 0; c < DC; ++c) {
                const int at = (wg * 16 + rg + 4 * r) * D + (cg + 8 * c) * 4;
                *reinterpret_cast<float4*>(hand_k + at) = acc_k[r][c];
                *reinterpret_cast<float4*>(hand_v + at) = acc_v[r][c];
            }
    }
    block_sync();
    if (group == 1) return;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        if (key[r] >= T) continue;
        const int64_t at = (int64_t(b) * T + key[r]) * kv_pos + int64_t(g) * D;
#pragma unroll
        for (int c = 0; c < DC; ++c) {
            const int h_at = (wg * 16 + rg + 4 * r) * D + (cg + 8 * c) * 4;
            const float4 ok = *reinterpret_cast<const float4*>(hand_k + h_at);
            const float4 ov = *reinterpret_cast<const float4*>(hand_v + h_at);
            *reinterpret_cast<float4*>(dk + at + (cg + 8 * c) * 4) =
                make_float4(acc_k[r][c].x + ok.x, acc_k[r][c].y + ok.y, acc_k[r][c].z + ok.z, acc_k[r][c].w + ok.w);
            *reinterpret_cast<float4*>(dv + at + (cg + 8 * c) * 4) =
                make_float4(acc_v[r][c].x + ov.x, acc_v[r][c].y + ov.y, acc_v[r][c].z + ov.z, acc_v[r][c].w + ov.w);
        }
    }
}

}  // namespace tandem::kernels::attention
