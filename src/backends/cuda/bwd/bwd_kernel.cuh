/* The CUDA backward (FlashAttention-2's algorithm, the GPU twin of src/backends/cpu/cpu_bwd_tiled.c).
 *
 * Three steps, all on the caller's stream:
 *   1. preprocess (bwd_launch.cu): Δ_i = rowsum(dO_i ∘ O_i) in f32, one warp per row, into a
 *      workspace (B, H, Lq); in the atomic dQ mode also a zeroed f32 dQ accumulator (B, H, Lq, D).
 *   2. dK/dV kernel: grid (key tiles of BN, kv heads, batch). A block keeps K_j, V_j (f32, shared
 *      memory) and its dK_j, dV_j accumulators in registers, loops over the query heads of its GQA
 *      group and over the query tiles (BM rows) that can see its keys (causal/window: tiles outside
 *      the band are never visited; the mask of fw_key_range() is applied per element), recomputes
 *      S = Q·Kᵀ, P = exp(scale·S − LSE) (0 where masked or LSE = −inf), dP = dO·Vᵀ,
 *      dS = P ∘ (dP − Δ), and accumulates dV += Pᵀ·dO, dK += dSᵀ·Q (scale applied at the store).
 *      The GQA sum over the group's query heads happens in registers: no atomics on dK/dV.
 *      Atomic mode: the same block also adds scale·dS·K_j into the f32 dQ accumulator (atomicAdd),
 *      and a conversion kernel writes dQ in the output dtype and strides.
 *   3. deterministic mode (default): a dQ kernel, grid (query tiles, heads, batch), keeps Q_i, dO_i,
 *      LSE_i, Δ_i, loops over the visible key tiles, recomputes P and dS and accumulates
 *      dQ_i = scale·dS·K in registers; no atomics anywhere, bit-identical results run to run.
 *
 * Arithmetic is f32 on CUDA cores for every dtype (f16/bf16 converted to f32 when staged into shared
 * memory). head_dim D is padded to the bucket DB with zeros (masking by zero-fill); one .cu file per
 * bucket (bwd_d64.cu, bwd_d128.cu, bwd_d256.cu) instantiates the kernels for f32, f16 and bf16.
 * 256 threads per block, register-blocked (see fw_bwd_geom); shared rows of Q, dO, K, V are padded
 * to DB + 4 floats so that the column-strided float4 reads of the score phase take the minimum
 * number of shared-memory wavefronts. */
#ifndef FW_BWD_KERNEL_CUH
#define FW_BWD_KERNEL_CUH

#include <math.h>
#include <stdint.h>
#include "backends/cuda/common/cuda_common.h"

/* Everything a backward launch needs; strides (batch, head, seq) in elements. */
struct fw_bwd_args {
    const void *q, *k, *v, *o, *dout;
    void *dq, *dk, *dv;
    const float *lse;   /* forward's LSE, contiguous (B, H, Lq), natural log */
    const float *delta; /* workspace (B, H, Lq) */
    const float *lse2;  /* tensor-core path: workspace (B, H, Lq), LSE·log2 e (+inf where LSE = −inf) */
    float *dq_acc;      /* atomic mode: zeroed workspace (B, H, Lq, D) */
    long long q_s[3], k_s[3], v_s[3], o_s[3], do_s[3], dq_s[3], dk_s[3], dv_s[3];
    long long off, wl, wr; /* fw_problem's diag_offset, window_left, window_right (FW_UNBOUNDED ok) */
    int B, H, Hkv, group, Lq, Lk, D;
    float scale;
};

/* dtype codes of the launchers (fw_dtype's values). */
#define FW_BWD_F32 0
#define FW_BWD_F16 1
#define FW_BWD_BF16 2

/* Host launchers, one per head-dim bucket (bwd_d<DB>.cu). They launch step 2 (and 3 unless
 * atomic_dq) after the caller ran step 1. smem_bytes reports the dynamic shared memory per block. */
#define FW_BWD_DECLARE(DB)                                                                         \
    cudaError_t fw_bwd_launch_d##DB(const fw_bwd_args *a, int dtype, int atomic_dq, cudaStream_t s); \
    size_t fw_bwd_smem_d##DB(void);
