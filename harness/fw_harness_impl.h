/* What the harness's files share (fw_harness.c, fw_harness_serving.c, fw_harness_bwd.c,
 * fw_harness_time.c): the poison patterns, host and device memory of a run, layout arithmetic, the
 * comparison pieces. Not for the harness's callers. */
#ifndef FW_HARNESS_IMPL_H
#define FW_HARNESS_IMPL_H

#include "fw_harness.h"

/* Poison patterns: NaNs with payloads no arithmetic produces. */
#define FWH_POISON_F32 0x7fbadbadu
#define FWH_POISON_16 0x7dadu   /* an f16 NaN; as bf16 also a NaN (exponent all ones) */
#define FWH_POISON_BF16 0x7fadu

int fwh_on_gpu(const fw_run *r);
/* Device memory of the run's device (host memory for a CPU run). */
fw_status fwh_dev_alloc(const fw_run *r, void **p, size_t bytes);
void fwh_dev_free(const fw_run *r, void *p);
/* Copy host -> device (to_device = 1) or back; a plain memcpy on the CPU (nothing when dst == src). */
fw_status fwh_copy(const fw_run *r, void *dst, const void *src, size_t bytes, int to_device);
/* Waits for the device and reports its last error (nothing on the CPU). */
fw_status fwh_sync(const fw_run *r);

/* FW_OK when a tensor of n0 x n1 x n2 x row elements of t is below 2^62 bytes; else
 * FW_ERR_INVALID_SHAPE naming it (checked before a buffer is sized from those numbers). */
fw_status fwh_check_elems(const char *name, int64_t n0, int64_t n1, int64_t n2, int64_t row, fw_dtype t, char *msg,
                          size_t len);
void fwh_fill_random(void *buf, fw_dtype t, size_t n, uint64_t *state);
void fwh_poison_host(void *buf, fw_dtype t, size_t n);
int fwh_is_poison(const void *buf, fw_dtype t, int64_t i);
int64_t fwh_offset(const fw_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d);
/* A (batch, heads, seq, head_dim) tensor in the case's layout (bhsd or bshd) with its padding. */
fw_tensor fwh_describe(void *data, const fw_case *c, int64_t batch, int64_t heads, int64_t seq, size_t *elems);
/* Contiguous f32 (B, H, S, D) copy of a host image with t's strides (exact: every f16/bf16 value is
 * an f32); NULL when out of memory. */
float *fwh_to_f32_bhsd(fw_dtype dt, const void *host, const fw_tensor *t);
/* Elementwise float32 copy of n elements of a host image (the same offsets); NULL when out of memory. */
float *fwh_to_f32(const void *host, fw_dtype t, size_t n);
/* t over float32 host data at data (a copy made by fwh_to_f32: same strides). */
fw_tensor fwh_as_f32(fw_tensor t, void *data);
/* x rounded to dtype t (identity for f32). */
float fwh_round_to(fw_dtype t, float x);

/* The computation in the input dtype t on float32 host copies described by p (any call kind). */
void fwh_lowp_attention(const fw_problem *p, fw_dtype t, float *out);
/* Comparison pieces shared by dense and serving cases (see fw_run_compare). */
void fwh_compare_elem(fw_errors *e, const void *host, fw_dtype t, int64_t at, double y, const float *lowp,
                      double acc[2]);
int fwh_compare_lse(fw_errors *e, float x, float y, const fw_case *c);
void fwh_errors_finish(fw_errors *e, const fw_case *c, const double acc[2], int lse_ok);

/* Serving cases (fw_harness_serving.c), behind the public fw_run_* functions. */
fw_status fwh_serving_alloc(fw_run *r, const fw_case *c, char *msg, size_t len);
void fwh_serving_free(fw_run *r);
fw_status fwh_serving_poison(fw_run *r);
fw_status fwh_serving_call(fw_run *r, fw_context *ctx);
fw_status fwh_serving_compare(fw_run *r, fw_errors *e);
fw_status fwh_serving_problem(const fw_run *r, fw_problem *p, char *msg, size_t len);
fw_status fwh_serving_supports(const fw_run *r, const char *name, char *why, size_t why_len);
double fwh_serving_bytes(const fw_run *r, int kv_only);
const char *fwh_serving_label(const fw_case *c, char *buf, size_t len);
/* The run's offsets (r->seqs) pointing into the host copies of the int32 arrays, at the same offsets. */
fw_varlen fwh_host_seqs(const fw_run *r);

/* The backward call of a run (dense or ragged) on its tensors and b's gradients (fw_harness_bwd.c). */
fw_status fwh_bwd_call(fw_run *r, fw_bwd *b, fw_context *ctx);

#endif
