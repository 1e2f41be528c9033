/* The serving path of the CUDA backends: ragged (varlen) batches, KV caches (contiguous and paged),
 * and the dense calls shaped like decode (few query rows per KV head, long keys).
 *
 * One kernel family per backend: cuda-flash's mma.sync kernel (serving_tc.cuh, f16/bf16) and
 * cuda-flash-f32's CUDA-core kernel (serving_f32.cu). Both pack the query heads that share a KV head
 * into one block of rows (GQA packing), so that each K/V tile is read once per KV head; gather K/V rows
 * through the block table; cut long key ranges into fixed chunks across blocks (split-KV, merged by
 * serving_common.cuh's merge kernel); and append new keys/values into the cache first. The plan
 * (tiles, splits, workspace) depends only on host-known sizes, so a CUDA graph captured once stays
 * valid while cache lengths and the block table change on the device.
 *
 * The hooks the backend tables call (one line each in cuda_flash.cu / cuda_flash_f32.cu). */
#ifndef FW_CUDA_SERVING_H
#define FW_CUDA_SERVING_H

#include <stddef.h>
#include <stdint.h>
#include "backends/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel arguments, shared by every serving kernel (plain C struct, passed by value). Lengths and
 * offsets that live on the device are read and clamped by the kernels (fwsrv::seq_info). */
typedef struct fw_srv_params {
    const void *q, *k, *v;   /* k, v: the packed keys, the contiguous cache or the page pool */
    void *o;
    float *lse;
    const void *k_new, *v_new;
    int64_t q_s[3], o_s[3], k_s[3], v_s[3], kn_s[3], vn_s[3]; /* strides of dims 0..2 (elements) */
    const int32_t *cu_q, *cu_k, *cache_seqlens, *block_table;
    int64_t bt_stride;
    int64_t total_q, total_k; /* packed seq sizes (clamping bounds of the offsets) */
    int kind;                 /* fw_call_kind */
    int paged;
    int B, H, H_kv, group, d;
    int max_q, max_k;         /* host maxima: every sequence is cut to these */
    int page_size, num_pages, capacity;
    uint32_t page_mul;        /* key j's page slot is (umulhi(j, page_mul) + j) >> page_shr: no division */
    int page_shr;
    /* Bytes between consecutive keys (rows) and between pages of k and v, below 2^32 (the host checks):
     * the tile loads form key addresses with 32 x 32 -> 64-bit multiply-adds. Zero where unused (a page
     * of one row, or no pages). */
    uint32_t k_row_bytes, v_row_bytes, k_page_bytes, v_page_bytes;
    int wl, wr;               /* window, clamped to max_q + max_k + 1 (no overflow in sums) */
    int has_window;
    float scale, scale_log2;
    /* launch geometry */
    int block_rows;           /* packed rows a block (BM) */
    int m_blocks;             /* blocks of packed rows a (sequence, KV head): ceil(max_q · group / BM) */
    int reverse_m;            /* causal-like: the blocks with the most keys first */
    int splits;               /* key chunks a sequence (1: the attention kernel writes o and lse) */
    int chunk;                /* keys a chunk, a multiple of the key tile */
    float *part_o;            /* splits > 1: [split][B][H][max_q][d] partial outputs (normalised) */
    float *part_lse;          /*             [split][B][H][max_q] their natural-log LSE (-inf: empty) */
    int merge_pdl;            /* sm_90+: the merge is a programmatic dependent launch of the attention kernel, so
                               * that its launch overlaps the attention kernel's last blocks */
} fw_srv_params;

/* ---- cuda-flash (f16, bf16) ---------------------------------------------------------------- */
/* Does this problem take the serving path by default: a ragged or cached call, or a dense forward
 * shaped like decode (seqlen_q · group <= 64 rows a KV head). */
int fw_srv_tc_routes(const fw_problem *p);
/* Does this call run on the serving path: every ragged or cached call; a dense call when the
 * configuration (or the FW_CUDA_FLASH_CONFIG knob) names a serving configuration, or names none and
 * the shape routes here. */
int fw_srv_tc_claims(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);
int fw_srv_tc_supports(const fw_problem *p, char *why, size_t why_len);
/* Serving configurations for p, the heuristic's choice first; 0 when p does not route here. */
int fw_srv_tc_configs(const fw_problem *p, fw_config *out, int max);
fw_status fw_srv_tc_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);
/* Upper bound of the device workspace (bytes) that calls up to p's sizes take (see serving.cu). */
size_t fw_srv_tc_workspace(const fw_problem *p);

/* ---- cuda-flash-f32 (ragged and cached calls only; dense calls keep the f32 kernels) ------- */
int fw_srv_f32_supports(const fw_problem *p, char *why, size_t why_len);
int fw_srv_f32_configs(const fw_problem *p, fw_config *out, int max);
fw_status fw_srv_f32_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);
size_t fw_srv_f32_workspace(const fw_problem *p);

#ifdef __cplusplus
}
#endif

#endif
