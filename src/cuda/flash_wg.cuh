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

/* Matrix descriptor of a 128-byte-swizzled tile (PTX ISA, "Matrix Descriptor Format"): start address,
 * leading- and stride-dimension byte offsets (>> 4), swizzle mode 1 = 128 bytes in bits 62-63. */
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

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

template <typename T, int D, int BN, int NWG, int ST>
__global__ void __launch_bounds__(NWG * 128, 1) flash_wg_kernel(const fw_flash_tc_params p)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int NT = NWG * 128, BM = 64 * NWG;
    constexpr int NS = BN / 8, ND = D / 8, KD = D / 16, KN = BN / 16;
    constexpr uint32_t Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
    static_assert(D % 64 == 0 && BN % 64 == 0 && ST == 3, "wgmma tile shapes");

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t base = ((uint32_t)__cvta_generic_to_shared(smem_raw) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = sQ + Q_BYTES, sV = sK + ST * KV_BYTES;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wg = warp >> 2, g = lane >> 2, t4 = lane & 3;
    int mb = blockIdx.x;
    if (p.reverse_m) mb = p.num_m_blocks - 1 - mb;
    const int h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
    const int m0 = mb * BM;
    const int wrow0 = wg * 64 + (warp & 3) * 16; /* this warp's first row in the block */

    const T *qg = reinterpret_cast<const T *>(p.q) + (int64_t)b * p.q_sb + (int64_t)h * p.q_sh;
    const T *kg = reinterpret_cast<const T *>(p.k) + (int64_t)b * p.k_sb + (int64_t)hk * p.k_sh;
    const T *vg = reinterpret_cast<const T *>(p.v) + (int64_t)b * p.v_sb + (int64_t)hk * p.v_sh;

    const int mlast = min(m0 + BM, p.Lq) - 1;
    int lo = 0, hi = p.Lk;
    if (p.has_window) {
        lo = max(0, m0 + p.off - p.wl);
        hi = min(p.Lk, mlast + p.off + p.wr + 1);
    }
    const int n_begin = (lo / BN) * BN;
    const int n_tiles = hi > n_begin ? (hi - n_begin + BN - 1) / BN : 0;

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

    float o[ND][4], s[NS][4];
#pragma unroll
    for (int j = 0; j < ND; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] = 0.f;
    float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.f, 0.f};
    uint32_t pa[KN][4]; /* P of the previous tile, the A operand of its P·V product */

    /* S = Q K(slot)ᵀ, issued and committed (not waited for). */
    auto issue_s = [&](int slot) {
        /* descriptors first: a register defined between wgmma.fence and the commit serialises the wgmmas */
        const uint64_t dq = sw128_desc(sQ + (uint32_t)(wg * 64 * 128), 16, 1024);
        const uint64_t dk = sw128_desc(sK + (uint32_t)slot * KV_BYTES, 16, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            /* +1 in the start-address field = 16 bytes: 2 per k16 step inside a 128-byte row, a column block
             * (rows x 128 bytes) per 4 steps */
            const uint64_t cbo = (uint64_t)((kk / 4) * 8), ko = (uint64_t)((kk % 4) * 2);
            wgmma_ss<T, BN>(s, dq + cbo * BM + ko, dk + cbo * BN + ko, kk > 0);
        }
        wgmma_commit();
    };
    /* O += P V(slot), issued and committed. */
    auto issue_pv = [&](int slot) {
        const uint64_t dv = sw128_desc(sV + (uint32_t)slot * KV_BYTES, BN * 128, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KN; kk++) wgmma_rs<T, D>(o, pa[kk], dv + (uint64_t)(kk * 16 * 128 / 16), 1);
        wgmma_commit();
    };
    /* Mask, online softmax (base 2) of S for keys from n0, P left in s; returns the rescale of O. */
    auto softmax = [&](int n0, float (&alpha)[2]) {
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
    };
    /* P into the A fragments, only once the P·V product that read them has retired (writing an in-flight
     * wgmma's input registers is undefined; ptxas would serialise the wgmmas to avoid it) */
    auto p_to_a = [&]() {
#pragma unroll
        for (int kk = 0; kk < KN; kk++) acc_to_a<T>(s[2 * kk], s[2 * kk + 1], pa[kk]);
    };

    if (n_tiles > 0) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (n_tiles > 1) {
            kc.template load<BN>(sK + KV_BYTES);
            vc.template load<BN>(sV + KV_BYTES);
        }
        cp_async_commit();
        issue_s(0);
        wgmma_wait<0>();
        wgmma_reg_fence(s);
        float alpha[2];
        softmax(n_begin, alpha);
        p_to_a();
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
        issue_s(t % ST);
        issue_pv((t - 1) % ST);
        wgmma_wait<1>(); /* S(t) done; P(t-1)·V(t-1) may still run */
        wgmma_reg_fence(s);
        float alpha[2];
        softmax(n_begin + t * BN, alpha);
        wgmma_wait<0>();
        wgmma_reg_fence(o);
#pragma unroll
        for (int j = 0; j < ND; j++) {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
        }
        p_to_a();
    }
    if (n_tiles > 0) {
        issue_pv((n_tiles - 1) % ST);
        wgmma_wait<0>();
        wgmma_reg_fence(o);
    }

    /* Epilogue: normalise, stage each warp's rows in shared memory (padded rows), 16-byte stores. */
    cp_async_wait<0>();
    __syncthreads();
    constexpr int SD = D + 8;
    T *stage = reinterpret_cast<T *>(smem_raw + (base - (uint32_t)__cvta_generic_to_shared(smem_raw)));
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
#else
    (void)p;
    __trap(); /* sm_90a only: cuda_flash.cu never launches it elsewhere */
#endif
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

#endif /* __CUDACC__ */
#endif
