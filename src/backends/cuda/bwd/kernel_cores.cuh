/* The CUDA-core backward (FlashAttention-2's algorithm, the GPU twin of src/backends/cpu/cpu_bwd_tiled.c): the
 * records of family bwd.cores, for f32 and for the f16/bf16 shapes the tensor-core kernels do not take.
 *
 *   dK/dV kernel: grid (key tiles of BN, kv heads, batch). A block keeps K_j, V_j (f32, shared memory) and its dK_j,
 *      dV_j accumulators in registers, loops over the query heads of its GQA group and over the query tiles (BM
 *      rows) that can see its keys (causal/window: tiles outside the band are never visited; the mask is applied
 *      per element), recomputes S = Q·Kᵀ, P = exp(scale·S − LSE) (0 where masked or LSE = −inf), dP = dO·Vᵀ,
 *      dS = P ∘ (dP − Δ), and accumulates dV += Pᵀ·dO, dK += dSᵀ·Q (scale applied at the store). The GQA sum over
 *      the group's query heads happens in registers: no atomics on dK/dV. Atomic mode: the same block also adds
 *      scale·dS·K_j into the f32 dQ accumulator (atomicAdd); preprocess.cuh's conversion writes dQ.
 *   dQ kernel (deterministic mode): grid (query tiles, heads, batch), keeps Q_i, dO_i, LSE_i, Δ_i, loops over the
 *      visible key tiles, recomputes P and dS and accumulates dQ_i = scale·dS·K in registers; no atomics anywhere,
 *      bit-identical results run to run.
 *
 * Arithmetic is f32 on CUDA cores for every dtype (f16/bf16 converted to f32 when staged into shared memory). The
 * head dim is padded to the record's D with zeros (masking by zero-fill). 256 threads per block, register-blocked
 * (cores_tile.cuh); shared rows of Q, dO, K, V are padded to D + 4 floats so that the column-strided float4 reads
 * of the score phase take the minimum number of shared-memory wavefronts.
 *
 * Cfg: a configuration (kernel_common.cuh: kv_kernel::cores) with D, BM, BN. */
#ifndef FW_BWD_KERNEL_CORES_CUH
#define FW_BWD_KERNEL_CORES_CUH

#include "backends/cuda/bwd/cores_tile.cuh"

