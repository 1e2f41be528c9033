/* flashwatt bench: backends x shapes (comma lists or a named suite). For each pair: median time
 * after warm-up, TFLOP/s, GB/s of compulsory traffic, FLOP/byte, and the error of that run's
 * output against the float64 reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "flashwatt.h"
#include "args.h"
#include "commands.h"
#include "fw_harness.h"
#include "report.h"
#include "suites.h"
#include "energy.h"
#include "bandwidth.h"
#include "calibrate.h"
#include "outputs.h"
#include "flashwatt_internal.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_SHAPES 4096
#define MAX_ROWS 16384
#define PROGRESS_S 3.0 /* a progress line on stderr for anything expected to take longer */

/* ---- GPU memory (cudaMemGetInfo) -------------------------------------------------------- */
static double gpu_used_bytes(fw_device dev)
{
#ifdef FW_HAVE_CUDA
    size_t free_b = 0, total_b = 0;
    if (dev.kind == FW_DEVICE_CUDA && cudaSetDevice(dev.index) == cudaSuccess &&
        cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        return (double)(total_b - free_b);
#else
    (void)dev;
#endif
    return NAN;
}

static int clampi(double x, int lo, int hi)
{
    if (!(x >= lo)) return lo;
    if (x > hi) return hi;
    return (int)x;
}


/* ---- --backward: one row of forward + backward ----------------------------------------- */
/* Fills row (time, TFLOP/s at 3.5x the forward FLOPs, GB/s); returns 1 on an error (row marked),
 * 0 otherwise (a backend without a backward is a skipped row). */
/* Adaptive repetitions from the probe time t (s) of one call: ~1 s of timed calls on the cpu, ~0.5 s on
 * a GPU (di: device row), at least 3 (fewer only when 3 would exceed ~10 s), at most 200 / 1000; the
 * user's --warmup / --reps where given. */
static void plan_reps(const fw_cli *cli, double t, int di, fw_row *row)
{
    const double budget = di ? 0.5 : 1.0;
    row->warmup = cli->warmup >= 0 ? cli->warmup : (t > 1.0 ? 0 : clampi(0.2 / t, 1, di ? 100 : 20));
    if (cli->reps > 0) row->reps = cli->reps;
    else if (3 * t > 10.0) row->reps = clampi(10.0 / t, 1, 3);
    else row->reps = clampi(budget / t, 3, di ? 1000 : 200);
}

static int bench_backward_row(const fw_cli *cli, fw_run *r, fw_bwd *bw, fw_context *ctx, fw_row *row, int done,
                              int total, const char *text)
{
    const int di = r->c.device.kind == FW_DEVICE_CUDA;
    row->pass_kind = "fwd+bwd";
    const fw_case *c = &r->c;
    const double flops = 3.5 * fw_run_flops(r);
    const double es = (double)fw_dtype_size(c->dtype);
    /* query and key rows: a ragged batch's totals, not its sequences times the longest */
    const int ragged = c->kind != FW_CASE_DENSE;
    const double rows_q = ragged ? (double)r->problem.total_q : (double)(c->batch * c->seqlen_q);
    const double rows_k = ragged ? (double)r->problem.total_k : (double)(c->batch * c->seqlen_k);
    const double nq = rows_q * (double)(c->heads * c->head_dim), nkv = rows_k * (double)(c->kv_heads * c->head_dim);
    const double bytes = fw_run_bytes(r) + es * (4.0 * nq + 4.0 * nkv) + 4.0 * rows_q * (double)c->heads;
    fw_status st = fw_context_set_backend(ctx, row->backend);
    double probe_ms = NAN;
    if (st == FW_OK) st = fw_bwd_time(r, bw, ctx, 0, 1, &probe_ms);
    if (st == FW_ERR_NOT_IMPLEMENTED) {
        row->status = FW_ROW_SKIPPED;
        snprintf(row->note, sizeof row->note, "no backward");
        return 0;
    }
    if (st != FW_OK) {
        row->status = FW_ROW_ERROR;
        snprintf(row->note, sizeof row->note, "%s", fw_context_last_error(ctx)[0] ? fw_context_last_error(ctx)
                                                                                : fw_status_string(st));
        return 1;
    }
    const double t = fmax(probe_ms * 1e-3, 1e-6);
    plan_reps(cli, t, di, row);
    const double expect = t * (row->warmup + row->reps);
    if (expect > PROGRESS_S)
        fprintf(stderr, "flashwatt bench: [%d/%d] timing %s %s fwd+bwd: %d+%d calls, ~%.0f s\n", done + 1, total,
                row->backend, text, row->warmup, row->reps, expect);
    double ms = NAN;
    st = fw_bwd_time(r, bw, ctx, row->warmup, row->reps, &ms);
    if (st != FW_OK) {
        row->status = FW_ROW_ERROR;
        snprintf(row->note, sizeof row->note, "timing failed: %s", fw_context_last_error(ctx)[0]
                                                                      ? fw_context_last_error(ctx)
                                                                      : fw_status_string(st));
        return 1;
    }
    row->ms = ms;
    row->tflops = flops / (ms * 1e-3) / 1e12;
    row->gbps = bytes / (ms * 1e-3) / 1e9;
    row->intensity = flops / bytes;
    snprintf(row->note, sizeof row->note, "fwd+bwd");
    if (!strcmp(row->backend, "auto")) {
        size_t nl = strlen(row->note);
        snprintf(row->note + nl, sizeof row->note - nl, "; ran %s", fw_context_last_backend(ctx));
    }
    return 0;
}

/* ---- KV-cache rows: the decode roofline ------------------------------------------------------ */
#define BW_ROUNDS 9

static double median_of(double *x, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j] < x[j - 1]; j--) {
            const double t = x[j]; x[j] = x[j - 1]; x[j - 1] = t;
        }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* K+V bytes per call against a copy on the same device: copies and calls alternate for BW_ROUNDS
 * rounds and the percentage is the median of each round's ratio. On the cpu a round's call is one
 * call (other processes come and go); on a GPU a window of ~20 ms of back-to-back calls, an engine's
 * steady state, whose median also becomes the row's time (one synchronised call also shows the
 * host's work a call, which the queue hides in a serving loop). */
