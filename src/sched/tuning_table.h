/* The tuning table: measured (time, energy, power) of each backend configuration per device and
 * problem bucket, kept on disk as tab-separated text, from which the controller's frontier is
 * read. A problem bucket is (device, call, dtype, head_dim, causal, batch*heads, Lq, Lk, group) with
 * the three sizes rounded up to a power of two; call is the kind of call (dense, varlen, cache,
 * paged), because a decode step against a paged cache and a dense call of the same sizes run
 * different kernels. For serving calls batch is the number of sequences, Lq and Lk the longest
 * query run and key count (a KV cache: its capacity per sequence).
 *
 * File: first line "# flashwatt tuning table v3", then one line per entry with 18 tab-separated
 * fields: device, dtype, head_dim, causal, bh, lq, lk, backend, config ("-" = default), ms,
 * j_per_call, avg_w, peak_w ("n/a" = not measured), unix time of the measurement, precision
 * (exact | tf32 | 3xtf32 | bf16: the compute mode of f32 inputs), err (the measured max |O - O_ref|
 * / max |V| against the float64 reference; "n/a" = not measured), group (GQA ratio H / H_kv) and
 * call. Other lines starting with '#' are comments. Version-2 files (the first 17 fields; call
 * dense) and version-1 files (the first 14; precision exact, err n/a, group 1) are read too. */
#ifndef FW_SCHED_TUNING_TABLE_H
#define FW_SCHED_TUNING_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include "flashwatt.h"
#include "controller.h"

/* The kind of call a bucket holds. */
typedef enum fw_tune_call {
    FW_TUNE_DENSE = 0,  /* fw_attention_forward */
    FW_TUNE_VARLEN = 1, /* fw_attention_varlen_forward */
    FW_TUNE_CACHE = 2,  /* fw_attention_kvcache_forward, contiguous cache */
    FW_TUNE_PAGED = 3   /* fw_attention_kvcache_forward, paged cache */
} fw_tune_call;

typedef struct fw_tune_key {
    char device[64]; /* GPU name ("NVIDIA H100 80GB HBM3") or "cpu" */
    fw_dtype dtype;
    int head_dim;
    int causal;
    int64_t bh; /* batch * heads, bucketed */
    int64_t lq; /* query length, bucketed */
    int64_t lk; /* key length, bucketed */
    int64_t group; /* GQA ratio: query heads per kv head (1 = MHA); fw_tune_key_make sets 1 */
    fw_tune_call call; /* fw_tune_key_make sets FW_TUNE_DENSE */
} fw_tune_key;

typedef struct fw_tune_entry {
    fw_tune_key key;
    char backend[32];
    char config[48];   /* "" = the backend's default */
    double ms;         /* > 0 */
    double j_per_call; /* 0 = not measured */
    double avg_w;      /* 0 = not measured */
    double peak_w;     /* 0 = not measured */
    int64_t stamp;     /* unix seconds */
    fw_precision precision; /* compute mode (f32 inputs); FW_PRECISION_EXACT for f16/bf16 */
    int err_valid;          /* err holds a measurement */
    double err;             /* max |O - O_ref| / max |V| measured by the tuner */
} fw_tune_entry;

typedef struct fw_tuning_table {
    int n, cap;
    fw_tune_entry *e;
} fw_tuning_table;

/* Smallest power of two >= x (1 for x <= 1). */
int64_t fw_tune_bucket(int64_t x);
fw_tune_key fw_tune_key_make(const char *device, fw_dtype dtype, int head_dim, int causal, int64_t batch_heads,
                             int64_t lq, int64_t lk);
int fw_tune_key_equal(const fw_tune_key *a, const fw_tune_key *b);

void fw_tune_init(fw_tuning_table *t);
void fw_tune_free(fw_tuning_table *t);
/* Adds e, replacing an entry with the same key, backend and config. Tabs and newlines in the names
 * become spaces. FW_ERR_INVALID_VALUE for ms <= 0 or negative/non-finite values. */
fw_status fw_tune_put(fw_tuning_table *t, const fw_tune_entry *e);
/* The entries of bucket k as frontier points (name "backend config", tag = entry index);
 * returns how many (at most max). */
int fw_tune_frontier(const fw_tuning_table *t, const fw_tune_key *k, fw_frontier_point *out, int max);
/* "dense", "varlen", "cache", "paged"; and back (0 on success). */
const char *fw_tune_call_name(fw_tune_call c);
int fw_tune_call_parse(const char *s, fw_tune_call *out);
/* "exact", "tf32", "3xtf32", "bf16"; and back (0 on success). */
const char *fw_precision_name(fw_precision p);
int fw_precision_parse(const char *s, fw_precision *out);
/* Merges a file into t (a later line replaces an earlier one of the same slot, as fw_tune_put does; in
 * time linear in the entries). A missing file is FW_OK (nothing added; why says so); a malformed one, or
 * anything but a regular file (a FIFO would block), is FW_ERR_INVALID_VALUE with the reason in why, and
 * t unchanged; FW_ERR_OUT_OF_MEMORY may leave t partly merged. */
fw_status fw_tune_load(fw_tuning_table *t, const char *path, char *why, size_t why_len);
/* Writes the whole table (to path.tmp, then renamed over path). */
fw_status fw_tune_save(const fw_tuning_table *t, const char *path, char *why, size_t why_len);

#endif
