/* cuda-flash: FlashAttention-2 forward on tensor cores (mma.sync m16n8k16, f16/bf16 operands,
 * f32 accumulation), for sm_80 and later.
 *
 * One thread block computes BM query rows of one (batch, head); each of its W warps owns
 * BM / W rows (MT = BM / (16 W) m16 tiles). K/V tiles of BN keys stream through a ST-stage
 * cp.async ring in shared memory (rows padded by 16 bytes so that ldmatrix is conflict-free);
 * S = Q Kᵀ stays in registers, the online softmax (exp2 with scale·log2 e folded in) runs on
 * the accumulator fragment, and that fragment is repacked in registers as the A operand of the
 * P·V mma. Out-of-range rows and padded head-dim columns are zero-filled by cp.async; masked
 * tiles (causal, window, Lk boundary) are predicated, fully masked tiles are never visited.
 *
 * Templates are compile-time specialisation only: element type, padded head dim, tile shape,
 * Q fragments kept in registers (QREG), softmax sub-tile width (SB). */
#ifndef FW_FLASH_TC_CUH
#define FW_FLASH_TC_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include "cuda_common.h"

/* Kernel arguments (plain C struct, passed by value). */
typedef struct fw_flash_tc_params {
    const void *q, *k, *v;
    void *o;
    float *lse;
    int64_t q_sb, q_sh, q_ss; /* strides (elements) of batch, head, seq */
    int64_t k_sb, k_sh, k_ss;
    int64_t v_sb, v_sh, v_ss;
    int64_t o_sb, o_sh, o_ss;
    int Lq, Lk, H, group, d; /* d: the real head dim (<= the kernel's padded D), multiple of 8 */
    int wl, wr, off;         /* window (clamped so that sums cannot overflow), diag offset Lk-Lq */
    int has_window;
    int num_m_blocks;
    int reverse_m; /* causal: schedule the longest (last) query blocks first */
    float scale_log2; /* scale * log2(e) */
    float scale;
} fw_flash_tc_params;

/* Host-side launch of one configuration; returns a cudaError_t (cudaSuccess on success). */
typedef cudaError_t (*fw_flash_tc_launch_fn)(const fw_flash_tc_params *p, int batch,
                                             cudaStream_t stream);

/* Shared memory of one configuration: Q tile plus ST stages of K and V, rows padded by 8. */
#define FW_FLASH_TC_SMEM(D, BM, BN, ST) ((size_t)((BM) + 2 * (ST) * (BN)) * ((D) + 8) * 2)

/* One compiled configuration (a point of the backend's search space). */
typedef struct fw_flash_tc_variant {
    int d, bm, bn, warps, stages, qreg, sub; /* sub: keys per softmax sub-tile (== bn: none) */
    fw_flash_tc_launch_fn f16, bf16;
    int wg; /* 1: the wgmma kernel (flash_wg.cuh, sm_90a, compute capability 9.0 only) */
} fw_flash_tc_variant;

#define FW_FLASH_TC_VARIANT(D, BM, BN, W, ST, QR, SB)                                              \
    { D, BM, BN, W, ST, QR, SB, fwtc::flash_launch<__half, D, BM, BN, W, ST, QR, SB>,              \
      fwtc::flash_launch<__nv_bfloat16, D, BM, BN, W, ST, QR, SB>, 0 }

