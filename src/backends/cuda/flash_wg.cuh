/* cuda-flash on Hopper: the forward with wgmma (sm_90a), f16/bf16, f32 accumulation.
 *
 * NWG consumer warpgroups per block, 64 query rows each (BM = 64 NWG). Q, K and V tiles live in shared
 * memory in the 128-byte-swizzled layout that wgmma reads through matrix descriptors: each tile is
 * stored as D/64 column blocks of rows x 64 elements (128 bytes a row), the 16-byte chunk index of row r
 * XORed with r % 8, every block 1024-byte aligned. All threads fill the tiles with cp.async (so any
 * stride, any Lq/Lk and zero-filled padding work as in the mma.sync kernel), then
 * fence.proxy.async makes the writes visible to the tensor cores' async proxy.
 *
 * Per warpgroup and key tile (FlashAttention-3's intra-warpgroup overlap):
 *   S(t) = Q K(t)ᵀ      wgmma, A and B from shared memory (both K-major)
 *   O += P(t-1) V(t-1)  wgmma, A (P, bf16/f16) from registers, B = V N-major (transposed descriptor)
 *   wait for S(t); online softmax of S(t) while the P·V product runs; wait for it; rescale O.
 * K/V tiles cycle through ST = 3 stages: while S(t) reads stage t and P·V reads stage t-1, tile t+1
 * loads into the third.
 *
 * Compiled for sm_90a only (the body is empty for other targets); cuda_flash.cu offers these
 * configurations on compute capability 9.0 devices. */
#ifndef FW_FLASH_WG_CUH
#define FW_FLASH_WG_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <string.h>
#include <type_traits>
#include "flash_tc.cuh"
#include "wgmma.cuh"

/* Shared memory: Q tile, ST stages of K and V, plus 1 KB to align the base to 1024 bytes. */
#define FW_FLASH_WG_SMEM(D, BM, BN, ST) ((size_t)((BM) + 2 * (ST) * (BN)) * (D) * 2 + 1024)

