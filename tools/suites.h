/* Named workloads for `flashwatt bench --suite NAME`: the seeds' shapes, the FlashAttention grid,
 * a CPU set, and the default workload `flashwatt bench` runs with no options. */
#ifndef FW_TOOLS_SUITES_H
#define FW_TOOLS_SUITES_H

#include <stdint.h>
#include "flashwatt.h"
#include "fw_harness.h"

/* One ragged batch of a serving call: per-sequence lengths and the cache's form. */
typedef struct fw_serving_shape {
    fw_case_kind kind;      /* FW_CASE_VARLEN or FW_CASE_KVCACHE */
    int nseq;
    int32_t seq_q[FW_CASE_MAX_SEQS]; /* queries (KV cache: new tokens) */
    int32_t seq_k[FW_CASE_MAX_SEQS]; /* keys (KV cache: tokens already cached) */
    int page_size;          /* KV cache: 0 contiguous, else paged (shuffled block table) */
    int append;             /* KV cache: new keys and values written into it by the call */
} fw_serving_shape;

/* One benchmark shape (a point of the cross product bench sweeps). */
typedef struct fw_shape {
    int64_t batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim;
    fw_dtype dtype;
    int causal;
    int64_t window_left, window_right; /* FW_WINDOW_UNLIMITED = -1 */
    int layout_bshd;
    int threads; /* 0 = all cores */
    /* a serving call (NULL: dense): batch = its sequences, seqlen_q / seqlen_k their longest */
    const fw_serving_shape *serving;
} fw_shape;

/* shape's batch and lengths from its serving batch (the longest query and key counts). */
void fw_shape_set_serving(fw_shape *s, const fw_serving_shape *serving);

typedef struct fw_suite {
    const char *name;
    const char *description;
    int gpu; /* 1: a GPU workload; its default device is cuda */
    /* Default backends where --backend is not given, per device kind; NULL = every usable backend
     * of the device except the cpu-ref oracle. */
    const char *cpu_backends;
    const char *cuda_backends;
    /* Writes the shapes for a device kind into out (at most max); returns the count. */
    int (*shapes)(fw_device_kind device, fw_shape *out, int max);
} fw_suite;

int fw_suite_count(void);
const fw_suite *fw_suite_get(int i);
const fw_suite *fw_suite_find(const char *name);
/* The suite `flashwatt bench` runs with no shape flags and no --suite. */
const fw_suite *fw_suite_default(void);

/* The harness case of a shape on a device: fresh random inputs from seed, poisoned outputs. */
fw_case fw_shape_case(const fw_shape *s, fw_device device, uint64_t seed, int want_lse);
/* "B=1 H=8 L=512 D=64 f32 causal" style text. */
const char *fw_shape_text(const fw_shape *s, char *buf, size_t len);

#endif
