/* The Hopper f32 kernels' tiles (tf32 / 3xtf32 on wgmma, sm_90a, head dims up to 64): the split of raw K/V tiles
 * into the tiles wgmma reads.
 *
 * tf32 wgmma reads B only K-major from shared memory (no transposed form as for f16/bf16), so V has to be
 * transposed on its way in, and 3xtf32 needs the big (truncated to tf32) and small (the rest) parts of every
 * operand (parts/tf32.cuh). So each key tile goes twice through shared memory: cp.async copies K and V as they
 * are into a raw tile (in the quad-row swizzle, parts/swizzle.cuh); then threads split them into K big/small
 * (keys are rows, d contiguous) and Vᵀ big/small (d rows, keys contiguous), both in the 128-byte-swizzled layout
 * (two 32-float column blocks of 64 rows each), the small part PART bytes after the big one. K's rows are stored
 * permuted inside each group of 8 keys (position 2t + e holds key t + 4e), so that S's accumulator columns come
 * in the order of P's A fragment (the mma.sync kernel's trick, done here by the split). */
#ifndef FW_F32_WG_TILES_CUH
#define FW_F32_WG_TILES_CUH

#include <stdint.h>
#include "backends/cuda/parts/swizzle.cuh"
#include "backends/cuda/parts/tf32.cuh"

