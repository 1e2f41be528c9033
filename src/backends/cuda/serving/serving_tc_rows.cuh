/* The serving kernel's math with query rows as the MMA's M dimension (serving_tc.cuh; every block
 * height of 16 rows or more): a warp owns 16 packed rows, S = Q·Kᵀ in m16n8 tiles of 8 keys, the
 * online softmax along the rows, O += P·V with P fed from the accumulators; the WN warps of a row group
 * saw disjoint keys and merge through shared memory before the epilogue. */
#ifndef FW_CUDA_SERVING_TC_ROWS_CUH
#define FW_CUDA_SERVING_TC_ROWS_CUH

#include "backends/cuda/parts/mma.cuh"
#include "backends/cuda/parts/softmax.cuh"
#include "serving_common.cuh"
#include "serving_load.cuh"

namespace fwsrv {

template <typename T, int D, int SB, int SD, int WN> struct rows_m_math {
    static constexpr int NN = SB / 8, ND = D / 8, KD = D / 16, KN = SB / 16, CPR = D / 8, SDF = D + 8;
    static constexpr bool QREG = D <= 128;

    float acc[1][ND][4];
    float row_m[2], row_l[2];
    uint32_t qf[QREG ? KD : 1][4];
    int jlo[2], jhi[2]; /* visible keys of this thread's two rows (g and g + 8 of its warp's 16) */
    uint32_t q_lane;
    int warp, lane, g, t4, wn, wrow0;

    __device__ __forceinline__ void init(const fw_srv_params &p, const seq_t &sq, int m0, int warp_, int lane_)
    {
        warp = warp_;
        lane = lane_;
        g = lane >> 2;
        t4 = lane & 3;
        wn = warp % WN;
        wrow0 = (warp / WN) * 16;
#pragma unroll
        for (int r = 0; r < 2; r++) row_key_range(p, sq, (m0 + wrow0 + g + 8 * r) / p.group, jlo[r], jhi[r]);
#pragma unroll
        for (int j = 0; j < ND; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[0][j][e] = 0.f;
        row_m[0] = row_m[1] = -INFINITY;
        row_l[0] = row_l[1] = 0.f;
        q_lane = fwparts::ldsm_a_lane<SD>(wrow0, lane);
    }

    /* Q's A fragments into registers (D <= 128), once Q is in shared memory. */
    __device__ __forceinline__ void load_q(uint32_t sQa)
    {
        if (QREG) {
#pragma unroll
            for (int kk = 0; kk < KD; kk++)
                fwparts::ldsm_x4(sQa + q_lane + (uint32_t)(kk * 32), qf[QREG ? kk : 0][0], qf[QREG ? kk : 0][1],
                                 qf[QREG ? kk : 0][2], qf[QREG ? kk : 0][3]);
        }
    }

    /* SB keys from key kt of the tile at key n0 (K and V rows at sKs, sVs). */
    __device__ __forceinline__ void subtile(const fw_srv_params &p, uint32_t sQa, uint32_t sKs, uint32_t sVs, int kt,
                                            int n0, bool need_mask, bool bad_tile, const int32_t *bt)
    {
        float s[1][NN][4];
#pragma unroll
        for (int j = 0; j < NN; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[0][j][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            uint32_t a[1][4];
            if (QREG) {
#pragma unroll
                for (int e = 0; e < 4; e++) a[0][e] = qf[QREG ? kk : 0][e];
            } else {
                fwparts::ldsm_x4(sQa + q_lane + (uint32_t)(kk * 32), a[0][0], a[0][1], a[0][2], a[0][3]);
            }
            /* K as B (keys as n, 16 a step): rows (lane & 7) + 8 (lane >> 4), chunk 2 kk + bit 3 of the lane */
            const uint32_t kb = sKs + kv_chunk<D>((lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1));
            fwparts::mma_ab<T, false, 1, NN / 2>(s, a, kb, 0, 16 * D);
        }
        if (need_mask) {
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int j = 0; j < NN; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int col = n0 + kt + j * 8 + t4 * 2 + e;
                        bool vis = col >= jlo[r] && col < jhi[r];
                        if (bad_tile && vis) /* rare: the table again, from global memory */
                            vis = page_ok(p, __ldg(bt + page_div(p, (uint32_t)col)));
                        if (!vis) s[0][j][r * 2 + e] = -INFINITY;
                    }
        }
        /* Online softmax (base 2) along each row; O is rescaled only when a row's maximum moved. */
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = row_m[r];
#pragma unroll
            for (int j = 0; j < NN; j++) mx = fmaxf(mx, fmaxf(s[0][j][r * 2], s[0][j][r * 2 + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            alpha[r] = online_row_step<2 * NN>(mx, row_m[r], row_l[r], p.scale_log2,
                                               [&](int i) -> float & { return s[0][i >> 1][r * 2 + (i & 1)]; });
        }
        if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int j = 0; j < ND; j++) {
                    acc[0][j][r * 2] *= alpha[r];
                    acc[0][j][r * 2 + 1] *= alpha[r];
                }
        }
        /* O += P V */
#pragma unroll
        for (int kk = 0; kk < KN; kk++) {
            uint32_t a[1][4];
            fwparts::acc_to_a<T>(s[0][2 * kk], s[0][2 * kk + 1], a[0]);
            fwparts::mma_ab_at<T, true, 1, ND / 2>(acc, a, [&](int np) {
                return sVs + kv_chunk<D>(kk * 16 + (lane & 15), 2 * np + (lane >> 4));
            });
        }
    }

    /* After the last tile, the K/V ring free (smem reused): the WN warps of a row group merge, then warps
     * wn = 0 write O (or the split's partial) and the LSE of their rows that exist. Every thread calls it. */
    __device__ __forceinline__ void finish(const fw_srv_params &p, const seq_t &sq, unsigned char *smem, size_t ml_offset,
                                           size_t o_offset, int b, int hk, int split, int m0, int rows)
    {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            row_l[r] += __shfl_xor_sync(0xffffffffu, row_l[r], 1);
            row_l[r] += __shfl_xor_sync(0xffffffffu, row_l[r], 2);
        }
        if constexpr (WN > 1) {
            /* The WN warps of a row group saw disjoint keys: rescale each to the common max, sum into wn = 0. */
            float *sm_ml = reinterpret_cast<float *>(smem + ml_offset); /* [warp][16][2]: m, l */
            float *sm_o = reinterpret_cast<float *>(smem + o_offset);   /* [warp][16][SDF] */
            if (t4 == 0) {
                sm_ml[(warp * 16 + g) * 2] = row_m[0];
                sm_ml[(warp * 16 + g + 8) * 2] = row_m[1];
            }
            __syncthreads();
            const int w0 = warp - wn; /* the row group's first warp */
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = -INFINITY;
#pragma unroll
                for (int w = 0; w < WN; w++) mx = fmaxf(mx, sm_ml[((w0 + w) * 16 + g + 8 * r) * 2]);
                const float f = row_m[r] == -INFINITY ? 0.f : fwparts::fast_exp2((row_m[r] - mx) * p.scale_log2);
                row_m[r] = mx;
                row_l[r] *= f;
#pragma unroll
                for (int j = 0; j < ND; j++) {
                    acc[0][j][r * 2] *= f;
                    acc[0][j][r * 2 + 1] *= f;
                }
            }
            if (wn > 0) {
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int row = warp * 16 + g + 8 * r;
                    if (t4 == 0) sm_ml[row * 2 + 1] = row_l[r];
#pragma unroll
                    for (int j = 0; j < ND; j++)
                        *reinterpret_cast<float2 *>(sm_o + row * SDF + j * 8 + t4 * 2) =
                            make_float2(acc[0][j][r * 2], acc[0][j][r * 2 + 1]);
                }
            }
            __syncthreads();
            if (wn > 0) return; /* no barrier follows */
#pragma unroll
            for (int w = 1; w < WN; w++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int row = (warp + w) * 16 + g + 8 * r;
                    row_l[r] += sm_ml[row * 2 + 1];
#pragma unroll
                    for (int j = 0; j < ND; j++) {
                        const float2 o = *reinterpret_cast<const float2 *>(sm_o + row * SDF + j * 8 + t4 * 2);
                        acc[0][j][r * 2] += o.x;
                        acc[0][j][r * 2 + 1] += o.y;
                    }
                }
        }

