/* The serving kernel's math with keys as the MMA's M dimension (serving_tc.cuh; blocks of 8 packed rows:
 * decode with up to 8 query heads a KV head). With query rows as M, a decode block of one to eight
 * real rows fills an m16 tile with padding, and half or more of the products and the exponentials are
 * spent on it. Here Sᵀ = K·Qᵀ in m16n8 tiles of 16 keys × the 8 rows (Q's B fragments stay in
 * registers), the softmax runs down the columns (a row's keys are spread over the lanes g and the
 * registers), Pᵀ becomes the B operand of Oᵀ += Vᵀ·Pᵀ by one movmatrix a 8 × 8 block, and Vᵀ's A
 * fragments are V read with ldmatrix.trans: half the MMAs and exponentials of the rows-as-M form.
 *
 * Fragments (lane = 4 g + t4): Sᵀ[mt] holds keys mt·16 + g (+ 8) × rows 2 t4, 2 t4 + 1; Oᵀ[dt] holds
 * columns dt·16 + g (+ 8) × the same rows. At the end every warp (each saw a quarter of the keys) leaves
 * its (max, sum, Oᵀ) in shared memory and the block merges them, 16 threads a row, with vector stores. */
#ifndef FW_CUDA_SERVING_TC_KEYS_CUH
#define FW_CUDA_SERVING_TC_KEYS_CUH

#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"
#include "serving_common.cuh"
#include "serving_load.cuh"

namespace fwsrv {

template <typename T, int D, int SB, int SD, int W> struct keys_m_math {
    static constexpr int BM = 8, MT = SB / 16, DT = D / 16, KD = D / 16, SDF = D + 8;
    static constexpr int TPR = 16, EPT = D / TPR; /* merge: threads a row, columns a thread */
    static_assert(SB % 16 == 0 && KD % 2 == 0 && W * 32 == BM * TPR, "tile shape");

    float o[DT][4];
    float row_m[2], row_l[2]; /* rows 2 t4 and 2 t4 + 1 (this lane's partial sum until finish) */
    uint32_t qf[KD][2];
    int jlo[2], jhi[2];
    int warp, lane, g, t4;

    __device__ __forceinline__ void init(const fw_srv_params &p, const seq_t &sq, int m0, int warp_, int lane_)
    {
        warp = warp_;
        lane = lane_;
        g = lane >> 2;
        t4 = lane & 3;
#pragma unroll
        for (int e = 0; e < 2; e++) row_key_range(p, sq, (m0 + 2 * t4 + e) / p.group, jlo[e], jhi[e]);
#pragma unroll
        for (int j = 0; j < DT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[j][e] = 0.f;
        row_m[0] = row_m[1] = -INFINITY;
        row_l[0] = row_l[1] = 0.f;
    }

    /* Qᵀ's B fragments (n8 = the rows, k16 steps of the head dim), two steps an ldmatrix.x4. */
    __device__ __forceinline__ void load_q(uint32_t sQa)
    {
        const uint32_t q_lane = (uint32_t)(((lane & 7) * SD + (lane >> 3) * 8) * 2);
#pragma unroll
        for (int kk = 0; kk < KD; kk += 2)
            fwparts::ldsm_x4(sQa + q_lane + (uint32_t)(kk * 32), qf[kk][0], qf[kk][1], qf[kk + 1][0], qf[kk + 1][1]);
    }

    /* SB keys from key kt of the tile at key n0 (K and V rows at sKs, sVs). */
    __device__ __forceinline__ void subtile(const fw_srv_params &p, uint32_t, uint32_t sKs, uint32_t sVs, int kt,
                                            int n0, bool need_mask, bool bad_tile, const int32_t *bt)
    {
        float s[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) s[mt][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t a[4];
                fwparts::ldsm_x4(sKs + kv_chunk<D>(mt * 16 + (lane & 15), 2 * kk + (lane >> 4)), a[0], a[1], a[2], a[3]);
                fwparts::mma16816<T>(s[mt], a, qf[kk][0], qf[kk][1]);
            }
        }
        if (need_mask) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int col = n0 + kt + mt * 16 + g + 8 * h;
                    const bool page_in = !bad_tile || page_ok(p, __ldg(bt + page_div(p, (uint32_t)col)));
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        if (!(page_in && col >= jlo[e] && col < jhi[e])) s[mt][2 * h + e] = -INFINITY;
                }
        }
        /* Online softmax (base 2) down each row's column; O is rescaled only when a row's maximum moved. */
        float alpha[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float mx = row_m[e];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) mx = fmaxf(mx, fmaxf(s[mt][e], s[mt][2 + e]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
            alpha[e] = online_row_step<2 * MT>(mx, row_m[e], row_l[e], p.scale_log2,
                                               [&](int i) -> float & { return s[i >> 1][2 * (i & 1) + e]; });
        }
        if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
            for (int j = 0; j < DT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[j][e] *= alpha[e & 1];
        }
        /* Oᵀ += Vᵀ Pᵀ: Pᵀ's B fragment of 16 keys is the transpose of Sᵀ's two 8 × 8 halves. */
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const uint32_t b0 = fwparts::movmatrix_t(fwparts::pack2<T>::make(s[mt][0], s[mt][1]));
            const uint32_t b1 = fwparts::movmatrix_t(fwparts::pack2<T>::make(s[mt][2], s[mt][3]));
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                uint32_t a[4];
                fwparts::ldsm_x4_t(sVs + kv_chunk<D>(mt * 16 + (lane & 7) + ((lane >> 4) << 3), 2 * dt + ((lane >> 3) & 1)),
                                   a[0], a[1], a[2], a[3]);
                fwparts::mma16816<T>(o[dt], a, b0, b1);
            }
        }
    }

    /* After the last tile, the K/V ring free (smem reused): each warp leaves (max, sum, Oᵀ) of its keys,
     * then thread tid merges the W warps' columns tid % 16 · EPT .. of row tid / 16 and writes O (or the
     * split's partial) and the LSE where the row exists. Every thread calls it. */
    __device__ __forceinline__ void finish(const fw_srv_params &p, const seq_t &sq, unsigned char *smem, size_t ml_offset,
                                           size_t o_offset, int b, int hk, int split, int m0, int rows)
    {
        float *sm_ml = reinterpret_cast<float *>(smem + ml_offset); /* [warp][BM][2]: m, l */
        float *sm_o = reinterpret_cast<float *>(smem + o_offset);   /* [warp][BM][SDF] */
#pragma unroll
        for (int e = 0; e < 2; e++) {
            row_l[e] += __shfl_xor_sync(0xffffffffu, row_l[e], 4);
            row_l[e] += __shfl_xor_sync(0xffffffffu, row_l[e], 8);
            row_l[e] += __shfl_xor_sync(0xffffffffu, row_l[e], 16);
            const int row = warp * BM + 2 * t4 + e;
            if (g == 0) {
                sm_ml[row * 2] = row_m[e];
                sm_ml[row * 2 + 1] = row_l[e];
            }
#pragma unroll
            for (int j = 0; j < DT; j++) {
                sm_o[row * SDF + j * 16 + g] = o[j][e];
                sm_o[row * SDF + j * 16 + g + 8] = o[j][2 + e];
            }
        }
        __syncthreads();
        const int tid = warp * 32 + lane, r = tid / TPR, c0 = (tid % TPR) * EPT, pm = m0 + r;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < W; w++) mx = fmaxf(mx, sm_ml[(w * BM + r) * 2]);
        float out[EPT], l = 0.f;
