/* The validated, normalised description of one attention call, as core hands it to a backend.
 * Backends read only this; they never see fw_tensor validation or the context. */
#ifndef FW_PROBLEM_H
#define FW_PROBLEM_H

#include <stdint.h>
#include "flashwatt.h"

typedef struct fw_problem {
    int64_t batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim;
    int64_t group; /* heads / kv_heads */
    fw_dtype dtype;
    fw_device device;
    float scale;
    int causal;
    /* Normalised window: key j is visible to query i iff
     * i + diag_offset - window_left <= j <= i + diag_offset + window_right,
     * with unlimited bounds stored as INT64 extremes (FW_UNBOUNDED). causal folds into window_right. */
    int64_t window_left, window_right, diag_offset;
    int has_window; /* any bound finite (causal included) */
    const void *q, *k, *v;
    void *o;
    float *lse; /* contiguous (B, H, Lq) or NULL */
    int64_t q_stride[4], k_stride[4], v_stride[4], o_stride[4];
    /* backward only */
    const void *dout;
    void *dq, *dk, *dv;
    int64_t do_stride[4], dq_stride[4], dk_stride[4], dv_stride[4];
    fw_precision precision;
    int deterministic; /* backward: no atomics in the dQ reduction (fw_context_set_deterministic) */
    size_t memory_budget; /* device workspace bytes a backend may take (fw_context_set_memory_budget); 0 = default */
} fw_problem;

#define FW_UNBOUNDED (INT64_MAX / 4)

/* Keys visible to query row i: [*lo, *hi) clipped to [0, Lk). Empty when *lo >= *hi. */
static inline void fw_key_range(const fw_problem *p, int64_t i, int64_t *lo, int64_t *hi)
{
    int64_t a = i + p->diag_offset - p->window_left;
    int64_t b = i + p->diag_offset + p->window_right + 1;
    *lo = a < 0 ? 0 : a;
    *hi = b > p->seqlen_k ? p->seqlen_k : b;
}

/* Exact FLOP count of the forward: 4 · D · (number of visible query-key pairs), summed over B·H. */
double fw_problem_flops(const fw_problem *p);
/* Visible (query, key) pairs for one (batch, head). */
double fw_problem_pairs(const fw_problem *p);

#endif
