/* The validated, normalised description of one attention call, as core hands it to a backend.
 * Backends read only this; they never see fw_tensor validation or the context. */
#ifndef FW_PROBLEM_H
#define FW_PROBLEM_H

#include <stdint.h>
#include "flashwatt.h"
#include "core/knobs.h"

/* Which public call made the problem. Dense calls have uniform sequences; the others describe a
 * batch of sequences of their own lengths (the accessors below give each one's rows and keys). */
typedef enum fw_call_kind {
    FW_CALL_DENSE = 0,   /* fw_attention_forward / backward */
    FW_CALL_VARLEN = 1,  /* fw_attention_varlen_forward: q/o and k/v packed by cu_seqlens_q/k */
    FW_CALL_KVCACHE = 2  /* fw_attention_kvcache_forward: k/v are the cache (contiguous or paged) */
} fw_call_kind;

typedef struct fw_problem {
    int64_t batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim;
    int64_t group; /* heads / kv_heads */
    fw_dtype dtype;
    fw_device device;
    float scale;
    int causal;
    /* Normalised window: key j is visible to query i iff
     * i + diag_offset - window_left <= j <= i + diag_offset + window_right,
     * with unlimited bounds stored as INT64 extremes (FW_UNBOUNDED). causal folds into window_right.
     * Ragged and cached calls: diag_offset is per sequence (its keys minus its queries, see
     * fw_seq_key_range); the field holds the dense value and is not used for them. */
    int64_t window_left, window_right, diag_offset;
    int has_window; /* any bound finite (causal included) */
    const void *q, *k, *v;
    void *o;
    float *lse; /* dense: contiguous (B, H, Lq); packed queries: (H, total_q); or NULL */
    int64_t q_stride[4], k_stride[4], v_stride[4], o_stride[4];
    /* backward only */
    const void *dout;
    void *dq, *dk, *dv;
    int64_t do_stride[4], dq_stride[4], dk_stride[4], dv_stride[4];
    fw_precision precision;
    int deterministic; /* backward: no atomics in the dQ reduction (fw_context_set_deterministic) */
    size_t memory_budget; /* device workspace bytes a backend may take (fw_context_set_memory_budget); 0 = default */

    /* ---- ragged and cached calls ------------------------------------------------------------
     * batch is the number of sequences; seqlen_q and seqlen_k are upper bounds of every sequence's
     * query and key count (max_seqlen_q; max_seqlen_k or the cache's capacity), so code that sizes
     * launches by them stays right. Every pointer below lives on `device`. */
    fw_call_kind kind;
    const int32_t *cu_seqlens_q; /* non-NULL: q, o (and lse) packed, sequence b = rows [cu[b], cu[b+1]) */
    const int32_t *cu_seqlens_k; /* FW_CALL_VARLEN: k, v packed likewise */
    int64_t total_q, total_k;    /* the packed tensors' seq sizes (0 where not packed) */
    /* FW_CALL_KVCACHE: k, v and k_stride, v_stride describe the cache. Contiguous: (B, H_kv, capacity,
     * D). Paged: (num_pages, H_kv, page_size, D), sequence b's key j on page
     * block_table[b * block_table_stride + j / page_size], row j % page_size. */
    const int32_t *cache_seqlens;  /* [B]: keys already cached */
    const int32_t *block_table;    /* NULL: contiguous */
    int64_t block_table_stride, max_pages_per_seq, page_size, num_pages;
    int64_t capacity;              /* keys one sequence's cache holds */
    const void *k_new, *v_new;     /* NULL, or new keys/values in q's geometry with kv_heads heads,
                                      written into the cache at cache_seqlens[b] before attending */
    int64_t kn_stride[4], vn_stride[4];
    /* Device scratch the caller reserved (fw_context_set_workspace): when set, a CUDA call takes its
     * scratch from here and neither allocates nor synchronises. */
    void *workspace;
    size_t workspace_bytes;
    /* The context's environment knobs (knobs.h): a backend's configs() and supports() read them here (its
     * forward() and backward() in fw_exec). NULL, for a problem made without a context: the defaults. */
    const fw_knobs *knobs;
} fw_problem;

/* The knobs a problem's configs() and supports() run with (fw_exec_knobs's twin). */
static inline const fw_knobs *fw_problem_knobs(const fw_problem *p)
{
    return p && p->knobs ? p->knobs : &fw_knobs_defaults;
}

#define FW_UNBOUNDED (INT64_MAX / 4)

/* The gradients of a ragged (or cached) call. The CPU backends run them sequence by sequence through
 * the accessors below, the CUDA backward (cuda-flash, cuda-flash-f32) on one grid over the sequences;
 * every other backend refuses such a problem in supports() with this reason. */
