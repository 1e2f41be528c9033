/* cuda-flash-f32: exact float32 FlashAttention-2 on CUDA cores, plus opt-in tf32 / 3xtf32 tensor-core
 * variants (mma.sync m16n8k8). Included by one .cu file per head-dim bucket (cuda_flash_f32_d*.cu),
 * each instantiating its configurations, so the CI build compiles the buckets in parallel.
 *
 * Both kernels: grid (query tiles, heads, batch), heaviest query tiles first (causal); K/V tiles in
 * shared memory, double-buffered with cp.async (16-byte copies with zero-fill when the tensors are
 * 16-byte aligned, 4-byte copies otherwise); online softmax in the log2 domain (S or Q scaled by
 * scale·log2 e), row statistics reduced with warp shuffles; key tiles outside the causal/window band
 * skipped, the mask applied only on tiles that straddle its edge. head_dim D is padded to the bucket
 * DB with zeros (masking by zero-fill), so one bucket serves every D in (DB/2, DB].
 *
 * Exact kernel (register-blocked like an SGEMM): each thread owns a TM×(BN/8) block of S and a
 * TM×(DB/8) block of O in registers; 8 threads (lanes 8k..8k+7 of a warp) share the rows of a block,
 * so row reductions are three xor-shuffles. Q (copied as it is; S is scaled) and P go through shared memory: every
 * inner step reads 16-byte vectors of Q/K (resp. P/V) and does TM·TN·4 FMAs.
 *
 * Tensor-core kernel: 4 warps × 16 query rows; S = Q·Kᵀ and O += P·V with mma.m16n8k8.tf32; the
 * accumulator layout of S is reused as the A operand of P·V by permuting the key order inside each
 * 8-key step (keys 2t, 2t+1 ↔ k-slots t, t+4), so P never leaves registers. 3xtf32 splits each
 * operand x = big + small (big = tf32(x), small = tf32(x - big)) and sums small·big + big·small +
 * big·big in f32. */
#ifndef FW_FLASH_F32_KERNEL_CUH
#define FW_FLASH_F32_KERNEL_CUH

#include <math.h>
#include <stdint.h>
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/common/workspace.h"

struct ff32_args {
    const float *q, *k, *v;
    float *o, *lse;
    long long qs[3], ks[3], vs[3], os[3]; /* batch, head, seq strides in elements */
    long long diag, wl, wr;               /* fw_problem's normalised window */
    int H, group, Lq, Lk, D;
    float scale_log2; /* scale · log2(e) */
    int vec16;        /* q/k/v 16-byte aligned with strides multiple of 4: 16-byte copies */
    int uneven;       /* a causal or window mask (query blocks see different numbers of key tiles): the exact kernel's
                       * grid is (heads, batch, query blocks), so that every head's heaviest block starts first */
    int sms;                       /* the device's SM count (0: not known): the launchers size grids and choices by it */
    int delay;                     /* a staggered start (ff32_stagger): blocks delay_from .. delay_to - 1, in launch */
    long long delay_from, delay_to; /* order, sleep delay SM cycles before their first copy; 0 = none */
};

/* Host-side launchers, one per head-dim bucket (defined in cuda_flash_f32_d<DB>.cu).
 * variant: 0 exact, 1 tf32, 2 3xtf32; cfg: index into that variant's table. */
struct ff32_cfg_info {
    const char *name;
    int block_m, block_n, warps;
    int sm90a; /* 1: a wgmma kernel (flash_f32_wg.cuh), compute capability 9.0 only */
    int few_blocks; /* k > 0: the default when its query blocks (B·H·⌈Lq/block_m⌉) are at most k per SM; the smallest
                     * block_m that qualifies wins (short sequences, small batches: more and shorter blocks) */
};
/* The persistent wgmma kernel's short-key form (config wsps, Lk <= FF32_SHORT_TILES x 64): its split warps get 56
 * registers instead of 24 (a key tile split in ~9 µs instead of ~11: docs/PERF-gpu-f32.md), which the consumers
 * pay with the separate P·V accumulator of 3xtf32 (FRESH_PV in flash_f32_wg.cuh): without it the tensor cores'
 * accumulation into O erred 3.8e-6 at 8 key tiles, 7.6e-6 at 16 and 1.2e-5 at 32. */
#define FF32_SHORT_TILES 8
#define FF32_DECLARE(DB)                                                                           \
    int ff32_configs_d##DB(int variant, const ff32_cfg_info **table);                              \
    cudaError_t ff32_launch_d##DB(int variant, int cfg, const ff32_args *a, int batch, cudaStream_t s, const fw_knobs *k);
FF32_DECLARE(32)
FF32_DECLARE(64)
FF32_DECLARE(128)
FF32_DECLARE(256)

#ifdef __CUDACC__

