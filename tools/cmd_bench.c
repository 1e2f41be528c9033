/* flashwatt bench: backends x shapes (comma lists or a named suite). For each pair: median time
 * after warm-up, TFLOP/s, GB/s of compulsory traffic, FLOP/byte, and the error of that run's
 * output against the float64 reference. This file reads the arguments, sets up each shape, skips
 * the rows that cannot or should not run, prints the table and writes the outputs; bench_row.c
 * measures a row. */
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
#include "calibrate.h"
#include "outputs.h"
#include "bench_row.h"
#include "sched/tuning_table.h"

#define MAX_SHAPES 4096
#define MAX_ROWS 16384

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
    fw_precision prec;
    if (fw_parse_policy(cli.policy, &policy, err, sizeof err) || fw_args_precision(&cli, "bench", &prec, err, sizeof err)) {
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
    printf(")%s%s on ", prec ? " in " : "", prec ? fw_precision_name(prec) : "");
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
    if (fw_context_create(&ctx) != FW_OK || fw_context_set_policy(ctx, &policy) != FW_OK ||
        fw_context_set_precision(ctx, prec) != FW_OK) {
        fprintf(stderr, "flashwatt bench: cannot create a context\n");
        free(base); free(shapes); free(rows);
        return 1;
    }
    int nrows = 0, errors = 0, done = 0, energy_warned = 0;
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
        fw_bench_ref ref[2] = {{0, 0, 0}, {0, 0, 0}};
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
            if (prec != FW_PRECISION_EXACT && s->dtype != FW_F32) { /* a suite's 16-bit shapes */
                row->status = FW_ROW_SKIPPED;
                snprintf(row->note, sizeof row->note, "--precision %s applies to f32 inputs", fw_precision_name(prec));
                fw_report_bench_row(stdout, row);
                continue;
            }
            if (!have_run[di] && !run_err[di][0]) {
                fw_case c = fw_shape_case(s, dev, cli.seed, cli.lse || cli.backward);
                c.precision = prec; /* the contract of max_err */
                fw_status st = fw_run_alloc(&runs[di], &c, run_err[di], sizeof run_err[di]);
                if (st == FW_OK) have_run[di] = 1;
                if (st == FW_OK && cli.backward) {
                    /* dO and the gradients only: each timed call's forward writes o and lse (a float64
                     * forward on the host would take minutes at long sequences) */
                    st = fw_bwd_alloc_grads(&runs[di], &bwds[di], cli.seed, run_err[di], sizeof run_err[di]);
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
            const double flops = fw_run_flops(r);
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
            if (est > FW_BENCH_PROGRESS_S)
                fprintf(stderr, "flashwatt bench: [%d/%d] %s %s: first call ~%.0f s\n", done + 1, total, row->backend,
                        text, est);

            const fw_bench_pos pos = {done, total, text};
            if (cli.backward ? fw_bench_backward_row(&cli, r, &bwds[di], ctx, row, pos)
                             : fw_bench_forward_row(&cli, r, ctx, row, dev, &ref[di], energy_asked, &energy_warned, pos))
                errors++;
            fw_report_bench_row(stdout, row);
        }
        for (int d = 0; d < 2; d++) {
            if (have_bwd[d]) fw_bwd_free(&runs[d], &bwds[d]);
            if (have_run[d]) fw_run_free(&runs[d]);
        }
    }
    fw_context_destroy(ctx);

    int ran = 0, skipped = 0, fails = 0;
    for (int i = 0; i < nrows; i++) {
        ran += rows[i].status == FW_ROW_OK;
        skipped += rows[i].status == FW_ROW_SKIPPED;
        fails += rows[i].checked && !rows[i].pass;
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
