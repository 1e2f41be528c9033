/* cuda-flash-f32's tf32 and 3xtf32 modes on Hopper: wgmma (sm_90a), head dims up to 64.
 *
 * tf32 wgmma reads B only K-major from shared memory (no transposed form as for f16/bf16), so V has to be
 * transposed on its way in, and 3xtf32 needs the big (truncated to tf32) and small (the rest) parts of
 * every operand. So each key tile goes twice through shared memory: cp.async copies K and V as they are
 * into a raw double buffer; then all threads split them into the wgmma tiles: K big/small (keys are rows,
 * d contiguous) and Vᵀ big/small (d rows, keys contiguous), both in the 128-byte-swizzled layout of
 * swizzle.cuh (two 32-float column blocks of 64 rows each). The split of tile t+1 runs while the tensor
 * cores compute tile t.
 *
 * Block: 2 warpgroups x 64 query rows (BM 128), key tiles of 64 (BN). Q (pre-scaled by scale·log2 e) and
 * P are A operands in registers, already split; the S accumulator's column order is the A fragment's
 * k order when K's rows are stored permuted inside each group of 8 keys (position 2t + e holds key t + 4e:
 * the mma.sync kernel's trick, done here by the split). Per warpgroup and tile:
 *   S(t) = Q K(t)ᵀ          3 wgmma per k8 step (small·big, big·small, big·big), tf32: 1
 *   O += P(t-1) V(t-1)      the same, B = Vᵀ(t-1)
 *   split tile t+1          (all threads, while both products run)
 *   wait S(t); online softmax; wait P·V; rescale O; P(t) to A fragments.
 * Shared memory (3xtf32): raw K/V 2 x 32 KB, split K 2 x 32 KB, split Vᵀ 3 x 32 KB (V(t-1) is still read
 * while tile t+1 is split) = 224 KB; tf32 keeps no small parts: 144 KB.
 *
 * Three kernels share these pieces: ff32_wg_kernel (every thread loads, splits and computes; a block-wide barrier
 * per tile: the default at Lk <= 256 until ff32_wg1_kernel passed it), ff32_wg1_kernel (the same with one warpgroup a
 * block, two blocks an SM, split-KV where the blocks are few: the default at Lk <= 256 and for few blocks) and
 * ff32_ws_kernel (every K/V tile split once into a workspace, by a pre-pass or by the kernel's own blocks, LOCAL > 0
 * or PERSIST (one block per SM looping over the query blocks); one producer thread bulk-copies the split tiles,
 * mbarriers hand them to two consumer warpgroups, which take turns issuing their products). cuda_flash_f32.cu picks
 * among them per call. Compiled for sm_90a only (the bodies trap elsewhere); cuda_flash_f32.cu offers them on compute
 * capability 9.0 devices only. */
#ifndef FW_FLASH_F32_WG_CUH
#define FW_FLASH_F32_WG_CUH

#include "backends/cuda/f32/flash_f32_kernel.cuh"
#include "backends/cuda/parts/pipeline.cuh" /* mbarrier and named-barrier helpers */
#include "backends/cuda/parts/wgmma.cuh"

#ifdef __CUDACC__

template <bool SPLIT> struct ff32_wg_cfg {
    static constexpr int BM = 128, BN = 64, DB = 64, NT = 256;
    static constexpr uint32_t RAW = 2 * BN * DB * 4;           /* one stage of raw K and V */
    static constexpr uint32_t PART = BN * DB * 4;              /* one split tile part (big or small) */
    static constexpr uint32_t KST = (SPLIT ? 2 : 1) * PART;    /* one split K stage */
    static constexpr uint32_t VST = KST;                       /* one split Vᵀ stage */
    static constexpr uint32_t OFF_K = 2 * RAW, OFF_V = OFF_K + 2 * KST;
    static constexpr size_t SMEM = (size_t)OFF_V + 3 * VST + 1024; /* + alignment of the base to 1024 */
    static constexpr int QST = DB + 4; /* Q staging row stride (floats), in the split-Vᵀ area */
};

/* tf32 mode: x rounded to tf32 by integer ops (ff32_round_tf32; cvt.rna.tf32.f32, as ff32_split's tf32 mode has it, made
 * tf32 mode 11% slower in these kernels: docs/PERF-gpu-f32.md).
 * 3xtf32: big = x truncated to tf32, small = x - big (exact in f32; the tensor cores read it truncated to its top 19
 * bits, bench/tf32_input.cu): two instructions an element against five for both parts rounded. The split's own error
 * grows from ~4e-8 to ~3e-7 of max|V| (bench/tf32_split_model.py), under the ~2e-6 that the products' accumulation
 * leaves. big = x itself (the tensor cores truncate it alike) saves nothing, since small needs the truncated
 * value, and in P's split ptxas then serialised wg1's wgmmas (C7511). Big rounded (ff32_split's form, 3 instructions)
 * erred less but was 1% slower at the short shapes. */
template <bool SPLIT> __device__ __forceinline__ void ff32_wg_split(float x, uint32_t &big, uint32_t &small)
{
    if (SPLIT) {
        big = __float_as_uint(x) & 0xffffe000u;
        small = __float_as_uint(x - __uint_as_float(big));
    } else {
        big = ff32_round_tf32(x);
    }
}

