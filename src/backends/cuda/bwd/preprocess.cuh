/* The backward's element-wise passes around its kernels (FlashAttention-2's preprocess and dQ conversion), and the
 * element loads and stores in f32 that the CUDA-core kernels and the store strategy share.
 *
 * Before: Δ_i = rowsum(dO_i ∘ O_i) in f32, FW_BWD_DELTA_LANES lanes per row, into a workspace (B, H, Lq); for the
 * tensor-core kernels also lse2_i = LSE_i · log2 e (softmax.cuh: +inf where LSE = −inf, so that P = 0 there).
 * After, in the atomic dQ mode: the f32 dQ accumulator (B, H, Lq, D) into dq in its dtype and strides.
 * Ragged batches (fw_cuda_seqs): the same per sequence-major row (kernel_common.cuh: seq_problem), on a grid over
 * every sequence's blocks of FW_BWD_DELTA_ROWS query rows (parts/scheduler.cuh), the LSE read from the forward's
 * (H, total_q) layout and written sequence-major as the kernels read it (lse2, or for the CUDA-core records the
 * LSE itself). */
#ifndef FW_BWD_PREPROCESS_CUH
#define FW_BWD_PREPROCESS_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "backends/cuda/bwd/params.h"
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/parts/epilogue.cuh"
#include "backends/cuda/parts/scheduler.cuh"
#include "backends/cuda/parts/softmax.cuh"

/* One element as f32, and back rounded to the nearest. */
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
            a.lse2[row] = fwparts::softmax_lse2(l);
        }
    }
}

/* A ragged batch's Δ and LSE (stats_log2: as lse2, else as it is) at sequence-major rows: grid over (slot of
 * FW_BWD_DELTA_ROWS rows, head); lse: the forward's (H, total_q). */
struct fw_bwd_delta_varlen_args {
    const void *o, *dout;
    long long o_s[3], do_s[3];
    const float *lse;
    float *delta, *stats;
    fw_cuda_seqs seqs;
    int H, max_q, max_k, D, vec, stats_log2;
};

template <typename T>
__global__ void __launch_bounds__(256) fw_bwd_delta_varlen_kernel(const fw_bwd_delta_varlen_args a)
{
    fwparts::tile_coord t;
    fwparts::seq_span q;
    if (!fwparts::varlen_tile_scheduler::get_tile<FW_BWD_DELTA_ROWS>(a.seqs, a.H, a.max_q, a.max_k, false, t, q)) return;
    const int sub = threadIdx.x % FW_BWD_DELTA_LANES;
    const int i = t.m_block * FW_BWD_DELTA_ROWS + threadIdx.x / FW_BWD_DELTA_LANES, h = t.h;
    const bool live = i < q.lq;
    const long long row = q.q_row0 + i; /* in the packed tensors */
    const T *orow = (const T *)a.o + (long long)h * a.o_s[1] + row * a.o_s[2];
    const T *drow = (const T *)a.dout + (long long)h * a.do_s[1] + row * a.do_s[2];
    const float sum = fw_bwd_row_delta<T>(orow, drow, live ? a.D : 0, sub, a.vec);
    if (live && sub == 0) {
        const long long w = (long long)a.H * q.q_row0 + (long long)h * q.lq + i;
        a.delta[w] = sum;
        const float l = a.lse[(long long)h * a.seqs.total_q + row];
        a.stats[w] = a.stats_log2 ? fwparts::softmax_lse2(l) : l;
    }
}

/* What the dense and the ragged preprocess take from p alike (A: fw_bwd_delta_args or fw_bwd_delta_varlen_args): O
 * and dO with their strides and vec (their rows laid out as nb batches of ns rows per head), the forward's LSE, the
 * Δ workspace, the heads and the head dim. */
template <typename T, class A>
static void fw_bwd_delta_fill(A &a, const fw_problem *p, float *delta, int64_t nb, int64_t ns)
{
    a.o = p->o;
    a.dout = p->dout;
    for (int i = 0; i < 3; i++) {
        a.o_s[i] = p->o_stride[i];
        a.do_s[i] = p->do_stride[i];
    }
    a.lse = p->lse;
    a.delta = delta;
    a.H = (int)p->heads;
    a.D = (int)p->head_dim;
    a.vec = fw_bwd_rows_vec16<T>(p->o, p->o_stride, nb, p->heads, ns, p->head_dim) &&
            fw_bwd_rows_vec16<T>(p->dout, p->do_stride, nb, p->heads, ns, p->head_dim);
}

/* Launches the preprocess for p on s, Δ into delta and, where stats is not NULL, lse2 into it; a ragged batch
 * (stats required) writes both sequence-major, stats as lse2 (stats_log2) or as the LSE itself (the CUDA-core
 * records'). The caller checks the launch. */