static void bandwidth_row(fw_run *r, fw_context *ctx, fw_row *row, fw_device dev)
{
    const fw_serving_shape *sv = row->s.serving;
    row->kv_bytes = fw_run_kv_bytes(r);
    row->tokens = 0;
    for (int b = 0; b < sv->nseq; b++) row->tokens += sv->seq_q[b];
    char why[256] = "";
    const int gpu = dev.kind == FW_DEVICE_CUDA;
    fw_copier *cp = fw_copier_open(dev, row->s.threads, gpu ? (size_t)1 << 30 : (size_t)256 << 20, why, sizeof why);
    double bw[BW_ROUNDS], ratio[BW_ROUNDS], win[BW_ROUNDS];
    int ok = cp != NULL;
    for (int i = 0; ok && i < BW_ROUNDS; i++) {
        bw[i] = 2.0 * (double)fw_copier_bytes(cp) / fw_copier_run(cp) / 1e9;
        double call_s = row->ms * 1e-3;
        if (!gpu) {
            const double t0 = fw_now_seconds();
            ok = fw_run_forward(r, ctx) == FW_OK;
            call_s = fw_now_seconds() - t0;
        } else {
            /* steady state: ~20 ms of back-to-back calls, so the host's work a call hides behind the queue */
            double ms = 0;
            const int calls = (int)fmin(2000.0, fmax(1.0, 20.0 / fmax(row->ms, 1e-3)));
            ok = fw_run_time_window(r, ctx, calls, &ms) == FW_OK && ms > 0;
            call_s = ms * 1e-3;
            win[i] = ms;
        }
        ratio[i] = row->kv_bytes / call_s / 1e9 / bw[i];
        if (!isfinite(bw[i])) {
            ok = 0;
            snprintf(why, sizeof why, "the copy failed");
        }
    }
    fw_copier_close(cp);
    if (ok) {
        row->copy_gbps = median_of(bw, BW_ROUNDS);
        row->copy_pct = 100.0 * median_of(ratio, BW_ROUNDS);
        if (gpu) { /* the row's time becomes a call's in back-to-back windows; its rates follow */
            const double ms = median_of(win, BW_ROUNDS);
            row->tflops *= row->ms / ms;
            row->gbps *= row->ms / ms;
            row->ms = ms;
        }
    } else {
        const size_t nl = strlen(row->note);
        snprintf(row->note + nl, sizeof row->note - nl, "%scopy bandwidth n/a: %.120s", nl ? "; " : "",
                 why[0] ? why : fw_context_last_error(ctx));
    }
}