/* Byte offset of 16-byte chunk c (0..15 along the row) of row r in a 64-row swizzled tile of 2 column blocks. */
__device__ __forceinline__ uint32_t ff32_wg_sw(int r, int c)
{
    return (uint32_t)((c >> 3) * 64 * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* Where split K keeps key row r: position 2(r % 4) + (r / 4) % 2 of its group of 8 (see ff32_wg_split_k). */
__device__ __forceinline__ int ff32_wg_key_pos(int r) { return (r & ~7) | ((r & 3) << 1) | ((r >> 2) & 1); }

/* Raw tile -> split wgmma tiles, NT threads. K: row r (key) goes to position 2(r%4) + (r/4)%2 of its group
 * of 8. Vᵀ: a thread transposes 4x4 blocks (keys 4kb.., d 4c..), kb = index % 16, so that a quarter warp's
 * reads and writes hit 8 different 16-byte chunks. */
template <bool SPLIT, int NT, bool NARROW = (NT < 128)>
__device__ __forceinline__ void ff32_wg_split_k(const float *rk, unsigned char *sk, int tid)
{
    auto put = [&](const float4 &x, unsigned char *dst) {
        uint4 big, small;
        ff32_wg_split<SPLIT>(x.x, big.x, small.x);
        ff32_wg_split<SPLIT>(x.y, big.y, small.y);
        ff32_wg_split<SPLIT>(x.z, big.z, small.z);
        ff32_wg_split<SPLIT>(x.w, big.w, small.w);
        *reinterpret_cast<uint4 *>(dst) = big;
        if (SPLIT) *reinterpret_cast<uint4 *>(dst + ff32_wg_cfg<SPLIT>::PART) = small;
    };
    constexpr int S = NT / 16; /* rows a pass */
    if constexpr (!NARROW && 1024 % NT == 0 && S % 8 == 0 && (S & (S - 1)) == 0) {
        /* A thread's rows r0 + S i keep r0's place in their group of 8 and, by ff32_raw_chunk_step, their read swizzle:
         * one base address each side, then fixed steps (per-row index arithmetic was ~12 of the ~25 instructions a
         * row; docs/PERF-gpu-f32.md). cx and pos0 are ff32_raw_chunk(r0, c) and ff32_wg_key_pos(r0) written
         * out: through the helpers nvcc 13.0 schedules ff32_presplit_kernel differently (the same instructions), and
         * that kernel's timings are of this form. */
        const int r0 = tid >> 4, c = tid & 15, cx = c ^ ((r0 >> 2) & 7);
        const int pos0 = (r0 & ~7) | ((r0 & 3) << 1) | ((r0 >> 2) & 1);
        const float *src = rk + r0 * 64;
        unsigned char *dst = sk + ff32_wg_sw(pos0, c);
        /* every load before the first store: ptxas cannot tell raw from split K apart, so a load after a store waits
         * for it, and load-split-store row by row made 8 shared-memory round trips one after another */
        float4 x[1024 / NT];
#pragma unroll
        for (int i = 0; i < 1024 / NT; i++)
            x[i] = *reinterpret_cast<const float4 *>(src + i * S * 64 + (ff32_raw_chunk_step<S>(cx, i) << 2));
#pragma unroll
        for (int i = 0; i < 1024 / NT; i++) put(x[i], dst + i * S * 128);
    } else {
#pragma unroll(NARROW ? 1 : 2)
        for (int i = 0; i < (1024 + NT - 1) / NT; i++) {
            const int idx = tid + NT * i, r = idx >> 4, c = idx & 15;
            if (1024 % NT && idx >= 1024) break;
            put(*reinterpret_cast<const float4 *>(rk + r * 64 + (ff32_raw_chunk(r, c) << 2)),
                sk + ff32_wg_sw(ff32_wg_key_pos(r), c));
        }
    }
}
template <bool SPLIT, int NT, bool NARROW = (NT < 128)>
__device__ __forceinline__ void ff32_wg_split_v(const float *rv, unsigned char *sv, int tid)
{
    constexpr int IT = (256 + NT - 1) / NT;
    /* keys 4kb..4kb+3 of column 4c + e, split, into their 16-byte chunk of Vᵀ */
    auto put = [&](int kb, int c, int e, float y0, float y1, float y2, float y3) {
        uint4 big, small;
        ff32_wg_split<SPLIT>(y0, big.x, small.x);
        ff32_wg_split<SPLIT>(y1, big.y, small.y);
        ff32_wg_split<SPLIT>(y2, big.z, small.z);
        ff32_wg_split<SPLIT>(y3, big.w, small.w);
        const uint32_t off = ff32_wg_sw(4 * c + e, kb);
        *reinterpret_cast<uint4 *>(sv + off) = big;
        if (SPLIT) *reinterpret_cast<uint4 *>(sv + ff32_wg_cfg<SPLIT>::PART + off) = small;
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
            x[j] = *reinterpret_cast<const float4 *>(rv + (4 * kb + j) * 64 + (ff32_raw_chunk(4 * kb, c) << 2));
    };
    if constexpr (NARROW) { /* the producer's split warps at 24 registers: one column at a time */
#pragma unroll 1
        for (int i = 0; i < IT; i++) {
            const int idx = tid + NT * i, kb = idx & 15, c = idx >> 4;
            if (256 % NT && idx >= 256) break;
            const float *col = rv + 4 * kb * 64 + (ff32_raw_chunk(4 * kb, c) << 2);
#pragma unroll 1
            for (int e = 0; e < 4; e++) put(kb, c, e, col[e], col[64 + e], col[128 + e], col[192 + e]);
        }
    } else if constexpr (IT <= 2) {
        /* every load before the first store (as in ff32_wg_split_k: a load after a store waits for it) */
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

/* d (+)= A · B over K = 64 (8 k8 steps); A big/small in registers, B big (+ small at +PART) at desc b.
 * 3xtf32: small·big + big·small + big·big. +1 in the descriptor = 16 bytes: 2 per k8 step inside a
 * 128-byte row, a column block (64 rows x 128 bytes = 512 units) per 4 steps. */
template <bool SPLIT>
__device__ __forceinline__ void ff32_wg_gemm(float (&d)[8][4], const uint32_t (&ab)[8][4], const uint32_t (&as)[8][4],
                                             uint64_t b, int acc)
{
    typedef ff32_wg_cfg<SPLIT> C;
    fwparts::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const uint64_t o = (uint64_t)((kk >> 2) * 512 + (kk & 3) * 2);
        if (SPLIT) {
            fwparts::wgmma_rs_tf32<64>(d, as[kk], b + o, acc || kk > 0);
            fwparts::wgmma_rs_tf32<64>(d, ab[kk], b + (C::PART >> 4) + o, 1);
            fwparts::wgmma_rs_tf32<64>(d, ab[kk], b + o, 1);
        } else {
            fwparts::wgmma_rs_tf32<64>(d, ab[kk], b + o, acc || kk > 0);
        }
    }
    fwparts::wgmma_commit();
}

/* One warpgroup's 64 query rows (a warp: rows wrow + g, wrow + g + 8): Q and P as split A fragments, the S
 * and O accumulators, running max and sum, the visible key range of its rows. Both kernels use it.
 * FRESH_PV: each key tile's P·V is summed in its own accumulator and added to O in f32. The tensor cores'
 * accumulation does not round to nearest; over 256 k8 steps x 3 products into O (L = 2048) 3xtf32 erred
 * 1.2e-5 on some inputs. 32 more registers: the warp-specialised kernel has them, ff32_wg_kernel not. */
template <bool SPLIT, bool FRESH_PV = false> struct ff32_wg_rows {
    uint32_t qb[8][4], qs[8][4], pb[8][4], ps[8][4];
    float o[8][4], s[8][4], m[2], l[2];
    float pv[FRESH_PV ? 8 : 1][4];
    int wrow, g, t4;

    __device__ __forceinline__ void init(int wrow_, int lane)
    {
        wrow = wrow_;
        g = lane >> 2;
        t4 = lane & 3;
#pragma unroll
        for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        reset();
    }
    /* O, the running maxima and sums (and the P·V accumulator): a new set of rows */
    __device__ __forceinline__ void reset()
    {
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            m[rr] = -INFINITY;
            l[rr] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
        if constexpr (FRESH_PV) {
#pragma unroll
            for (int j = 0; j < 8; j++) pv[j][0] = pv[j][1] = pv[j][2] = pv[j][3] = 0.0f;
        }
    }
    /* O (+)= P·V of one key tile: issued and committed, not waited for. */
    __device__ __forceinline__ void issue_pv(uint64_t v)
    {
        if constexpr (FRESH_PV) ff32_wg_gemm<SPLIT>(pv, pb, ps, v, 0);
        else ff32_wg_gemm<SPLIT>(o, pb, ps, v, 1);
    }
    /* The last tile's P·V retired. */
    __device__ __forceinline__ void finish_pv()
    {
        if constexpr (FRESH_PV) {
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[j][e] += pv[j][e];
        }
    }
    __device__ __forceinline__ void fence_pv() /* after the wait for a P·V product */
    {
        if constexpr (FRESH_PV) fwparts::wgmma_reg_fence(pv);
        else fwparts::wgmma_reg_fence(o);
    }
    /* Q's A fragments, split; at(r, c): row r, column c of the warpgroup's tile, pre-scaled by scale·log2 e */
    template <typename At> __device__ __forceinline__ void take_q(At at)
    {
#pragma unroll
        for (int kk = 0; kk < 8; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = wrow + g + 8 * (e & 1), c = 8 * kk + t4 + 4 * (e >> 1);
                ff32_wg_split<SPLIT>(at(r, c), qb[kk][e], qs[kk][e]);
            }
    }
    /* from a row-major tile: row r, column c at q[r * rs + c]; rows >= rows and columns >= D read as 0 */
    __device__ __forceinline__ void load_q(const float *q, long long rs, int rows, int D, float sc)
    {
        take_q([&](int r, int c) { return r < rows && c < D ? q[r * rs + c] * sc : 0.0f; });
    }
    /* from a staged 128 x 64 tile (ff32_ws_kernel's, zero-filled past the rows and D): 16-byte chunk c of row r at
     * chunk c ^ (r % 8), so that a warp's 8 rows x 4 columns hit 32 banks */
    __device__ __forceinline__ void load_q_staged(const float *q, float sc)
    {
        take_q([&](int r, int c) { return q[r * 64 + (((c >> 2) ^ (r & 7)) << 2) + (c & 3)] * sc; });
    }
    /* Mask (tiles on the band's edge: the rows' key ranges computed there, not kept in registers), online
     * softmax of S in place (keys from n0); alpha: the rescale of O. */
    __device__ __forceinline__ void softmax(const ff32_args &a, int m0, int n0, bool edge, float (&alpha)[2])
    {
        if (edge) {
            int lo[2], hi[2];
#pragma unroll
            for (int rr = 0; rr < 2; rr++) ff32_range(a, (long long)m0 + wrow + g + 8 * rr, &lo[rr], &hi[rr]);
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = n0 + 8 * j + t4 + 4 * (e & 1), rr = e >> 1;
                    if (key < lo[rr] || key >= hi[rr]) s[j][e] = -INFINITY;
                }
        }
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            float mx = m[rr];
#pragma unroll
            for (int j = 0; j < 8; j++) mx = fmaxf(mx, fmaxf(s[j][2 * rr], s[j][2 * rr + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mu = mx == -INFINITY ? 0.0f : mx;
            alpha[rr] = ff32_exp2(m[rr] - mu);
            m[rr] = mx;
            float ls = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                s[j][2 * rr] = ff32_exp2(s[j][2 * rr] - mu);
                s[j][2 * rr + 1] = ff32_exp2(s[j][2 * rr + 1] - mu);
                ls += s[j][2 * rr] + s[j][2 * rr + 1];
            }
            l[rr] = l[rr] * alpha[rr] + ls;
        }
    }
    /* O *= alpha (its P·V product retired, added first with FRESH_PV), then P into the A fragments (which that product read):
     * k-slot t <-> S column 2t (key t), slot t + 4 <-> column 2t + 1 (key t + 4). */
    __device__ __forceinline__ void rescale_and_take_p(const float (&alpha)[2])
    {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if constexpr (FRESH_PV) {
#pragma unroll
                for (int e = 0; e < 4; e++) o[j][e] += pv[j][e];
            }
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
            ff32_wg_split<SPLIT>(s[j][0], pb[j][0], ps[j][0]);
            ff32_wg_split<SPLIT>(s[j][2], pb[j][1], ps[j][1]);
            ff32_wg_split<SPLIT>(s[j][1], pb[j][2], ps[j][2]);
            ff32_wg_split<SPLIT>(s[j][3], pb[j][3], ps[j][3]);
        }
    }
    /* Split-KV: this thread's O (not yet divided by the sums), row maxima and sums as 9 float4, at p[0], p[NT], ...
     * (the same thread of another key range holds the same rows and columns) */
    template <int NT> __device__ __forceinline__ void save_partial(float4 *p) const
    {
#pragma unroll
        for (int j = 0; j < 8; j++) p[j * NT] = make_float4(o[j][0], o[j][1], o[j][2], o[j][3]);
        p[8 * NT] = make_float4(m[0], m[1], l[0], l[1]);
    }
    /* ... and another range's, merged into this one's: both rescaled to the larger maximum, as softmax() rescales O */
    template <int NT> __device__ __forceinline__ void merge_partial(const float4 *p)
    {
        const float4 ml = __ldcg(p + 8 * NT);
        float sa[2], sb[2];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const float mo = rr ? ml.y : ml.x, lo = rr ? ml.w : ml.z, mx = fmaxf(m[rr], mo);
            const float mu = mx == -INFINITY ? 0.0f : mx;
            sa[rr] = ff32_exp2(m[rr] - mu);
            sb[rr] = ff32_exp2(mo - mu);
            l[rr] = l[rr] * sa[rr] + lo * sb[rr];
            m[rr] = mx;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float4 x = __ldcg(p + j * NT);
            o[j][0] = o[j][0] * sa[0] + x.x * sb[0];
            o[j][1] = o[j][1] * sa[0] + x.y * sb[0];
            o[j][2] = o[j][2] * sa[1] + x.z * sb[1];
            o[j][3] = o[j][3] * sa[1] + x.w * sb[1];
        }
    }
    /* Normalise and write O (rows < rows, columns < D) and the LSE. */
    __device__ __forceinline__ void store(const ff32_args &a, int m0, int rows, int b, int h)
    {
        float *op = a.o + b * a.os[0] + h * a.os[1];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            float lr = l[rr];
            lr += __shfl_xor_sync(0xffffffffu, lr, 1);
            lr += __shfl_xor_sync(0xffffffffu, lr, 2);
            const int row = wrow + g + 8 * rr;
            if (row >= rows) continue;
            const bool live = lr > 0.0f || lr != lr;
            const float inv = live ? 1.0f / lr : 0.0f;
            float *orow = op + (long long)(m0 + row) * a.os[2];
            if (a.D == 64 && (reinterpret_cast<uintptr_t>(orow) & 7) == 0) { /* 8-byte stores: whole 32-byte sectors */
#pragma unroll
                for (int j = 0; j < 8; j++)
                    *reinterpret_cast<float2 *>(orow + j * 8 + 2 * t4) = make_float2(o[j][2 * rr] * inv, o[j][2 * rr + 1] * inv);
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const int col = j * 8 + 2 * t4;
                    if (col < a.D) orow[col] = o[j][2 * rr] * inv;
                    if (col + 1 < a.D) orow[col + 1] = o[j][2 * rr + 1] * inv;
                }
            }
            if (a.lse && t4 == 0)
                a.lse[((long long)b * a.H + h) * a.Lq + m0 + row] =
                    live ? (m[rr] == -INFINITY ? 0.0f : m[rr]) * 0.69314718055994531f + logf(lr) : -INFINITY;
        }
    }
};