#ifdef __cplusplus
extern "C" {
#endif
/* Defined in flash_tc_d<D>.cu, one file per padded head dim. */
extern const fw_flash_tc_variant fw_flash_tc_variants_d32[], fw_flash_tc_variants_d64[],
    fw_flash_tc_variants_d96[], fw_flash_tc_variants_d128[], fw_flash_tc_variants_d256[];
extern const int fw_flash_tc_nvariants_d32, fw_flash_tc_nvariants_d64, fw_flash_tc_nvariants_d96,
    fw_flash_tc_nvariants_d128, fw_flash_tc_nvariants_d256;
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__

namespace fwtc {

template <typename T> struct pack2;
template <> struct pack2<__half> {
    static __device__ __forceinline__ uint32_t make(float a, float b)
    {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};
template <> struct pack2<__nv_bfloat16> {
    static __device__ __forceinline__ uint32_t make(float a, float b)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
};

template <typename T>
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__half>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float *c, const uint32_t *a, uint32_t b0,
                                                       uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                        uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                          uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

__device__ __forceinline__ void cp_async16(uint32_t saddr, const void *g, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(g), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Does the tile of BM query rows from m0 × BN keys from n0 need the per-element mask: it crosses Lk, or
 * (with a window or causal mask) a window edge. Tiles wholly inside the band do not. P: any kernel
 * parameter struct with Lk, has_window, off, wl, wr. */
template <int BM, int BN, typename P>
__device__ __forceinline__ bool tile_needs_mask(const P &p, int m0, int n0)
{
    bool need = n0 + BN > p.Lk;
    if (p.has_window) {
        const bool full = (m0 + BM - 1 + p.off - p.wl <= n0) && (m0 + p.off + p.wr >= n0 + BN - 1);
        need = need || !full;
    }
    return need;
}

/* The key tiles that query rows m0 .. m0 + BM - 1 may see: n_tiles tiles of BN keys from n_begin (a
 * multiple of BN); tiles wholly outside the window/causal band are never listed. P: any kernel parameter
 * struct with Lq, Lk, has_window, off, wl, wr. */
template <int BM, int BN, typename P>
__device__ __forceinline__ void key_tile_range(const P &p, int m0, int &n_begin, int &n_tiles)
{
    const int mlast = min(m0 + BM, p.Lq) - 1;
    int lo = 0, hi = p.Lk;
    if (p.has_window) {
        lo = max(0, m0 + p.off - p.wl);
        hi = min(p.Lk, mlast + p.off + p.wr + 1);
    }
    n_begin = (lo / BN) * BN;
    n_tiles = hi > n_begin ? (hi - n_begin + BN - 1) / BN : 0;
}

/* The A fragment (m16 × k16) of one k16 step from the accumulators of its two n8 tiles: the C layout
 * of an m16n8 product is the A layout of half a k16 step, so P (and dS) feed the next product
 * straight from registers. */
template <typename T>
__device__ __forceinline__ void acc_to_a(const float (&lo)[4], const float (&hi)[4], uint32_t (&a)[4])
{
    a[0] = pack2<T>::make(lo[0], lo[1]);
    a[1] = pack2<T>::make(lo[2], lo[3]);
    a[2] = pack2<T>::make(hi[0], hi[1]);
    a[3] = pack2<T>::make(hi[2], hi[3]);
}

/* acc[mt][2·np .. 2·np+1] += A[mt] · B_np for np < NP and every m16 tile mt: B_np is the k16 × n16 block
 * that ldmatrix (TRANS: .trans, for B stored k-major) reads at lane address b + 2·(np·step + off), with
 * step and off in elements of the shared tile. */
template <typename T, bool TRANS, int MT, int NP, int N>
__device__ __forceinline__ void mma_ab(float (&acc)[MT][N][4], const uint32_t (&a)[MT][4], uint32_t b, int off, int step)
{
    static_assert(2 * NP <= N, "accumulator tiles");
#pragma unroll
    for (int np = 0; np < NP; np++) {
        uint32_t b0, b1, b2, b3;
        if (TRANS)
            ldsm_x4_t(b + (uint32_t)((np * step + off) * 2), b0, b1, b2, b3);
        else
            ldsm_x4(b + (uint32_t)((np * step + off) * 2), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            mma16816<T>(acc[mt][2 * np], a[mt], b0, b1);
            mma16816<T>(acc[mt][2 * np + 1], a[mt], b2, b3);
        }
    }
}

/* Per-thread cursor over a (seq, D) matrix for tile loads: thread tid copies the 16-byte chunks
 * (row_in + i * RS, col) of each tile, RS = NT / (D / 8). Keeping one running pointer and one
 * row step (instead of an address per chunk) keeps the register count down. */
template <typename T, int D, int NT> struct tile_cursor {
    static constexpr int CPR = D / 8;
    static constexpr bool EVEN = NT % CPR == 0; /* else (D = 96): chunk-by-chunk addressing */
    const T *ptr;  /* EVEN: &g[(row0 + row_in) * ss + col * 8]; else &g[row0 * ss] */
    int64_t step;  /* EVEN: RS * ss; else ss */
    int rows_left; /* nrows - (row0 + row_in) (EVEN) or nrows - row0 */
    int d;
    __device__ __forceinline__ void init(const T *g, int64_t ss, int row0, int nrows, int d_, int tid)
    {
        d = d_;
        if (EVEN) {
            const int row_in = tid / CPR, col = tid % CPR;
            ptr = g + (int64_t)(row0 + row_in) * ss + col * 8;
            step = (int64_t)(NT / CPR) * ss;
            rows_left = nrows - row0 - row_in;
        } else {
            ptr = g + (int64_t)row0 * ss;
            step = ss;
            rows_left = nrows - row0;
        }
    }
    /* Copy ROWS rows into shared memory (row stride SD elements) and advance by ROWS rows.
     * Rows past the end and columns >= d are zero-filled. */
    template <int ROWS, int SD>
    __device__ __forceinline__ void load(uint32_t sbase, int tid)
    {
        if constexpr (EVEN) {
            constexpr int RS = NT / CPR;
            static_assert(ROWS % RS == 0, "tile chunks must divide among the threads");
            const uint32_t s0 = sbase + (uint32_t)(((tid / CPR) * SD + (tid % CPR) * 8) * 2);
            const bool colok = (tid % CPR) * 8 < d;
            const T *p = ptr;
#pragma unroll
            for (int i = 0; i < ROWS / RS; i++) {
                const bool ok = colok && (i * RS < rows_left);
                cp_async16(s0 + (uint32_t)(i * RS * SD * 2), p, ok ? 16 : 0);
                p += step;
            }
            ptr = p;
        } else {
            constexpr int TOTAL = ROWS * CPR;
#pragma unroll
            for (int i = 0; i < (TOTAL + NT - 1) / NT; i++) {
                const int c = tid + i * NT;
                if (TOTAL % NT == 0 || c < TOTAL) {
                    const int r = c / CPR, col = c % CPR;
                    const bool ok = r < rows_left && col * 8 < d;
                    const T *src = ok ? ptr + (int64_t)r * step + col * 8 : ptr;
                    cp_async16(sbase + (uint32_t)((r * SD + col * 8) * 2), src, ok ? 16 : 0);
                }
            }
            ptr += (int64_t)ROWS * step;
        }
        rows_left -= ROWS;
    }
};

template <typename T, int D, int BM, int BN, int W, int ST, bool QREG, int SB>
__global__ void __launch_bounds__(W * 32) flash_fwd_kernel(const fw_flash_tc_params p)
{
    constexpr int NT = W * 32;
    constexpr int MT = BM / (16 * W); /* m16 tiles per warp */
    constexpr int SD = D + 8;         /* padded smem row stride (elements) */
    constexpr int NN = SB / 8;        /* n8 tiles of S (one sub-tile of SB keys) */
    constexpr int ND = D / 8;         /* n8 tiles of O */
    constexpr int KD = D / 16;        /* k16 steps of Q Kᵀ */
    constexpr int KN = SB / 16;       /* k16 steps of P V */
    static_assert(MT >= 1 && MT * 16 * W == BM, "BM must be a multiple of 16 * warps");
    static_assert(D % 16 == 0 && BN % 16 == 0, "tile sizes");
    static_assert(SB % 16 == 0 && BN % SB == 0, "the sub-tile must divide the key tile");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sQ = reinterpret_cast<T *>(smem_raw);
    const uint32_t sQa = (uint32_t)__cvta_generic_to_shared(sQ);
    const uint32_t sKa = sQa + BM * SD * 2;
    const uint32_t sVa = sKa + ST * BN * SD * 2;
    constexpr uint32_t KV_STAGE_BYTES = BN * SD * 2;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t4 = lane & 3;
    int mb = blockIdx.x;
    if (p.reverse_m) mb = p.num_m_blocks - 1 - mb;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
    const int m0 = mb * BM;

    const T *qg = reinterpret_cast<const T *>(p.q) + (int64_t)b * p.q_sb + (int64_t)h * p.q_sh;
    const T *kg = reinterpret_cast<const T *>(p.k) + (int64_t)b * p.k_sb + (int64_t)hk * p.k_sh;
    const T *vg = reinterpret_cast<const T *>(p.v) + (int64_t)b * p.v_sb + (int64_t)hk * p.v_sh;

    int n_begin, n_tiles; /* the key tiles any row of this block may see */
    key_tile_range<BM, BN>(p, m0, n_begin, n_tiles);

    /* Prologue: Q and the first ST-1 K/V tiles. */
    {
        tile_cursor<T, D, NT> qc;
        qc.init(qg, p.q_ss, m0, p.Lq, p.d, tid);
        qc.template load<BM, SD>(sQa, tid);
    }
    tile_cursor<T, D, NT> kc, vc;
    kc.init(kg, p.k_ss, n_begin, p.Lk, p.d, tid);
    vc.init(vg, p.v_ss, n_begin, p.Lk, p.d, tid);
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < n_tiles) {
            kc.template load<BN, SD>(sKa + s * KV_STAGE_BYTES, tid);
            vc.template load<BN, SD>(sVa + s * KV_STAGE_BYTES, tid);
        }
        cp_async_commit();
    }

    float acc_o[MT][ND][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc_o[mt][j][e] = 0.f;
    float row_m[MT][2], row_l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            row_m[mt][r] = -INFINITY;
            row_l[mt][r] = 0.f;
        }

    /* ldmatrix lane addressing (byte offsets within a tile). */
    const int wrow0 = warp * MT * 16;
    /* A (Q): matrices (r0-7,c0-7), (r8-15,c0-7), (r0-7,c8-15), (r8-15,c8-15) */
    const uint32_t q_lane = (uint32_t)(((wrow0 + (lane & 15)) * SD + (lane >> 4) * 8) * 2);
    /* B (K, non-trans): (n0-7,k0-7), (n0-7,k8-15), (n8-15,k0-7), (n8-15,k8-15) */
    const uint32_t k_lane = (uint32_t)((((lane & 7) + ((lane >> 4) << 3)) * SD + ((lane >> 3) & 1) * 8) * 2);
    /* B (V, trans): (k0-7,n0-7), (k8-15,n0-7), (k0-7,n8-15), (k8-15,n8-15) */
    const uint32_t v_lane = (uint32_t)(((lane & 15) * SD + (lane >> 4) * 8) * 2);

    uint32_t qf[QREG ? MT : 1][QREG ? KD : 1][4];

    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<ST - 2>();
        __syncthreads();
        {
            const int nx = it + ST - 1;
            if (nx < n_tiles) {
                const int slot = nx % ST;
                kc.template load<BN, SD>(sKa + slot * KV_STAGE_BYTES, tid);
                vc.template load<BN, SD>(sVa + slot * KV_STAGE_BYTES, tid);
            }
            cp_async_commit();
        }
        if (QREG && it == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < KD; kk++)
                    ldsm_x4(sQa + q_lane + (uint32_t)((mt * 16 * SD + kk * 16) * 2), qf[mt][kk][0],
                            qf[mt][kk][1], qf[mt][kk][2], qf[mt][kk][3]);
        }
        const int slot = it % ST;
        const uint32_t sK = sKa + slot * KV_STAGE_BYTES, sV = sVa + slot * KV_STAGE_BYTES;
        const int n0 = n_begin + it * BN;

        /* Mask: only on tiles that cross the Lk boundary or the window's edges. */
        const bool need_mask = tile_needs_mask<BM, BN>(p, m0, n0);
        /* The tile is processed in BN / SB sub-tiles of SB keys (SB < BN: fewer S registers live,
         * one barrier and one load round per BN keys). Not unrolled, so that the sub-tiles do not
         * overlap in registers. */
#pragma unroll 1
        for (int sb = 0; sb < BN / SB; sb++) {
            const uint32_t sKs = sK + (uint32_t)(sb * SB * SD * 2), sVs = sV + (uint32_t)(sb * SB * SD * 2);
            const int ns = n0 + sb * SB;
            /* S = Q Kᵀ */
            float s[MT][NN][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < NN; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][j][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (QREG) {
#pragma unroll
                        for (int e = 0; e < 4; e++) a[mt][e] = qf[QREG ? mt : 0][QREG ? kk : 0][e];
                    } else {
                        ldsm_x4(sQa + q_lane + (uint32_t)((mt * 16 * SD + kk * 16) * 2), a[mt][0], a[mt][1],
                                a[mt][2], a[mt][3]);
                    }
                }
                mma_ab<T, false, MT, NN / 2>(s, a, sKs + k_lane, kk * 16, 16 * SD);
            }

            /* Mask the sub-tile (only on tiles that cross the Lk boundary or a window edge). */
            if (need_mask) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const int i = m0 + wrow0 + mt * 16 + g + r * 8;
                        int jlo = 0, jhi = p.Lk; /* visible: jlo <= j < jhi */
                        if (p.has_window) {
                            jlo = max(jlo, i + p.off - p.wl);
                            jhi = min(jhi, i + p.off + p.wr + 1);
                        }
#pragma unroll
                        for (int j = 0; j < NN; j++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const int col = ns + j * 8 + t4 * 2 + e;
                                if (col < jlo || col >= jhi) s[mt][j][r * 2 + e] = -INFINITY;
                            }
                    }
            }

            /* Online softmax (base 2). O is rescaled on every tile: skipping the rescale when no
             * row max moved (a warp vote) measured 3-8% slower on H200 (docs/PERF-gpu-tc.md). */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float mx = row_m[mt][r];
