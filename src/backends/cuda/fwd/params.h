/* The f16/bf16 forward family (backend cuda-flash): its kernels' parameters and its kernel records.
 *
 * A record is one compiled configuration: a kernel (mma.sync, wgmma with cp.async, or warp-specialised
 * wgmma with TMA), its tile shape and options, its shared memory and its launch functions. The records are
 * generated with their instantiation files (scripts/gen_kernels.py from src/backends/cuda/kernels.tsv into
 * generated/); heuristics.cu chooses among them and cuda_flash.cu launches the one chosen. */
#ifndef FW_FWD_PARAMS_H
#define FW_FWD_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "backends/cuda/common/seqs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel arguments (plain C struct, passed by value). */
typedef struct fw_fwd_params {
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
    int num_m_blocks; /* query blocks per (batch, head): set by the launcher from its BM */
    int reverse_m;    /* causal-like masks: schedule the longest (last) query blocks first */
    int persist_blocks; /* a persistent kernel's grid at most (the device's multiprocessors) */
    float scale_log2; /* scale * log2(e) */
    float scale;
} fw_fwd_params;

/* Host-side launch of one configuration for one element type; returns a cudaError_t. seqs: the ragged (varlen)
 * batch for a record of the varlen table (common/seqs.h; NULL otherwise: dense records ignore it), with q, o
 * packed as (1, H, total_q, D), k, v as (1, H_kv, total_k, D), fw_fwd_params's Lq and Lk the maxima
 * (max_seqlen_q/k) and its batch strides unused. A varlen record returns cudaErrorNotSupported, launching
 * nothing, where the driver refuses a tensor map of the packed tensors. */
typedef cudaError_t (*fw_fwd_launch_fn)(const fw_fwd_params *p, int batch, const fw_cuda_seqs *seqs,
                                        cudaStream_t stream);

typedef enum fw_fwd_kernel {
    FW_FWD_MMA = 0, /* mma.sync m16n8k16, cp.async ring (kernel_mma.cuh): sm_80 machine code, runs on 8.0+ */
    FW_FWD_WG = 1,  /* wgmma, every thread loads with cp.async (kernel_wg.cuh): sm_90a, runs on 9.0 only */
    FW_FWD_WS = 2   /* wgmma, a TMA producer warpgroup (kernel_ws.cuh): sm_90a, runs on 9.0 only */
} fw_fwd_kernel;

typedef struct fw_fwd_record {
    const char *name;     /* fw_config.name (tuning tables store it): unique within a head dim */
    fw_fwd_kernel kernel;
    int arch;             /* 80: runs on compute capability 8.0 and later; 90: sm_90a, on 9.0 only */
    int d;                /* padded head dim: 32, 64, 96, 128 or 256 */
    int bm, bn, warps, stages;
    int q_in_regs;        /* mma: Q fragments kept in registers */
    int sub_n;            /* mma: keys per softmax sub-tile (== bn: none) */
    int pingpong;         /* ws: the consumer warpgroups take turns (FlashAttention-3's ping-pong) */
    int persistent;       /* ws: one block an SM loops over the query blocks */
    size_t smem;          /* dynamic shared memory, bytes */
    fw_fwd_launch_fn f16, bf16;
} fw_fwd_record;

/* generated/fwd_records.cu: every record of dense calls, head dims ascending, in the table's order within
 * one; and the records of ragged calls (kernels.tsv's varlen option), likewise. */
extern const fw_fwd_record fw_fwd_records[];
extern const int fw_fwd_nrecords;
extern const fw_fwd_record fw_fwd_varlen_records[];
extern const int fw_fwd_nvarlen_records;

#ifdef __cplusplus
}
#endif
#endif