/* ff32_block with the wgmma kernels' view: key tile i counted from t_begin. */
struct ff32_wg_block : ff32_block {
    int n_tiles;
    __device__ __forceinline__ void init(const ff32_args &a, int BM, int BN)
    {
        ff32_block::init(a, BM, BN);
        n_tiles = t_end - t_begin;
    }
    __device__ __forceinline__ void init_at(const ff32_args &a, int BM, int BN, int mblk, int h_, int b_)
    {
        ff32_block::init_at(a, BM, BN, mblk, h_, b_);
        n_tiles = t_end - t_begin;
    }
    __device__ __forceinline__ int n0(int i, int BN) const { return (t_begin + i) * BN; }
    __device__ __forceinline__ bool edge(int i, int BN) const
    {
        return n0(i, BN) < bd.lo_max || n0(i, BN) + BN > bd.hi_min;
    }
    /* raw K (V) of key tile i (by NT threads) */
    template <int NT> __device__ __forceinline__ void load_raw_k(const ff32_args &a, float *dst, int i, int tid) const
    {
        const int n = n0(i, 64);
        ff32_load_tile<64, 64, 64, NT, true>(dst, kp + (long long)n * a.ks[2], a.ks[2], a.Lk - n, a.D, a.vec16, tid);
    }
    template <int NT> __device__ __forceinline__ void load_raw_v(const ff32_args &a, float *dst, int i, int tid) const
    {
        const int n = n0(i, 64);
        ff32_load_tile<64, 64, 64, NT, true>(dst, vp + (long long)n * a.vs[2], a.vs[2], a.Lk - n, a.D, a.vec16, tid);
    }
    /* both, V at dst + 64 x 64 */
    template <int NT> __device__ __forceinline__ void load_raw(const ff32_args &a, float *dst, int i, int tid) const
    {
        load_raw_k<NT>(a, dst, i, tid);
        load_raw_v<NT>(a, dst + 64 * 64, i, tid);
    }
};

__device__ __forceinline__ unsigned char *ff32_wg_base(unsigned char *smem)
{
    return smem + ((1024u - ((uint32_t)__cvta_generic_to_shared(smem) & 1023u)) & 1023u);
}