/* ---- energy: calls for the window ------------------------------------------------------- */
typedef struct bench_arg {
    fw_run *r;
    fw_context *ctx;
    int cuda_index;
} bench_arg;

static fw_status bench_call(void *a)
{
    bench_arg *b = (bench_arg *)a;
    return fw_run_call(b->r, b->ctx);
}

static fw_status bench_sync(void *a) { return fw_device_sync(((bench_arg *)a)->cuda_index); }

/* --policy fastest | min-energy | cap:W, each optionally followed by ,temp:C and ,reduced:BUDGET */
static int fw_parse_policy(const char *s, fw_policy *p, char *err, size_t len)
{
    *p = fw_policy_default();
    if (!s) return 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *end = NULL;
        if (!strcmp(tok, "fastest")) p->objective = FW_OBJECTIVE_FASTEST;
        else if (!strcmp(tok, "min-energy")) p->objective = FW_OBJECTIVE_MIN_ENERGY;
        else if (!strncmp(tok, "cap:", 4) && (p->power_cap_w = strtod(tok + 4, &end)) > 0 && !*end)
            p->objective = FW_OBJECTIVE_POWER_CAP;
        else if (!strncmp(tok, "temp:", 5) && (p->temperature_limit_c = strtod(tok + 5, &end)) > 0 && !*end) {
        } else if (!strncmp(tok, "reduced:", 8) && (p->error_budget = strtod(tok + 8, &end)) >= 0 && !*end)
            p->allow_reduced_precision = 1;
        else {
            snprintf(err, len, "--policy: '%s' is not fastest, min-energy, cap:W, temp:C or reduced:BUDGET", tok);
            return 2;
        }
    }
    return 0;
}

static void list_suites(void)
{
    printf("suites (flashwatt bench --suite NAME):\n");
    for (int i = 0; i < fw_suite_count(); i++) {
        const fw_suite *s = fw_suite_get(i);
        fw_shape shapes[256];
        int n = s->shapes(s->gpu ? FW_DEVICE_CUDA : FW_DEVICE_CPU, shapes, 256);
        printf("  %-9s %3d shapes  %s\n", s->name, n, s->description);
    }
}

