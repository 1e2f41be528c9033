/* A ragged (varlen) batch as the CUDA kernels see it: where each sequence lies in the packed tensors. The forward
 * and the backward take the same struct, so that one tile scheduler (parts/scheduler.cuh: varlen_tile_scheduler)
 * serves both, and fill it from the problem in one place (fw_cuda_seqs_fill). */
#ifndef FW_CUDA_SEQS_H
#define FW_CUDA_SEQS_H

#include <stdint.h>
#include <string.h>
#include "core/problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sequence b owns query rows cu_q[b] .. cu_q[b+1] - 1 and key rows cu_k[b] .. cu_k[b+1] - 1 of the packed tensors.
 * The offsets live on the device and the kernels clamp them (parts/scheduler.cuh: seq_span), so that corrupted
 * ones cannot reach outside the tensors. */
typedef struct fw_cuda_seqs {
    const int32_t *cu_q, *cu_k; /* batch + 1 offsets each, on the device */
    int64_t total_q, total_k;   /* the packed tensors' rows */
    int batch;                  /* sequences */
} fw_cuda_seqs;

/* s from a ragged problem's offsets, totals and sequence count; zeroed first, padding included, so that kernel
 * arguments holding it are fully defined. */
static inline void fw_cuda_seqs_fill(fw_cuda_seqs *s, const fw_problem *p)
{
    memset(s, 0, sizeof *s);
    s->cu_q = p->cu_seqlens_q;
    s->cu_k = p->cu_seqlens_k;
    s->total_q = p->total_q;
    s->total_k = p->total_k;
    s->batch = (int)p->batch;
}

#ifdef __cplusplus
}
#endif
#endif
