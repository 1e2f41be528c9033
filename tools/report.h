/* Output of check and bench: an aligned table on stdout, CSV and JSON files. */
#ifndef FW_TOOLS_REPORT_H
#define FW_TOOLS_REPORT_H

#include <stdio.h>
#include "suites.h"

typedef enum fw_row_status { FW_ROW_OK = 0, FW_ROW_SKIPPED = 1, FW_ROW_ERROR = 2 } fw_row_status;

/* One backend x shape. Absent numbers are NaN (written as null / empty). */
typedef struct fw_row {
    char backend[48];
    char device[16];
    fw_shape s;
    fw_row_status status;
    double ms, tflops, gbps, intensity;
    double max_abs_err, rel_l2, tol; /* NaN when the reference was skipped */
    int checked, pass;               /* checked: compared against the reference */
    int warmup, reps;
    double peak_mem_bytes;           /* NaN where not measured */
    /* energy (NaN / n/a where there is no GPU telemetry or --energy 0): an energy window of >= 1 s
     * of back-to-back calls after a bounded cool-down and a warm-up (tools/energy.h) */
    double watts_avg, watts_peak, joules_per_call, gflops_per_watt, watts_std;
    double idle_w;                   /* the baseline the cool-down waited for */
    const char *energy_source;       /* "counter", "sampled", or NULL */
    int ntrace;
    double (*power_trace)[2];        /* [t_s, W] samples inside the window (malloc'd, may be NULL) */
    const char *pass_kind;           /* NULL (forward) or "fwd+bwd" (bench --backward): JSON "phase" */
    /* KV-cache rows (the bandwidth report): K+V bytes one call reads, its new tokens, the copy
     * bandwidth (GB/s, bytes read + written) measured right after the row on its device, and the
     * call's K+V GB/s as a percentage of it (bench_row.c: bandwidth_row); NaN else */
    double kv_bytes, tokens, copy_gbps, copy_pct;
    char note[256];
} fw_row;

void fw_row_init(fw_row *r);
void fw_row_free(fw_row *r); /* the power trace */

/* bench: the table, printed row by row as results come in (notes inline, last column). */
void fw_report_bench_header(FILE *f);
void fw_report_bench_row(FILE *f, const fw_row *r);

/* check: one line per backend. */
void fw_report_check_header(FILE *f);
void fw_report_check_row(FILE *f, const fw_row *r);

/* The bandwidth table of the KV-cache rows: µs, GB/s of K+V read, % of the copy bandwidth, J/token. */
void fw_report_bandwidth(FILE *f, const fw_row *rows, int n);

/* 0 on success; -1 after printing why to stderr. */
int fw_report_write_csv(const char *path, const fw_row *rows, int n);
int fw_report_write_json(const char *path, const fw_row *rows, int n);

#endif