/* ---- small device helpers --------------------------------------------------------------------- */
__device__ __forceinline__ unsigned ff32_smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ff32_cp16(float *dst, const float *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(ff32_smem_addr(dst)), "l"(src),
                 "r"(bytes));
}
__device__ __forceinline__ void ff32_cp4(float *dst, const float *src, int bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(ff32_smem_addr(dst)), "l"(src),
                 "r"(bytes));
}
__device__ __forceinline__ void ff32_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void ff32_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ float ff32_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* The raw tiles' swizzle (ff32_load_tile's SWZ, read by flash_f32_wg.cuh's splits): 16-byte chunk c of row r sits
 * at chunk c ^ ((r / 4) % 8). */
__device__ __forceinline__ int ff32_raw_chunk(int r, int c) { return c ^ ((r >> 2) & 7); }
/* ... and of row r0 + k S, from row r0's chunk cx = ff32_raw_chunk(r0, c), where r0 < S and S is a power of 2 and a
 * multiple of 8: (r0 + k S) / 4 = r0 / 4 + k S / 4 without carries into the swizzle's 3 bits, so a constant XOR, and
 * the compiler folds each row's address into a fixed offset (docs/PERF-gpu-f32.md). */
template <int S> __device__ __forceinline__ int ff32_raw_chunk_step(int cx, int k) { return cx ^ ((k * (S / 4)) & 7); }

/* Rows [0, ROWS) × cols [0, DB) of a tile into shared memory (row stride SST); rows >= nrows and
 * cols >= D are zero-filled. src points at the tile's row 0 (a valid row); rs = row stride.
 * SWZ: 16-byte chunk c of row r goes to chunk ff32_raw_chunk(r, c) (flash_f32_wg.cuh's raw tiles, whose 4x4
 * transposes then read without bank conflicts). */
template <int ROWS, int DB, int SST, int NT, bool SWZ = false>
__device__ __forceinline__ void ff32_load_tile(float *dst, const float *src, long long rs, int nrows, int D,
                                               int vec16, int tid)
{
    auto chunk = [](int r, int c4) { return SWZ ? ff32_raw_chunk(r, c4) : c4; }; /* 16-byte chunk c4 of row r */
    constexpr int CH = DB / 4, RP = NT / CH; /* 16-byte chunks per row; rows per pass of NT threads */
    if (NT % CH == 0 && vec16 && nrows >= ROWS && D == DB) {
        /* a whole tile (every key tile but the last, D = DB): one base address per thread, then a fixed step; the
         * checked loop below costs ~20 instructions a copy, 3-4% of the exact kernel's instructions, and ~45 in the
         * wgmma kernels' split warps, a quarter of their time (Nsight Compute's source view) */
        const int r0 = tid / CH, c4 = tid % CH;
        const float *g = src + r0 * rs + 4 * c4;
        constexpr bool XOR_STEP = SWZ && RP % 8 == 0 && (RP & (RP - 1)) == 0; /* see ff32_raw_chunk_step */
        const int cx = XOR_STEP ? chunk(r0, c4) : c4;
#pragma unroll(NT < 128 ? 1 : (ROWS + RP - 1) / RP)
        for (int k = 0; k < (ROWS + RP - 1) / RP; k++) {
            const int r = r0 + k * RP;
            if (ROWS % RP && r >= ROWS) break;
            const int ch = XOR_STEP ? ff32_raw_chunk_step<RP>(cx, k) : chunk(r, c4);
            ff32_cp16(dst + r * SST + 4 * ch, g + k * RP * rs, 16);
        }
    } else if (vec16) {
        /* fewer than 128 threads: the wgmma kernels' split warps, at 24 registers (unrolled, they spill) */
#pragma unroll(NT < 128 ? 1 : 4)
        for (int idx = tid; idx < ROWS * CH; idx += NT) {
            const int r = idx / CH, c = (idx % CH) * 4;
            const float *g = src;
            int bytes = 0;
            if (r < nrows && c < D) {
                g = src + r * rs + c;
                bytes = min(16, (D - c) * 4);
            }
            ff32_cp16(dst + r * SST + chunk(r, c >> 2) * 4, g, bytes);
        }
    } else {
        for (int idx = tid; idx < ROWS * DB; idx += NT) {
            const int r = idx / DB, c = idx % DB;
            const bool ok = r < nrows && c < D;
            ff32_cp4(dst + r * SST + (SWZ ? chunk(r, c >> 2) * 4 + (c & 3) : c), ok ? src + r * rs + c : src, ok ? 4 : 0);
        }
    }
}

/* Visible key range [lo, hi) of query row i, clipped to [0, Lk]. */
__device__ __forceinline__ void ff32_range(const ff32_args &a, long long i, int *lo, int *hi)
{
    long long x = i + a.diag - a.wl, y = i + a.diag + a.wr + 1;
    *lo = x < 0 ? 0 : (x > a.Lk ? a.Lk : (int)x);
    *hi = y > a.Lk ? a.Lk : (y < 0 ? 0 : (int)y);
}

/* The key tiles a query block [m0, m0+rows) must visit, and whether tile n0 needs the mask. */
struct ff32_band {
    int n_begin, n_end; /* keys [n_begin, n_end) cover every visible key of the block */
    int lo_max, hi_min; /* tiles inside [lo_max, hi_min) are fully visible to every row */
};
__device__ __forceinline__ ff32_band ff32_block_band(const ff32_args &a, int m0, int rows)
{
    ff32_band bd;
    int lo0, hi0, lo1, hi1;
    ff32_range(a, m0, &lo0, &hi0);
    ff32_range(a, m0 + rows - 1, &lo1, &hi1);
    bd.n_begin = lo0; /* lo, hi are non-decreasing in i */
    bd.n_end = hi1;
    bd.lo_max = lo1;
    bd.hi_min = hi0;
    return bd;
}