namespace fwbwd {

/* The dynamic shared memory of both kernels: K, V [BN][LD]; Q, dO [BM][LD]; P, dS [BM][LDP]; LSE, Δ [BM]. The kernels
 * carve it themselves: through a helper's pointers the dQ kernel compiled to other registers. */
extern __shared__ float4 cores_smem4[];

/* dK, dV (and in the atomic mode dQ through atomics). Grid (ceil(Lk/BN), Hkv, B); VARLEN: a ragged batch
 * (kernel_common.cuh: ragged_block). */
template <typename T, class Cfg, dq_mode DQ, bool VARLEN = false>
__global__ void __launch_bounds__(CORES_THREADS) cores_dkdv_kernel(const fw_bwd_args args)
{
    typedef cores_geom<Cfg> G;
    constexpr bool ATOMIC_DQ = DQ == dq_mode::atomic;
    float *Ks = (float *)cores_smem4;
    float *Vs = Ks + G::BN * G::LD;
    float *Qs = Vs + G::BN * G::LD;
    float *dOs = Qs + G::BM * G::LD;
    float *Ps = dOs + G::BM * G::LD;
    float *dSs = Ps + G::BM * G::LDP;
    float *lse_s = dSs + G::BM * G::LDP;
    float *dl_s = lse_s + G::BM;

    fw_bwd_args seq; /* VARLEN: the block's sequence as a problem of its own */
    fwparts::tile_coord tile;
    if constexpr (VARLEN) {
        if (!ragged_block<T, G::BN, true>(args, false, seq, tile)) return;
    } else {
        tile = {(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
    }
    const fw_bwd_args &a = VARLEN ? seq : args;
    const int j0 = tile.m_block * G::BN, hk = tile.h, b = tile.b;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const T *q = (const T *)a.q, *k = (const T *)a.k, *v = (const T *)a.v, *dout = (const T *)a.dout;

    cores_load_rows<T, Cfg, G::BN>(Ks, k, (long long)b * a.k_s[0] + (long long)hk * a.k_s[1], a.k_s[2], j0, a.Lk, a.D);
    cores_load_rows<T, Cfg, G::BN>(Vs, v, (long long)b * a.v_s[0] + (long long)hk * a.v_s[1], a.v_s[2], j0, a.Lk, a.D);

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
            cores_load_rows<T, Cfg, G::BM>(Qs, q, qbase, a.q_s[2], i0, a.Lq, a.D);
            cores_load_rows<T, Cfg, G::BM>(dOs, dout, obase, a.do_s[2], i0, a.Lq, a.D);
            cores_load_stats<G::BM>(lse_s, dl_s, a, b, h, i0);
            __syncthreads();
            cores_scores<Cfg>(Qs, dOs, Ks, Vs, lse_s, dl_s, Ps, dSs, a, i0, j0);
            __syncthreads();
            /* dV += Pᵀ·dO, dK += dSᵀ·Q over the BM rows */
#pragma unroll 4
            for (int r = 0; r < G::BM; r++) {
                float p[G::RJ], ds[G::RJ];
                cores_ldn<G::RJ>(p, Ps + r * G::LDP + G::RJ * ty);
                cores_ldn<G::RJ>(ds, dSs + r * G::LDP + G::RJ * ty);
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
                        cores_fma4(&dv[x][4 * g], p[x], o[g]);
                        cores_fma4(&dk[x][4 * g], ds[x], qq[g]);
                    }
            }
            if (ATOMIC_DQ) {
                float acc[G::RM][G::C];
#pragma unroll
                for (int x = 0; x < G::RM; x++)
#pragma unroll
                    for (int c = 0; c < G::C; c++) acc[x][c] = 0.0f;
                cores_dq_step<Cfg>(dSs, Ks, acc);
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

/* The deterministic mode's dQ. Grid (ceil(Lq/BM), H, B); VARLEN: a ragged batch (kernel_common.cuh: ragged_block),
 * held to the dense kernel's two blocks an SM (unbounded, ptxas gave it 182 registers instead of 124; 0: no bound,
 * as the dense kernel was measured). */
template <typename T, class Cfg, bool VARLEN = false>
__global__ void __launch_bounds__(CORES_THREADS, VARLEN ? 2 : 0) cores_dq_kernel(const fw_bwd_args args)
{
    typedef cores_geom<Cfg> G;
    float *Ks = (float *)cores_smem4;
    float *Vs = Ks + G::BN * G::LD;
    float *Qs = Vs + G::BN * G::LD;
    float *dOs = Qs + G::BM * G::LD;
    float *Ps = dOs + G::BM * G::LD;
    float *dSs = Ps + G::BM * G::LDP;
    float *lse_s = dSs + G::BM * G::LDP;
    float *dl_s = lse_s + G::BM;

    fw_bwd_args seq; /* VARLEN: the block's sequence as a problem of its own */
    fwparts::tile_coord tile;
    if constexpr (VARLEN) {
        if (!ragged_block<T, G::BM, false>(args, false, seq, tile)) return;
    } else {
        tile = {(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
    }
    const fw_bwd_args &a = VARLEN ? seq : args;
    const int i0 = tile.m_block * G::BM, h = tile.h, b = tile.b;
    const int hk = h / a.group;
    const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
    const T *q = (const T *)a.q, *k = (const T *)a.k, *v = (const T *)a.v, *dout = (const T *)a.dout;

    cores_load_rows<T, Cfg, G::BM>(Qs, q, (long long)b * a.q_s[0] + (long long)h * a.q_s[1], a.q_s[2], i0, a.Lq, a.D);
    cores_load_rows<T, Cfg, G::BM>(dOs, dout, (long long)b * a.do_s[0] + (long long)h * a.do_s[1], a.do_s[2], i0,
                                   a.Lq, a.D);
    cores_load_stats<G::BM>(lse_s, dl_s, a, b, h, i0);

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
        cores_load_rows<T, Cfg, G::BN>(Ks, k, kbase, a.k_s[2], j0, a.Lk, a.D);
        cores_load_rows<T, Cfg, G::BN>(Vs, v, vbase, a.v_s[2], j0, a.Lk, a.D);
        __syncthreads();
        cores_scores<Cfg>(Qs, dOs, Ks, Vs, lse_s, dl_s, Ps, dSs, a, i0, j0);
        __syncthreads();
        cores_dq_step<Cfg>(dSs, Ks, acc);
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

/* Shared memory of either kernel, bytes. */
template <class Cfg> constexpr size_t cores_smem_bytes() { return (size_t)cores_geom<Cfg>::SMEM_FLOATS * sizeof(float); }

/* Host: the dK/dV kernel, then in the deterministic mode the dQ kernel; VARLEN: on a ragged batch (a->seqs). */
template <typename T, class Cfg, bool VARLEN = false>
static cudaError_t cores_launch(const fw_bwd_args *a, int atomic_dq, cudaStream_t s)
{
    typedef cores_geom<Cfg> G;
    const size_t smem = cores_smem_bytes<Cfg>();
    cudaError_t e;
    const dim3 block(CORES_THREADS);
    const dim3 grid_kv = VARLEN ? dim3(ragged_blocks<G::BN, true>(a->seqs, a->Hkv))
                                : dim3((unsigned)((a->Lk + G::BN - 1) / G::BN), (unsigned)a->Hkv, (unsigned)a->B);
    if (atomic_dq) {
        e = fw_cuda_smem_limit<cores_dkdv_kernel<T, Cfg, dq_mode::atomic, VARLEN>>(smem);
        if (e != cudaSuccess) return e;
        cores_dkdv_kernel<T, Cfg, dq_mode::atomic, VARLEN><<<grid_kv, block, smem, s>>>(*a);
        return fw_cuda_launch_error();
    }
    e = fw_cuda_smem_limit<cores_dkdv_kernel<T, Cfg, dq_mode::deterministic, VARLEN>>(smem);
    if (e != cudaSuccess) return e;
    cores_dkdv_kernel<T, Cfg, dq_mode::deterministic, VARLEN><<<grid_kv, block, smem, s>>>(*a);
    if ((e = fw_cuda_launch_error()) != cudaSuccess) return e;
    e = fw_cuda_smem_limit<cores_dq_kernel<T, Cfg, VARLEN>>(smem);
    if (e != cudaSuccess) return e;
    const dim3 grid_q = VARLEN ? dim3(ragged_blocks<G::BM, false>(a->seqs, a->H))
                               : dim3((unsigned)((a->Lq + G::BM - 1) / G::BM), (unsigned)a->H, (unsigned)a->B);
    cores_dq_kernel<T, Cfg, VARLEN><<<grid_q, block, smem, s>>>(*a);
    return fw_cuda_launch_error();
}

} /* namespace fwbwd */
#endif
