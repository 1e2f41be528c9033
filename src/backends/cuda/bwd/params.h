/* The CUDA backward family: its kernels' parameters and its kernel records.
 *
 * A record is one compiled configuration of the backward's kernels for one padded head dim: a dK/dV kernel (which
 * in the atomic dQ mode also adds dQ into an f32 accumulator) and the deterministic mode's separate dQ kernel, with
 * its shared memory per mode and its launch functions. The records are generated with their instantiation files
 * (scripts/gen_kernels.py from src/backends/cuda/kernels.tsv into generated/); heuristics.cu chooses among them and
 * cuda_backward.cu launches the one chosen. */
#ifndef FW_BWD_PARAMS_H
#define FW_BWD_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "backends/cuda/common/seqs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Everything a backward launch needs; strides (batch, head, seq) in elements. The CUDA-core kernels take it as
 * it is; the tensor-core kernels take fw_bwd_tc_params (launch.cuh converts).
 * A ragged batch (a record's varlen launch): q, o, dout, dq packed (1, H, total_q, D), k, v, dk, dv packed
 * (1, H_kv, total_k, D); B = 1, Lq and Lk the longest sequences (max_seqlen_q/k), seqs set (common/seqs.h: the
 * forward takes the same type, so that one tile scheduler serves both);
 * lse, delta (and lse2) and dq_acc are then sequence-major workspaces, sequence b's (H, lq_b) rows from row
 * H·cu_q[b] (kernel_common.cuh: seq_problem), lse the forward's LSE copied there (preprocess.cuh). */
typedef struct fw_bwd_args {
    const void *q, *k, *v, *o, *dout;
    void *dq, *dk, *dv;
    const float *lse;   /* forward's LSE, contiguous (B, H, Lq), natural log */
    const float *delta; /* workspace (B, H, Lq) */
    const float *lse2;  /* tensor-core records: workspace (B, H, Lq), LSE·log2 e (+inf where LSE = −inf) */
    float *dq_acc;      /* atomic mode: zeroed workspace (B, H, Lq, D), or tiled (dq_acc_tiled) */
    int dq_acc_tiled;   /* the fused dQ's tiled layout (dq_acc_tile below) */
    int *dq_acc_tiled_used; /* host, where set: a launch that accumulated in the tiled layout sets *it to 1 */
    long long q_s[3], k_s[3], v_s[3], o_s[3], do_s[3], dq_s[3], dk_s[3], dv_s[3];
    long long off, wl, wr; /* fw_problem's diag_offset, window_left, window_right (FW_UNBOUNDED ok) */
    int B, H, Hkv, group, Lq, Lk, D;
    float scale;
    int precision;     /* f32: the fw_precision a tf32 record runs (FW_PRECISION_TF32, else 3xtf32) */
    fw_cuda_seqs seqs; /* ragged batches only (last: the dense kernels' fields keep their places) */
} fw_bwd_args;

/* The tensor-core kernels' arguments: fw_bwd_args with the window folded into ints that cannot overflow. */
typedef struct fw_bwd_tc_params {
    const void *q, *k, *v, *dout;
    void *dq, *dk, *dv;
    const float *lse2, *delta;
    float *dq_acc;
    long long q_s[3], k_s[3], v_s[3], do_s[3], dq_s[3], dk_s[3], dv_s[3];
    int B, H, group, Lq, Lk, d;
    int off, wl, wr, has_window; /* visible: i + off − wl <= j <= i + off + wr (when has_window) */
    float scale, scale_log2;
    fw_cuda_seqs seqs; /* ragged batches only, as in fw_bwd_args */
} fw_bwd_tc_params;

#ifdef __CUDACC__
/* The fused dQ's accumulator (kernel_dkdv_ws.cuh): per (b·H + h, 64-row block m, 64-column block c of the head
 * dim's cblocks = ⌈D/64⌉) a 16-KB tile in a warpgroup's wgmma accumulator order, thread t's n8 tile j as the float4
 * at 4 (128 j + t); its first float. */
static __device__ __forceinline__ long long dq_acc_tile(long long bh, int m, int c, int Lq, int cblocks)
{
    return ((bh * ((Lq + 63) / 64) + m) * cblocks + c) * 4096;
}
/* A ragged batch's: sequence seq (first packed row q_row0) is a dense problem of one batch entry whose tiles start at
 * 64-row block q_row0 / 64 + seq of every head (as FlashAttention-3 pads its ragged dQ accumulator), which no earlier
 * sequence's tiles reach; the last sequence's end before H (total_q / 64 + batch) blocks. Its first float. */
static __device__ __forceinline__ long long dq_acc_seq_tiles(long long q_row0, int seq, int H, int cblocks)
{
    return (q_row0 / 64 + seq) * H * cblocks * 4096;
}
#endif

/* A record's launch for one element type: the dK/dV kernel, and in the deterministic mode (atomic_dq = 0) the dQ
 * kernel after it, on the stream; the caller made the Δ (and lse2) workspace and, for atomic_dq, the zeroed
 * dQ accumulator. Returns a cudaError_t. */
typedef cudaError_t (*fw_bwd_launch_fn)(const fw_bwd_args *a, int atomic_dq, cudaStream_t stream);

/* The dK/dV kernel of a record. */
typedef enum fw_bwd_kernel {
    FW_BWD_CORES = 0, /* CUDA cores, f32 arithmetic for every dtype, with its own dQ kernel (kernel_cores.cuh) */
    FW_BWD_MMA = 1,   /* mma.sync, warp w owns keys 16w .. (kernel_dkdv_mma.cuh): sm_80 machine code */
    FW_BWD_MMA2D = 2, /* mma.sync with 2-D warp tiling (kernel_dkdv_mma2d.cuh): sm_80 */
    FW_BWD_WG = 3,    /* wgmma, every thread loads with cp.async (kernel_dkdv_wg.cuh): sm_90a */
    FW_BWD_WS = 4,    /* wgmma, a TMA producer warpgroup (kernel_dkdv_ws.cuh; deterministic mode, and the atomic
                         mode with dQ fused in: fw_bwd_fuses_dq): sm_90a */
    FW_BWD_TF32 = 5   /* f32 on mma.sync tf32 (kernel_dkdv_tf32.cuh; deterministic mode, tf32 or 3xtf32): sm_80 */
} fw_bwd_kernel;

/* The deterministic mode's dQ kernel of a tensor-core record. */
typedef enum fw_bwd_dq_kernel {
    FW_BWD_DQ_CORES = 0, /* the CUDA-core records' own */
    FW_BWD_DQ_MMA = 1,   /* mma.sync (kernel_dq_mma.cuh) */
    FW_BWD_DQ_WG = 2,    /* wgmma with cp.async (kernel_dq_wg.cuh) */
    FW_BWD_DQ_WS = 3,    /* wgmma, a TMA producer warpgroup (kernel_dq_ws.cuh) */
    FW_BWD_DQ_TF32 = 4   /* f32 on mma.sync tf32 (kernel_dq_tf32.cuh) */
} fw_bwd_dq_kernel;

typedef struct fw_bwd_record {
    const char *name;     /* unique within a head dim; configuration names and FW_CUDA_BWD_CONFIG hold it */
    fw_bwd_kernel kernel; /* the dK/dV kernel */
    int arch;             /* 80: runs on compute capability 8.0 and later; 90: sm_90a, on 9.0 only */
    int d;                /* padded head dim: 64, 128 (tensor cores), 256 (CUDA cores) */
    int bm, bn, warps;    /* dK/dV kernel: query rows per step, keys per block, warps per block */
    int stages;           /* its ring of query tiles (wg: 3 = the overlapped schedule, deterministic mode) */
    int sub_m;            /* mma: query rows per sub-tile (== bm: none) */
    fw_bwd_dq_kernel dq_kernel;
    int dq_warps, dq_mt, dq_bn; /* dQ kernel: warps (mma), m16 tiles per warp (mma), keys per step */
    int fuse_dq;                /* ws: the atomic mode adds dQ up in the dK/dV kernel (kernels.tsv's fuse) */
    size_t smem_atomic, smem_deterministic; /* dynamic shared memory, the larger of a mode's kernels, bytes */
    fw_bwd_launch_fn f32, f16, bf16;        /* f32: the CUDA-core and tf32 records (NULL elsewhere); the tf32
                                               records have f32 only */
    /* The same kernels for ragged batches (kernels.tsv's varlen option; NULL where the record has none): one grid
     * over every sequence, each block finding its own from the offsets (kernel_common.cuh: ragged_block). */
    fw_bwd_launch_fn varlen_f32, varlen_f16, varlen_bf16;
} fw_bwd_record;

/* generated/bwd_records.cu: every record, head dims ascending, in the table's order within one. */
extern const fw_bwd_record fw_bwd_records[];
extern const int fw_bwd_nrecords;

#ifdef __cplusplus
}
#endif
#endif
