/* The tile phases of the CUDA-core backward (kernel_cores.cuh): its geometry, the staging of rows as f32, the
 * recompute of P and dS of a tile, and the dQ step. f32 arithmetic for every dtype. */
#ifndef FW_BWD_CORES_TILE_CUH
#define FW_BWD_CORES_TILE_CUH

#include "backends/cuda/bwd/kernel_common.cuh"
#include "backends/cuda/bwd/preprocess.cuh"
#include "backends/cuda/parts/softmax.cuh"

namespace fwbwd {

constexpr int CORES_THREADS = 256;

/* Thread (ty, tx) = (tid / 16, tid % 16) owns, in every phase, a block of positions:
 *   scores:  rows ty + 16x (x < RM) × keys tx + 16y (y < RN) of the BM×BN tile
 *   dK, dV:  keys RJ·ty + x (x < RJ) × dims 4tx + 64g + e (g < C/4, e < 4) of the BN×DB accumulators
 *   dQ:      rows ty + 16x (x < RM) × the same dims, of the BM×DB accumulator
 * so each shared value read feeds several FMAs (register blocking), and the accumulation phases read
 * 16-byte vectors (4 consecutive dims of dO/Q/K; RJ consecutive keys of P/dS; 4 keys of a dS row). */
template <class Cfg> struct cores_geom {
    enum {
        DB = Cfg::D,
        BM = Cfg::BM,
        BN = Cfg::BN,
        LD = DB + 4,        /* shared row stride of Q, dO, K, V (16-byte rows, conflict-free float4 columns) */
        LDP = BN + 16,      /* shared row stride of P, dS (16-byte rows; score writes conflict-free) */
        RM = BM / 16,       /* query rows per thread */
        RN = BN / 16,       /* keys per thread in the score tile */
        RJ = BN / 16,       /* keys per thread in the dK/dV accumulators */
        C = DB / 16,        /* head dims per thread in the accumulators */
        C4 = DB / 64,       /* ... as groups of 4 consecutive dims */
        SMEM_FLOATS = 2 * BN * LD + 2 * BM * LD + 2 * BM * LDP + 2 * BM
    };
    static_assert(RM * 16 == BM && RN * 16 == BN && C * 16 == DB && C4 * 64 == DB, "tiles are multiples of 16");
    static_assert(LDP % 4 == 0 && LD % 4 == 0 && (RJ == 1 || RJ == 2 || RJ == 4), "vector alignment");
    static_assert((BM * LDP) % 4 == 0, "P/dS keep 16-byte alignment of what follows");
};

/* rows [r0, r0 + ROWS) of one (batch, head) slice of a tensor into shared f32 [ROWS][LD];
 * rows past `rows_valid` and columns past D are zero. */
template <typename T, class Cfg, int ROWS>
__device__ __forceinline__ void cores_load_rows(float *dst, const T *src, long long base, long long ss, int r0,
                                                int rows_valid, int D)
{
    constexpr int LD = cores_geom<Cfg>::LD, DB = Cfg::D;
    for (int idx = threadIdx.x; idx < ROWS * DB; idx += CORES_THREADS) {
        const int r = idx / DB, d = idx % DB;
        float x = 0.0f;
        if (r0 + r < rows_valid && d < D) x = fw_bwd_io<T>::ld(src + base + (long long)(r0 + r) * ss + d);
        dst[r * LD + d] = x;
    }
}

/* LSE and Δ of the BM query rows from i0 of (b, h) into shared memory; rows past Lq get LSE = −inf
 * (so P = 0 there) and Δ = 0. */
template <int BM>
__device__ __forceinline__ void cores_load_stats(float *lse_s, float *dl_s, const fw_bwd_args &a, int b, int h, int i0)
{
    for (int r = threadIdx.x; r < BM; r += CORES_THREADS) {
        const int i = i0 + r;
        float l = -INFINITY, dl = 0.0f;
        if (i < a.Lq) {
            const long long row = ((long long)b * a.H + h) * a.Lq + i;
            l = a.lse[row];
            dl = a.delta[row];
        }
        lse_s[r] = l;
        dl_s[r] = dl;
    }
}

/* P and dS of the tile (query rows i0.., keys j0..) from the staged Q, dO, K, V, LSE, Δ into
 * Ps, dSs [BM][LDP]. Every element of Ps/dSs is written. Q·Kᵀ and dO·Vᵀ read 16-byte vectors
 * (columns past D are zero up to the bucket, so the loop runs to D rounded up to 4). */
template <class Cfg>
__device__ __forceinline__ void cores_scores(const float *Qs, const float *dOs, const float *Ks, const float *Vs,
                                              const float *lse_s, const float *dl_s, float *Ps, float *dSs,
                                              const fw_bwd_args &a, int i0, int j0)
{
    typedef cores_geom<Cfg> G;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    float s[G::RM][G::RN], dp[G::RM][G::RN];
#pragma unroll
    for (int x = 0; x < G::RM; x++)
#pragma unroll
        for (int y = 0; y < G::RN; y++) s[x][y] = dp[x][y] = 0.0f;
    const int D4 = (a.D + 3) & ~3;
#pragma unroll 2
    for (int d = 0; d < D4; d += 4) {
        float4 qa[G::RM], oa[G::RM], kb[G::RN], vb[G::RN];
#pragma unroll
        for (int x = 0; x < G::RM; x++) {
            qa[x] = *(const float4 *)(Qs + (ty + 16 * x) * G::LD + d);
            oa[x] = *(const float4 *)(dOs + (ty + 16 * x) * G::LD + d);
        }
#pragma unroll
        for (int y = 0; y < G::RN; y++) {
            kb[y] = *(const float4 *)(Ks + (tx + 16 * y) * G::LD + d);
            vb[y] = *(const float4 *)(Vs + (tx + 16 * y) * G::LD + d);
        }
#pragma unroll
        for (int x = 0; x < G::RM; x++)
#pragma unroll
            for (int y = 0; y < G::RN; y++) {
                s[x][y] = fmaf(qa[x].x, kb[y].x, s[x][y]);
                s[x][y] = fmaf(qa[x].y, kb[y].y, s[x][y]);
                s[x][y] = fmaf(qa[x].z, kb[y].z, s[x][y]);
                s[x][y] = fmaf(qa[x].w, kb[y].w, s[x][y]);
                dp[x][y] = fmaf(oa[x].x, vb[y].x, dp[x][y]);
                dp[x][y] = fmaf(oa[x].y, vb[y].y, dp[x][y]);
                dp[x][y] = fmaf(oa[x].z, vb[y].z, dp[x][y]);
                dp[x][y] = fmaf(oa[x].w, vb[y].w, dp[x][y]);
            }
    }
#pragma unroll
    for (int x = 0; x < G::RM; x++) {
        const int r = ty + 16 * x;
        const long long i = (long long)i0 + r;
        const float L = lse_s[r], dl = dl_s[r];
#pragma unroll
        for (int y = 0; y < G::RN; y++) {
            const int c = tx + 16 * y;
            const long long j = (long long)j0 + c;
            const bool vis = i < a.Lq && j < a.Lk && j >= i + a.off - a.wl && j <= i + a.off + a.wr && L != -INFINITY;
            const float p = vis ? expf(s[x][y] * a.scale - L) : 0.0f;
            Ps[r * G::LDP + c] = p;
            dSs[r * G::LDP + c] = vis ? fwparts::softmax_grad(p, dp[x][y], dl) : 0.0f;
        }
    }
}

/* N (1, 2 or 4) consecutive floats from 8/16-byte aligned shared memory. */
template <int N> __device__ __forceinline__ void cores_ldn(float (&dst)[N], const float *src);
template <> __device__ __forceinline__ void cores_ldn<1>(float (&dst)[1], const float *src) { dst[0] = src[0]; }
template <> __device__ __forceinline__ void cores_ldn<2>(float (&dst)[2], const float *src)
{
    const float2 v = *(const float2 *)src;
    dst[0] = v.x; dst[1] = v.y;
}
template <> __device__ __forceinline__ void cores_ldn<4>(float (&dst)[4], const float *src)
{
    const float4 v = *(const float4 *)src;
    dst[0] = v.x; dst[1] = v.y; dst[2] = v.z; dst[3] = v.w;
}

/* acc[x][4g + e] += a · v.e for the 4 dims of group g. */
__device__ __forceinline__ void cores_fma4(float *acc, float a, const float4 &v)
{
    acc[0] = fmaf(a, v.x, acc[0]);
    acc[1] = fmaf(a, v.y, acc[1]);
    acc[2] = fmaf(a, v.z, acc[2]);
    acc[3] = fmaf(a, v.w, acc[3]);
}

/* acc[x][4g + e] += Σ_k dSs[ty + 16x][k] · Ks[k][4tx + 64g + e] over the BN keys: one dQ tile step. */
template <class Cfg>
__device__ __forceinline__ void cores_dq_step(const float *dSs, const float *Ks,
                                              float (&acc)[cores_geom<Cfg>::RM][cores_geom<Cfg>::C])
{
    typedef cores_geom<Cfg> G;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 1
    for (int k4 = 0; k4 < G::BN; k4 += 4) {
        float ds[G::RM][4];
#pragma unroll
        for (int x = 0; x < G::RM; x++) cores_ldn<4>(ds[x], dSs + (ty + 16 * x) * G::LDP + k4);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float4 kv[G::C4];
#pragma unroll
            for (int g = 0; g < G::C4; g++) kv[g] = *(const float4 *)(Ks + (k4 + e) * G::LD + 4 * tx + 64 * g);
#pragma unroll
            for (int x = 0; x < G::RM; x++)
#pragma unroll
                for (int g = 0; g < G::C4; g++) cores_fma4(&acc[x][4 * g], ds[x][e], kv[g]);
        }
    }
}

} /* namespace fwbwd */
#endif