template <bool SPLIT>
__global__ void __launch_bounds__(256, 1) ff32_wg_kernel(const ff32_args a)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef ff32_wg_cfg<SPLIT> C;
    constexpr int BM = C::BM, BN = C::BN, NT = C::NT;
    extern __shared__ __align__(16) unsigned char ff32_wg_smem[];
    unsigned char *base = ff32_wg_base(ff32_wg_smem);
    float *raw = reinterpret_cast<float *>(base);
    unsigned char *sK = base + C::OFF_K, *sV = base + C::OFF_V;
    const uint32_t sK_addr = (uint32_t)__cvta_generic_to_shared(sK), sV_addr = (uint32_t)__cvta_generic_to_shared(sV);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    ff32_wg_block blk;
    blk.init(a, BM, BN);
    const int n_tiles = blk.n_tiles;

    auto split = [&](int i) { /* raw stage i % 2 into split K stage i % 2 and Vᵀ stage i % 3 */
        const float *r = raw + (i & 1) * (2 * 64 * 64);
        ff32_wg_split_k<SPLIT, NT>(r, sK + (i & 1) * C::KST, tid);
        ff32_wg_split_v<SPLIT, NT>(r + 64 * 64, sV + (i % 3) * C::VST, tid);
        fwparts::fence_proxy_async();
    };
    auto s_desc = [&](int i) { return fwparts::sw128_desc(sK_addr + (uint32_t)((i & 1) * C::KST), 16, 1024); };
    auto v_desc = [&](int i) { return fwparts::sw128_desc(sV_addr + (uint32_t)((i % 3) * C::VST), 16, 1024); };

    /* Q through the (still unused) split-Vᵀ area, then into registers (straight from global memory, together
     * with the cvt form of the split, was 13% slower at L = 2048) */
    float *Qs = reinterpret_cast<float *>(sV);
    ff32_load_tile<BM, 64, C::QST, NT>(Qs, blk.qp, a.qs[2], blk.rows, a.D, a.vec16, tid);
    if (n_tiles > 0) blk.load_raw<NT>(a, raw, 0, tid);
    ff32_commit();
    if (n_tiles > 1) blk.load_raw<NT>(a, raw + 2 * 64 * 64, 1, tid);
    ff32_commit();
    ff32_wait<1>();
    __syncthreads();
    ff32_wg_rows<SPLIT> w;
    w.init(warp * 16, lane);
    w.load_q(Qs, C::QST, BM, 64, a.scale_log2);
    __syncthreads(); /* Q staging read: the split-Vᵀ area is free */
    if (n_tiles > 0) split(0);

    if (n_tiles > 0) {
        ff32_wait<0>();
        __syncthreads(); /* split tile 0 visible (with the proxy fence); raw tile 1 landed */
        ff32_wg_gemm<SPLIT>(w.s, w.qb, w.qs, s_desc(0), 0);
        if (2 < n_tiles) blk.load_raw<NT>(a, raw, 2, tid);
        ff32_commit();
        if (1 < n_tiles) split(1);
        fwparts::wgmma_wait<0>();
        fwparts::wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(a, blk.m0, blk.n0(0, BN), blk.edge(0, BN), alpha);
        w.rescale_and_take_p(alpha);
    }
    for (int i = 1; i < n_tiles; i++) {
        ff32_wait<0>();
        __syncthreads(); /* split tile i visible; raw tile i + 1 landed */
        ff32_wg_gemm<SPLIT>(w.s, w.qb, w.qs, s_desc(i), 0);
        ff32_wg_gemm<SPLIT>(w.o, w.pb, w.ps, v_desc(i - 1), 1);
        if (i + 2 < n_tiles) blk.load_raw<NT>(a, raw + (i & 1) * (2 * 64 * 64), i + 2, tid); /* tile i: split already */
        ff32_commit();
        if (i + 1 < n_tiles) split(i + 1); /* K stage of tile i - 1 (S(i-1) retired), Vᵀ stage of tile i - 2 */
        fwparts::wgmma_wait<1>(); /* S(i) done; P(i-1)·V(i-1) may still run */
        fwparts::wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(a, blk.m0, blk.n0(i, BN), blk.edge(i, BN), alpha);
        fwparts::wgmma_wait<0>(); /* P(i-1)·V(i-1) retired: O may be rescaled and P's fragments rewritten */
        fwparts::wgmma_reg_fence(w.o);
        w.rescale_and_take_p(alpha);
    }
    if (n_tiles > 0) {
        ff32_wg_gemm<SPLIT>(w.o, w.pb, w.ps, v_desc(n_tiles - 1), 1);
        fwparts::wgmma_wait<0>();
        fwparts::wgmma_reg_fence(w.o);
    }
    ff32_wait<0>();
    w.store(a, blk.m0, blk.rows, blk.b, blk.h);
#else
    (void)a;
    __trap(); /* sm_90a only: cuda_flash_f32.cu never launches it elsewhere */
#endif
}

/* ---- one warpgroup a block, two blocks an SM; the keys split across blocks when the blocks are few --------------
 * ff32_wg_kernel's blocks take a whole SM (224 KB, 255 registers x 256 threads), so at L = 256 the second wave's copies
 * all start when the first wave ends, and within a block the copies of Q and the first tiles precede every product.
 * Here a block is one warpgroup of 64 query rows with single-buffered stages (raw K/V, split K, split Vᵀ: 97 KB in
 * 3xtf32), two blocks an SM: one block's copies, splits and softmax run under the other's products. Per tile: split K
 * (while P(i-1)·V(i-1) runs), wait for it, S = Q Kᵀ issued, split Vᵀ under it, copy the next raw tile, softmax, P·V
 * issued. (S(i) cannot start before P(i-1)·V(i-1) retires: P's registers are S's accumulator, and issuing it earlier
 * made ptxas serialise the products, info C7514.)
 * Where the blocks fill the SMs one to four times and have at most four key tiles, the first wave's second block of each
 * SM starts ~1 us late (ff32_stagger), so that the first blocks' copies land sooner and they compute while the rest land.
 * Where even 64-row blocks would leave SMs idle (B = 1: 8 heads of L = 512 are 64 blocks on 132 SMs), each query
 * block's key tiles are cut into `n` ranges, one block each (FlashAttention's split-KV): a block writes its O (not yet
 * divided by the sum), its rows' maxima and sums to `part`, takes a ticket from the query block's counter, and the
 * last to arrive merges the others' into its own, sets the counter back to 0 for the next call, and stores. */
template <bool SPLIT> struct ff32_wg1_cfg {
    static constexpr int BM = 64, BN = 64, DB = 64, NT = 128;
    static constexpr uint32_t RAW = 2 * BN * DB * 4;        /* raw K and V */
    static constexpr uint32_t KST = (SPLIT ? 2 : 1) * BN * DB * 4, VST = KST;
    static constexpr int QST = DB + 4;                       /* Q staging row stride (floats), in the split-Vᵀ area */
    static constexpr uint32_t QB = BM * QST * 4, VAREA = VST > QB ? VST : QB;
    static constexpr uint32_t OFF_K = RAW, OFF_V = OFF_K + KST;
    static constexpr size_t SMEM = (size_t)OFF_V + VAREA + 1024; /* + alignment of the base to 1024 */
    static constexpr int PART_F4 = 9 * NT; /* a block's partial: O as 8 float4 a thread, then (m0, m1, l0, l1) */
};
struct ff32_kv_split {
    float4 *part; /* [query block][range] ff32_wg1_cfg::PART_F4 */
    int *ctr;     /* [query block]: ranges done; 0 between calls */
    int n;        /* key ranges a query block: 1, no split */
    int stage0;   /* tile 0's K, Q and V waited for one by one (blocks enough to fill the SMs: see the kernel) */
};