int fw_cmd_bench(int argc, char **argv)
{
    fw_cli cli;
    char err[1024];
    if (fw_args_parse(argc, argv, 1, 1, &cli, err, sizeof err)) {
        fprintf(stderr, "flashwatt bench: %s\n", err);
        return 2;
    }
    if (cli.help) {
        fw_usage_bench(stdout);
        return 0;
    }
    if (cli.list_suites) {
        list_suites();
        return 0;
    }
    const fw_suite *suite = NULL;
    if (cli.suite) {
        suite = fw_suite_find(cli.suite);
        if (!suite) {
            fprintf(stderr, "flashwatt bench: no suite '%s' (known:", cli.suite);
            for (int i = 0; i < fw_suite_count(); i++) fprintf(stderr, " %s", fw_suite_get(i)->name);
            fprintf(stderr, ")\n");
            return 2;
        }
        if (fw_args_any_shape(&cli)) {
            fprintf(stderr, "flashwatt bench: --suite %s fixes the shapes; drop the shape flags or the suite\n",
                    suite->name);
            return 2;
        }
    } else if (!fw_args_any_shape(&cli)) {
        suite = fw_suite_default();
    }

    fw_plan plan;
    int rc = fw_args_plan(&cli, suite ? suite->gpu : 0, suite ? suite->cpu_backends : NULL,
                          suite ? suite->cuda_backends : NULL, 0, &plan, err, sizeof err);
    if (rc) {
        fprintf(stderr, "flashwatt bench: %s\n", err);
        return rc;
    }

    fw_policy policy;
    if (fw_parse_policy(cli.policy, &policy, err, sizeof err)) {
        fprintf(stderr, "flashwatt bench: %s\n", err);
        return 2;
    }
    /* where the results go, checked before anything runs */
    char plot_script[1200] = "";
    if ((cli.csv && fw_output_check_file("--csv", cli.csv, err, sizeof err)) ||
        (cli.json && fw_output_check_file("--json", cli.json, err, sizeof err)) ||
        (cli.plot && fw_output_check_plot(cli.plot, plot_script, sizeof plot_script, err, sizeof err))) {
        fprintf(stderr, "flashwatt bench: %s\n", err);
        return 2;
    }
    /* energy: on by default where a GPU power reading exists (decided at the first GPU row) */
    const int energy_asked = cli.energy.n ? (int)cli.energy.v[0] : -1;
    if (energy_asked == 1) {
        int gpu_rows = 0;
        for (int i = 0; i < plan.n; i++) gpu_rows |= plan.device[i].kind == FW_DEVICE_CUDA;
        if (!gpu_rows)
            fprintf(stderr, "flashwatt bench: --energy: energy is measured on GPU rows only (NVML); these rows are on "
                            "the cpu: energy n/a\n");
    }

    fw_shape *base = (fw_shape *)calloc(MAX_SHAPES, sizeof *base);
    fw_shape *shapes = (fw_shape *)calloc(MAX_SHAPES, sizeof *shapes);
    fw_row *rows = (fw_row *)calloc(MAX_ROWS, sizeof *rows);
    if (!base || !shapes || !rows) {
        fprintf(stderr, "flashwatt bench: out of memory\n");
        free(base); free(shapes); free(rows);
        return 1;
    }
    int nbase = suite ? suite->shapes(plan.main_device.kind, base, MAX_SHAPES) : fw_args_shapes(&cli, base, MAX_SHAPES);
    int nshapes = 0;
    for (int i = 0; i < nbase && nshapes >= 0; i++)
        for (int t = 0; t < (cli.threads.n ? cli.threads.n : 1); t++) {
            if (nshapes >= MAX_SHAPES) { nshapes = -1; break; }
            shapes[nshapes] = base[i];
            shapes[nshapes].threads = cli.threads.n ? (int)cli.threads.v[t] : 0;
            nshapes++;
        }
    if (nbase < 0 || nshapes < 0 || (long)nshapes * plan.n > MAX_ROWS) {
        fprintf(stderr, "flashwatt bench: too many combinations (at most %d shapes and %d rows)\n", MAX_SHAPES, MAX_ROWS);
        free(base); free(shapes); free(rows);
        return 2;
    }

    char devname[16] = "";
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("flashwatt bench: %s%s, %d shape%s x %d backend%s", suite ? "suite " : "", suite ? suite->name : "custom",
           nshapes, nshapes == 1 ? "" : "s", plan.n, plan.n == 1 ? "" : "s");
    printf(" (");
    for (int i = 0; i < plan.n; i++) printf("%s%s", i ? ", " : "", plan.name[i]);
    printf(") on ");
    int any_cpu = 0, any_cuda = 0;
    for (int i = 0; i < plan.n; i++) {
        if (plan.device[i].kind == FW_DEVICE_CUDA) any_cuda = 1;
        else any_cpu = 1;
    }
    for (int i = 0; i < plan.n; i++)
        if (plan.device[i].kind == FW_DEVICE_CUDA) { fw_args_device_name(plan.device[i], devname, sizeof devname); break; }
    printf("%s%s%s; cpu simd %s, %ld cores; flashwatt %s\n", any_cpu ? "cpu" : "", any_cpu && any_cuda ? " + " : "",
           any_cuda ? devname : "", fw_cpu_simd_level(), cores, fw_version());
    /* the idle baseline is taken before any GPU work of this run (the cool-downs wait for it) */
    if (energy_asked != 0 && any_cuda) {
        for (int i = 0; i < plan.n; i++)
            if (plan.device[i].kind == FW_DEVICE_CUDA) {
                int g = -1;
                double idle = 0;
                char ewhy[256] = "";
                if (fw_energy_session(plan.device[i].index, &g, &idle, ewhy, sizeof ewhy))
                    printf("energy: idle baseline %.1f W (NVML %d), cool-down <= %.1f s, windows %.1f s\n", idle, g,
                           cli.cooldown_s, cli.window_s);
                else
                    printf("energy: n/a (%s)\n", ewhy);
                break;
            }
    }
    if (cli.backward)
        printf("backward: each row times forward + backward (median after warm-up); TFLOP/s counts 3.5x the "
               "forward FLOPs; GB/s counts the forward's traffic plus q, k, v, o, dO read and dQ, dK, dV written; "
               "gradients are checked by `flashwatt check --backward`, energy is not measured\n");
    fw_report_bench_header(stdout);

    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK || fw_context_set_policy(ctx, &policy) != FW_OK) {
        fprintf(stderr, "flashwatt bench: cannot create a context\n");
        free(base); free(shapes); free(rows);
        return 1;
    }
    int nrows = 0, errors = 0, fails = 0, done = 0, energy_warned = 0;
    const int total = nshapes * plan.n;
    const double start = fw_now_seconds();
    for (int si = 0; si < nshapes; si++) {
        const fw_shape *s = &shapes[si];
        char text[256];
        fw_shape_text(s, text, sizeof text);
        fw_run runs[2];
        int have_run[2] = {0, 0};
        fw_bwd bwds[2];
        int have_bwd[2] = {0, 0};
        char run_err[2][512] = {"", ""};
        int ref_decided[2] = {0, 0}, ref_ok[2] = {0, 0};
        double ref_est[2] = {0, 0};
        if (fw_context_set_threads(ctx, s->threads) != FW_OK) {
            fprintf(stderr, "flashwatt bench: --threads %d: %s\n", s->threads, fw_context_last_error(ctx));
            errors++;
            break;
        }
        for (int bi = 0; bi < plan.n; bi++, done++) {
            fw_row *row = &rows[nrows++];
            fw_row_init(row);
            row->s = *s;
            snprintf(row->backend, sizeof row->backend, "%s", plan.name[bi]);
            const fw_device dev = plan.device[bi];
            fw_args_device_name(dev, row->device, sizeof row->device);
            const int di = dev.kind == FW_DEVICE_CUDA;

            fw_backend_info info;
            const int is_auto = !strcmp(row->backend, "auto"); /* the scheduler's choice */
            fw_args_backend_info(row->backend, &info);
            if (is_auto) info.usable = 1;
            if (!info.usable) {
                row->status = FW_ROW_SKIPPED;
                snprintf(row->note, sizeof row->note, "not usable here: %.230s", info.why_not);
                fw_report_bench_row(stdout, row);
                continue;
            }
            if (!have_run[di] && !run_err[di][0]) {
                fw_case c = fw_shape_case(s, dev, cli.seed, cli.lse || cli.backward);
                fw_status st = fw_run_alloc(&runs[di], &c, run_err[di], sizeof run_err[di]);
                if (st == FW_OK) have_run[di] = 1;
                if (st == FW_OK && cli.backward) {
                    st = fw_bwd_alloc(&runs[di], &bwds[di], cli.seed, run_err[di], sizeof run_err[di]);
                    if (st == FW_OK) have_bwd[di] = 1;
                    else {
                        fw_run_free(&runs[di]);
                        have_run[di] = 0;
                    }
                }
                else if (!run_err[di][0]) snprintf(run_err[di], sizeof run_err[di], "%s", fw_status_string(st));
            }
            if (!have_run[di]) {
                row->status = FW_ROW_SKIPPED;
                snprintf(row->note, sizeof row->note, "cannot set up this shape: %.220s", run_err[di]);
                fw_report_bench_row(stdout, row);
                continue;
            }
            fw_run *r = &runs[di];
            char why[512];
            if (!is_auto && fw_run_supports(r, row->backend, why, sizeof why) != FW_OK) {
                row->status = FW_ROW_SKIPPED;
                snprintf(row->note, sizeof row->note, "unsupported: %.240s", why);
                fw_report_bench_row(stdout, row);
                continue;
            }
            const double flops = fw_run_flops(r), bytes = fw_run_bytes(r);
            const double rate = fw_calib_rate(row->backend, dev, s->dtype, s->head_dim, s->threads);
            double est = rate > 0 ? flops / rate : NAN;
            if (!di && cli.max_call_s > 0 && est > cli.max_call_s && s->batch * s->heads > 1 && !s->serving) {
                /* the small calibration problem underrates tiled backends: before skipping, time a
                 * slice of this shape (one head per thread, same lengths) when that is affordable */
                fw_shape slice = *s;
                const int nthr = s->threads > 0 ? s->threads : (int)cores;
                slice.batch = 1;
                slice.heads = slice.kv_heads = nthr < s->batch * s->heads ? nthr : s->batch * s->heads;
                const double frac = (double)slice.heads / (double)(s->batch * s->heads);
                if (est * frac <= 0.5 * cli.max_call_s) {
                    const double r1 = fw_calib_measure(row->backend, &slice, dev, 0, 1);
                    if (r1 > 0) {
                        est = flops / r1;
                        fw_calib_learn(row->backend, dev, s->dtype, s->head_dim, s->threads, r1);
                    }
                }
            }
            if (cli.max_call_s > 0 && est > cli.max_call_s) {
                row->status = FW_ROW_SKIPPED;
                snprintf(row->note, sizeof row->note, "one call would take ~%.0f s (over --max-call-s %g)", est,
                         cli.max_call_s);
                fw_report_bench_row(stdout, row);
                continue;
            }
            if (est > PROGRESS_S)
                fprintf(stderr, "flashwatt bench: [%d/%d] %s %s: first call ~%.0f s\n", done + 1, total, row->backend,
                        text, est);

            if (cli.backward) {
                if (bench_backward_row(&cli, r, &bwds[di], ctx, row, done, total, text)) errors++;
                fw_report_bench_row(stdout, row);
                continue;
            }
            const double mem_row_before = di ? gpu_used_bytes(dev) : NAN;
            fw_status st = fw_context_set_backend(ctx, row->backend);
            if (st == FW_OK) st = fw_run_poison(r);
            double t0 = fw_now_seconds();
            if (st == FW_OK) st = fw_run_forward(r, ctx);
            const double probe = fw_now_seconds() - t0;
            if (st != FW_OK) {
                row->status = FW_ROW_ERROR;
                snprintf(row->note, sizeof row->note, "%s", fw_context_last_error(ctx)[0] ? fw_context_last_error(ctx)
                                                                                        : fw_status_string(st));
                errors++;
                fw_report_bench_row(stdout, row);
                continue;
            }
            /* the error of this run's output against the reference (computed once per shape) */
            if (!ref_decided[di]) {
                ref_decided[di] = 1;
                const double rrate = fw_calib_rate(NULL, dev, s->dtype, s->head_dim, 0);
                ref_est[di] = rrate > 0 ? flops / rrate : INFINITY;
                ref_ok[di] = cli.max_ref_s > 0 && ref_est[di] <= cli.max_ref_s;
                if (ref_ok[di] && ref_est[di] > PROGRESS_S)
                    fprintf(stderr, "flashwatt bench: [%d/%d] float64 reference for %s: ~%.0f s\n", done + 1, total,
                            text, ref_est[di]);
            }
            if (ref_ok[di]) {
                fw_errors e;
                const int first = !r->have_ref;
                const double tr = fw_now_seconds();
                st = fw_run_compare(r, &e);
                if (st == FW_OK && first)
                    fw_calib_learn(NULL, dev, s->dtype, s->head_dim, 0, flops / fmax(fw_now_seconds() - tr, 1e-6));
                if (st != FW_OK) {
                    snprintf(row->note, sizeof row->note, "reference comparison failed: %s", fw_status_string(st));
                } else {
                    row->checked = 1;
                    row->pass = e.pass;
                    row->max_abs_err = e.max_abs;
                    row->rel_l2 = e.rel_l2;
                    row->tol = e.tol;
                    if (!e.pass) fails++;
                    if (e.unwritten || e.nan_mismatch || e.cache_mismatch)
                        snprintf(row->note, sizeof row->note, "%ld unwritten, %ld NaN mismatches, %ld cache elements wrong",
                                 e.unwritten, e.nan_mismatch, e.cache_mismatch);
                }
            } else {
                if (cli.max_ref_s <= 0)
                    snprintf(row->note, sizeof row->note, "reference comparison off (--max-ref-s 0)");
                else
                    snprintf(row->note, sizeof row->note, "reference skipped for size (~%.0f s > --max-ref-s %g)",
                             ref_est[di], cli.max_ref_s);
            }
            const double t = fmax(probe, 1e-6);
            plan_reps(&cli, t, di, row);
            const double expect = t * (row->warmup + row->reps);
            if (expect > PROGRESS_S)
                fprintf(stderr, "flashwatt bench: [%d/%d] timing %s %s: %d+%d calls, ~%.0f s\n", done + 1, total,
                        row->backend, text, row->warmup, row->reps, expect);
            double ms = NAN;
            st = fw_run_time(r, ctx, row->warmup, row->reps, &ms);
            if (st != FW_OK) {
                row->status = FW_ROW_ERROR;
                snprintf(row->note, sizeof row->note, "timing failed: %s", fw_context_last_error(ctx)[0]
                                                                              ? fw_context_last_error(ctx)
                                                                              : fw_status_string(st));
                errors++;
                fw_report_bench_row(stdout, row);
                continue;
            }
            row->ms = ms;
            fw_calib_learn(row->backend, dev, s->dtype, s->head_dim, s->threads, flops / (ms * 1e-3));
            row->tflops = flops / (ms * 1e-3) / 1e12;
            row->gbps = bytes / (ms * 1e-3) / 1e9;
            row->intensity = flops / bytes;
            if (s->serving && s->serving->kind == FW_CASE_KVCACHE) bandwidth_row(r, ctx, row, dev);
            if (di) {
                /* the call's tensors plus the device memory the backend newly holds after this row's
                 * calls (cudaMemGetInfo before and after). Workspace a backend cached on an earlier
                 * row and allocations freed inside a call are not seen. */
                const double used = gpu_used_bytes(dev);
                const double es = s->dtype == FW_F32 ? 4.0 : 2.0;
                const double tensors = es * (double)(r->q_elems + 2 * r->kv_elems + r->o_elems) +
                                       (r->lse ? 4.0 * (double)(s->batch * s->heads * s->seqlen_q) : 0.0);
                if (isfinite(used) && isfinite(mem_row_before))
                    row->peak_mem_bytes = tensors + fmax(used - mem_row_before, 0);
                /* energy window: cool-down (bounded), warm-up, >= 1 s of back-to-back calls */
                if (energy_asked != 0) {
                    int gpu = -1;
                    double idle_w = 0;
                    char ewhy[256] = "";
                    fw_telemetry *tel = fw_energy_session(dev.index, &gpu, &idle_w, ewhy, sizeof ewhy);
                    if (!tel && energy_asked == 1 && !energy_warned) {
                        energy_warned = 1;
                        fprintf(stderr, "flashwatt bench: --energy: no GPU power telemetry here (%s): energy n/a\n", ewhy);
                    }
                    if (tel) {
                        bench_arg ba = {r, ctx, dev.index};
                        fw_emeas m;
                        fw_status es = fw_energy_measure(tel, gpu, idle_w, cli.cooldown_s, 0.5, cli.window_s, ms * 1e-3,
                                                         bench_call, bench_sync, &ba, &m);
                        if (es == FW_OK && m.valid) {
                            row->watts_avg = m.watts_avg;
                            row->joules_per_call = m.joules_per_call;
                            row->gflops_per_watt = flops / m.joules_per_call / 1e9;
                            row->energy_source = m.source;
                        }
                        if (es == FW_OK && m.peak_valid) row->watts_peak = m.watts_peak;
                        if (es == FW_OK && m.std_valid) row->watts_std = m.watts_std;
                        row->idle_w = m.idle_w;
                        row->power_trace = m.trace;
                        row->ntrace = m.ntrace;
                        m.trace = NULL;
                        if (es != FW_OK || m.note[0]) {
                            size_t nl = strlen(row->note);
                            snprintf(row->note + nl, sizeof row->note - nl, "%s%s", nl ? "; " : "",
                                     es != FW_OK ? "energy window failed" : m.note);
                        }
                        fw_emeas_free(&m);
                    }
                }
            }
            if (is_auto) {
                size_t nl = strlen(row->note);
                snprintf(row->note + nl, sizeof row->note - nl, "%sran %s: %.200s", nl ? "; " : "",
                         fw_context_last_backend(ctx), fw_sched_last_choice(fw_context_sched(ctx)));
            }
            fw_report_bench_row(stdout, row);
        }
        for (int d = 0; d < 2; d++) {
            if (have_bwd[d]) fw_bwd_free(&runs[d], &bwds[d]);
            if (have_run[d]) fw_run_free(&runs[d]);
        }
    }
    fw_context_destroy(ctx);

    int ran = 0, skipped = 0;
    for (int i = 0; i < nrows; i++) {
        ran += rows[i].status == FW_ROW_OK;
        skipped += rows[i].status == FW_ROW_SKIPPED;
    }
    printf("%d ran, %d skipped, %d errors, %d over tolerance; %.1f s\n", ran, skipped, errors, fails,
           fw_now_seconds() - start);
    fw_report_bandwidth(stdout, rows, nrows);
    int wrc = 0;
    if (cli.csv && fw_report_write_csv(cli.csv, rows, nrows)) wrc = 1;
    if (cli.json && fw_report_write_json(cli.json, rows, nrows)) wrc = 1;
    if (cli.plot && ran) {
        char json[1200];
        if (cli.json) snprintf(json, sizeof json, "%s", cli.json);
        else {
            snprintf(json, sizeof json, "%s/bench.json", cli.plot);
            if (fw_report_write_json(json, rows, nrows)) wrc = 1;
        }
        if (fw_output_plot(plot_script, json, cli.plot)) wrc = 1;
    }
    for (int i = 0; i < nrows; i++) fw_row_free(&rows[i]);
    fw_energy_session_close();
    free(base); free(shapes); free(rows);
    if (!ran) /* a run that measured nothing is not a success, whatever the reason */
        fprintf(stderr, "flashwatt bench: nothing ran: %d row%s skipped, %d error%s (the notes in the table say why)\n",
                skipped, skipped == 1 ? "" : "s", errors, errors == 1 ? "" : "s");
    return errors || fails || wrc || !ran ? 1 : 0;
}
