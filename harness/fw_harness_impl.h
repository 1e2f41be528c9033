/* What the harness's files share (fw_harness.c, fw_harness_bwd.c, fw_harness_time.c): the poison
 * patterns, host and device memory of a run, layout arithmetic. Not for the harness's callers. */
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

void fwh_fill_random(void *buf, fw_dtype t, size_t n, uint64_t *state);
void fwh_poison_host(void *buf, fw_dtype t, size_t n);
int fwh_is_poison(const void *buf, fw_dtype t, int64_t i);
int64_t fwh_offset(const fw_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d);
/* Contiguous f32 (B, H, S, D) copy of a host image with t's strides (exact: every f16/bf16 value is
 * an f32); NULL when out of memory. */
float *fwh_to_f32_bhsd(fw_dtype dt, const void *host, const fw_tensor *t);
/* x rounded to dtype t (identity for f32). */
float fwh_round_to(fw_dtype t, float x);

#endif