static inline int fw_problem_ragged_backward(const fw_problem *p)
{
    return p->dout != NULL && p->kind != FW_CALL_DENSE;
}
#define FW_RAGGED_BACKWARD_WHERE "the ragged backward runs on cpu-ref, cpu-flash, cuda-flash and cuda-flash-f32"

/* Keys visible to query row i: [*lo, *hi) clipped to [0, Lk). Empty when *lo >= *hi. Dense calls. */
static inline void fw_key_range(const fw_problem *p, int64_t i, int64_t *lo, int64_t *hi)
{
    int64_t a = i + p->diag_offset - p->window_left;
    int64_t b = i + p->diag_offset + p->window_right + 1;
    *lo = a < 0 ? 0 : a;
    *hi = b > p->seqlen_k ? p->seqlen_k : b;
}

/* ---- per-sequence accessors (host side: the CPU backends and the reference) ------------------
 * They hold for every call kind, so one loop over (sequence, head, row) serves dense, ragged and
 * cached problems alike. They read offsets, cache lengths and the block table, so on a CUDA problem
 * only device code may use their twins. Values are the validated ones (host-side checks). */

/* Sequence b's query rows: the first row's index in q's / o's seq dimension and the count. */
static inline void fw_seq_q(const fw_problem *p, int64_t b, int64_t *row0, int64_t *len)
{
    if (p->cu_seqlens_q) {
        *row0 = p->cu_seqlens_q[b];
        *len = (int64_t)p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b];
    } else {
        *row0 = 0;
        *len = p->seqlen_q;
    }
}

/* Sequence b's key count: the keys it attends to (a cache's with the new tokens appended). */
static inline int64_t fw_seq_k_len(const fw_problem *p, int64_t b)
{
    if (p->kind == FW_CALL_VARLEN) return (int64_t)p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b];
    if (p->kind == FW_CALL_KVCACHE) {
        int64_t n = p->cache_seqlens[b];
        if (p->k_new) {
            int64_t r0, lq;
            fw_seq_q(p, b, &r0, &lq);
            n += lq;
        }
        return n;
    }
    return p->seqlen_k;
}

/* Keys visible to row i of a sequence with lq queries and lk keys (bottom-right aligned). */
static inline void fw_seq_key_range(const fw_problem *p, int64_t lq, int64_t lk, int64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t off = lk - lq;
    int64_t a = i + off - p->window_left;
    int64_t b = i + off + p->window_right + 1;
    *lo = a < 0 ? 0 : a;
    *hi = b > lk ? lk : b;
}

/* Element offset of row i (of sequence b, head h) in a tensor laid out like q (q, o, dout, k_new):
 * packed tensors index rows by the sequence's offset, dense ones by batch. */
static inline int64_t fw_row_offset(const fw_problem *p, const int64_t stride[4], int64_t b, int64_t h, int64_t i)
{
    if (p->cu_seqlens_q) return ((int64_t)p->cu_seqlens_q[b] + i) * stride[2] + h * stride[1];
    return b * stride[0] + h * stride[1] + i * stride[2];
}

/* Element offset of key j of sequence b, kv head hk, in k or v (pass k_stride or v_stride); -1
 * where a paged cache's table points outside the page pool. */
static inline int64_t fw_key_offset(const fw_problem *p, const int64_t stride[4], int64_t b, int64_t hk, int64_t j)
{
    if (p->kind == FW_CALL_VARLEN) return ((int64_t)p->cu_seqlens_k[b] + j) * stride[2] + hk * stride[1];
    if (p->block_table) {
        const int64_t page = p->block_table[b * p->block_table_stride + j / p->page_size];
        if (page < 0 || page >= p->num_pages) return -1;
        return page * stride[0] + (j % p->page_size) * stride[2] + hk * stride[1];
    }
    return b * stride[0] + hk * stride[1] + j * stride[2];
}

/* Index of row i's log-sum-exp (sequence b, head h) in p->lse. */
static inline int64_t fw_lse_index(const fw_problem *p, int64_t b, int64_t h, int64_t i)
{
    if (p->cu_seqlens_q) return h * p->total_q + p->cu_seqlens_q[b] + i;
    return (b * p->heads + h) * p->seqlen_q + i;
}

/* Exact FLOP count of the forward: 4 · D · (number of visible query-key pairs), summed over B·H
 * (ragged and cached calls: over every sequence's own lengths, read from host memory; where they
 * live on a device, the bound from max_seqlen_q and max_seqlen_k or the capacity). */
double fw_problem_flops(const fw_problem *p);
/* Visible (query, key) pairs for one (batch, head); ragged and cached calls: the mean per sequence. */
double fw_problem_pairs(const fw_problem *p);
/* Ragged and cached calls: visible pairs of one head summed over the sequences (validate_serving.c). */
double fw_serving_pairs(const fw_problem *p);

#endif
