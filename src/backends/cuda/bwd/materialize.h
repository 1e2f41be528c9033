/* The "store" strategy of the CUDA backward (materialize.cu): S/P and dP/dS of whole
 * (batch, head) slices materialised in device memory, cuBLAS GEMMs for the five products. The
 * default CUDA backward (cuda_backward.cu) recomputes P tile by tile instead (O(L) memory).
 *
 * When it runs (heuristics.cu: fw_bwd_materialize_wanted):
 *   - the config name is "bwd-materialize" (tests, benchmarks, a scheduler's choice); with a memory
 *     budget (fw_context_set_memory_budget) too small for one slice this fails with
 *     FW_ERR_UNSUPPORTED and a message naming the budget and the need;
 *   - or the context's memory budget is > 0, the call is deterministic, f32 with head_dim > 64 (the
 *     only case where storing was measured faster: 1.6-1.7x the deterministic CUDA-core recompute
 *     on an H100; the tensor-core recompute of f16/bf16 was 2.7-4.7x faster than storing),
 *     seqlen_q·seqlen_k <= FW_BWD_MATERIALIZE_MAX_PAIRS, and the fixed workspace plus the Lq×Lk
 *     workspace of one (batch, head) slice fit the budget, unless the config names a recompute
 *     ("bwd-atomic...", "bwd-deterministic...": any other "bwd-" name).
 * A budget of 0 (the default) never selects it automatically.
 *
 * Workspace (one fw_cuda_ws_alloc, counted by fw_cuda_workspace_peak):
 *   fixed  Δ (B·H·Lq f32), f32 accumulators for dQ (B·H·Lq·D) and dK, dV (2·B·H_kv·Lk·D), and
 *          contiguous copies of q, dout, k, v where their strides do not suit cuBLAS (see the .cu)
 *   chunk  per (batch, head) slice, Lq·Lk·8 bytes for f32 (S→P and dP→dS in place) or Lq·Lk·12
 *          for f16/bf16 (S, dP in f32, then P and dS in the input dtype for the tensor-core GEMMs),
 *          times the slices of one chunk: as many as the budget leaves after the fixed part
 *          (budget 0 with an explicit "bwd-materialize": FW_BWD_MATERIALIZE_DEFAULT_BYTES, at least
 *          one slice). */
#ifndef FW_BWD_MATERIALIZE_H
#define FW_BWD_MATERIALIZE_H

#include <stddef.h>
#include <stdint.h>
#include "backends/backend.h"

/* Auto-selection limit on the visible-or-not pairs of one slice (the lead tunes it from device runs). */
#define FW_BWD_MATERIALIZE_MAX_PAIRS (2048LL * 2048LL) /* measured faster up to L = 2048 */
/* Chunk workspace when "bwd-materialize" is asked for with no budget set. */
#define FW_BWD_MATERIALIZE_DEFAULT_BYTES ((size_t)1 << 30)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fw_bwd_mat_plan {
    size_t slice_bytes;      /* Lq×Lk workspace of one (batch, head) slice */
    size_t fixed_bytes;      /* Δ, f32 gradient accumulators, input copies (aligned) */
    size_t chunk_bytes;      /* Lq×Lk workspace of one chunk (0 when !fits) */
    int64_t units_per_chunk; /* kv units (batch, kv head) per chunk */
    int64_t heads_per_pass;  /* query heads of a kv group per pass: the group, or fewer (then 1 unit) */
    int copies;              /* bit 0 q, 1 dout, 2 k, 3 v: copied to contiguous buffers */
    int fits;                /* 0: the budget cannot hold the fixed part and one slice */
} fw_bwd_mat_plan;

/* The plan for p under p->memory_budget. Returns plan->fits. */
int fw_bwd_materialize_plan(const fw_problem *p, fw_bwd_mat_plan *plan);
/* The materialised backward (p already checked by fw_cuda_backward_supports). */
fw_status fw_cuda_backward_materialize(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);

#ifdef __cplusplus
}
#endif

#endif