/* A block's query tile (heaviest, i.e. last, query tiles first for causal-like masks), head, batch, the
 * Q/K/V bases of its head and kv head, and the key tiles [t_begin, t_end) of size BN its rows may see. */
struct ff32_block {
    int m0, rows, h, b, t_begin, t_end;
    ff32_band bd;
    const float *qp, *kp, *vp;
    /* ACROSS (with an uneven mask): the grid's heaviest query blocks of every head first, then the next heaviest, so
     * that the last blocks to start are the lightest (the exact kernel, causal L=2048: the last heads' heavy blocks
     * had run alone at the end); else head by head, which keeps a head's K/V in L2 for its query blocks. */
    __device__ __forceinline__ void init(const ff32_args &a, int BM, int BN, bool across = false)
    {
        if (across && a.uneven) /* the launcher's grid is then (heads, batch, query blocks) */
            init_at(a, BM, BN, gridDim.z - 1 - blockIdx.z, blockIdx.x, blockIdx.y);
        else
            init_at(a, BM, BN, gridDim.x - 1 - blockIdx.x, blockIdx.y, blockIdx.z);
    }
    /* query block mblk of head h, batch b (init: the grid's; the last query blocks, the longest rows when causal,
     * first) */
    __device__ __forceinline__ void init_at(const ff32_args &a, int BM, int BN, int mblk, int h_, int b_)
    {
        h = h_;
        b = b_;
        const int hk = h / a.group;
        m0 = mblk * BM;
        rows = min(BM, a.Lq - m0);
        qp = a.q + b * a.qs[0] + h * a.qs[1] + (long long)m0 * a.qs[2];
        kp = a.k + b * a.ks[0] + hk * a.ks[1];
        vp = a.v + b * a.vs[0] + hk * a.vs[1];
        bd = ff32_block_band(a, m0, rows);
        t_begin = bd.n_begin / BN;
        t_end = bd.n_end > bd.n_begin ? (bd.n_end + BN - 1) / BN : t_begin;
    }
};

/* Writes the Q tile (rows valid < rows), pre-scaled by scale·log2 e and zero-padded, to Qs. */
/* K and V of key tile t (keys t·BN..) into Kd, Vd as one cp.async group (both kernels' double buffer). */
template <int BN, int DB, int KST, int VST, int NT>
__device__ __forceinline__ void ff32_load_kv(float *Kd, float *Vd, const float *kp, const float *vp, const ff32_args &a,
                                             int t, int tid)
{
    const int n0 = t * BN;
    ff32_load_tile<BN, DB, KST, NT>(Kd, kp + (long long)n0 * a.ks[2], a.ks[2], a.Lk - n0, a.D, a.vec16, tid);
    ff32_load_tile<BN, DB, VST, NT>(Vd, vp + (long long)n0 * a.vs[2], a.vs[2], a.Lk - n0, a.D, a.vec16, tid);
    ff32_commit();
}

template <int BM, int DB, int QST, int NT>
__device__ __forceinline__ void ff32_load_q(float *Qs, const float *q, long long rs, int rows, int D, float sc,
                                            int vec16, int tid)
{
    if (vec16) {
        constexpr int CH = DB / 4;
        for (int idx = tid; idx < BM * CH; idx += NT) {
            const int r = idx / CH, c = (idx % CH) * 4;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r < rows) {
                const float *g = q + r * rs + c;
                if (c + 4 <= D) x = *reinterpret_cast<const float4 *>(g);
                else {
                    if (c < D) x.x = g[0];
                    if (c + 1 < D) x.y = g[1];
                    if (c + 2 < D) x.z = g[2];
                }
            }
            x.x *= sc; x.y *= sc; x.z *= sc; x.w *= sc;
            *reinterpret_cast<float4 *>(Qs + r * QST + c) = x;
        }
    } else {
        for (int idx = tid; idx < BM * DB; idx += NT) {
            const int r = idx / DB, c = idx % DB;
            Qs[r * QST + c] = (r < rows && c < D) ? q[r * rs + c] * sc : 0.0f;
        }
    }
}

/* ===================================================================================================
 * Exact float32 kernel.  NT = (BM/TM)·8 threads; thread (ty, tx) owns query rows ty + RS·r (r < TM,
 * RS = BM/TM) and keys tx + 8c (c < TN = BN/8) of S, and O columns 32g + 4tx + e (g < DB/32, e < 4).
 * =================================================================================================== */