template <typename T>
static void fw_bwd_launch_delta(const fw_problem *p, float *delta, float *stats, cudaStream_t s, int stats_log2 = 1)
{
    if (p->kind == FW_CALL_VARLEN) {
        fw_bwd_delta_varlen_args a;
        memset(&a, 0, sizeof a);
        fw_bwd_delta_fill<T>(a, p, delta, 1, p->total_q);
        a.stats = stats;
        a.stats_log2 = stats_log2;
        fw_cuda_seqs_fill(&a.seqs, p);
        a.max_q = (int)p->seqlen_q;
        a.max_k = (int)p->seqlen_k;
        const int64_t blocks = fwparts::varlen_tile_scheduler::blocks(p->total_q, p->batch, p->heads, FW_BWD_DELTA_ROWS);
        fw_bwd_delta_varlen_kernel<T><<<(unsigned)blocks, 256, 0, s>>>(a);
        return;
    }

    fw_bwd_delta_args a;
    fw_bwd_delta_fill<T>(a, p, delta, p->batch, p->seqlen_q);
    a.lse2 = stats;
    a.Lq = (int)p->seqlen_q;
    const dim3 grid((unsigned)((p->seqlen_q + FW_BWD_DELTA_ROWS - 1) / FW_BWD_DELTA_ROWS), (unsigned)p->heads,
                    (unsigned)p->batch);
    fw_bwd_delta_kernel<T><<<grid, 256, 0, s>>>(a);
}

/* The conversion goes a 64-row x 64-column block of dQ at a time through shared memory (pitch 72 elements: both its
 * phases conflict-free), so that the accumulator's reads and dq's writes are 16-byte vectors; a thread an element
 * with 64-bit index arithmetic ran at a fifth of the memory's rate. */
#define FW_BWD_CONVERT_ROWS 64
#define FW_BWD_CONVERT_PITCH 72

/* Block (rows x cols valid, from row 0 column 0 of the block) of the accumulator into the staging tile s: tiled, the
 * fused dQ's 16-KB tile (params.h: dq_acc_tile; thread t's n8 tile j as the float4 at 4 (128 j + t), holding rows
 * r = 16 (t / 32) + (t % 32) / 4 and r + 8, columns c = 8 j + 2 (t % 4) and c + 1, of the wgmma accumulator), else
 * rows of D floats from acc. */
template <typename T>
__device__ __forceinline__ void fw_bwd_dq_stage(T (*s)[FW_BWD_CONVERT_PITCH], const float *acc, int tiled, int rows,
                                                int cols, int D)
{
    if (tiled) {
        const float4 *tile = reinterpret_cast<const float4 *>(acc);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int f = k * 256 + (int)threadIdx.x, t = f & 127;
            const int r = (t >> 5) * 16 + ((t & 31) >> 2), c = (f >> 7) * 8 + (t & 3) * 2;
            const float4 x = tile[f];
            fwparts::store_pair(&s[r][c], x.x, x.y);
            fwparts::store_pair(&s[r + 8][c], x.z, x.w);
        }
        return;
    }
    const bool vec = D % 4 == 0; /* rows, and so every 4-column group, 16-byte aligned */
    for (int idx = (int)threadIdx.x; idx < FW_BWD_CONVERT_ROWS * 16; idx += 256) {
        const int r = idx >> 4, c = (idx & 15) * 4;
        if (r >= rows) break;
        const float *src = acc + (long long)r * D + c;
        if (vec && c + 4 <= cols) {
            const float4 x = *reinterpret_cast<const float4 *>(src);
            fwparts::store_pair(&s[r][c], x.x, x.y);
            fwparts::store_pair(&s[r][c + 2], x.z, x.w);
        } else {
            for (int e = 0; e < 4 && c + e < cols; e++) fw_bwd_io<T>::st(&s[r][c + e], src[e]);
        }
    }
}

/* The staging tile's rows x cols into dq (row stride rs), 16-byte stores where the row's address allows. */
template <typename T>
__device__ __forceinline__ void fw_bwd_dq_unstage(T (*s)[FW_BWD_CONVERT_PITCH], T *dq, long long rs, int rows, int cols)
{
    constexpr int VEC = 16 / sizeof(T), NV = 64 / VEC;
    for (int idx = (int)threadIdx.x; idx < FW_BWD_CONVERT_ROWS * NV; idx += 256) {
        const int r = idx / NV, c = (idx % NV) * VEC;
        if (r >= rows) break;
        T *dst = dq + (long long)r * rs + c;
        if (c + VEC <= cols && ((uintptr_t)dst & 15) == 0) *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(&s[r][c]);
        else
            for (int e = 0; e < VEC && c + e < cols; e++) dst[e] = s[r][c + e];
    }
}

