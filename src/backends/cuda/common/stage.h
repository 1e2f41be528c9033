/* Staging for cuda-flash (f16/bf16): the kernels read 16-byte row chunks, so they need head_dim a multiple of 8
 * and every row 16-byte aligned (base pointers, batch/head/seq strides multiples of 8 elements). A dense or
 * ragged (varlen) problem that breaks this runs as FlashAttention's front end runs it: each tensor that cannot be
 * read in place is copied into stream-ordered workspace (workspace.h) as a contiguous (B, S, H, Dp) tensor
 * (packed tensors: (1, total, H, Dp)) with Dp = head_dim rounded up to 8 and the columns past head_dim zero; the
 * existing path runs on that problem; the outputs (o; dq, dk, dv) are copied back into the caller's tensors,
 * head_dim columns of each row and nothing else. Zero columns change neither Q·Kᵀ nor Δ = rowsum(dO∘O), and
 * the padded columns of O, dQ, dK, dV come out zero and are dropped; the scale stays the problem's (validation
 * resolved the default 1/sqrt(head_dim) from the real head dim). LSE is not staged (its layout has no head dim).
 * Cost: one copy of each staged tensor, O(tokens · Dp) bytes, for the duration of the call.
 * KV-cache calls are not staged: the cache is appended to and read in place, and a per-call copy of a whole
 * cache would cost more than the call. Nor is a call whose context reserved a workspace for CUDA graphs
 * (fw_context_set_workspace): such calls promise not to allocate. */
#ifndef FW_CUDA_STAGE_H
#define FW_CUDA_STAGE_H

#include "backends/backend.h"
#include "core/knobs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 where p is a dense or ragged f16/bf16 problem on a CUDA device, head_dim at most 256, with a tensor that the
 * 16-byte-row kernels cannot read in place (head_dim not a multiple of 8, a base pointer or a stride that breaks
 * the 16-byte rule). */
int fw_stage_needed(const fw_problem *p);
/* 0 with the reason where p needs staging (fw_stage_needed) but cannot have it: its context reserved a
 * workspace (no allocation allowed); else 1. */
int fw_stage_allowed(const fw_problem *p, char *why, size_t why_len);
/* *s = the problem fw_stage_run hands its body for p: head_dim rounded up to 8, each staged tensor contiguous.
 * The staged tensors' pointers are placeholders (16-byte aligned, never dereferenced): the shape is for
 * supports() and configs(). */
void fw_stage_shape(const fw_problem *p, fw_problem *s);
/* 1 where the CUDA backward stages p: a dense p needs staging and the tensor-core kernels take the staged problem
 * (under the knobs) but not p. Elsewhere (f32, head_dim above 128, FW_CUDA_BWD_TC=0, ragged batches) the CUDA-core
 * kernels read any head dim and stride in place. */
int fw_stage_backward_wanted(const fw_problem *p, const fw_knobs *k);

/* Stages p's tensors, runs body on the staged problem with cfg and ex, and copies its outputs back (only when
 * body returned FW_OK). Everything is ordered on ex->stream; the workspace is freed stream-ordered. */
typedef fw_status (*fw_stage_body)(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);
fw_status fw_stage_run(const fw_problem *p, const fw_config *cfg, const fw_exec *ex, fw_stage_body body);

#ifdef __cplusplus
}
#endif
#endif