template <int DB, int BM, int BN, int TM, bool KV1> struct ff32_exact_cfg {
    static constexpr int NT = (BM / TM) * 8;
    static constexpr int RS = BM / TM;
    static constexpr int TN = BN / 8;
    static constexpr int G = DB / 32;
    static constexpr int QST = DB + 4, KST = DB + 4, VST = DB + 4, PST = BN + 8;
    static constexpr int KVB = KV1 ? 1 : 2; /* K and V buffers each */
    static constexpr int SMEM_FLOATS = BM * QST + KVB * BN * KST + KVB * BN * VST + BM * PST;
    static constexpr size_t SMEM = SMEM_FLOATS * sizeof(float);
};

/* A staggered start. Where the blocks fill the SMs one to four times and each has at most four key tiles, every block
 * of the first wave copies at once and none computes until the copies are nearly all in (docs/PERF-gpu-f32.md "Run
 * 11"). The blocks sms .. 2 sms - 1 in launch order (the first wave's second block of each SM; later waves start when
 * slots free, staggered already) sleep ~1 us (2000 cycles at 1.98 GHz) before their copies, so the first ones' inputs
 * land sooner and they compute while the rest land. H100, against none: `wg1` 3xtf32 seed L = 128 0.0122 -> 0.0116 ms,
 * seed003 B = 32 L = 128 0.0229 -> 0.0216, seed L = 256 0.0332 -> 0.0326-0.0328; tf32 0.0104 -> 0.0096, 0.0190 ->
 * 0.0178, 0.0249 -> 0.0239-0.0241; the exact kernel at seed L = 128 0.0213 -> 0.0209. Asleep, not spinning, so that
 * the SM's other block keeps the issue slots. fill: the caller's blocks are independent of one
 * another's progress (no split-KV) and fill the SMs. FW_F32_DELAY=cycles forces it (0: off), for sms blocks from the
 * SM count or half the blocks on, whichever is first (tests: the small cases' blocks do not fill the SMs). */
static inline void ff32_stagger_set(ff32_args *a, long long blocks, long long n_kt, int sms, bool fill, const fw_knobs *k)
{
    a->delay = 0;
    a->delay_from = sms;
    a->delay_to = 2LL * sms;
    if (k->f32_delay >= 0) {
        a->delay = k->f32_delay;
        a->delay_from = sms < blocks / 2 ? sms : blocks / 2;
        a->delay_to = a->delay_from + sms;
    } else if (fill && sms > 0 && n_kt <= 4 && blocks >= sms && blocks <= 4LL * sms) {
        a->delay = 2000;
    }
}
__device__ __forceinline__ void ff32_stagger(const ff32_args &a)
{
    if (a.delay <= 0) return;
    const long long order = blockIdx.x + gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
    if (order < a.delay_from || order >= a.delay_to) return;
    const long long t0 = clock64();
    while (clock64() - t0 < a.delay) __nanosleep(64);
}

/* KV1 = false: K and V tiles double-buffered together (tile t+1 copies during all of iteration t).
 * KV1 = true: one K and one V buffer, ping-pong: V(t) copies during S(t), K(t+1) during P(t)·V(t);
 * half the K/V shared memory, so larger tiles still fit two blocks per SM. */