template <bool SPLIT>
__global__ void __launch_bounds__(128, 2) ff32_wg1_kernel(const ff32_args a, const ff32_kv_split ks)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef ff32_wg1_cfg<SPLIT> C;
    constexpr int BM = C::BM, BN = C::BN, NT = C::NT;
    extern __shared__ __align__(16) unsigned char ff32_wg_smem[];
    unsigned char *base = ff32_wg_base(ff32_wg_smem);
    float *raw = reinterpret_cast<float *>(base);
    unsigned char *sK = base + C::OFF_K, *sV = base + C::OFF_V;
    const uint64_t s_desc = fwparts::sw128_desc((uint32_t)__cvta_generic_to_shared(sK), 16, 1024);
    const uint64_t v_desc = fwparts::sw128_desc((uint32_t)__cvta_generic_to_shared(sV), 16, 1024);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int range = blockIdx.z % ks.n, mblk = gridDim.x - 1 - blockIdx.x;
    ff32_wg_block blk;
    blk.init_at(a, BM, BN, mblk, blockIdx.y, blockIdx.z / ks.n);
    if (ks.n > 1) { /* this block's share of the query block's key tiles */
        const int per = (blk.n_tiles + ks.n - 1) / ks.n, t0 = min(range * per, blk.n_tiles);
        blk.t_begin += t0;
        blk.n_tiles = min(per, blk.n_tiles - t0);
        blk.t_end = blk.t_begin + blk.n_tiles;
    }
    const int n_tiles = blk.n_tiles;
    ff32_stagger(a);

    /* Tile 0's K, Q, tile 0's V: three copy groups. ks.stage0 (the blocks fill the SMs and all copy at once: at seed
     * L = 128 Q landed 3.5 us into a block and tile 0 1.2 us after it, docs/PERF-gpu-f32.md): K(0) is split
     * while Q lands and S(0) runs while V(0) lands (3xtf32 seed L = 128 -6%). Else (few blocks: the copies are
     * quick) K(0) and Q are waited for together, V(0) once Q is in registers: the staged form's extra waits and barriers
     * cost 4% at B = 1, L = 128. Later tiles: one group, K and V. */
    const bool stage0 = ks.stage0 != 0;
    float *Qs = reinterpret_cast<float *>(sV); /* Q through the split-Vᵀ area, before tile 0's split */
    if (n_tiles > 0) blk.load_raw_k<NT>(a, raw, 0, tid);
    ff32_commit();
    ff32_load_tile<BM, 64, C::QST, NT>(Qs, blk.qp, a.qs[2], blk.rows, a.D, a.vec16, tid);
    ff32_commit();
    if (n_tiles > 0) blk.load_raw_v<NT>(a, raw + 64 * 64, 0, tid);
    ff32_commit();
    ff32_wg_rows<SPLIT> w;
    w.init(warp * 16, lane);
    for (int i = 0; i < n_tiles; i++) {
        if (i == 0 && stage0) {
            ff32_wait<2>(); /* K(0) */
        } else if (i == 0) {
            ff32_wait<1>(); /* K(0) and Q: Q into registers while V(0) lands */
            __syncthreads();
            w.load_q(Qs, C::QST, BM, 64, a.scale_log2);
            ff32_wait<0>();
        } else {
            ff32_wait<0>();
        }
        __syncthreads(); /* raw K(i) landed (and V(i), unless i = 0 and staged); S(i-1) retired in every warp */
        ff32_wg_split_k<SPLIT, NT>(raw, sK, tid);
        fwparts::fence_proxy_async();
        if (i == 0 && stage0) {
            ff32_wait<1>();
            __syncthreads(); /* Q landed */
            w.load_q(Qs, C::QST, BM, 64, a.scale_log2);
        }
        fwparts::wgmma_wait<0>(); /* P(i-1)·V(i-1) retired (P's registers are S's: S(i) may not start before) */
        __syncthreads(); /* split K(i) visible to the tensor cores; every warp's P(i-1)·V(i-1) retired: Vᵀ free (Q's
                          * staging read, at i = 0) */
        ff32_wg_gemm<SPLIT>(w.s, w.qb, w.qs, s_desc, 0); /* S(i) runs under Vᵀ(i)'s split */
        if (i == 0 && stage0) {
            ff32_wait<0>();
            __syncthreads(); /* raw V(0) landed */
        }
        ff32_wg_split_v<SPLIT, NT>(raw + 64 * 64, sV, tid);
        fwparts::fence_proxy_async();
        __syncthreads(); /* split Vᵀ(i) visible to the tensor cores; the raw stage free */
        if (i + 1 < n_tiles) blk.load_raw<NT>(a, raw, i + 1, tid);
        ff32_commit();
        fwparts::wgmma_wait<0>();
        fwparts::wgmma_reg_fence(w.o);
        fwparts::wgmma_reg_fence(w.s);
        float alpha[2];
        w.softmax(a, blk.m0, blk.n0(i, BN), blk.edge(i, BN), alpha);
        w.rescale_and_take_p(alpha);
        ff32_wg_gemm<SPLIT>(w.o, w.pb, w.ps, v_desc, 1); /* runs under the next tile's copy wait and K split */
        if constexpr (!SPLIT) { /* a use of Q's fragments that ptxas sees: without it, ptxas 13.0 gave P the registers of
                                  * Q in tf32 (wrong from the second tile on); after the P·V issue, not before it, where
                                  * ptxas injected warpgroup.arrive into the products (info C7519) */
            uint32_t x = 0;
#pragma unroll
            for (int kk = 0; kk < 8; kk++) x ^= w.qb[kk][0] ^ w.qb[kk][1] ^ w.qb[kk][2] ^ w.qb[kk][3];
            if (x == 0x7fffffffu && a.D < 0) a.o[0] = 0.0f; /* never: D > 0 */
        }
    }
    fwparts::wgmma_wait<0>();
    fwparts::wgmma_reg_fence(w.o);
    ff32_wait<0>(); /* n_tiles = 0: Q's copy (never read: no keys) */
    if (ks.n > 1) {
        const long long qi = ((long long)blk.b * a.H + blk.h) * gridDim.x + mblk;
        w.save_partial<NT>(ks.part + (qi * ks.n + range) * C::PART_F4 + tid);
        __threadfence();
        __syncthreads(); /* every thread's partial written (and the raw stage, used for the ticket, read) */
        int *last = reinterpret_cast<int *>(raw);
        if (tid == 0) {
            const int done = atomicAdd(&ks.ctr[qi], 1) + 1;
            *last = done == ks.n;
            if (done == ks.n) ks.ctr[qi] = 0; /* every range has counted: the next call starts from 0 */
        }
        __syncthreads();
        if (!*last) return;
        __threadfence();
        for (int r = 0; r < ks.n; r++)
            if (r != range) w.merge_partial<NT>(ks.part + (qi * ks.n + r) * C::PART_F4 + tid);
    }
    w.store(a, blk.m0, blk.rows, blk.b, blk.h);
#else
    (void)a;
    (void)ks;
    __trap(); /* sm_90a only: cuda_flash_f32.cu never launches it elsewhere */
#endif
}

/* ---- split once per head, then a warp-specialised kernel -----------------------------------------------
 * Splitting every K/V tile in every query block repeats the work L/128 times, and a producer warpgroup doing it
 * per block was the bottleneck (docs/PERF-gpu-f32.md: 0.55 of 1.76 ms at L = 2048). So a pre-pass
 * (ff32_presplit_kernel, one block per key tile and kv head) writes each tile's split K and Vᵀ parts, in the
 * swizzled shared-memory layout, contiguously to a workspace: tile (b, hk, t) at ((b Hk + hk) n_kt + t) TILE
 * bytes, K big (+ small) then Vᵀ big (+ small). The main kernel's producer is one thread issuing 1-D bulk copies
 * (cp.async.bulk, completing on the stage's mbarrier); warpgroups 1 and 2 consume 64 query rows each. */
template <bool SPLIT, bool FUSED = false> struct ff32_ps_cfg {
    typedef ff32_wg_cfg<SPLIT> W;
    static constexpr uint32_t TILE = W::KST + W::VST; /* one tile's split K and Vᵀ in the workspace */
    static constexpr uint32_t OFF_V = 2 * W::KST, OFF_RAW = OFF_V + 3 * W::VST;
    /* fused: raw K and V tiles for the split; the second prologue tile's raw copy goes to Vᵀ stage 2 where that
     * holds it (3xtf32), else to a second raw tile */
    static constexpr uint32_t RAW2 = W::VST >= W::RAW ? OFF_V + 2 * W::VST : OFF_RAW + W::RAW;
    static constexpr uint32_t OFF_BAR = OFF_RAW + (FUSED ? (W::VST >= W::RAW ? 1 : 2) * W::RAW : 0);
    static constexpr size_t SMEM = (size_t)OFF_BAR + 128 + 1024; /* + mbarriers and the ticket, + base alignment */
    /* persistent: the next query block's rows, staged by the consumers an item ahead (cp.async) */
    static constexpr uint32_t OFF_Q = OFF_BAR + 128;
    static constexpr size_t SMEM_PERSIST = (size_t)OFF_Q + W::BM * 64 * 4 + 1024;
    static constexpr size_t PRE_SMEM = (size_t)W::RAW; /* pre-pass: one raw K and V tile */
};

template <bool SPLIT>
__global__ void __launch_bounds__(256) ff32_presplit_kernel(const ff32_args a, unsigned char *ws)
{
    extern __shared__ __align__(16) unsigned char ff32_wg_smem[];
    float *raw = reinterpret_cast<float *>(ff32_wg_smem);
    const int t = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int n0 = t * 64;
    const float *kp = a.k + b * a.ks[0] + hk * a.ks[1] + (long long)n0 * a.ks[2];
    const float *vp = a.v + b * a.vs[0] + hk * a.vs[1] + (long long)n0 * a.vs[2];
    ff32_load_tile<64, 64, 64, 256, true>(raw, kp, a.ks[2], a.Lk - n0, a.D, a.vec16, tid);
    ff32_load_tile<64, 64, 64, 256, true>(raw + 64 * 64, vp, a.vs[2], a.Lk - n0, a.D, a.vec16, tid);
    ff32_commit();
    ff32_wait<0>();
    __syncthreads();
    /* straight to the workspace: a quarter warp's 16-byte stores fill one 128-byte row */
    unsigned char *dst = ws + (((long long)b * gridDim.y + hk) * gridDim.x + t) * (long long)ff32_ps_cfg<SPLIT>::TILE;
    ff32_wg_split_k<SPLIT, 256>(raw, dst, tid);
    ff32_wg_split_v<SPLIT, 256>(raw + 64 * 64, dst + ff32_wg_cfg<SPLIT>::KST, tid);
}

