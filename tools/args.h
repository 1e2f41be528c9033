/* Flag parsing shared by `flashwatt check` and `flashwatt bench`: every shape flag takes a comma
 * list (bench sweeps the cross product; check takes one value each). Errors are usage errors:
 * the caller prints the message and exits 2. */
#ifndef FW_TOOLS_ARGS_H
#define FW_TOOLS_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include "flashwatt.h"
#include "suites.h"

#define FW_LIST_MAX 64
#define FW_NAME_MAX 48

typedef struct fw_ilist {
    int n;
    int64_t v[FW_LIST_MAX];
} fw_ilist;

typedef struct fw_slist {
    int n;
    char v[FW_LIST_MAX][FW_NAME_MAX];
} fw_slist;

typedef struct fw_cli {
    /* shape flags; n == 0 means "not given" */
    fw_ilist batch, heads, kv_heads, seqlen, seqlen_k, head_dim;
    fw_ilist dtype;   /* fw_dtype values */
    fw_ilist causal;  /* 0/1 */
    fw_ilist layout;  /* 0 = bhsd, 1 = bshd */
    fw_ilist threads; /* 0 = all cores */
    int have_window;
    int64_t window_left, window_right; /* FW_WINDOW_UNLIMITED = -1 */
    int lse;          /* --lse: also produce and check the row log-sum-exp */
    int backward;     /* --backward: check / time the backward pass (fwd+bwd in bench) */
    /* serving calls: one ragged batch (--seqlens-q / --seqlens-k, --kv-cache, --page-size, --append) */
    int n_seqlens_q, n_seqlens_k; /* 0 = not given */
    int32_t seqlens_q[FW_CASE_MAX_SEQS], seqlens_k[FW_CASE_MAX_SEQS];
    const char *kv_cache; /* "contiguous" | "paged" */
    int page_size;        /* 0 = not given */
    int append;
    fw_serving_shape serving; /* the batch those flags describe; nseq 0 = a dense call */
    fw_slist backends;
    int have_device;
    fw_device device;
    int have_seed;
    uint64_t seed;
    /* bench only */
    int warmup, reps;   /* -1 = adaptive */
    double max_ref_s;   /* skip the reference check when it would take longer (estimated) */
    double max_call_s;  /* skip a backend x shape when one call would take longer (estimated) */
    const char *suite, *csv, *json;
    int list_suites;
    /* energy (bench, tune) */
    fw_ilist energy;    /* --energy [0|1]: n == 0 = auto (on where a GPU with NVML power is present) */
    double cooldown_s;  /* --cooldown S: bounded wait for the idle baseline before each window (default 5) */
    double window_s;    /* --window-s S: energy window of back-to-back calls (default 1.0, at least 1) */
    const char *plot;   /* --plot DIR (bench) */
    const char *policy; /* --policy fastest | min-energy | cap:W[,temp:C][,reduced:BUDGET] for "auto" */
    /* tune */
    double budget_s;    /* --budget-s S: total time cap (default 120) */
    const char *out;    /* --out FILE: the tuning table (default $FLASHWATT_TUNING or ~/.cache/...) */
    const char *precisions; /* --precision: tune, a list for f32 buckets (default all); check and bench, one mode */
    int help;
} fw_cli;

/* Parses argv[first..argc). lists: 1 for bench (comma lists everywhere, bench-only flags allowed),
 * 0 for check (one value per flag). Returns 0 on success, 2 on a usage error with the message in
 * err. --help sets cli->help and returns 0. */
int fw_args_parse(int argc, char **argv, int first, int lists, fw_cli *cli, char *err, size_t err_len);

/* "f32" / "f16" / "bf16" (also float32, float16, half, bfloat16) -> 0 on success. */
int fw_args_dtype(const char *s, fw_dtype *out);
/* check and bench: the one --precision mode of f32 calls (exact where none is given), refused for other dtypes.
 * Returns 0, or 2 with the message in err. */
int fw_args_precision(const fw_cli *cli, const char *cmd, fw_precision *out, char *err, size_t err_len);
/* "cpu", "cuda", "cuda:N" -> 0 on success. */
/* Short text for a device: "cpu", "cuda:0". buf needs 16 bytes. */
const char *fw_args_device_name(fw_device d, char *buf, size_t len);
/* The info of the backend called name: 1 if it is compiled in; 0 (info zeroed) if not. */
int fw_args_backend_info(const char *name, fw_backend_info *out);

/* ---- shared by check and bench ----------------------------------------------------------- */
#define FW_DEFAULT_BATCH 1
#define FW_DEFAULT_HEADS 8
#define FW_DEFAULT_SEQLEN 512
#define FW_DEFAULT_HEAD_DIM 64

/* Did the user give any shape flag (batch, heads, kv-heads, seqlen, seqlen-k, head-dim, dtype,
 * causal, window, layout, or a serving flag)? */
int fw_args_any_shape(const fw_cli *cli);
/* The cross product of the shape flags (defaults where a flag is absent; a serving batch where its
 * flags are given) into out; the count, or -1 when more than max. In suites.c. */
int fw_args_shapes(const fw_cli *cli, fw_shape *out, int max);

/* The backends to run and where each runs.
 * Named backends (--backend): each on its own device kind (cuda index from --device), "all" =
 * every usable backend of the device; --device, when given, must agree with every named backend.
 * Otherwise: default_list (comma names) when not NULL, else every usable backend of the device
 * (cpu-ref included only when include_ref). The device is --device, else gpu_default ? cuda :
 * (a GPU if visible, else cpu). Returns 0, or 2 (usage) / 1 (no such device) with err. */
typedef struct fw_plan {
    int n;
    char name[FW_LIST_MAX][FW_NAME_MAX];
    fw_device device[FW_LIST_MAX];
    fw_device main_device; /* the device of the default set / suite */
} fw_plan;
int fw_args_plan(const fw_cli *cli, int gpu_default, const char *cpu_default_list, const char *cuda_default_list,
                 int include_ref, fw_plan *plan, char *err, size_t err_len);

#endif