template <int DB, int BM, int BN, int TM, int UNR, bool KV1>
__global__ void __launch_bounds__(ff32_exact_cfg<DB, BM, BN, TM, KV1>::NT)
    ff32_exact_kernel(const ff32_args a)
{
    typedef ff32_exact_cfg<DB, BM, BN, TM, KV1> C;
    constexpr int NT = C::NT, RS = C::RS, TN = C::TN, G = C::G;
    constexpr int QST = C::QST, KST = C::KST, VST = C::VST, PST = C::PST;
    extern __shared__ float4 ff32_smem4[];
    float *Qs = reinterpret_cast<float *>(ff32_smem4);
    float *Ks = Qs + BM * QST;           /* KVB stages */
    float *Vs = Ks + C::KVB * BN * KST; /* KVB stages */
    float *Ps = Vs + C::KVB * BN * VST;

    const int tid = threadIdx.x, tx = tid & 7, ty = tid >> 3;
    ff32_stagger(a);
    ff32_block blk;
    blk.init(a, BM, BN, true);
    const int h = blk.h, b = blk.b, m0 = blk.m0, rows = blk.rows, t_begin = blk.t_begin, t_end = blk.t_end;
    const float *qp = blk.qp, *kp = blk.kp, *vp = blk.vp;
    const ff32_band bd = blk.bd;

    int lo[TM], hi[TM];
#pragma unroll
    for (int r = 0; r < TM; r++) ff32_range(a, (long long)m0 + ty + RS * r, &lo[r], &hi[r]);

    float o[TM][4 * G], m[TM], l[TM];
#pragma unroll
    for (int r = 0; r < TM; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < 4 * G; c++) o[r][c] = 0.0f;
    }

    /* Q as it is (S is scaled instead), copied like K: loaded through registers to be pre-scaled, its wait was 16% of
     * the samples at L=128 (Nsight Compute's source view) */
    ff32_load_tile<BM, DB, QST, NT>(Qs, qp, a.qs[2], rows, a.D, a.vec16, tid);
    if (t_begin < t_end) {
        const int n0 = t_begin * BN;
        ff32_load_tile<BN, DB, KST, NT>(Ks, kp + (long long)n0 * a.ks[2], a.ks[2], a.Lk - n0, a.D, a.vec16, tid);
        if (!KV1) /* KV1: V(t_begin) in the loop, as every V; in the prologue 0.5-1% slower at every L */
            ff32_load_tile<BN, DB, VST, NT>(Vs, vp + (long long)n0 * a.vs[2], a.vs[2], a.Lk - n0, a.D, a.vec16, tid);
    }
    ff32_commit();
    if (t_begin >= t_end) ff32_wait<0>(); /* no tile: nothing to wait on the copies later */
    const float sc = a.scale_log2;

    for (int t = t_begin; t < t_end; t++) {
        const int st = KV1 ? 0 : (t - t_begin) & 1;
        /* Tile t landed, and every thread is done with iteration t-1 (stage st^1 and Ps): one barrier
         * covers both, then the copy of tile t+1 into stage st^1 overlaps this whole iteration. */
        ff32_wait<0>();
        __syncthreads();
        if (KV1) { /* V(t) into the V buffer, free since everyone finished P(t-1)·V(t-1) */
            const int n0 = t * BN;
            ff32_load_tile<BN, DB, VST, NT>(Vs, vp + (long long)n0 * a.vs[2], a.vs[2], a.Lk - n0, a.D, a.vec16, tid);
            ff32_commit();
        } else if (t + 1 < t_end) {
            ff32_load_kv<BN, DB, KST, VST, NT>(Ks + (st ^ 1) * BN * KST, Vs + (st ^ 1) * BN * VST, kp, vp, a, t + 1, tid);
        }
        const float *Kt = Ks + st * BN * KST, *Vt = Vs + st * BN * VST;

        /* S = Q·Kᵀ, then times scale·log2 e (log2 units) */
        float s[TM][TN];
#pragma unroll
        for (int r = 0; r < TM; r++)
#pragma unroll
            for (int c = 0; c < TN; c++) s[r][c] = 0.0f;
#pragma unroll UNR
        for (int d = 0; d < DB; d += 4) {
            float4 qv[TM], kv[TN];
#pragma unroll
            for (int r = 0; r < TM; r++) qv[r] = *reinterpret_cast<const float4 *>(Qs + (ty + RS * r) * QST + d);
#pragma unroll
            for (int c = 0; c < TN; c++) kv[c] = *reinterpret_cast<const float4 *>(Kt + (tx + 8 * c) * KST + d);
#pragma unroll
            for (int r = 0; r < TM; r++)
#pragma unroll
                for (int c = 0; c < TN; c++) {
                    float x = s[r][c];
                    x = fmaf(qv[r].x, kv[c].x, x);
                    x = fmaf(qv[r].y, kv[c].y, x);
                    x = fmaf(qv[r].z, kv[c].z, x);
                    x = fmaf(qv[r].w, kv[c].w, x);
                    s[r][c] = x;
                }
        }
#pragma unroll
        for (int r = 0; r < TM; r++)
#pragma unroll
            for (int c = 0; c < TN; c++) s[r][c] *= sc;
        const int n0 = t * BN;
        if (n0 < bd.lo_max || n0 + BN > bd.hi_min) { /* tile straddles the band's edge (or Lk) */
#pragma unroll
            for (int r = 0; r < TM; r++)
#pragma unroll
                for (int c = 0; c < TN; c++) {
                    const int j = n0 + tx + 8 * c;
                    if (j < lo[r] || j >= hi[r]) s[r][c] = -INFINITY;
                }
        }
        /* online softmax */
#pragma unroll
        for (int r = 0; r < TM; r++) {
            float mx = s[r][0];
#pragma unroll
            for (int c = 1; c < TN; c++) mx = fmaxf(mx, s[r][c]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            const float mn = fmaxf(m[r], mx);
            const float mu = mn == -INFINITY ? 0.0f : mn;
            const float alpha = ff32_exp2(m[r] - mu);
            m[r] = mn;
            float ls = 0.0f;
#pragma unroll
            for (int c = 0; c < TN; c++) {
                const float pv = ff32_exp2(s[r][c] - mu);
                s[r][c] = pv;
                ls += pv;
            }
            l[r] = l[r] * alpha + ls;
#pragma unroll
            for (int c = 0; c < 4 * G; c++) o[r][c] *= alpha;
        }
#pragma unroll
        for (int r = 0; r < TM; r++)
#pragma unroll
            for (int c = 0; c < TN; c++) Ps[(ty + RS * r) * PST + tx + 8 * c] = s[r][c];
        if (KV1) ff32_wait<0>(); /* V(t) */
        __syncthreads();
        if (KV1 && t + 1 < t_end) { /* K(t+1) into the K buffer, which nobody reads any more */
            const int n1 = (t + 1) * BN;
            ff32_load_tile<BN, DB, KST, NT>(Ks, kp + (long long)n1 * a.ks[2], a.ks[2], a.Lk - n1, a.D, a.vec16, tid);
            ff32_commit();
        }

        /* O += P·V */
#pragma unroll 2
        for (int j = 0; j < BN; j += 4) {
            float4 pv[TM];
#pragma unroll
            for (int r = 0; r < TM; r++) pv[r] = *reinterpret_cast<const float4 *>(Ps + (ty + RS * r) * PST + j);
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                float4 vv[G];
#pragma unroll
                for (int g = 0; g < G; g++)
                    vv[g] = *reinterpret_cast<const float4 *>(Vt + (j + jj) * VST + 32 * g + 4 * tx);
#pragma unroll
                for (int r = 0; r < TM; r++) {
                    const float p = jj == 0 ? pv[r].x : (jj == 1 ? pv[r].y : (jj == 2 ? pv[r].z : pv[r].w));
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        o[r][4 * g + 0] = fmaf(p, vv[g].x, o[r][4 * g + 0]);
                        o[r][4 * g + 1] = fmaf(p, vv[g].y, o[r][4 * g + 1]);
                        o[r][4 * g + 2] = fmaf(p, vv[g].z, o[r][4 * g + 2]);
                        o[r][4 * g + 3] = fmaf(p, vv[g].w, o[r][4 * g + 3]);
                    }
                }
            }
        }
    }

    /* epilogue: O / l, LSE = (m + log2 l)·ln 2 */
    float *op = a.o + b * a.os[0] + h * a.os[1];
