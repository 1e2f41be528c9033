/* Argument checking of every public entry point; turns fw_tensors into an fw_problem. */
#ifndef FW_VALIDATE_H
#define FW_VALIDATE_H

#include <stddef.h>
#include "problem.h"

/* On failure returns the status and writes a message naming the argument and the limit. */
fw_status fw_validate_forward(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                              const fw_tensor *o, float *lse, const fw_attn_params *params,
                              fw_problem *out, char *msg, size_t msg_len);

fw_status fw_validate_backward(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                               const fw_tensor *o, const float *lse, const fw_tensor *dout,
                               const fw_tensor *dq, const fw_tensor *dk, const fw_tensor *dv,
                               const fw_attn_params *params, fw_problem *out, char *msg,
                               size_t msg_len);

/* ---- serving calls (validate_serving.c) --------------------------------------------------------
 * The structural checks (shapes, dtypes, devices, overlaps, sizes of the int32 arrays) of the ragged
 * and the KV-cache forward. They never read offsets, cache lengths or block tables: those may live
 * on a device. fw_validate_serving_values checks them from host copies (or the host arrays of a CPU
 * call) against a problem the structural checks made. */
fw_status fw_validate_varlen(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, const fw_tensor *o,
                             float *lse, const fw_varlen *seqs, const fw_attn_params *params, fw_problem *out,
                             char *msg, size_t msg_len);
/* The ragged backward: fw_validate_varlen's checks with o as an input, lse (H, total_q) required, and
 * the gradients' (fw_check_gradients); the offsets' values as fw_validate_serving_values says. */
fw_status fw_validate_varlen_backward(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, const fw_tensor *o,
                                      const float *lse, const fw_tensor *dout, const fw_tensor *dq, const fw_tensor *dk,
                                      const fw_tensor *dv, const fw_varlen *seqs, const fw_attn_params *params,
                                      fw_problem *out, char *msg, size_t msg_len);
fw_status fw_validate_kvcache(const fw_tensor *q, const fw_kv_cache *cache, const fw_tensor *k_new,
                              const fw_tensor *v_new, const fw_tensor *o, float *lse, const fw_varlen *q_seqs,
                              const fw_attn_params *params, fw_problem *out, char *msg, size_t msg_len);
/* Offsets that start at 0, never decrease, end at the packed length and stay within max_seqlen; cache
 * lengths >= 0 and within the capacity with the new tokens; the block-table entries each sequence
 * uses inside the page pool. The arrays are host copies of p's (NULL where p has none). */
fw_status fw_validate_serving_values(const fw_problem *p, const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                     const int32_t *cache_seqlens, const int32_t *block_table, char *msg,
                                     size_t msg_len);
/* Elements of each int32 array of p (0 where absent): what a host copy of it must hold. */
void fw_serving_value_counts(const fw_problem *p, int64_t *n_cu_q, int64_t *n_cu_k, int64_t *n_seqlens,
                             int64_t *n_table);

/* The single-tensor checks of validate.c, shared with validate_serving.c. */
fw_status fw_check_tensor(const char *name, const fw_tensor *t, int is_output, char *msg, size_t msg_len);
fw_status fw_check_same(const char *an, const fw_tensor *a, const char *bn, const fw_tensor *b, char *msg,
                        size_t msg_len);
fw_status fw_check_no_overlap(const char *on, const fw_tensor *o, const char *in, const fw_tensor *t, char *msg,
                              size_t msg_len);
/* The backward's gradients against the forward's tensors (dense and ragged calls alike): dout shaped
 * like o, dq like q, dk and dv like k and v, one dtype and device, and none of them overlapping an
 * input (q, k, v, o, dout, lse, and the n_extra named arrays such as offsets) or each other. Fills
 * out's gradient pointers and strides. */
fw_status fw_check_gradients(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, const fw_tensor *o,
                             const fw_tensor *lse, const fw_tensor *dout, const fw_tensor *dq, const fw_tensor *dk,
                             const fw_tensor *dv, const char *const *extra_names, const fw_tensor *extra, int n_extra,
                             fw_problem *out, char *msg, size_t msg_len);
fw_status fw_check_params(const fw_attn_params *p, int64_t head_dim, fw_problem *out, char *msg, size_t msg_len);
/* ptr (may be NULL) on a multiple of align bytes: its elements are read as align-byte values. */
fw_status fw_check_aligned(const char *name, const void *ptr, size_t align, char *msg, size_t msg_len);

#endif