#pragma unroll
                    for (int j = 0; j < NN; j++) mx = fmaxf(mx, fmaxf(s[mt][j][r * 2], s[mt][j][r * 2 + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float msc = mx == -INFINITY ? 0.f : mx * p.scale_log2;
                    const float alpha = fast_exp2(row_m[mt][r] * p.scale_log2 - msc);
                    row_m[mt][r] = mx;
                    float sum = 0.f;
#pragma unroll
                    for (int j = 0; j < NN; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const float v = fast_exp2(fmaf(s[mt][j][r * 2 + e], p.scale_log2, -msc));
                            s[mt][j][r * 2 + e] = v;
                            sum += v;
                        }
                    row_l[mt][r] = row_l[mt][r] * alpha + sum;
#pragma unroll
                    for (int j = 0; j < ND; j++) {
                        acc_o[mt][j][r * 2] *= alpha;
                        acc_o[mt][j][r * 2 + 1] *= alpha;
                    }
                }

            /* O += P V, P repacked from the S accumulators in registers. */
#pragma unroll
            for (int kk = 0; kk < KN; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) acc_to_a<T>(s[mt][2 * kk], s[mt][2 * kk + 1], a[mt]);
                mma_ab<T, true, MT, ND / 2>(acc_o, a, sVs + v_lane, kk * 16 * SD, 16);
            }
        }
    }

    /* Epilogue: normalise, stage this warp's rows through its own part of sQ, 16-byte stores. */
    cp_async_wait<0>();
    __syncthreads();
    T *og = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (int64_t)h * p.o_sh;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = row_l[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.f ? 1.f / l : (l == l ? 0.f : l);
            const int row = wrow0 + mt * 16 + g + r * 8;
#pragma unroll
            for (int j = 0; j < ND; j++) {
                const uint32_t v = pack2<T>::make(acc_o[mt][j][r * 2] * inv, acc_o[mt][j][r * 2 + 1] * inv);
                *reinterpret_cast<uint32_t *>(sQ + row * SD + j * 8 + t4 * 2) = v;
            }
            if (p.lse && t4 == 0 && m0 + row < p.Lq) {
                float lse;
                if (l > 0.f)
                    lse = row_m[mt][r] * p.scale + logf(l);
                else
                    lse = l == l ? -INFINITY : l;
                p.lse[((int64_t)b * p.H + h) * p.Lq + m0 + row] = lse;
            }
        }
    __syncwarp();
    {
        constexpr int CPR = D / 8;
        constexpr int TOTAL = MT * 16 * CPR;
#pragma unroll
        for (int i = 0; i < (TOTAL + 31) / 32; i++) {
            const int c = lane + i * 32;
            if (TOTAL % 32 == 0 || c < TOTAL) {
                const int r = c / CPR, col = c % CPR;
                const int grow = m0 + wrow0 + r;
                if (grow < p.Lq && col * 8 < p.d) {
                    const uint4 v = *reinterpret_cast<const uint4 *>(sQ + (wrow0 + r) * SD + col * 8);
                    *reinterpret_cast<uint4 *>(og + (int64_t)grow * p.o_ss + col * 8) = v;
                }
            }
        }
    }
}

template <typename T, int D, int BM, int BN, int W, int ST, bool QREG, int SB>
static cudaError_t flash_launch(const fw_flash_tc_params *p, int batch, cudaStream_t stream)
{
    const size_t smem = FW_FLASH_TC_SMEM(D, BM, BN, ST);
    const cudaError_t e = fw_cuda_smem_limit<flash_fwd_kernel<T, D, BM, BN, W, ST, QREG, SB>>(smem);
    if (e != cudaSuccess) return e;
    fw_flash_tc_params q = *p;
    q.num_m_blocks = (p->Lq + BM - 1) / BM;
    dim3 grid((unsigned)q.num_m_blocks, (unsigned)p->H, (unsigned)batch);
    flash_fwd_kernel<T, D, BM, BN, W, ST, QREG, SB><<<grid, W * 32, smem, stream>>>(q);
    return cudaGetLastError();
}

} /* namespace fwtc */

#endif /* __CUDACC__ */

#endif