#ifdef __CUDACC__
namespace fwwg {

using fwtc::acc_to_a;
using fwtc::cp_async16;
using fwtc::cp_async_commit;
using fwtc::cp_async_wait;
using fwtc::fast_exp2;
using fwtc::pack2;

/* Per-thread cursor filling ROWS x D tiles in the swizzled layout: thread tid copies chunk c = tid % (D/8)
 * of rows tid / (D/8) + i RS (RS = NT / (D/8), a multiple of 8, so the swizzle term r % 8 is the same
 * for all of a thread's rows). Rows past nrows and columns >= d are zero-filled. */
template <typename T, int D, int NT> struct sw_cursor {
    static constexpr int CPR = D / 8, RS = NT / CPR;
    static_assert(NT % CPR == 0 && RS % 8 == 0, "thread layout of the tile loads");
    const T *ptr;
    int64_t step;
    int rows_left;
    bool colok;
    uint32_t soff; /* this thread's byte offset within a tile, without the column-block term */
    uint32_t cb;   /* its column block */
    __device__ __forceinline__ void init(const T *g, int64_t ss, int row0, int nrows, int d, int tid)
    {
        const int row_in = tid / CPR, c = tid % CPR;
        ptr = g + (int64_t)(row0 + row_in) * ss + c * 8;
        step = (int64_t)RS * ss;
        rows_left = nrows - row0 - row_in;
        colok = c * 8 < d;
        cb = (uint32_t)(c / 8);
        soff = (uint32_t)(row_in * 128 + (((c % 8) ^ (row_in & 7)) << 4));
    }
    template <int ROWS> __device__ __forceinline__ void load(uint32_t sbase)
    {
        const uint32_t s0 = sbase + cb * (uint32_t)(ROWS * 128) + soff;
        const T *p = ptr;
#pragma unroll
        for (int i = 0; i < (ROWS + RS - 1) / RS; i++) {
            if (ROWS % RS == 0 || (int)(soff / 128) + i * RS < ROWS) {
                const bool ok = colok && i * RS < rows_left;
                cp_async16(s0 + (uint32_t)(i * RS * 128), ok ? (const void *)p : (const void *)ptr, ok ? 16 : 0);
            }
            p += step;
        }
        ptr += (int64_t)ROWS * (step / RS);
        rows_left -= ROWS;
    }
};

/* One consumer warpgroup's state and steps: S (64 x BN) and O (64 x D) accumulators, the running row max
 * and sum, and P of the previous tile as the A operand of its P·V product. Both kernels below use it. */
template <typename T, int D, int BN, int BM> struct wg_rows {
    static constexpr int NS = BN / 8, ND = D / 8, KD = D / 16, KN = BN / 16;
    float o[ND][4], s[NS][4];
    float row_m[2], row_l[2];
    uint32_t pa[KN][4];
    int wrow0, g, t4; /* the warp's first row in the block, lane / 4, lane % 4 */

    __device__ __forceinline__ void init(int warp_in_wg, int wgc, int lane)
    {
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[j][e] = 0.f;
        row_m[0] = row_m[1] = -INFINITY;
        row_l[0] = row_l[1] = 0.f;
        wrow0 = wgc * 64 + warp_in_wg * 16;
        g = lane >> 2;
        t4 = lane & 3;
    }
    /* S = Q Kᵀ, issued and committed (not waited for); sq: this warpgroup's 64 rows of the Q tile. The
     * descriptors are formed first: a register defined between wgmma.fence and the commit serialises the
     * wgmmas (ptxas C7513). +1 in the start-address field = 16 bytes: 2 per k16 step inside a 128-byte row,
     * a column block (rows x 128 bytes) per 4 steps. */
    __device__ __forceinline__ void issue_s(uint32_t sq, uint32_t sk)
    {
        const uint64_t dq = sw128_desc(sq, 16, 1024), dk = sw128_desc(sk, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            const uint64_t cbo = (uint64_t)((kk / 4) * 8), ko = (uint64_t)((kk % 4) * 2);
            wgmma_ss<T, BN>(s, dq + cbo * BM + ko, dk + cbo * BN + ko, kk > 0);
        }
        wgmma_commit();
    }
    /* O += P V: V N-major (keys are rows), column blocks BN x 128 bytes apart. */
    __device__ __forceinline__ void issue_pv(uint32_t sv)
    {
        const uint64_t dv = sw128_desc(sv, BN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KN; kk++) wgmma_rs<T, D>(o, pa[kk], dv + (uint64_t)(kk * 16 * 128 / 16), 1);
        wgmma_commit();
    }
    /* Mask, online softmax (base 2) of S for keys from n0, P left in s; alpha: the rescale of O. */
    __device__ __forceinline__ void softmax(const fw_flash_tc_params &p, int m0, int n0, float (&alpha)[2])
    {
        if (fwtc::tile_needs_mask<BM, BN>(p, m0, n0)) {
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int i = m0 + wrow0 + g + r * 8;
                int jlo = 0, jhi = p.Lk;
                if (p.has_window) {
                    jlo = max(jlo, i + p.off - p.wl);
                    jhi = min(jhi, i + p.off + p.wr + 1);
                }
#pragma unroll
                for (int j = 0; j < NS; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int col = n0 + j * 8 + t4 * 2 + e;
                        if (col < jlo || col >= jhi) s[j][r * 2 + e] = -INFINITY;
                    }
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = row_m[r];
#pragma unroll
            for (int j = 0; j < NS; j++) mx = fmaxf(mx, fmaxf(s[j][r * 2], s[j][r * 2 + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float msc = mx == -INFINITY ? 0.f : mx * p.scale_log2;
            alpha[r] = fast_exp2(row_m[r] * p.scale_log2 - msc);
            row_m[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int j = 0; j < NS; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float v = fast_exp2(fmaf(s[j][r * 2 + e], p.scale_log2, -msc));
                    s[j][r * 2 + e] = v;
                    sum += v;
                }
            row_l[r] = row_l[r] * alpha[r] + sum;
        }
    }
    __device__ __forceinline__ void rescale(const float (&alpha)[2])
    {
#pragma unroll
        for (int j = 0; j < ND; j++) {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
        }
    }
    /* P into the A fragments, only once the P·V product that read them has retired (writing an in-flight
     * wgmma's input registers is undefined; ptxas would serialise the wgmmas to avoid it). */
    __device__ __forceinline__ void p_to_a()
    {
#pragma unroll
        for (int kk = 0; kk < KN; kk++) acc_to_a<T>(s[2 * kk], s[2 * kk + 1], pa[kk]);
    }
    /* Normalise, stage the warp's 16 rows in shared memory (rows padded to D + 8), 16-byte stores, LSE.
     * stage: the block's staging area (BM x (D + 8) elements), free of any reader. */
    __device__ __forceinline__ void store(const fw_flash_tc_params &p, T *stage, int m0, int b, int h, int lane)
    {
        constexpr int SD = D + 8;
        T *og = reinterpret_cast<T *>(p.o) + (int64_t)b * p.o_sb + (int64_t)h * p.o_sh;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = row_l[r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.f ? 1.f / l : (l == l ? 0.f : l);
            const int row = wrow0 + g + r * 8;
#pragma unroll
            for (int j = 0; j < ND; j++)
                *reinterpret_cast<uint32_t *>(stage + row * SD + j * 8 + t4 * 2) =
                    pack2<T>::make(o[j][r * 2] * inv, o[j][r * 2 + 1] * inv);
            if (p.lse && t4 == 0 && m0 + row < p.Lq) {
                float lse;
                if (l > 0.f)
                    lse = row_m[r] * p.scale + logf(l);
                else
                    lse = l == l ? -INFINITY : l;
                p.lse[((int64_t)b * p.H + h) * p.Lq + m0 + row] = lse;
            }
        }
        __syncwarp();
        constexpr int CPR = D / 8;
#pragma unroll
        for (int i = 0; i < 16 * CPR / 32; i++) {
            const int c = lane + i * 32;
            const int r = c / CPR, col = c % CPR;
            const int grow = m0 + wrow0 + r;
            if (grow < p.Lq && col * 8 < p.d)
                *reinterpret_cast<uint4 *>(og + (int64_t)grow * p.o_ss + col * 8) =
                    *reinterpret_cast<const uint4 *>(stage + (wrow0 + r) * SD + col * 8);
        }
    }
};

/* A forward block's coordinates: its query rows m0.. (causal-like masks run the longest blocks first),
 * head, batch, kv head, and the key tiles its rows may see. */
struct fwd_block {
    int m0, h, b, hk, n_begin, n_tiles;
    template <int BM, int BN> static __device__ __forceinline__ fwd_block of(const fw_flash_tc_params &p)
    {
        fwd_block k;
        const int mb = p.reverse_m ? p.num_m_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;
        k.h = blockIdx.y;
        k.b = blockIdx.z;
        k.hk = k.h / p.group;
        k.m0 = mb * BM;
        fwtc::key_tile_range<BM, BN>(p, k.m0, k.n_begin, k.n_tiles);
        return k;
    }
};

template <typename T, int D, int BN, int NWG, int ST>
__global__ void __launch_bounds__(NWG * 128, 1) flash_wg_kernel(const fw_flash_tc_params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int NT = NWG * 128, BM = 64 * NWG;
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static_assert(D % 64 == 0 && BN % 64 == 0 && ST == 3, "wgmma tile shapes");

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = sQ + Q_BYTES, sV = sK + ST * KV_BYTES;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    const fwd_block blk = fwd_block::of<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    const T *qg = reinterpret_cast<const T *>(p.q) + (int64_t)b * p.q_sb + (int64_t)h * p.q_sh;
    const T *kg = reinterpret_cast<const T *>(p.k) + (int64_t)b * p.k_sb + (int64_t)hk * p.k_sh;
    const T *vg = reinterpret_cast<const T *>(p.v) + (int64_t)b * p.v_sb + (int64_t)hk * p.v_sh;
    sw_cursor<T, D, NT> kc, vc;
    {
        sw_cursor<T, D, NT> qc;
        qc.init(qg, p.q_ss, m0, p.Lq, p.d, tid);
        qc.template load<BM>(sQ);
    }
    kc.init(kg, p.k_ss, n_begin, p.Lk, p.d, tid);
    vc.init(vg, p.v_ss, n_begin, p.Lk, p.d, tid);
    if (n_tiles > 0) {
        kc.template load<BN>(sK);
        vc.template load<BN>(sV);
    }
    cp_async_commit();

    wg_rows<T, D, BN, BM> w;
    w.init(warp & 3, wg, lane);
    const uint32_t sq = sQ + (uint32_t)(wg * 64 * 128);
    if (n_tiles > 0) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (n_tiles > 1) {
            kc.template load<BN>(sK + KV_BYTES);
            vc.template load<BN>(sV + KV_BYTES);
        }
        cp_async_commit();
        w.issue_s(sq, sK);
        wgmma_wait<0>();
        wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(p, m0, n_begin, alpha);
        w.p_to_a();
    }
    for (int t = 1; t < n_tiles; t++) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (t + 1 < n_tiles) {
            const uint32_t slot = (uint32_t)((t + 1) % ST);
            kc.template load<BN>(sK + slot * KV_BYTES);
            vc.template load<BN>(sV + slot * KV_BYTES);
        }
        cp_async_commit();
        w.issue_s(sq, sK + (uint32_t)(t % ST) * KV_BYTES);
        w.issue_pv(sV + (uint32_t)((t - 1) % ST) * KV_BYTES);
        wgmma_wait<1>(); /* S(t) done; P(t-1)·V(t-1) may still run */
        wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(p, m0, n_begin + t * BN, alpha);
        wgmma_wait<0>();
        wgmma_reg_fence(w.o);
        w.rescale(alpha);
        w.p_to_a();
    }
    if (n_tiles > 0) {
        w.issue_pv(sV + (uint32_t)((n_tiles - 1) % ST) * KV_BYTES);
        wgmma_wait<0>();
        wgmma_reg_fence(w.o);
    }
    cp_async_wait<0>();
    __syncthreads();
    w.store(p, reinterpret_cast<T *>(smem_raw + (base - (uint32_t)__cvta_generic_to_shared(smem_raw))), m0, b, h, lane);
#else
    (void)p;
    __trap(); /* sm_90a only: cuda_flash.cu never launches it elsewhere */
#endif
}

/* ---- warp-specialised version: a producer warpgroup loads with the tensor memory accelerator ----------
 * Block = 3 warpgroups: warpgroup 0 produces (one thread issues every load: cp.async.bulk.tensor with a
 * 128-byte-swizzled box, completing on the stage's mbarrier), warpgroups 1 and 2 consume 64 query rows each
 * and never load. K and V of a stage have their own "full" barriers (S can start before V lands); the
 * consumers' arrivals on the stage's "empty" barrier let the producer reuse it. The producer gives up
 * registers (setmaxnreg 24), the consumers take them (240). PP: the two consumers take turns issuing their
 * products (named barriers 1 and 2), so that one's softmax runs under the other's wgmmas
 * (FlashAttention-3's ping-pong). TMA boxes are 64 columns x rows: the swizzled layout above. */

/* Tensor maps of Q, K, V: (d, seq, head, batch), or (d, head, seq, batch) when the head stride is the
 * smaller one (bshd), so that the strides ascend; swap_* says which. */
struct tma_maps {
    CUtensorMap q, k, v;
    int swap_q, swap_k, swap_v;
};

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* One box of rows x 64 columns from (col, row) of (head, batch); rows past the tensor read as zeros. */
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, int swap, uint32_t bar, int col, int row,
                                         int head, int batch)
{
    const int c1 = swap ? head : row, c2 = swap ? row : head;
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(col), "r"(c1), "r"(c2), "r"(batch)
                 : "memory");
}
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