/* One 64 x 64 block: staged, then stored (the block's threads all call it). */
template <typename T>
__device__ __forceinline__ void fw_bwd_dq_convert_block(const float *acc, int tiled, int rows, int cols, int D, T *dq,
                                                        long long rs)
{
    __shared__ __align__(16) unsigned char raw[FW_BWD_CONVERT_ROWS * FW_BWD_CONVERT_PITCH * sizeof(T)];
    T (*s)[FW_BWD_CONVERT_PITCH] = reinterpret_cast<T (*)[FW_BWD_CONVERT_PITCH]>(raw);
    fw_bwd_dq_stage<T>(s, acc, tiled, rows, cols, D);
    __syncthreads();
    fw_bwd_dq_unstage<T>(s, dq, rs, rows, cols);
}

/* Atomic mode: the f32 dQ accumulator (B, H, Lq, D), or its tiled form, into dq (output dtype and strides). Grid
 * (64-row blocks x 64-column blocks, H, B). */
template <typename T>
__global__ void __launch_bounds__(256) fw_bwd_dq_convert_kernel(const fw_bwd_args a)
{
    const int cblocks = (a.D + 63) / 64, m = (int)blockIdx.x / cblocks, c = (int)blockIdx.x % cblocks;
    const int h = (int)blockIdx.y, b = (int)blockIdx.z;
    const long long bh = (long long)b * a.H + h;
    const float *acc = a.dq_acc_tiled ? a.dq_acc + dq_acc_tile(bh, m, c, a.Lq, cblocks)
                                      : a.dq_acc + (bh * a.Lq + (long long)m * 64) * a.D + 64 * c;
    T *dq = (T *)a.dq + b * a.dq_s[0] + h * a.dq_s[1] + (long long)m * 64 * a.dq_s[2] + 64 * c;
    fw_bwd_dq_convert_block<T>(acc, a.dq_acc_tiled, min(64, a.Lq - 64 * m), min(64, a.D - 64 * c), a.D, dq, a.dq_s[2]);
}

/* The same for a ragged batch (a.seqs; the accumulator sequence-major, its tiled form params.h's dq_acc_seq_tiles):
 * grid over (slot of 64 rows, head), each block its rows' column blocks. */
template <typename T>
__global__ void __launch_bounds__(256) fw_bwd_dq_convert_varlen_kernel(const fw_bwd_args a)
{
    fwparts::tile_coord t;
    fwparts::seq_span q;
    if (!fwparts::varlen_tile_scheduler::get_tile<FW_BWD_CONVERT_ROWS>(a.seqs, a.H, a.Lq, a.Lk, false, t, q)) return;
    const int m = t.m_block, i0 = m * 64, rows = min(64, q.lq - i0), cblocks = (a.D + 63) / 64;
    const float *tiles = a.dq_acc + dq_acc_seq_tiles(q.q_row0, q.seq, a.H, cblocks);
    for (int c = 0; c < cblocks; c++) {
        if (c > 0) __syncthreads(); /* the staging tile is read */
        const float *acc = a.dq_acc_tiled ? tiles + dq_acc_tile(t.h, m, c, q.lq, cblocks)
                                          : a.dq_acc + ((long long)a.H * q.q_row0 + (long long)t.h * q.lq + i0) * a.D + 64 * c;
        T *dq = (T *)a.dq + (q.q_row0 + i0) * a.dq_s[2] + (long long)t.h * a.dq_s[1] + 64 * c;
        fw_bwd_dq_convert_block<T>(acc, a.dq_acc_tiled, rows, min(64, a.D - 64 * c), a.D, dq, a.dq_s[2]);
    }
}

/* Atomic mode's conversion of a's accumulator into dq for p (dense or ragged) on s; the caller checks the launch. */
template <typename T> static void fw_bwd_launch_dq_convert(const fw_problem *p, const fw_bwd_args *a, cudaStream_t s)
{
    if (p->kind == FW_CALL_VARLEN) {
        const int64_t blocks = fwparts::varlen_tile_scheduler::blocks(p->total_q, p->batch, p->heads, FW_BWD_CONVERT_ROWS);
        fw_bwd_dq_convert_varlen_kernel<T><<<(unsigned)blocks, 256, 0, s>>>(*a);
        return;
    }
    const dim3 grid((unsigned)((a->Lq + 63) / 64 * ((a->D + 63) / 64)), (unsigned)a->H, (unsigned)a->B);
    fw_bwd_dq_convert_kernel<T><<<grid, 256, 0, s>>>(*a);
}

#endif