__device__ __forceinline__ void ff32_bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* k_full/v_full: the producer's expect-tx arrival + the bulk copy's bytes; k_empty/v_empty: 256 consumer
 * arrivals once their wgmmas retired. Split K has 2 stages, Vᵀ 3 (V(t-1) is read while K(t+1) may land). */
struct ff32_ws_bars {
    uint32_t base;
    __device__ __forceinline__ uint32_t k_full(int st) const { return base + 8u * (uint32_t)st; }
    __device__ __forceinline__ uint32_t k_empty(int st) const { return base + 8u * (uint32_t)(2 + st); }
    __device__ __forceinline__ uint32_t v_full(int st) const { return base + 8u * (uint32_t)(4 + st); }
    __device__ __forceinline__ uint32_t v_empty(int st) const { return base + 8u * (uint32_t)(7 + st); }
    __device__ __forceinline__ void init() const
    {
        for (int st = 0; st < 2; st++) {
            fwparts::mbar_init(k_full(st), 1);
            fwparts::mbar_init(k_empty(st), 256);
        }
        for (int st = 0; st < 3; st++) {
            fwparts::mbar_init(v_full(st), 1);
            fwparts::mbar_init(v_empty(st), 256);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
};

/* The fused form's tile states in global memory (below): acquire/release at GPU scope, and the fence that orders
 * them with the bulk copies (async proxy) reading the tiles. The memory is a stream's cached scratch (fw_cuda_ws_cached)
 * or zeroed pool memory; a call's `epoch` (>= 1) is new with the same memory, so that flags need no reset: a tile is
 * split in this call when its flag == epoch. The kv heads' ticket counters come in two sets, the call's (epoch % 2)
 * and the next call's, which this call zeroes (the last call's: done with it). A counter of tagged epochs, taken by
 * compare-and-swap, was 5% slower at L = 512. */
struct ff32_ws_sync {
    int *ctr;  /* 2 x per kv head */
    int *flag; /* per tile */
    int epoch, heads;
};
__device__ __forceinline__ int ff32_ld_acquire(const int *p)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void ff32_st_release(int *p, int v)
{
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void ff32_fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

/* FUSED: no pre-pass. Every block splits its first LOCAL key tiles itself (all threads, into stages 0 and 1); the
 * split of the others is shared through the workspace: warps 1-3 of the producer warpgroup take tickets (tiles
 * LOCAL, LOCAL + 1, ... of their kv head, from a counter in global memory), split that tile from a raw copy into
 * the workspace and raise its flag; the producer thread waits for a tile's flag before copying it. The tiles are
 * split in the order every block needs them, each once, by the head's blocks together. A block waits only for
 * tiles whose ticket a running block holds (its own split warps take any that nobody took), so the blocks of a
 * head need not run at the same time.
 * PERSIST (LOCAL = 0): one block per SM loops over the query blocks (items it, it + gridDim.x, ...; the query blocks
 * of a head next to each other); the stages' ring runs on across items, so the producer copies (and the split
 * warps split) the next item's tiles while the consumers finish the current one, and each consumer warpgroup stages
 * its rows of the next item's Q in shared memory.
 * SHORT (PERSIST, keys of at most FF32_SHORT_TILES tiles): the split warps get 56 registers and the consumers 224,
 * without 3xtf32's separate P·V accumulator (see FF32_SHORT_TILES). At L = 512 each block splits 2 of the 8 tiles of
 * every item's head, and a tile's split (~11 µs at 24 registers, ~9 at 56) is what the items wait for. */
template <bool SPLIT, int LOCAL = 0, bool PERSIST = false, bool SHORT = false>
__global__ void __launch_bounds__(384, 1) ff32_ws_kernel(const ff32_args a, unsigned char *ws, const ff32_ws_sync sync, int batch)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool FUSED = LOCAL > 0 || PERSIST;
    typedef ff32_ps_cfg<SPLIT, FUSED> C;
    constexpr int BN = C::W::BN, BM = C::W::BM;
    static_assert(!PERSIST || LOCAL == 0, "the persistent form splits every tile by ticket");
    static_assert(!SHORT || PERSIST, "the short-key form is a persistent one");
    extern __shared__ __align__(16) unsigned char ff32_wg_smem[];
    unsigned char *base = ff32_wg_base(ff32_wg_smem);
    const uint32_t sK_addr = (uint32_t)__cvta_generic_to_shared(base), sV_addr = sK_addr + C::OFF_V;
    const ff32_ws_bars bar{sK_addr + C::OFF_BAR};
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
    /* the items: PERSIST, every query block of the problem in turn; else the grid's one */
    const int nqb = (a.Lq + BM - 1) / BM, n_items = PERSIST ? nqb * a.H * batch : 1;
    const int it0 = PERSIST ? (int)blockIdx.x : 0, it_step = PERSIST ? (int)gridDim.x : 1;
    auto item = [&](int it) {
        ff32_wg_block blk;
        if (PERSIST) blk.init_at(a, BM, BN, nqb - 1 - it % nqb, it / nqb % a.H, it / (nqb * a.H));
        else blk.init(a, BM, BN);
        return blk;
    };
    if (tid == 0) bar.init();
    float *raw = reinterpret_cast<float *>(base + C::OFF_RAW);
    int n_local = 0; /* LOCAL: the first tiles, split here into stages 0 and 1 */
    if (LOCAL > 0) {
        const ff32_wg_block blk = item(it0);
        n_local = min(blk.n_tiles, LOCAL);
        if (n_local > 0) {
            for (int i = 0; i < n_local; i++) blk.load_raw<384>(a, i ? reinterpret_cast<float *>(base + C::RAW2) : raw, i, tid);
            ff32_commit();
            ff32_wait<0>();
            __syncthreads();
            for (int i = 0; i < n_local; i++) {
                const float *r = i ? reinterpret_cast<const float *>(base + C::RAW2) : raw;
                ff32_wg_split_k<SPLIT, 384>(r, base + i * C::W::KST, tid);
                ff32_wg_split_v<SPLIT, 384>(r + 64 * 64, base + C::OFF_V + i * C::W::VST, tid);
            }
            fwparts::fence_proxy_async();
        }
    }
    __syncthreads();
    if (tid == 0) /* stages i of K and Vᵀ full: phase 0 of their barriers */
        for (int i = 0; i < n_local; i++) {
            fwparts::mbar_arrive(bar.k_full(i));
            fwparts::mbar_arrive(bar.v_full(i));
        }

    if (wg == 0) { /* producer: one thread copies; with FUSED, warps 1-3 split tiles by ticket */
        if constexpr (SHORT) asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
        else asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        const int hkn = a.H / a.group, n_kt = (a.Lk + BN - 1) / BN;
        if (FUSED && warp > 0) {
            const int ts = tid - 32;
            volatile int *ticket = reinterpret_cast<volatile int *>(base + C::OFF_BAR + 96);
            for (int it = it0; it < n_items; it += it_step) {
                const ff32_wg_block blk = item(it);
                const long long head = (long long)blk.b * hkn + blk.h / a.group;
                unsigned char *ws_head = ws + head * n_kt * (long long)C::TILE;
                int *ctr = sync.ctr + (sync.epoch & 1) * sync.heads + head;
                int *flag = sync.flag + head * n_kt;
                for (;;) {
                    if (ts == 0) *ticket = atomicAdd(ctr, 1) + LOCAL;
                    fwparts::named_sync(1, 96);
                    const int t = *ticket;
                    fwparts::named_sync(1, 96); /* read by all before the next ticket (maybe the next item's) is written */
                    if (t >= n_kt) break;
                    const int n = t * 64;
                    ff32_load_tile<64, 64, 64, 96, true>(raw, blk.kp + (long long)n * a.ks[2], a.ks[2], a.Lk - n, a.D,
                                                         a.vec16, ts);
                    ff32_load_tile<64, 64, 64, 96, true>(raw + 64 * 64, blk.vp + (long long)n * a.vs[2], a.vs[2], a.Lk - n,
                                                         a.D, a.vec16, ts);
                    ff32_commit();
                    ff32_wait<0>();
                    fwparts::named_sync(1, 96); /* the raw tile landed */
                    unsigned char *dst = ws_head + t * (long long)C::TILE;
                    ff32_wg_split_k<SPLIT, 96, !SHORT>(raw, dst, ts); /* SHORT: unrolled, V by rows (2% faster) */
                    ff32_wg_split_v<SPLIT, 96, !SHORT>(raw + 64 * 64, dst + C::W::KST, ts);
                    ff32_fence_proxy_async_global();
                    fwparts::named_sync(1, 96); /* the tile written (and the raw copy read) by all 96 */
                    if (ts == 0) ff32_st_release(flag + t, sync.epoch);
                }
            }
        }
        if (tid == 0) {
            int g = 0; /* tiles through the stages so far */
            for (int it = it0; it < n_items; it += it_step) {
                const ff32_wg_block blk = item(it);
                const long long head = (long long)blk.b * hkn + blk.h / a.group;
                const int *flag = FUSED ? sync.flag + head * n_kt + blk.t_begin : nullptr;
                const unsigned char *src = ws + (head * n_kt + blk.t_begin) * (long long)C::TILE;
                for (int t = 0; t < blk.n_tiles; t++, g++, src += C::TILE) {
                    if (FUSED) {
                        if (g < n_local) continue; /* split in the prologue */
                        while (ff32_ld_acquire(flag + t) != sync.epoch) __nanosleep(32);
                        ff32_fence_proxy_async_global();
                    }
                    if (g >= 2) fwparts::mbar_wait(bar.k_empty(g & 1), (uint32_t)(((g >> 1) - 1) & 1));
                    fwparts::mbar_expect_tx(bar.k_full(g & 1), C::W::KST);
                    ff32_bulk_copy(sK_addr + (uint32_t)(g & 1) * C::W::KST, src, C::W::KST, bar.k_full(g & 1));
                    if (g >= 3) fwparts::mbar_wait(bar.v_empty(g % 3), (uint32_t)((g / 3 - 1) & 1));
                    fwparts::mbar_expect_tx(bar.v_full(g % 3), C::W::VST);
                    ff32_bulk_copy(sV_addr + (uint32_t)(g % 3) * C::W::VST, src + C::W::KST, C::W::VST, bar.v_full(g % 3));
                }
            }
        }
        return;
    }

    if constexpr (SHORT) asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
    else asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    const int wgc = wg - 1;
    auto s_desc = [&](int g) { return fwparts::sw128_desc(sK_addr + (uint32_t)((g & 1) * C::W::KST), 16, 1024); };
    auto v_desc = [&](int g) { return fwparts::sw128_desc(sV_addr + (uint32_t)((g % 3) * C::W::VST), 16, 1024); };
    int g = 0; /* tiles through the stages before this item */
    ff32_wg_rows<SPLIT, SPLIT && !SHORT> w;
    w.init(wgc * 64 + (warp & 3) * 16, lane);
    /* ping-pong (as fwd/kernel_ws.cuh): consumer c issues its products after named_sync(2 + c), then lets the other go, so
     * that one's softmax runs under the other's products (3xtf32 7-16% faster at L = 512..2048); consumer 1
     * lets consumer 0 start, and consumer 0 takes that extra arrival at the end (barrier 1: the split warps') */
    if (wgc == 1) fwparts::named_arrive(2, 256);
    auto turn_begin = [&]() { fwparts::named_sync(2 + wgc, 256); };
    auto turn_end = [&]() { fwparts::named_arrive(3 - wgc, 256); };
    /* PERSIST: each consumer warpgroup copies its 64 query rows of the next item into shared memory while it works on
     * this one (loaded from global memory at the item's start, they took ~4-5 µs behind the split warps' traffic) */
    const bool qstage = PERSIST && a.vec16;
    float *const sQ = reinterpret_cast<float *>(base + C::OFF_Q);
    auto stage_q = [&](const ff32_wg_block &qb) {
        const int ct = tid & 127;
#pragma unroll 2
        for (int i = 0; i < 8; i++) {
            const int idx = ct + 128 * i, r = wgc * 64 + (idx >> 4), c = idx & 15;
            const int bytes = r < qb.rows && 4 * c < a.D ? min(16, (a.D - 4 * c) * 4) : 0;
            ff32_cp16(sQ + r * 64 + ((c ^ (r & 7)) << 2), bytes ? qb.qp + (long long)r * a.qs[2] + 4 * c : qb.qp, bytes);
        }
        ff32_commit();
    };
    if (qstage && it0 < n_items) stage_q(item(it0));
    for (int it = it0; it < n_items; it += it_step) {
        const ff32_wg_block blk = item(it);
        const int n_tiles = blk.n_tiles;
        if (qstage) {
            ff32_wait<0>();
            fwparts::named_sync(4 + wgc, 128); /* the warpgroup's rows landed */
            w.load_q_staged(sQ, a.scale_log2);
            fwparts::named_sync(4 + wgc, 128); /* and read by all before the next item's overwrite them */
            if (it + it_step < n_items) stage_q(item(it + it_step));
        } else {
            w.load_q(blk.qp, a.qs[2], blk.rows, a.D, a.scale_log2);
        }
        if (n_tiles > 0) {
            fwparts::mbar_wait(bar.k_full(g & 1), (uint32_t)((g >> 1) & 1));
            turn_begin();
            ff32_wg_gemm<SPLIT>(w.s, w.qb, w.qs, s_desc(g), 0);
            turn_end();
            fwparts::wgmma_wait<0>();
            fwparts::wgmma_reg_fence(w.s);
            fwparts::mbar_arrive(bar.k_empty(g & 1));
            float alpha[2];
            w.softmax(a, blk.m0, blk.n0(0, BN), blk.edge(0, BN), alpha);
            w.rescale_and_take_p(alpha);
        }
        for (int i = 1; i < n_tiles; i++) {
            const int gi = g + i;
            fwparts::mbar_wait(bar.k_full(gi & 1), (uint32_t)((gi >> 1) & 1));
            fwparts::mbar_wait(bar.v_full((gi - 1) % 3), (uint32_t)(((gi - 1) / 3) & 1));
            turn_begin();
            ff32_wg_gemm<SPLIT>(w.s, w.qb, w.qs, s_desc(gi), 0);
            w.issue_pv(v_desc(gi - 1));
            turn_end();
            fwparts::wgmma_wait<1>(); /* S(i) done; P(i-1)·V(i-1) may still run */
            fwparts::wgmma_reg_fence(w.s);
            fwparts::mbar_arrive(bar.k_empty(gi & 1));
            float alpha[2];
            w.softmax(a, blk.m0, blk.n0(i, BN), blk.edge(i, BN), alpha);
            fwparts::wgmma_wait<0>();
            w.fence_pv();
            fwparts::mbar_arrive(bar.v_empty((gi - 1) % 3));
            w.rescale_and_take_p(alpha);
        }
        if (n_tiles > 0) {
            const int gl = g + n_tiles - 1;
            fwparts::mbar_wait(bar.v_full(gl % 3), (uint32_t)((gl / 3) & 1));
            turn_begin();
            w.issue_pv(v_desc(gl));
            turn_end();
            fwparts::wgmma_wait<0>();
            w.fence_pv();
            if (PERSIST) fwparts::mbar_arrive(bar.v_empty(gl % 3)); /* the ring goes on */
            w.finish_pv();
        }
        w.store(a, blk.m0, blk.rows, blk.b, blk.h);
        if (PERSIST) w.reset();
        g += n_tiles;
    }
    if (wgc == 0) fwparts::named_sync(2, 256);
    if (FUSED) { /* the next call's ticket counters, by the consumers at the end (at the start: 160 bytes more spilled) */
        const long long nb = (long long)gridDim.x * gridDim.y * gridDim.z;
        const long long lin = blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
        int *next = sync.ctr + ((sync.epoch + 1) & 1) * sync.heads;
        for (long long i = lin * 256 + tid - 128; i < sync.heads; i += nb * 256) next[i] = 0;
    }
#else
    (void)a;
    (void)ws;
    (void)sync;
    (void)batch;
    __trap(); /* sm_90a only */
#endif
}

/* Key ranges a query block for ff32_wg1_kernel: where its 64-row blocks are fewer than the SMs, enough ranges for about
 * two blocks an SM, each of at least 4 key tiles (B = 1, 3xtf32, H100: L = 512 2 ranges 0.0160 ms, 4 ranges 0.0159,
 * none 0.0212; L = 1024 2 ranges 0.0338, 4 0.0388, none 0.0397; L = 128 2 ranges of a tile 0.0091, none 0.0073:
 * docs/PERF-gpu-f32.md). FW_F32_KV_SPLITS=n forces n (at most one a tile): tests and experiments. */
static int ff32_wg1_ranges(long long blocks, int n_kt, int sms, const fw_knobs *k)
{
    int n = 1;
    if (k->f32_kv_splits > 0) n = k->f32_kv_splits;
    else if (sms > 0 && blocks > 0 && blocks < sms) {
        n = (int)((2LL * sms) / blocks);
        if (n > n_kt / 4) n = n_kt / 4;
    }
    if (n > 8) n = 8;
    if (n > n_kt) n = n_kt;
    return n < 1 ? 1 : n;
}

template <bool SPLIT> static cudaError_t ff32_launch_wg1(const ff32_args *a, int batch, cudaStream_t s, const fw_knobs *k)
{
    typedef ff32_wg1_cfg<SPLIT> C;
    cudaError_t e = fw_cuda_smem_limit<ff32_wg1_kernel<SPLIT>>(C::SMEM);
    if (e != cudaSuccess) return e;
    const long long nqb = (a->Lq + C::BM - 1) / C::BM, blocks = nqb * a->H * batch;
    const int n_kt = (a->Lk + C::BN - 1) / C::BN;
    const int sms = a->sms; /* 0: not known (no split, no staging) */
    ff32_kv_split ks{nullptr, nullptr, ff32_wg1_ranges(blocks, n_kt, sms, k), 0};
    if ((long long)batch * ks.n > 65535) ks.n = 1; /* the grid's z */
    /* FW_F32_WG1_STAGE0=0/1 forces the first tile's staging (the second test pass and the sanitizers force 1) */
    ks.stage0 = k->f32_wg1_stage0 >= 0 ? k->f32_wg1_stage0 != 0 : sms > 0 && blocks * ks.n >= sms;
    ff32_args x = *a;
    ff32_stagger_set(&x, blocks * ks.n, n_kt, sms, ks.stage0 && ks.n == 1, k);
    void *ws = NULL;
    bool cached = false;
    size_t bytes = 0;
    if (ks.n > 1) {
        const size_t part = (size_t)blocks * ks.n * C::PART_F4 * sizeof(float4);
        bytes = part + (size_t)blocks * sizeof(int);
        unsigned epoch = 1;
        e = fw_cuda_ws_cached(&ws, bytes, part, 1ULL << 63 | (unsigned long long)blocks << 8 | (unsigned)ks.n, s, k, &epoch);
        cached = e == cudaSuccess;
        if (!cached) {
            e = fw_cuda_ws_alloc(&ws, bytes, s);
            if (e != cudaSuccess) return e;
            e = cudaMemsetAsync(reinterpret_cast<unsigned char *>(ws) + part, 0, bytes - part, s);
        }
        ks.part = reinterpret_cast<float4 *>(ws);
        ks.ctr = reinterpret_cast<int *>(reinterpret_cast<unsigned char *>(ws) + part);
    }
    if (e == cudaSuccess && blocks > 0) {
        dim3 grid((unsigned)nqb, (unsigned)a->H, (unsigned)(batch * ks.n));
        ff32_wg1_kernel<SPLIT><<<grid, C::NT, C::SMEM, s>>>(x, ks);
        e = cudaGetLastError();
    }
    cudaError_t f = cudaSuccess;
    if (cached) fw_cuda_ws_cached_end(bytes, e == cudaSuccess);
    else if (ws) f = fw_cuda_ws_free(ws, bytes, s);
    return e != cudaSuccess ? e : f;
}

template <bool SPLIT> static cudaError_t ff32_launch_wg(const ff32_args *a, int batch, cudaStream_t s)
{
    typedef ff32_wg_cfg<SPLIT> C;
    cudaError_t e = fw_cuda_smem_limit<ff32_wg_kernel<SPLIT>>(C::SMEM);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((a->Lq + C::BM - 1) / C::BM), (unsigned)a->H, (unsigned)batch);
    ff32_wg_kernel<SPLIT><<<grid, C::NT, C::SMEM, s>>>(*a);
    return cudaGetLastError();
}

/* A workspace of B·Hk·⌈Lk/64⌉ tiles (64 KB each in 3xtf32, 32 KB in tf32), filled by the pre-pass or, FUSED,
 * by the kernel itself (per kv head a ticket counter and a flag per tile, after the tiles); then the kernel (PERSIST:
 * one block per SM). The workspace is the stream's cached scratch where it may be (no allocation, memset or free per
 * call: 8 µs less host time a call), else from the pool, its counters and flags zeroed here, epoch 1. */
template <bool SPLIT, int LOCAL = 0, bool PERSIST = false, bool SHORT = false>
static cudaError_t ff32_launch_ws(const ff32_args *a, int batch, cudaStream_t s, const fw_knobs *k)
{
    if constexpr (SHORT)
        if ((a->Lk + 63) / 64 > FF32_SHORT_TILES) return ff32_launch_ws<SPLIT, 0, true, false>(a, batch, s, k);
    constexpr bool FUSED = LOCAL > 0 || PERSIST;
    typedef ff32_ps_cfg<SPLIT, FUSED> C;
    const int hkn = a->H / a->group, n_kt = (a->Lk + 63) / 64;
    const size_t tiles = (size_t)batch * hkn * n_kt, heads = (size_t)batch * hkn;
    const size_t sync_bytes = FUSED ? (2 * heads + tiles) * sizeof(int) : 0;
    const size_t bytes = tiles * C::TILE + sync_bytes;
    cudaError_t e = FUSED ? cudaSuccess : fw_cuda_smem_limit<ff32_presplit_kernel<SPLIT>>(C::PRE_SMEM);
    const size_t smem = PERSIST ? C::SMEM_PERSIST : C::SMEM;
    if (e == cudaSuccess) e = fw_cuda_smem_limit<ff32_ws_kernel<SPLIT, LOCAL, PERSIST, SHORT>>(smem);
    if (e != cudaSuccess) return e;
    const int nqb = (a->Lq + C::W::BM - 1) / C::W::BM;
    dim3 grid((unsigned)nqb, (unsigned)a->H, (unsigned)batch);
    if (PERSIST) {
        if (a->sms <= 0) return cudaErrorInvalidDevice; /* its grid is one block per SM */
        long long blocks = (long long)nqb * a->H * batch;
        if (blocks > a->sms) blocks = a->sms;
        /* FW_CUDA_PERSIST_BLOCKS=n: at most n blocks (tests: several items per block on small problems) */
        if (k->f32_persist_blocks > 0 && blocks > k->f32_persist_blocks) blocks = k->f32_persist_blocks;
        grid = dim3((unsigned)blocks, 1, 1);
    }
    void *ws = NULL;
    bool cached = false;
    ff32_ws_sync sync{nullptr, nullptr, 1, 0}; /* no counters: the kernel resets none */
    if (tiles && grid.x > 0) {
        unsigned epoch = 1;
        e = fw_cuda_ws_cached(&ws, bytes, FUSED ? tiles * C::TILE : bytes, (unsigned long long)heads << 32 | tiles, s, k, &epoch);
        cached = e == cudaSuccess;
        if (!cached) e = fw_cuda_ws_alloc(&ws, bytes, s);
        if (e != cudaSuccess) return e;
        if (FUSED) { /* the counters, then the flags */
            sync.ctr = reinterpret_cast<int *>(reinterpret_cast<unsigned char *>(ws) + tiles * C::TILE);
            sync.flag = sync.ctr + 2 * heads;
            sync.epoch = (int)epoch;
            sync.heads = (int)heads;
            if (!cached) e = cudaMemsetAsync(sync.ctr, 0, sync_bytes, s);
        } else {
            ff32_presplit_kernel<SPLIT><<<dim3((unsigned)n_kt, (unsigned)hkn, (unsigned)batch), 256, C::PRE_SMEM, s>>>(
                *a, reinterpret_cast<unsigned char *>(ws));
            e = cudaGetLastError();
        }
    }
    if (e == cudaSuccess && grid.x > 0) {
        ff32_ws_kernel<SPLIT, LOCAL, PERSIST, SHORT><<<grid, 384, smem, s>>>(*a, reinterpret_cast<unsigned char *>(ws), sync, batch);
        e = cudaGetLastError();
    }
    cudaError_t f = cudaSuccess;
    if (cached) fw_cuda_ws_cached_end(bytes, e == cudaSuccess);
    else if (ws) f = fw_cuda_ws_free(ws, bytes, s);
    return e != cudaSuccess ? e : f;
}

#endif /* __CUDACC__ */
#endif