/* The mbarriers of a warp-specialised kernel with resident tiles and ST stages of K and V, 8 bytes each
 * from `base`: full (the resident tiles), k_full[ST], v_full[ST], empty[ST] (an arrival per consumer
 * thread). init: by one thread, before a block-wide barrier. */
template <int ST> struct kv_ring_bars {
    uint32_t base;
    __device__ __forceinline__ uint32_t full() const { return base; }
    __device__ __forceinline__ uint32_t k(int st) const { return base + 8u * (uint32_t)(1 + st); }
    __device__ __forceinline__ uint32_t v(int st) const { return base + 8u * (uint32_t)(1 + ST + st); }
    __device__ __forceinline__ uint32_t empty(int st) const { return base + 8u * (uint32_t)(1 + 2 * ST + st); }
    __device__ __forceinline__ void init(uint32_t consumers) const
    {
        mbar_init(full(), 1);
        for (int st = 0; st < ST; st++) {
            mbar_init(k(st), 1);
            mbar_init(v(st), 1);
            mbar_init(empty(st), consumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
};

template <typename T, int D, int BN, int ST, bool PP>
__global__ void __launch_bounds__(384, 1) flash_ws_kernel(const fw_flash_tc_params p, const __grid_constant__ tma_maps m)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = 128, CB = D / 64;
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static_assert(D % 64 == 0 && BN % 64 == 0 && ST >= 2, "wgmma tile shapes");

    extern __shared__ __align__(16) unsigned char smem_raw[]; /* aligned to 1024 below */
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = sQ + Q_BYTES, sV = sK + ST * KV_BYTES;
    const kv_ring_bars<ST> bar{sV + ST * KV_BYTES}; /* full = Q */

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    const fwd_block blk = fwd_block::of<BM, BN>(p);
    const int m0 = blk.m0, h = blk.h, b = blk.b, hk = blk.hk, n_begin = blk.n_begin, n_tiles = blk.n_tiles;

    if (tid == 0) bar.init(256);
    __syncthreads();

    if (wg == 0) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (warp == 0 && lane == 0) {
            mbar_expect_tx(bar.full(), Q_BYTES);
#pragma unroll
            for (int cb = 0; cb < CB; cb++) tma_load(sQ + (uint32_t)(cb * BM * 128), &m.q, m.swap_q, bar.full(), cb * 64, m0, h, b);
            for (int t = 0; t < n_tiles; t++) {
                const int st = t % ST, n0 = n_begin + t * BN;
                if (t >= ST) mbar_wait(bar.empty(st), (uint32_t)((t / ST - 1) & 1));
                const uint32_t dk = sK + (uint32_t)st * KV_BYTES, dv = sV + (uint32_t)st * KV_BYTES;
                mbar_expect_tx(bar.k(st), KV_BYTES);
#pragma unroll
                for (int cb = 0; cb < CB; cb++) tma_load(dk + (uint32_t)(cb * BN * 128), &m.k, m.swap_k, bar.k(st), cb * 64, n0, hk, b);
                mbar_expect_tx(bar.v(st), KV_BYTES);
#pragma unroll
                for (int cb = 0; cb < CB; cb++) tma_load(dv + (uint32_t)(cb * BN * 128), &m.v, m.swap_v, bar.v(st), cb * 64, n0, hk, b);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    const int wgc = wg - 1; /* consumer 0 or 1 */
    wg_rows<T, D, BN, BM> w;
    w.init(warp & 3, wgc, lane);
    const uint32_t sq = sQ + (uint32_t)(wgc * 64 * 128);
    /* ping-pong: consumer c issues after named_sync(1 + c) and then lets the other go; consumer 1 lets
     * consumer 0 start, and consumer 0 takes that extra arrival at the end */
    if (PP && wgc == 1) named_arrive(1, 256);
    auto turn_begin = [&]() { if (PP) named_sync(1 + wgc, 256); };
    auto turn_end = [&]() { if (PP) named_arrive(2 - wgc, 256); };

    mbar_wait(bar.full(), 0);
    if (n_tiles > 0) {
        mbar_wait(bar.k(0), 0);
        turn_begin();
        w.issue_s(sq, sK);
        turn_end();
        wgmma_wait<0>();
        wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(p, m0, n_begin, alpha);
        w.p_to_a();
    }
    for (int t = 1; t < n_tiles; t++) {
        const int st = t % ST, pst = (t - 1) % ST;
        mbar_wait(bar.k(st), (uint32_t)((t / ST) & 1));
        mbar_wait(bar.v(pst), (uint32_t)(((t - 1) / ST) & 1));
        turn_begin();
        w.issue_s(sq, sK + (uint32_t)st * KV_BYTES);
        w.issue_pv(sV + (uint32_t)pst * KV_BYTES);
        turn_end();
        wgmma_wait<1>(); /* S(t) done; P(t-1)·V(t-1) may still run */
        wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(p, m0, n_begin + t * BN, alpha);
        wgmma_wait<0>();
        wgmma_reg_fence(w.o);
        mbar_arrive(bar.empty(pst)); /* K(t-1) and V(t-1) are read */
        w.rescale(alpha);
        w.p_to_a();
    }
    if (n_tiles > 0) {
        const int pst = (n_tiles - 1) % ST;
        mbar_wait(bar.v(pst), (uint32_t)(((n_tiles - 1) / ST) & 1));
        turn_begin();
        w.issue_pv(sV + (uint32_t)pst * KV_BYTES);
        turn_end();
        wgmma_wait<0>();
        wgmma_reg_fence(w.o);
    }
    if (PP && wgc == 0) named_sync(1, 256);
    named_sync(3, 256); /* both consumers are done with every tile: the staging area is free */
    w.store(p, reinterpret_cast<T *>(smem_raw + (base - (uint32_t)__cvta_generic_to_shared(smem_raw))), m0, b, h, lane);
#else
    (void)p;
    (void)m;
    __trap(); /* sm_90a only */
#endif
}

/* cuTensorMapEncodeTiled from the driver, found once at run time (no libcuda at link time). */
static inline PFN_cuTensorMapEncodeTiled_v12000 tma_encode_fn()
{
    /* a function-local static: initialised once, thread-safe (calls may come from several host threads) */
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            return (PFN_cuTensorMapEncodeTiled_v12000)f;
        cudaGetLastError();
        return NULL;
    }();
    return fn;
}

/* One tensor map: (d, seq, head, batch) with box 64 x rows, or seq and head swapped when the head stride is
 * the smaller. Strides of extent-1 dimensions are never used: they get a packed value. Returns 0 when the
 * driver refuses (the caller falls back to the cp.async kernel). */
template <typename T>
static int tma_make(CUtensorMap *map, int *swap, const void *ptr, int d, int L, int H, int B, int64_t ss, int64_t sh,
                    int64_t sb, int rows)
{
    PFN_cuTensorMapEncodeTiled_v12000 enc = tma_encode_fn();
    if (!enc) return 0;
    const int64_t es = 2;
    if (L == 1) ss = (int64_t)d;
    if (H == 1) sh = (int64_t)d * L;
    if (B == 1) sb = (int64_t)d * L * H;
    *swap = sh < ss;
    cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)(*swap ? H : L), (cuuint64_t)(*swap ? L : H), (cuuint64_t)B};
    cuuint64_t strides[3] = {(cuuint64_t)((*swap ? sh : ss) * es), (cuuint64_t)((*swap ? ss : sh) * es), (cuuint64_t)(sb * es)};
    cuuint32_t box[4] = {64, (cuuint32_t)(*swap ? 1 : rows), (cuuint32_t)(*swap ? rows : 1), 1};
    cuuint32_t estr[4] = {1, 1, 1, 1};
    const CUtensorMapDataType dt = sizeof(T) == 2 && std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                                   : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    return enc(map, dt, 4, const_cast<void *>(ptr), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T, int D, int BN, int NWG, int ST>
static cudaError_t flash_wg_launch(const fw_flash_tc_params *p, int batch, cudaStream_t stream);

template <typename T, int D, int BN, int ST, bool PP>
static cudaError_t flash_ws_launch(const fw_flash_tc_params *p, int batch, cudaStream_t stream)
{
    constexpr int BM = 128;
    tma_maps m;
    memset(&m, 0, sizeof m);
    if (!tma_make<T>(&m.q, &m.swap_q, p->q, p->d, p->Lq, p->H, batch, p->q_ss, p->q_sh, p->q_sb, BM) ||
        !tma_make<T>(&m.k, &m.swap_k, p->k, p->d, p->Lk, p->H / p->group, batch, p->k_ss, p->k_sh, p->k_sb, BN) ||
        !tma_make<T>(&m.v, &m.swap_v, p->v, p->d, p->Lk, p->H / p->group, batch, p->v_ss, p->v_sh, p->v_sb, BN))
        return flash_wg_launch<T, D, BN, 2, 3>(p, batch, stream); /* a layout the copy engine refuses */
    const size_t smem = FW_FLASH_WG_SMEM(D, BM, BN, ST) + 256;
    const cudaError_t e = fw_cuda_smem_limit<flash_ws_kernel<T, D, BN, ST, PP>>(smem);
    if (e != cudaSuccess) return e;
    fw_flash_tc_params q = *p;
    q.num_m_blocks = (p->Lq + BM - 1) / BM;
    dim3 grid((unsigned)q.num_m_blocks, (unsigned)p->H, (unsigned)batch);
    flash_ws_kernel<T, D, BN, ST, PP><<<grid, 384, smem, stream>>>(q, m);
    return cudaGetLastError();
}

template <typename T, int D, int BN, int NWG, int ST>
static cudaError_t flash_wg_launch(const fw_flash_tc_params *p, int batch, cudaStream_t stream)
{
    constexpr int BM = 64 * NWG;
    const size_t smem = FW_FLASH_WG_SMEM(D, BM, BN, ST);
    const cudaError_t e = fw_cuda_smem_limit<flash_wg_kernel<T, D, BN, NWG, ST>>(smem);
    if (e != cudaSuccess) return e;
    fw_flash_tc_params q = *p;
    q.num_m_blocks = (p->Lq + BM - 1) / BM;
    dim3 grid((unsigned)q.num_m_blocks, (unsigned)p->H, (unsigned)batch);
    flash_wg_kernel<T, D, BN, NWG, ST><<<grid, NWG * 128, smem, stream>>>(q);
    return cudaGetLastError();
}

} /* namespace fwwg */

/* A wgmma configuration in a head dim's variant list: warps = 4 NWG, stages ST, wg = 1. */
#define FW_FLASH_WG_VARIANT(D, BN, NWG, ST)                                                         \
    { D, 64 * (NWG), BN, 4 * (NWG), ST, 1, BN, fwwg::flash_wg_launch<__half, D, BN, NWG, ST>,       \
      fwwg::flash_wg_launch<__nv_bfloat16, D, BN, NWG, ST>, 1 }

/* A warp-specialised TMA configuration: 2 consumer warpgroups (BM 128) + a producer; wg = 2, qreg = PP. */
#define FW_FLASH_WS_VARIANT(D, BN, ST, PP)                                                           \
    { D, 128, BN, 12, ST, PP, BN, fwwg::flash_ws_launch<__half, D, BN, ST, PP>,                      \
      fwwg::flash_ws_launch<__nv_bfloat16, D, BN, ST, PP>, 2 }

#endif /* __CUDACC__ */
#endif