#pragma unroll
    for (int r = 0; r < TM; r++) {
        float lr = l[r];
        lr += __shfl_xor_sync(0xffffffffu, lr, 1);
        lr += __shfl_xor_sync(0xffffffffu, lr, 2);
        lr += __shfl_xor_sync(0xffffffffu, lr, 4);
        const int row = ty + RS * r;
        if (row >= rows) continue;
        const bool live = lr > 0.0f || lr != lr;
        const float inv = live ? 1.0f / lr : 0.0f;
        float *orow = op + (long long)(m0 + row) * a.os[2];
#pragma unroll
        for (int g = 0; g < G; g++) {
            const int c0 = 32 * g + 4 * tx;
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (c0 + e < a.D) orow[c0 + e] = o[r][4 * g + e] * inv;
        }
        if (a.lse && tx == 0)
            a.lse[((long long)b * a.H + h) * a.Lq + m0 + row] =
                live ? (m[r] == -INFINITY ? 0.0f : m[r]) * 0.69314718055994531f + logf(lr) : -INFINITY;
    }
}

/* ===================================================================================================
 * Tensor-core kernel (tf32 / 3xtf32). 128 threads = 4 warps; warp w owns MW m16 tiles of query rows,
 * 16·MW·w .. 16·MW·(w+1)-1, so each B fragment read from shared memory (and split) feeds MW mma.
 * Q·Kᵀ permutes d inside each 8-wide k-step (slot t ↔ d 2t, slot t+4 ↔ d 2t+1) so that the A and B
 * fragments are 8-byte loads; P·V permutes the keys the same way so that P stays in registers.
 * =================================================================================================== */
template <int DB, int BN, int MW> struct ff32_tc_cfg {
    static constexpr int BM = 64 * MW, NT = 128;
    static constexpr int QST = DB + 8, KST = DB + 8, VST = DB + 4;
    static constexpr int SMEM_FLOATS = BM * QST + 2 * BN * KST + 2 * BN * VST;
    static constexpr size_t SMEM = SMEM_FLOATS * sizeof(float);
};

__device__ __forceinline__ unsigned ff32_tf32(float x)
{
    unsigned y;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(x));
    return y;
}
/* x rounded to tf32 (to nearest, ties away) by integer ops: 2 instructions, where cvt.rna.tf32.f32 took more time in
 * the split (docs/PERF-gpu-f32.md) and in the wgmma kernels' tf32 mode */