namespace fwf32 {

/* The two-warpgroup block's geometry (kernel_wg.cuh; the split tile sizes serve every wgmma kernel): 128 query
 * rows, key tiles of 64, head dim 64; raw K/V double-buffered, split K 2 stages, split Vᵀ 3 (V(t-1) is still
 * read while tile t+1 is split). */
template <class P> struct wg_geom {
    static constexpr int BM = 128, BN = 64, DB = 64, NT = 256;
    static constexpr uint32_t RAW = 2 * BN * DB * 4;           /* one stage of raw K and V */
    static constexpr uint32_t PART = BN * DB * 4;              /* one split tile part (big or small) */
    static constexpr uint32_t KST = (P::THREE ? 2 : 1) * PART; /* one split K stage */
    static constexpr uint32_t VST = KST;                       /* one split Vᵀ stage */
    static constexpr uint32_t OFF_K = 2 * RAW, OFF_V = OFF_K + 2 * KST;
    static constexpr size_t SMEM = (size_t)OFF_V + 3 * VST + 1024; /* + alignment of the base to 1024 */
    static constexpr int QST = DB + 4; /* Q staging row stride (floats), in the split-Vᵀ area */
};

/* Where split K keeps key row r: position 2(r % 4) + (r / 4) % 2 of its group of 8. */
__device__ __forceinline__ int key_pos(int r) { return (r & ~7) | ((r & 3) << 1) | ((r >> 2) & 1); }

/* Splits by NT threads: NARROW, one element group at a time (the producers' split warps at 24 registers); WIDE,
 * loads batched ahead of the stores. */
constexpr bool SPLIT_WIDE = false, SPLIT_NARROW = true;

/* Raw K tile -> split K, NT threads: row r (key) goes to position key_pos(r). */
template <class P, int NT, bool NARROW = (NT < 128)>
__device__ __forceinline__ void split_k(const float *rk, unsigned char *sk, int tid)
{
    using namespace fwparts;
    auto put = [&](const float4 &x, unsigned char *dst) {
        uint4 big, small;
        split_truncated<P>(x.x, big.x, small.x);
        split_truncated<P>(x.y, big.y, small.y);
        split_truncated<P>(x.z, big.z, small.z);
        split_truncated<P>(x.w, big.w, small.w);
        *reinterpret_cast<uint4 *>(dst) = big;
        if (P::THREE) *reinterpret_cast<uint4 *>(dst + wg_geom<P>::PART) = small;
    };
    constexpr int S = NT / 16; /* rows a pass */
    if constexpr (!NARROW && 1024 % NT == 0 && S % 8 == 0 && (S & (S - 1)) == 0) {
        /* A thread's rows r0 + S i keep r0's place in their group of 8 and, by quad_swizzle_step, their read swizzle:
         * one base address each side, then fixed steps (per-row index arithmetic was ~12 of the ~25 instructions a
         * row). cx and pos0 are quad_swizzle_chunk(r0, c) and key_pos(r0) written out: through the helpers nvcc
         * 13.0 schedules the pre-pass kernel differently (the same instructions), and that kernel's timings are of
         * this form. */
        const int r0 = tid >> 4, c = tid & 15, cx = c ^ ((r0 >> 2) & 7);
        const int pos0 = (r0 & ~7) | ((r0 & 3) << 1) | ((r0 >> 2) & 1);
        const float *src = rk + r0 * 64;
        unsigned char *dst = sk + sw128_tile_offset<64>(pos0, c);
        /* every load before the first store: ptxas cannot tell raw from split K apart, so a load after a store waits
         * for it, and load-split-store row by row made 8 shared-memory round trips one after another */
        float4 x[1024 / NT];
#pragma unroll
        for (int i = 0; i < 1024 / NT; i++)
            x[i] = *reinterpret_cast<const float4 *>(src + i * S * 64 + (quad_swizzle_step<S>(cx, i) << 2));
#pragma unroll
        for (int i = 0; i < 1024 / NT; i++) put(x[i], dst + i * S * 128);
    } else {
#pragma unroll(NARROW ? 1 : 2)
        for (int i = 0; i < (1024 + NT - 1) / NT; i++) {
            const int idx = tid + NT * i, r = idx >> 4, c = idx & 15;
            if (1024 % NT && idx >= 1024) break;
            put(*reinterpret_cast<const float4 *>(rk + r * 64 + (quad_swizzle_chunk(r, c) << 2)),
                sk + sw128_tile_offset<64>(key_pos(r), c));
        }
    }
}

/* Raw V tile -> split Vᵀ, NT threads: a thread transposes 4x4 blocks (keys 4kb.., d 4c..), kb = index % 16, so
 * that a quarter warp's reads and writes hit 8 different 16-byte chunks. */
template <class P, int NT, bool NARROW = (NT < 128)>
__device__ __forceinline__ void split_v(const float *rv, unsigned char *sv, int tid)
{
    using namespace fwparts;
    constexpr int IT = (256 + NT - 1) / NT;
    /* keys 4kb..4kb+3 of column 4c + e, split, into their 16-byte chunk of Vᵀ */
    auto put = [&](int kb, int c, int e, float y0, float y1, float y2, float y3) {
        uint4 big, small;
        split_truncated<P>(y0, big.x, small.x);
        split_truncated<P>(y1, big.y, small.y);
        split_truncated<P>(y2, big.z, small.z);
        split_truncated<P>(y3, big.w, small.w);
        const uint32_t off = sw128_tile_offset<64>(4 * c + e, kb);
        *reinterpret_cast<uint4 *>(sv + off) = big;
        if (P::THREE) *reinterpret_cast<uint4 *>(sv + wg_geom<P>::PART + off) = small;
    };
    auto put4 = [&](int kb, int c, const float4 (&x)[4]) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            auto at = [&](const float4 &v) { return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w; };
            put(kb, c, e, at(x[0]), at(x[1]), at(x[2]), at(x[3]));
        }
    };
    auto load4 = [&](int kb, int c, float4 (&x)[4]) {
#pragma unroll
        for (int j = 0; j < 4; j++)
            x[j] = *reinterpret_cast<const float4 *>(rv + (4 * kb + j) * 64 + (quad_swizzle_chunk(4 * kb, c) << 2));
    };
    if constexpr (NARROW) { /* the producer's split warps at 24 registers: one column at a time */
#pragma unroll 1
        for (int i = 0; i < IT; i++) {
            const int idx = tid + NT * i, kb = idx & 15, c = idx >> 4;
            if (256 % NT && idx >= 256) break;
            const float *col = rv + 4 * kb * 64 + (quad_swizzle_chunk(4 * kb, c) << 2);
#pragma unroll 1
            for (int e = 0; e < 4; e++) put(kb, c, e, col[e], col[64 + e], col[128 + e], col[192 + e]);
        }
    } else if constexpr (IT <= 2) {
        /* every load before the first store (as in split_k: a load after a store waits for it) */
        float4 x[IT][4];
#pragma unroll
        for (int i = 0; i < IT; i++) {
            const int idx = tid + NT * i;
            if (256 % NT == 0 || idx < 256) load4(idx & 15, idx >> 4, x[i]);
        }
#pragma unroll
        for (int i = 0; i < IT; i++) {
            const int idx = tid + NT * i;
            if (256 % NT == 0 || idx < 256) put4(idx & 15, idx >> 4, x[i]);
        }
    } else { /* the short-key kernel's split warps (56 registers): four loads at a time */
#pragma unroll
        for (int i = 0; i < IT; i++) {
            const int idx = tid + NT * i;
            if (256 % NT && idx >= 256) break;
            float4 x[4];
            load4(idx & 15, idx >> 4, x);
            put4(idx & 15, idx >> 4, x);
        }
    }
}

} /* namespace fwf32 */
#endif