        /* Epilogue (warps wn = 0): rows of this warp's group that exist. */
        float inv[2], lse[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float l = row_l[r];
            inv[r] = fwparts::softmax_inv_sum(l);
            lse[r] = row_lse(row_m[r], p.scale, l);
        }
        if (p.splits == 1) {
            /* Normalised O staged as T through this warp's rows of sQ, then 16-byte stores. */
            T *sQ = reinterpret_cast<T *>(smem);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = wrow0 + g + 8 * r, pm = m0 + row;
#pragma unroll
                for (int j = 0; j < ND; j++)
                    *reinterpret_cast<uint32_t *>(sQ + row * SD + j * 8 + t4 * 2) =
                        fwparts::pack2<T>::make(acc[0][j][r * 2] * inv[r], acc[0][j][r * 2 + 1] * inv[r]);
                if (p.lse && t4 == 0 && pm < rows)
                    p.lse[lse_index(p, b, hk * p.group + pm % p.group, pm / p.group, sq)] = lse[r];
            }
            __syncwarp();
            T *og = reinterpret_cast<T *>(p.o) + q_base(p, p.o_s, b, sq);
#pragma unroll
            for (int c = lane; c < 16 * CPR; c += 32) {
                const int r = c / CPR, col = c % CPR, pm = m0 + wrow0 + r;
                if (pm < rows && col * 8 < p.d) {
                    const int i = pm / p.group, h = hk * p.group + pm % p.group;
                    *reinterpret_cast<uint4 *>(og + (int64_t)h * p.o_s[1] + (int64_t)i * p.o_s[2] + col * 8) =
                        *reinterpret_cast<const uint4 *>(sQ + (wrow0 + r) * SD + col * 8);
                }
            }
        } else {
            /* Split-KV: the normalised f32 partial and its LSE (-inf where this chunk had no visible key). */
            const int ld = part_ld(p);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int pm = m0 + wrow0 + g + 8 * r;
                if (pm >= rows) continue;
                const int64_t pr = part_row(p, split, b, hk * p.group + pm % p.group, pm / p.group);
                if (t4 == 0) p.part_lse[pr] = lse[r];
                float *po = p.part_o + pr * ld;
#pragma unroll
                for (int j = 0; j < ND; j++)
                    if (j * 8 < p.d)
                        *reinterpret_cast<float2 *>(po + j * 8 + t4 * 2) =
                            make_float2(acc[0][j][r * 2] * inv[r], acc[0][j][r * 2 + 1] * inv[r]);
            }
        }
    }
};

} /* namespace fwsrv */

#endif