__device__ __forceinline__ unsigned ff32_round_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }
template <bool SPLIT> __device__ __forceinline__ void ff32_split(float x, unsigned &big, unsigned &small)
{
    if (SPLIT) { /* big rounded, small = x - big exact (the tensor cores read it truncated): 3 instructions, against 5
                  * with cvt.rna for both; truncating big as ff32_wg_split does was slower here and erred more */
        big = ff32_round_tf32(x);
        small = __float_as_uint(x - __uint_as_float(big));
    } else {
        big = ff32_tf32(x);
        small = 0u;
    }
}
__device__ __forceinline__ void ff32_mma(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c += a·b in tf32, or in 3xtf32 (SPLIT: small·big + big·small + big·big) from split operands. */
template <bool SPLIT>
__device__ __forceinline__ void ff32_mma3(float *c, const unsigned *ab, const unsigned *as, unsigned b0b, unsigned b0s,
                                          unsigned b1b, unsigned b1s)
{
    if (SPLIT) {
        ff32_mma(c, as, b0b, b1b);
        ff32_mma(c, ab, b0s, b1s);
    }
    ff32_mma(c, ab, b0b, b1b);
}

template <int DB, int BN, int MW, bool SPLIT>
__global__ void __launch_bounds__(128) ff32_tc_kernel(const ff32_args a)
{
    typedef ff32_tc_cfg<DB, BN, MW> C;
    constexpr int BM = C::BM, NT = C::NT, QST = C::QST, KST = C::KST, VST = C::VST;
    constexpr int NS = BN / 8; /* S n-tiles */
    constexpr int NO = DB / 8; /* O n-tiles */
    extern __shared__ float4 ff32_smem4[];
    float *Qs = reinterpret_cast<float *>(ff32_smem4);
    float *Ks = Qs + BM * QST;
    float *Vs = Ks + 2 * BN * KST;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    ff32_block blk;
    blk.init(a, BM, BN);
    const int h = blk.h, b = blk.b, m0 = blk.m0, rows = blk.rows, t_begin = blk.t_begin, t_end = blk.t_end;
    const float *qp = blk.qp, *kp = blk.kp, *vp = blk.vp;
    const ff32_band bd = blk.bd;
    const int wr0 = warp * 16 * MW; /* first row of this warp; thread rows wr0 + 16mt + g (+8) */
    int lo[MW][2], hi[MW][2];
    float o[MW][NO][4], m[MW][2], l[MW][2];
#pragma unroll
    for (int mt = 0; mt < MW; mt++) {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            ff32_range(a, (long long)m0 + wr0 + 16 * mt + g + 8 * rr, &lo[mt][rr], &hi[mt][rr]);
            m[mt][rr] = -INFINITY;
            l[mt][rr] = 0.0f;
        }
#pragma unroll
        for (int n = 0; n < NO; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    }

    if (t_begin < t_end) ff32_load_kv<BN, DB, KST, VST, NT>(Ks, Vs, kp, vp, a, t_begin, tid);
    ff32_load_q<BM, DB, QST, NT>(Qs, qp, a.qs[2], rows, a.D, a.scale_log2, a.vec16, tid);

    for (int t = t_begin; t < t_end; t++) {
        const int st = (t - t_begin) & 1;
        ff32_wait<0>();
        __syncthreads(); /* tile t landed; everyone is done with stage st^1 */
        if (t + 1 < t_end) {
            ff32_load_kv<BN, DB, KST, VST, NT>(Ks + (st ^ 1) * BN * KST, Vs + (st ^ 1) * BN * VST, kp, vp, a, t + 1, tid);
        }
        const float *Kt = Ks + st * BN * KST, *Vt = Vs + st * BN * VST;

        float s[MW][NS][4];
#pragma unroll
        for (int mt = 0; mt < MW; mt++)
#pragma unroll
            for (int n = 0; n < NS; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll 2
        for (int k0 = 0; k0 < DB; k0 += 8) {
            unsigned ab[MW][4], as[MW][4];
#pragma unroll
            for (int mt = 0; mt < MW; mt++) {
                const float2 x0 = *reinterpret_cast<const float2 *>(Qs + (wr0 + 16 * mt + g) * QST + k0 + 2 * tg);
                const float2 x1 = *reinterpret_cast<const float2 *>(Qs + (wr0 + 16 * mt + g + 8) * QST + k0 + 2 * tg);
                ff32_split<SPLIT>(x0.x, ab[mt][0], as[mt][0]);
                ff32_split<SPLIT>(x1.x, ab[mt][1], as[mt][1]);
                ff32_split<SPLIT>(x0.y, ab[mt][2], as[mt][2]);
                ff32_split<SPLIT>(x1.y, ab[mt][3], as[mt][3]);
            }
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const float2 kb = *reinterpret_cast<const float2 *>(Kt + (n * 8 + g) * KST + k0 + 2 * tg);
                unsigned b0b, b0s, b1b, b1s;
                ff32_split<SPLIT>(kb.x, b0b, b0s);
                ff32_split<SPLIT>(kb.y, b1b, b1s);
#pragma unroll
                for (int mt = 0; mt < MW; mt++) ff32_mma3<SPLIT>(s[mt][n], ab[mt], as[mt], b0b, b0s, b1b, b1s);
            }
        }
        const int n0 = t * BN;
        const bool edge = n0 < bd.lo_max || n0 + BN > bd.hi_min;
#pragma unroll
        for (int mt = 0; mt < MW; mt++) {
            if (edge) {
#pragma unroll
                for (int n = 0; n < NS; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int j = n0 + n * 8 + 2 * tg + (e & 1), rr = e >> 1;
                        if (j < lo[mt][rr] || j >= hi[mt][rr]) s[mt][n][e] = -INFINITY;
                    }
            }
#pragma unroll
            for (int rr = 0; rr < 2; rr++) {
                float mx = fmaxf(s[mt][0][2 * rr], s[mt][0][2 * rr + 1]);
#pragma unroll
                for (int n = 1; n < NS; n++) mx = fmaxf(mx, fmaxf(s[mt][n][2 * rr], s[mt][n][2 * rr + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mn = fmaxf(m[mt][rr], mx);
                const float mu = mn == -INFINITY ? 0.0f : mn;
                const float alpha = ff32_exp2(m[mt][rr] - mu);
                m[mt][rr] = mn;
                float ls = 0.0f;
#pragma unroll
                for (int n = 0; n < NS; n++) {
                    s[mt][n][2 * rr] = ff32_exp2(s[mt][n][2 * rr] - mu);
                    s[mt][n][2 * rr + 1] = ff32_exp2(s[mt][n][2 * rr + 1] - mu);
                    ls += s[mt][n][2 * rr] + s[mt][n][2 * rr + 1];
                }
                l[mt][rr] = l[mt][rr] * alpha + ls;
#pragma unroll
                for (int n = 0; n < NO; n++) {
                    o[mt][n][2 * rr] *= alpha;
                    o[mt][n][2 * rr + 1] *= alpha;
                }
            }
        }
        /* O += P·V: k-slot t ↔ key 2t, slot t+4 ↔ key 2t+1 within each 8-key step */
#pragma unroll
        for (int n = 0; n < NS; n++) {
            unsigned pb[MW][4], ps[MW][4];
#pragma unroll
            for (int mt = 0; mt < MW; mt++) {
                ff32_split<SPLIT>(s[mt][n][0], pb[mt][0], ps[mt][0]); /* P[g][2tg]     -> a0 */
                ff32_split<SPLIT>(s[mt][n][2], pb[mt][1], ps[mt][1]); /* P[g+8][2tg]   -> a1 */
                ff32_split<SPLIT>(s[mt][n][1], pb[mt][2], ps[mt][2]); /* P[g][2tg+1]   -> a2 */
                ff32_split<SPLIT>(s[mt][n][3], pb[mt][3], ps[mt][3]); /* P[g+8][2tg+1] -> a3 */
            }
            const float *v0 = Vt + (n * 8 + 2 * tg) * VST + g, *v1 = v0 + VST;
#pragma unroll
            for (int c = 0; c < NO; c++) {
                unsigned b0b, b0s, b1b, b1s;
                ff32_split<SPLIT>(v0[c * 8], b0b, b0s);
                ff32_split<SPLIT>(v1[c * 8], b1b, b1s);
#pragma unroll
                for (int mt = 0; mt < MW; mt++) ff32_mma3<SPLIT>(o[mt][c], pb[mt], ps[mt], b0b, b0s, b1b, b1s);
            }
        }
    }

    float *op = a.o + b * a.os[0] + h * a.os[1];
#pragma unroll
    for (int mt = 0; mt < MW; mt++) {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            float lr = l[mt][rr];
            lr += __shfl_xor_sync(0xffffffffu, lr, 1);
            lr += __shfl_xor_sync(0xffffffffu, lr, 2);
            const int row = wr0 + 16 * mt + g + 8 * rr;
            if (row >= rows) continue;
            const bool live = lr > 0.0f || lr != lr;
            const float inv = live ? 1.0f / lr : 0.0f;
            float *orow = op + (long long)(m0 + row) * a.os[2];
#pragma unroll
            for (int c = 0; c < NO; c++) {
                const int col = c * 8 + 2 * tg;
                if (col < a.D) orow[col] = o[mt][c][2 * rr] * inv;
                if (col + 1 < a.D) orow[col + 1] = o[mt][c][2 * rr + 1] * inv;
            }
            if (a.lse && tg == 0)
                a.lse[((long long)b * a.H + h) * a.Lq + m0 + row] =
                    live ? (m[mt][rr] == -INFINITY ? 0.0f : m[mt][rr]) * 0.69314718055994531f + logf(lr) : -INFINITY;
        }
    }
}

/* ---- launch helpers used by the per-bucket files ------------------------------------------------- */
template <int DB, int BM, int BN, int TM, int UNR, bool KV1>
static cudaError_t ff32_launch_exact(const ff32_args *a, int batch, cudaStream_t s, const fw_knobs *k)
{
    typedef ff32_exact_cfg<DB, BM, BN, TM, KV1> C;
    cudaError_t e = fw_cuda_smem_limit<ff32_exact_kernel<DB, BM, BN, TM, UNR, KV1>>(C::SMEM);
    if (e != cudaSuccess) return e;
    const unsigned nqb = (unsigned)((a->Lq + BM - 1) / BM);
    const dim3 grid = a->uneven ? dim3((unsigned)a->H, (unsigned)batch, nqb) : dim3(nqb, (unsigned)a->H, (unsigned)batch);
    ff32_args x = *a;
    ff32_stagger_set(&x, (long long)nqb * a->H * batch, (a->Lk + BN - 1) / BN, a->sms, true, k);
    ff32_exact_kernel<DB, BM, BN, TM, UNR, KV1><<<grid, C::NT, C::SMEM, s>>>(x);
    return cudaGetLastError();
}

template <int DB, int BN, int MW, bool SPLIT>
static cudaError_t ff32_launch_tc(const ff32_args *a, int batch, cudaStream_t s)
{
    typedef ff32_tc_cfg<DB, BN, MW> C;
    cudaError_t e = fw_cuda_smem_limit<ff32_tc_kernel<DB, BN, MW, SPLIT>>(C::SMEM);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((a->Lq + C::BM - 1) / C::BM), (unsigned)a->H, (unsigned)batch);
    ff32_tc_kernel<DB, BN, MW, SPLIT><<<grid, C::NT, C::SMEM, s>>>(*a);
    return cudaGetLastError();
}

#endif /* __CUDACC__ */
#endif
