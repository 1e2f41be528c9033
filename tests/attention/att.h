/* test_attention: one registry-driven program that checks every attention backend against cpu-ref's
 * float64 reference (test), times them (perf) and checks their gradients (backward), on the CPU and
 * on CUDA devices alike. A case is a point of the grid (backend × dtype × head dim × (Lq, Lk) ×
 * mask × layout × precision × GQA × call kind); sections are named lists of cases plus the checks
 * that are not plain grid points (NaN propagation, workspace reuse, forced configurations, ...).
 *
 *   main.c      command line, sections, the plan of cases, parallel execution, the summary
 *   cases.c     the forward sections (test and perf): which cases each one holds
 *   cases_bwd.c the backward sections, and finite differences of cpu-ref itself
 *   forward.c   one forward case: every backend, precision, configuration and thread count
 *   backward.c  one backward case: every backend with a backward, each way it can run
 *   perf.c      timing of one case (median of CUDA events or the host clock; CUDA graphs)
 *   cuda.c      what needs the CUDA runtime: workspace reuse across calls and graphs, device time
 *               from a CUDA graph, the backward's store strategy under a memory budget, staging checks
 *               on misaligned base pointers */
#ifndef ATT_H
#define ATT_H

#include <stdint.h>
#include <stdio.h>
#include "fw_harness.h"

/* ---- what a case is --------------------------------------------------------------------------- */

/* How the attention is called. Dense calls only, for now; ragged (varlen: per-sequence lengths) and
 * KV-cache calls (page size, new tokens appended) add a kind here, their fields below, their buffers
 * in att_alloc_call (main.c) and their call where the runners call fw_run_forward; the sections then
 * set t.call like any other axis. */
typedef enum att_call_kind { ATT_CALL_DENSE = 0 } att_call_kind;

typedef struct att_call {
    att_call_kind kind;
    int page_size; /* KV cache: 0 = contiguous */
    int append;    /* KV cache: new tokens written by the call */
} att_call;

/* A value written into one input element before the run (NaN and infinity propagation). */
typedef struct att_plant {
    char tensor; /* 'q', 'k', 'v'; 0 = none */
    int64_t head, row, col;
    float value;
} att_plant;

enum {
    ATT_EVERY_CONFIG = 1u << 0, /* each entry of every backend's configs(), then its own choice */
    ATT_REFUSED = 1u << 1,      /* the named backend must refuse it: FW_ERR_UNSUPPORTED and a reason */
    ATT_NAN_ROWS = 1u << 2,     /* with plants: exactly the rows that see a planted key go non-finite */
    ATT_TIME_BACKWARD = 1u << 3, /* perf: time the forward, then each way the backward runs */
    ATT_MUST_SUPPORT = 1u << 4,  /* the backends it runs on (t.backend) must take it: a refusal fails, so that a
                                    fallback to another backend cannot hide one */
};

#define ATT_MAX_PLANTS 3
#define ATT_PRECISIONS 4 /* exact, tf32, 3xtf32, bf16 */

typedef struct att_case {
    fw_case c;             /* shape, GQA, dtype, device, layout (bshd, padding), mask, LSE, seed */
    att_call call;
    unsigned precisions;   /* bit (1 << fw_precision) per precision to run; f32 inputs only */
    const char *backend;   /* NULL: every usable backend of the device that supports the case */
    const char *config;    /* forward: NULL = the default, a name = that configuration (backend table);
                              backward: NULL = every way, else the ways to run, comma-separated */
    unsigned flags;
    unsigned char threads[4]; /* CPU threads per run, 0-terminated; all 0 = {1, 2} */
    att_plant plant[ATT_MAX_PLANTS];
    float input_scale;     /* > 0: q and k multiplied by it (large logits) */
    const char *section;   /* the section that made it */
    const char *tag;       /* perf: the name of its suite in RESULT lines and dump files */
    const char *env;       /* "NAME=VALUE[ NAME=VALUE...]": set while it runs (forced configurations);
                              such cases run one at a time, after the others */
    double cost;           /* B·H·Lq·Lk·D: the order cases run in (largest first) */
} att_case;

/* A case of this shape with the program's defaults (device, seed, LSE, precisions). */
att_case att_make(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, fw_dtype dt);
att_case att_mask(att_case t, int causal, int64_t window_left, int64_t window_right);
att_case att_layout(att_case t, int bshd, int pad);

/* ---- the run ---------------------------------------------------------------------------------- */
typedef enum att_mode { ATT_TEST = 0, ATT_PERF = 1, ATT_BACKWARD = 2 } att_mode;