#pragma unroll
        for (int j = 0; j < EPT; j++) out[j] = 0.f;
#pragma unroll
        for (int w = 0; w < W; w++) {
            const float mw = sm_ml[(w * BM + r) * 2];
            const float f = mw == -INFINITY ? 0.f : fwparts::fast_exp2((mw - mx) * p.scale_log2);
            l += f * sm_ml[(w * BM + r) * 2 + 1];
#pragma unroll
            for (int j = 0; j < EPT; j += 4) {
                const float4 x = *reinterpret_cast<const float4 *>(sm_o + (w * BM + r) * SDF + c0 + j);
                out[j] += f * x.x;
                out[j + 1] += f * x.y;
                out[j + 2] += f * x.z;
                out[j + 3] += f * x.w;
            }
        }
        if (pm >= rows) return;
        const float inv = fwparts::softmax_inv_sum(l), lse = row_lse(mx, p.scale, l);
        const int i = pm / p.group, h = hk * p.group + pm % p.group;
        if (p.splits == 1) {
            /* 16-byte stores of 8 elements (8-byte of 4 at head dim 64); p.d is a multiple of 8 */
            constexpr int U = EPT < 8 ? EPT : 8;
            T *orow = reinterpret_cast<T *>(p.o) + q_base(p, p.o_s, b, sq) + (int64_t)h * p.o_s[1] + (int64_t)i * p.o_s[2];
#pragma unroll
            for (int u = 0; u < EPT; u += U) {
                if (c0 + u >= p.d) break;
                uint32_t w[U / 2];
#pragma unroll
                for (int j = 0; j < U / 2; j++) w[j] = fwparts::pack2<T>::make(out[u + 2 * j] * inv, out[u + 2 * j + 1] * inv);
                if constexpr (U == 8)
                    *reinterpret_cast<uint4 *>(orow + c0 + u) = make_uint4(w[0], w[1], w[2], w[3]);
                else
                    *reinterpret_cast<uint2 *>(orow + c0 + u) = make_uint2(w[0], w[1]);
            }
            if (p.lse && tid % TPR == 0) p.lse[lse_index(p, b, h, i, sq)] = lse;
        } else {
            /* Split-KV: the normalised f32 partial and its LSE (-inf where this chunk had no visible key). */
            const int64_t pr = part_row(p, split, b, h, i);
            float *po = p.part_o + pr * part_ld(p);
#pragma unroll
            for (int j = 0; j < EPT; j += 4)
                if (c0 + j < p.d)
                    *reinterpret_cast<float4 *>(po + c0 + j) = make_float4(out[j] * inv, out[j + 1] * inv, out[j + 2] * inv, out[j + 3] * inv);
            if (tid % TPR == 0) p.part_lse[pr] = lse;
        }
    }
};

} /* namespace fwsrv */

#endif
