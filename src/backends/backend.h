/* The backend table: every kernel family is one fw_backend, registered in registry.c.
 * Core and sched reach backends only through this table; nothing here knows core. */
#ifndef FW_BACKEND_H
#define FW_BACKEND_H

#include <stddef.h>
#include "flashwatt.h"
#include "core/problem.h"
#include "core/knobs.h"

#ifdef __cplusplus
extern "C" { /* the CUDA backends (.cu, compiled as C++) include this */
#endif

/* One point of a backend's tunable search space. Fields a backend does not use stay 0. */
typedef struct fw_config {
    char name[48];  /* e.g. "bm64-bn64-w4-s2"; "" = the backend's default */
    int block_m;    /* query rows per block / tile */
    int block_n;    /* keys per tile */
    int warps;
    int stages;     /* pipeline depth */
    int splits;     /* split-KV count, 0 = backend decides */
    int occupancy;  /* max resident blocks per SM (0 = unlimited); power knob */
    fw_precision precision;
} fw_config;

/* Per-call execution environment handed to a backend by core. */
typedef struct fw_exec {
    int threads;        /* CPU threads to use (>= 1) */
    void *stream;       /* cudaStream_t or NULL */
    char *err;          /* backend writes a message here on failure */
    size_t err_len;
    const fw_knobs *knobs; /* the context's environment knobs; NULL = defaults (fw_exec_knobs) */
} fw_exec;

/* The knobs a backend call runs with: the context's, or the defaults for callers without one. */
static inline const fw_knobs *fw_exec_knobs(const fw_exec *ex)
{
    return ex && ex->knobs ? ex->knobs : &fw_knobs_defaults;
}

#define FW_MAX_CONFIGS 64

typedef struct fw_backend {
    const char *name;
    const char *description;
    fw_device_kind device;
    /* Is it usable on this machine now (compiled in, device present)? If not, why. */
    int (*available)(char *why, size_t why_len);
    /* Can it run this problem? 1 = yes; 0 = no with the reason in why. */
    int (*supports)(const fw_problem *p, char *why, size_t why_len);
    /* Its search space for p, at most max entries written to out; returns the count (>= 1).
     * Entry 0 is the default configuration. NULL = one default config. */
    int (*configs)(const fw_problem *p, fw_config *out, int max);
    fw_status (*forward)(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);
    /* NULL when the backend has no backward yet. */
    fw_status (*backward)(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);
    /* Device workspace (bytes) that forward calls up to p's sizes take at most; NULL = none. Core asks it
     * for fw_attention_workspace_size with a problem built from the query: kind FW_CALL_KVCACHE, batch,
     * heads, kv_heads, group, head_dim, dtype, device, seqlen_q = max_seqlen_q, seqlen_k = max_seqlen_k;
     * nothing else is read. */
    size_t (*workspace)(const fw_problem *p);
} fw_backend;

int fw_registry_count(void);
const fw_backend *fw_registry_get(int index);
const fw_backend *fw_registry_find(const char *name);

/* Device-resident values to the host for fw_context_set_check_device_values (devices.c; the CUDA
 * backend's copy, which synchronises `stream`). FW_ERR_NOT_IMPLEMENTED in a build without CUDA. */
fw_status fw_device_values_to_host(fw_device dev, void *stream, void *dst, const void *src, size_t bytes,
                                   char *msg, size_t msg_len);

/* Helper for backends: printf into the why/err buffer; returns 0 so "return fw_why(...)" reads well. */
int fw_why(char *buf, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#ifdef __cplusplus
}
#endif

#endif