typedef struct att_opts {
    att_mode mode;
    fw_device device;
    int quick;             /* the small subset (sanitizers) */
    int long_cases;        /* --long: add the longest sequences */
    const char *sections;  /* comma-separated section names, NULL = the mode's defaults */
    const char *backend;   /* only this backend */
    const char *filter;    /* only cases whose label contains it */
    int dtype;             /* -1, or only this fw_dtype */
    int64_t min_len, max_len; /* only cases with min_len <= Lq <= max_len (0 = no bound) */
    int reps;              /* perf: timed calls per measurement */
    int check;             /* perf: also compare each timed run with the reference */
    const char *dump;      /* perf: write inputs and outputs (f32) here for the PyTorch side */
    int jobs;              /* cases run at once */
    int verbose;           /* also print skipped runs */
    uint64_t seed;         /* of the random sections */
    fw_knobs knobs;        /* the environment as a context created now reads it */
} att_opts;

extern att_opts att_o;

/* One case's results and printed lines (its own stream, printed in order once it is done). */
typedef struct att_out {
    FILE *f;
    char *buf;
    size_t len;
    int passed, failed, skipped;
} att_out;

/* "PASS ..." or "FAIL ..." into the case's stream, counted. Returns ok. */
int att_report(att_out *out, int ok, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* A run that did not happen and why (printed with --verbose), counted. */
void att_skip(att_out *out, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- sections --------------------------------------------------------------------------------- */
typedef struct att_plan {
    att_case *v;
    int n, cap;
} att_plan;

att_case *att_add(att_plan *p, att_case t);

typedef struct att_section {
    const char *name;
    unsigned modes;   /* bit (1 << att_mode) of the modes it belongs to */
    unsigned devices; /* bit (1 << fw_device_kind) of the devices it runs on */
    int by_default;   /* 0: only when named with --section */
    const char *what;
    void (*add)(att_plan *p, const att_opts *o);               /* the cases; NULL = run() alone */
    void (*run)(const att_opts *o, att_out *out);              /* checks that are not cases; may be NULL */
} att_section;

extern const att_section att_sections[];
extern const int att_n_sections;

/* ---- one case, per mode ------------------------------------------------------------------------ */
void att_forward_case(const att_case *t, att_out *out);
void att_backward_case(const att_case *t, att_out *out);
void att_perf_case(const att_case *t, att_out *out);

/* Shared by the runners. The buffers of case t's call (c: t->c, or a variant of it). */
fw_status att_alloc_call(const att_case *t, const fw_case *c, fw_run *r, char *msg, size_t len);
const char *att_label(const att_case *t, char *buf, size_t len);
/* Backends of the run's device that are usable (compiled in, device present), in registry order. */
int att_backends(const fw_backend **out, int max);
/* Sets t->env's variables (saving what was there); att_env_restore puts them back. The knobs are
 * read after setting, so backend-table calls see what a context created now would. */
typedef struct att_env {
    char saved[4][2][256];
    int n, had[4];
    fw_knobs knobs;
} att_env;
void att_env_apply(const char *env, att_env *e);
void att_env_restore(att_env *e);
int att_precision_count(unsigned precisions);
const char *att_precision_name(fw_precision p);

/* CUDA-only pieces (cuda.c); without CUDA they report nothing and return -1. */
void att_cuda_workspace_reuse(const att_opts *o, att_out *out);
/* Device milliseconds per call: a CUDA graph of many call(r, arg) on rotating copies of the inputs
 * (past the L2), replayed; *stream_slot is the stream the call must use while it is captured. */
double att_cuda_graph_ms(fw_run *r, fw_timed_call call, void *arg, void **stream_slot, double per_call_ms);
/* Staging (cuda-flash, src/backends/cuda/common/stage.h) where no grid case reaches it: base pointers one element
 * off the 16-byte boundary, forward (test mode) and backward (backward mode), against the reference; and the
 * refusal of a call that would stage under a context workspace (test mode). */
void att_cuda_stage_forward_checks(const att_opts *o, att_out *out);
void att_cuda_stage_backward_checks(const att_opts *o, att_out *out);
/* The store strategy of the CUDA backward under a memory budget (fw_context_set_memory_budget): the
 * rule must pick it exactly where it is documented to, run it in chunks of at most 3 (batch, head)
 * slices, and the device workspace peak must show it ran. */
void att_cuda_store_check(fw_run *r, fw_bwd *g, const fw_backend *b, const char *label, att_out *out);

#endif