FW_BWD_DECLARE(64)
FW_BWD_DECLARE(128)
FW_BWD_DECLARE(256)

#ifdef __CUDACC__
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define FW_BWD_THREADS 256

template <typename T> struct fw_bwd_io;
template <> struct fw_bwd_io<float> {
    static __device__ __forceinline__ float ld(const float *p) { return *p; }
    static __device__ __forceinline__ void st(float *p, float x) { *p = x; }
};
template <> struct fw_bwd_io<__half> {
    static __device__ __forceinline__ float ld(const __half *p) { return __half2float(*p); }
    static __device__ __forceinline__ void st(__half *p, float x) { *p = __float2half_rn(x); }
};
template <> struct fw_bwd_io<__nv_bfloat16> {
    static __device__ __forceinline__ float ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
    static __device__ __forceinline__ void st(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }
};

/* rowsum(o ∘ dout) over D elements by FW_BWD_DELTA_LANES consecutive lanes (sub = lane index within
 * them); every one of them gets the sum. vec: both rows 16-byte aligned and D a multiple of 16 bytes, so
 * each lane reads 16-byte vectors (a 64-dim bf16 row is one 16-byte load per lane). Lanes of rows past
 * the end must still call it (the shuffles take all 32 lanes) with D = 0. */
#define FW_BWD_DELTA_LANES 8
template <typename T> __device__ __forceinline__ float fw_bwd_dot16(const uint4 &x, const uint4 &y);
template <> __device__ __forceinline__ float fw_bwd_dot16<float>(const uint4 &x, const uint4 &y)
{
    return __uint_as_float(x.x) * __uint_as_float(y.x) + __uint_as_float(x.y) * __uint_as_float(y.y) +
           __uint_as_float(x.z) * __uint_as_float(y.z) + __uint_as_float(x.w) * __uint_as_float(y.w);
}
template <typename T2, float2 (*TO_F2)(T2)>
__device__ __forceinline__ float fw_bwd_dot16_pairs(const uint4 &x, const uint4 &y)
{
    const T2 *a = reinterpret_cast<const T2 *>(&x), *b = reinterpret_cast<const T2 *>(&y);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 u = TO_F2(a[j]), v = TO_F2(b[j]);
        sum = fmaf(u.x, v.x, fmaf(u.y, v.y, sum));
    }
    return sum;
}
__device__ __forceinline__ float2 fw_half2_f2(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float2 fw_bf162_f2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
template <> __device__ __forceinline__ float fw_bwd_dot16<__half>(const uint4 &x, const uint4 &y)
{
    return fw_bwd_dot16_pairs<__half2, fw_half2_f2>(x, y);
}
template <> __device__ __forceinline__ float fw_bwd_dot16<__nv_bfloat16>(const uint4 &x, const uint4 &y)
{
    return fw_bwd_dot16_pairs<__nv_bfloat162, fw_bf162_f2>(x, y);
}

template <typename T>
__device__ __forceinline__ float fw_bwd_row_delta(const T *orow, const T *drow, int D, int sub, int vec)
{
    float sum = 0.0f;
    if (vec) {
        constexpr int V = 16 / sizeof(T);
        for (int d = sub * V; d < D; d += FW_BWD_DELTA_LANES * V)
            sum += fw_bwd_dot16<T>(*reinterpret_cast<const uint4 *>(orow + d), *reinterpret_cast<const uint4 *>(drow + d));
    } else {
        for (int d = sub; d < D; d += FW_BWD_DELTA_LANES)
            sum = fmaf(fw_bwd_io<T>::ld(orow + d), fw_bwd_io<T>::ld(drow + d), sum);
    }
#pragma unroll
    for (int m = FW_BWD_DELTA_LANES / 2; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    return sum;
}

/* vec of fw_bwd_row_delta for one (B, H, L, D) tensor: aligned base, every used stride and D multiples of 16 bytes. */
template <typename T>
static inline int fw_bwd_rows_vec16(const void *ptr, const int64_t *s, int64_t nb, int64_t nh, int64_t ns, int64_t D)
{
    constexpr int64_t V = 16 / sizeof(T);
    return fw_cuda_aligned16(ptr) && D % V == 0 && fw_cuda_unaligned_stride(s, nb, nh, ns, V) < 0;
}

/* Δ_i = rowsum(dO_i ∘ O_i) in f32 over the rows (b, h, i) of (B, H, Lq), stored at (b·H + h)·Lq + i;
 * with lse2, also lse2_i = LSE_i · log2 e, +inf where LSE = −inf (a row that sees no key: the tensor-core
 * kernels' P = exp2(x − lse2) = 0). FW_BWD_DELTA_LANES lanes per row, grid (row blocks, H, B). */
#define FW_BWD_DELTA_ROWS (256 / FW_BWD_DELTA_LANES)
struct fw_bwd_delta_args {
    const void *o, *dout;
    long long o_s[3], do_s[3];
    const float *lse;
    float *delta, *lse2;
    int H, Lq, D, vec;
};

template <typename T>
__global__ void __launch_bounds__(256) fw_bwd_delta_kernel(const fw_bwd_delta_args a)
{
    const int sub = threadIdx.x % FW_BWD_DELTA_LANES;
    const int i = blockIdx.x * FW_BWD_DELTA_ROWS + threadIdx.x / FW_BWD_DELTA_LANES;
    const int h = blockIdx.y, b = blockIdx.z;
    const bool live = i < a.Lq;
    const T *orow = (const T *)a.o + (long long)b * a.o_s[0] + (long long)h * a.o_s[1] + (long long)i * a.o_s[2];
    const T *drow = (const T *)a.dout + (long long)b * a.do_s[0] + (long long)h * a.do_s[1] + (long long)i * a.do_s[2];
    const float sum = fw_bwd_row_delta<T>(orow, drow, live ? a.D : 0, sub, a.vec);
    if (live && sub == 0) {
        const long long row = ((long long)b * a.H + h) * a.Lq + i;
        a.delta[row] = sum;
        if (a.lse2) {
            const float l = a.lse[row];
            a.lse2[row] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
        }
    }
}

#ifndef FW_BWD_EMULATE
/* Launches fw_bwd_delta_kernel for p on s (lse2 may be NULL); the caller checks the launch. */
template <typename T>
static void fw_bwd_launch_delta(const fw_problem *p, float *delta, float *lse2, cudaStream_t s)
{
    fw_bwd_delta_args a;
    a.o = p->o;
    a.dout = p->dout;
    for (int i = 0; i < 3; i++) {
        a.o_s[i] = p->o_stride[i];
        a.do_s[i] = p->do_stride[i];
    }
    a.lse = p->lse;
    a.delta = delta;
    a.lse2 = lse2;
    a.H = (int)p->heads;
    a.Lq = (int)p->seqlen_q;
    a.D = (int)p->head_dim;
    a.vec = fw_bwd_rows_vec16<T>(p->o, p->o_stride, p->batch, p->heads, p->seqlen_q, p->head_dim) &&
            fw_bwd_rows_vec16<T>(p->dout, p->do_stride, p->batch, p->heads, p->seqlen_q, p->head_dim);
    const dim3 grid((unsigned)((p->seqlen_q + FW_BWD_DELTA_ROWS - 1) / FW_BWD_DELTA_ROWS), (unsigned)p->heads,
                    (unsigned)p->batch);
    fw_bwd_delta_kernel<T><<<grid, 256, 0, s>>>(a);
}
#endif

/* Tile geometry of one bucket. */
template <int DB> struct fw_bwd_tile;
template <> struct fw_bwd_tile<64> { enum { BM = 64, BN = 64 }; };
template <> struct fw_bwd_tile<128> { enum { BM = 32, BN = 64 }; };
template <> struct fw_bwd_tile<256> { enum { BM = 16, BN = 32 }; };

/* Thread (ty, tx) = (tid / 16, tid % 16) owns, in every phase, a block of positions:
 *   scores:  rows ty + 16x (x < RM) × keys tx + 16y (y < RN) of the BM×BN tile
 *   dK, dV:  keys RJ·ty + x (x < RJ) × dims 4tx + 64g + e (g < C/4, e < 4) of the BN×DB accumulators
 *   dQ:      rows ty + 16x (x < RM) × the same dims, of the BM×DB accumulator
 * so each shared value read feeds several FMAs (register blocking), and the accumulation phases read
 * 16-byte vectors (4 consecutive dims of dO/Q/K; RJ consecutive keys of P/dS; 4 keys of a dS row). */
template <int DB> struct fw_bwd_geom {
    enum {
        BM = fw_bwd_tile<DB>::BM,
        BN = fw_bwd_tile<DB>::BN,
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
template <typename T, int DB, int ROWS>
__device__ __forceinline__ void fw_bwd_load_rows(float *dst, const T *src, long long base, long long ss, int r0,
                                                 int rows_valid, int D)
{
    constexpr int LD = fw_bwd_geom<DB>::LD;
    for (int idx = threadIdx.x; idx < ROWS * DB; idx += FW_BWD_THREADS) {
        const int r = idx / DB, d = idx % DB;
        float x = 0.0f;
        if (r0 + r < rows_valid && d < D) x = fw_bwd_io<T>::ld(src + base + (long long)(r0 + r) * ss + d);
        dst[r * LD + d] = x;
    }
}

/* LSE and Δ of the BM query rows from i0 of (b, h) into shared memory; rows past Lq get LSE = −inf
 * (so P = 0 there) and Δ = 0. */
template <int BM>
__device__ __forceinline__ void fw_bwd_load_stats(float *lse_s, float *dl_s, const fw_bwd_args &a, int b, int h, int i0)
{
    for (int r = threadIdx.x; r < BM; r += FW_BWD_THREADS) {
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
template <int DB>
__device__ __forceinline__ void fw_bwd_scores(const float *Qs, const float *dOs, const float *Ks, const float *Vs,
                                              const float *lse_s, const float *dl_s, float *Ps, float *dSs,
                                              const fw_bwd_args &a, int i0, int j0)
{
    typedef fw_bwd_geom<DB> G;
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
            dSs[r * G::LDP + c] = vis ? p * (dp[x][y] - dl) : 0.0f;
        }
    }
}

/* N (1, 2 or 4) consecutive floats from 8/16-byte aligned shared memory. */
template <int N> __device__ __forceinline__ void fw_bwd_ldn(float (&dst)[N], const float *src);
template <> __device__ __forceinline__ void fw_bwd_ldn<1>(float (&dst)[1], const float *src) { dst[0] = src[0]; }
template <> __device__ __forceinline__ void fw_bwd_ldn<2>(float (&dst)[2], const float *src)
{
    const float2 v = *(const float2 *)src;
    dst[0] = v.x; dst[1] = v.y;
}
template <> __device__ __forceinline__ void fw_bwd_ldn<4>(float (&dst)[4], const float *src)
{
    const float4 v = *(const float4 *)src;
    dst[0] = v.x; dst[1] = v.y; dst[2] = v.z; dst[3] = v.w;
}

/* acc[x][4g + e] += a · v.e for the 4 dims of group g. */
__device__ __forceinline__ void fw_bwd_fma4(float *acc, float a, const float4 &v)
{
    acc[0] = fmaf(a, v.x, acc[0]);
    acc[1] = fmaf(a, v.y, acc[1]);
    acc[2] = fmaf(a, v.z, acc[2]);
    acc[3] = fmaf(a, v.w, acc[3]);
}

/* acc[x][4g + e] += Σ_k dSs[ty + 16x][k] · Ks[k][4tx + 64g + e] over the BN keys: one dQ tile step. */
template <int DB>
__device__ __forceinline__ void fw_bwd_dq_step(const float *dSs, const float *Ks,
                                               float (&acc)[fw_bwd_geom<DB>::RM][fw_bwd_geom<DB>::C])
{
    typedef fw_bwd_geom<DB> G;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll 1
    for (int k4 = 0; k4 < G::BN; k4 += 4) {
        float ds[G::RM][4];
#pragma unroll
        for (int x = 0; x < G::RM; x++) fw_bwd_ldn<4>(ds[x], dSs + (ty + 16 * x) * G::LDP + k4);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float4 kv[G::C4];
#pragma unroll
            for (int g = 0; g < G::C4; g++) kv[g] = *(const float4 *)(Ks + (k4 + e) * G::LD + 4 * tx + 64 * g);
#pragma unroll
            for (int x = 0; x < G::RM; x++)
#pragma unroll
                for (int g = 0; g < G::C4; g++) fw_bwd_fma4(&acc[x][4 * g], ds[x][e], kv[g]);
        }
    }
}

#define FW_BWD_SMEM_CARVE(G)                                                                       \
    extern __shared__ float4 fw_bwd_smem4[];                                                       \
    float *Ks = (float *)fw_bwd_smem4;                                                             \
    float *Vs = Ks + G::BN * G::LD;                                                                \
    float *Qs = Vs + G::BN * G::LD;                                                                \
    float *dOs = Qs + G::BM * G::LD;                                                               \
    float *Ps = dOs + G::BM * G::LD;                                                               \
    float *dSs = Ps + G::BM * G::LDP;                                                              \
    float *lse_s = dSs + G::BM * G::LDP;                                                           \
    float *dl_s = lse_s + G::BM;

/* Step 2: dK, dV (and, with ATOMIC_DQ, dQ through atomics). Grid (ceil(Lk/BN), Hkv, B). */
template <typename T, int DB, bool ATOMIC_DQ>
__global__ void __launch_bounds__(FW_BWD_THREADS) fw_bwd_dkdv_kernel(const fw_bwd_args a)
{
    typedef fw_bwd_geom<DB> G;
    FW_BWD_SMEM_CARVE(G)

    const int j0 = blockIdx.x * G::BN, hk = blockIdx.y, b = blockIdx.z;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const T *q = (const T *)a.q, *k = (const T *)a.k, *v = (const T *)a.v, *dout = (const T *)a.dout;

    fw_bwd_load_rows<T, DB, G::BN>(Ks, k, (long long)b * a.k_s[0] + (long long)hk * a.k_s[1], a.k_s[2], j0, a.Lk, a.D);
    fw_bwd_load_rows<T, DB, G::BN>(Vs, v, (long long)b * a.v_s[0] + (long long)hk * a.v_s[1], a.v_s[2], j0, a.Lk, a.D);

    float dk[G::RJ][G::C], dv[G::RJ][G::C];
#pragma unroll
    for (int x = 0; x < G::RJ; x++)
#pragma unroll
        for (int c = 0; c < G::C; c++) dk[x][c] = dv[x][c] = 0.0f;

    /* query rows that see at least one key of [j0, j1): j - off - wr <= i <= j - off + wl */
    const long long j1 = j0 + G::BN < a.Lk ? j0 + G::BN : a.Lk;
    long long ilo = (long long)j0 - a.off - a.wr, ihi = (j1 - 1) - a.off + a.wl + 1;
    if (ilo < 0) ilo = 0;
    if (ihi > a.Lq) ihi = a.Lq;

    for (int h = hk * a.group; h < (hk + 1) * a.group; h++) {
        const long long qbase = (long long)b * a.q_s[0] + (long long)h * a.q_s[1];
        const long long obase = (long long)b * a.do_s[0] + (long long)h * a.do_s[1];
        for (long long i0l = ilo; i0l < ihi; i0l += G::BM) {
            const int i0 = (int)i0l;
            __syncthreads(); /* the previous tile's readers are done */
            fw_bwd_load_rows<T, DB, G::BM>(Qs, q, qbase, a.q_s[2], i0, a.Lq, a.D);
            fw_bwd_load_rows<T, DB, G::BM>(dOs, dout, obase, a.do_s[2], i0, a.Lq, a.D);
            fw_bwd_load_stats<G::BM>(lse_s, dl_s, a, b, h, i0);
            __syncthreads();
            fw_bwd_scores<DB>(Qs, dOs, Ks, Vs, lse_s, dl_s, Ps, dSs, a, i0, j0);
            __syncthreads();
            /* dV += Pᵀ·dO, dK += dSᵀ·Q over the BM rows */
#pragma unroll 4
            for (int r = 0; r < G::BM; r++) {
                float p[G::RJ], ds[G::RJ];
                fw_bwd_ldn<G::RJ>(p, Ps + r * G::LDP + G::RJ * ty);
                fw_bwd_ldn<G::RJ>(ds, dSs + r * G::LDP + G::RJ * ty);
                float4 o[G::C4], qq[G::C4];
#pragma unroll
                for (int g = 0; g < G::C4; g++) {
                    o[g] = *(const float4 *)(dOs + r * G::LD + 4 * tx + 64 * g);
                    qq[g] = *(const float4 *)(Qs + r * G::LD + 4 * tx + 64 * g);
                }
#pragma unroll
                for (int x = 0; x < G::RJ; x++)
#pragma unroll
                    for (int g = 0; g < G::C4; g++) {
                        fw_bwd_fma4(&dv[x][4 * g], p[x], o[g]);
                        fw_bwd_fma4(&dk[x][4 * g], ds[x], qq[g]);
                    }
            }
            if (ATOMIC_DQ) {
                float acc[G::RM][G::C];
#pragma unroll
                for (int x = 0; x < G::RM; x++)
#pragma unroll
                    for (int c = 0; c < G::C; c++) acc[x][c] = 0.0f;
                fw_bwd_dq_step<DB>(dSs, Ks, acc);
#pragma unroll
                for (int x = 0; x < G::RM; x++) {
                    const int i = i0 + ty + 16 * x;
                    if (i < a.Lq) {
                        float *dst = a.dq_acc + (((long long)b * a.H + h) * a.Lq + i) * a.D;
#pragma unroll
                        for (int c = 0; c < G::C; c++) {
                            const int d = 4 * tx + 64 * (c / 4) + c % 4;
                            if (d < a.D) atomicAdd(dst + d, acc[x][c] * a.scale);
                        }
                    }
                }
            }
        }
    }

#pragma unroll
    for (int x = 0; x < G::RJ; x++) {
        const int j = j0 + G::RJ * ty + x;
        if (j < a.Lk) {
            T *dkp = (T *)a.dk + (long long)b * a.dk_s[0] + (long long)hk * a.dk_s[1] + (long long)j * a.dk_s[2];
            T *dvp = (T *)a.dv + (long long)b * a.dv_s[0] + (long long)hk * a.dv_s[1] + (long long)j * a.dv_s[2];
#pragma unroll
            for (int c = 0; c < G::C; c++) {
                const int d = 4 * tx + 64 * (c / 4) + c % 4;
                if (d < a.D) {
                    fw_bwd_io<T>::st(dkp + d, dk[x][c] * a.scale);
                    fw_bwd_io<T>::st(dvp + d, dv[x][c]);
                }
            }
        }
    }
}

/* Step 3 (deterministic mode): dQ. Grid (ceil(Lq/BM), H, B). */
template <typename T, int DB>
__global__ void __launch_bounds__(FW_BWD_THREADS) fw_bwd_dq_kernel(const fw_bwd_args a)
{
    typedef fw_bwd_geom<DB> G;
    FW_BWD_SMEM_CARVE(G)
    (void)Ps;

    const int i0 = blockIdx.x * G::BM, h = blockIdx.y, b = blockIdx.z;
    const int hk = h / a.group;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const T *q = (const T *)a.q, *k = (const T *)a.k, *v = (const T *)a.v, *dout = (const T *)a.dout;

    fw_bwd_load_rows<T, DB, G::BM>(Qs, q, (long long)b * a.q_s[0] + (long long)h * a.q_s[1], a.q_s[2], i0, a.Lq, a.D);
    fw_bwd_load_rows<T, DB, G::BM>(dOs, dout, (long long)b * a.do_s[0] + (long long)h * a.do_s[1], a.do_s[2], i0,
                                   a.Lq, a.D);
    fw_bwd_load_stats<G::BM>(lse_s, dl_s, a, b, h, i0);

    float acc[G::RM][G::C];
#pragma unroll
    for (int x = 0; x < G::RM; x++)
#pragma unroll
        for (int c = 0; c < G::C; c++) acc[x][c] = 0.0f;

    /* keys visible to rows [i0, i1): [i0 + off - wl, (i1 - 1) + off + wr] */
    const long long i1 = i0 + G::BM < a.Lq ? i0 + G::BM : a.Lq;
    long long klo = (long long)i0 + a.off - a.wl, khi = (i1 - 1) + a.off + a.wr + 1;
    if (klo < 0) klo = 0;
    if (khi > a.Lk) khi = a.Lk;
    const long long kbase = (long long)b * a.k_s[0] + (long long)hk * a.k_s[1];
    const long long vbase = (long long)b * a.v_s[0] + (long long)hk * a.v_s[1];
    for (long long j0l = klo; j0l < khi; j0l += G::BN) {
        const int j0 = (int)j0l;
        __syncthreads(); /* the previous tile's readers are done (and Q/dO/stats staged) */
        fw_bwd_load_rows<T, DB, G::BN>(Ks, k, kbase, a.k_s[2], j0, a.Lk, a.D);
        fw_bwd_load_rows<T, DB, G::BN>(Vs, v, vbase, a.v_s[2], j0, a.Lk, a.D);
        __syncthreads();
        fw_bwd_scores<DB>(Qs, dOs, Ks, Vs, lse_s, dl_s, Ps, dSs, a, i0, j0);
        __syncthreads();
        fw_bwd_dq_step<DB>(dSs, Ks, acc);
    }

#pragma unroll
    for (int x = 0; x < G::RM; x++) {
        const int i = i0 + ty + 16 * x;
        if (i < a.Lq) {
            T *dqp = (T *)a.dq + (long long)b * a.dq_s[0] + (long long)h * a.dq_s[1] + (long long)i * a.dq_s[2];
#pragma unroll
            for (int c = 0; c < G::C; c++) {
                const int d = 4 * tx + 64 * (c / 4) + c % 4;
                if (d < a.D) fw_bwd_io<T>::st(dqp + d, acc[x][c] * a.scale);
            }
        }
    }
}

#ifndef FW_BWD_EMULATE /* (a host-thread emulation of the kernels includes this file without the launchers) */
template <typename T, int DB>
static cudaError_t fw_bwd_launch_t(const fw_bwd_args *a, int atomic_dq, cudaStream_t s)
{
    typedef fw_bwd_geom<DB> G;
    const size_t smem = (size_t)G::SMEM_FLOATS * sizeof(float);
    cudaError_t e;
    const dim3 block(FW_BWD_THREADS);
    const dim3 grid_kv((unsigned)((a->Lk + G::BN - 1) / G::BN), (unsigned)a->Hkv, (unsigned)a->B);
    if (atomic_dq) {
        e = fw_cuda_smem_limit<fw_bwd_dkdv_kernel<T, DB, true>>(smem);
        if (e != cudaSuccess) return e;
        fw_bwd_dkdv_kernel<T, DB, true><<<grid_kv, block, smem, s>>>(*a);
        return cudaGetLastError();
    }
    e = fw_cuda_smem_limit<fw_bwd_dkdv_kernel<T, DB, false>>(smem);
    if (e != cudaSuccess) return e;
    fw_bwd_dkdv_kernel<T, DB, false><<<grid_kv, block, smem, s>>>(*a);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    e = fw_cuda_smem_limit<fw_bwd_dq_kernel<T, DB>>(smem);
    if (e != cudaSuccess) return e;
    const dim3 grid_q((unsigned)((a->Lq + G::BM - 1) / G::BM), (unsigned)a->H, (unsigned)a->B);
    fw_bwd_dq_kernel<T, DB><<<grid_q, block, smem, s>>>(*a);
    return cudaGetLastError();
}

#define FW_BWD_DEFINE(DB)                                                                          \
    cudaError_t fw_bwd_launch_d##DB(const fw_bwd_args *a, int dtype, int atomic_dq, cudaStream_t s) \
    {                                                                                              \
        switch (dtype) {                                                                           \
        case FW_BWD_F32: return fw_bwd_launch_t<float, DB>(a, atomic_dq, s);                       \
        case FW_BWD_F16: return fw_bwd_launch_t<__half, DB>(a, atomic_dq, s);                      \
        case FW_BWD_BF16: return fw_bwd_launch_t<__nv_bfloat16, DB>(a, atomic_dq, s);              \
        default: return cudaErrorInvalidValue;                                                     \
        }                                                                                          \
    }                                                                                              \
    size_t fw_bwd_smem_d##DB(void) { return (size_t)fw_bwd_geom<DB>::SMEM_FLOATS * sizeof(float); }
#endif /* FW_BWD_EMULATE */

#endif /* __CUDACC__ */
#endif
