/* flashwatt tune: measures every configuration of every applicable backend (through the registry,
 * not through core) over problem buckets, and writes the per-GPU tuning table the scheduler reads
 * (src/sched/tuning_table.h). Per configuration: time per call, error against the float64
 * reference (max |O - O_ref| / max |V|: the number the reduced-precision error budget is held to)
 * and, where GPU telemetry exists, J/call, average and peak W from an energy window (energy.h).
 * Bounded: --budget-s caps the total; defaults of every backend are measured first. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "flashwatt.h"
#include "args.h"
#include "commands.h"
#include "energy.h"
#include "fw_harness.h"
#include "suites.h"
#include "flashwatt_internal.h"

#define MAX_SHAPES 256
#define MAX_ITEMS 512

void fw_usage_tune(FILE *f)
{
    fprintf(f,
            "usage: flashwatt tune [flags]\n"
            "\n"
            "Measures each configuration (tile shape, warps, stages, precision mode) of each applicable\n"
            "backend for problem buckets (device, dtype, D, causal, GQA ratio, B*H, Lq, Lk rounded up to\n"
            "powers of two) and writes the tuning table the scheduler reads when a context is created:\n"
            "time per call, error against the float64 reference and, where GPU telemetry exists,\n"
            "J/call, average and peak W over >= 1 s energy windows (n/a elsewhere).\n"
            "\n"
            "flags:\n"
            "  --suite NAME      the buckets of a named workload (see flashwatt bench --list-suites)\n"
            "  shape flags       --batch --heads --kv-heads --seqlen --seqlen-k --head-dim --dtype\n"
            "                    --causal (comma lists, cross product; as in bench)\n"
            "  serving flags     --seqlens-q --seqlens-k --kv-cache --page-size --append: one ragged\n"
            "                    batch or decode step (as in bench); its buckets are apart from the\n"
            "                    dense call's (call kind: varlen, cache, paged)\n"
            "  --backend NAMES   only these backends (default: every usable backend of the device)\n"
            "  --device D        cpu | cuda | cuda:N (default: a GPU if one is visible)\n"
            "  --precision LIST  modes tried for f32 buckets: exact,tf32,3xtf32,bf16 (default all; each\n"
            "                    only where a backend supports it)\n"
            "  --budget-s S      stop after S seconds in total (default 120), shared equally by the\n"
            "                    buckets; what was measured is kept (defaults of every backend first)\n"
            "  --max-ref-s S     measure the error against the float64 reference only where that\n"
            "                    takes about S seconds or less (default 5; 0 = never; error then n/a)\n"
            "  --energy [0|1]    energy windows (default: on where a GPU power reading exists)\n"
            "  --cooldown S      bounded wait for the idle baseline before each window (default 1 here)\n"
            "  --window-s S      energy window length (default 1, at least 1)\n"
            "  --out FILE        the table (default: $FLASHWATT_TUNING, else\n"
            "                    ~/.cache/flashwatt/tuning-<gpu name>.txt); existing entries of other\n"
            "                    buckets are kept, re-measured ones replaced\n"
            "  --threads N       CPU threads for cpu backends\n");
}

typedef struct tune_arg {
    const fw_backend *b;
    const fw_problem *p;
    const fw_config *cfg;
    fw_exec ex;
    int cuda_index;
} tune_arg;

static fw_status tune_call(void *a)
{
    tune_arg *t = (tune_arg *)a;
    return t->b->forward(t->p, t->cfg, &t->ex);
}

static fw_status tune_sync(void *a)
{
    tune_arg *t = (tune_arg *)a;
    return t->p->device.kind == FW_DEVICE_CUDA ? fw_device_sync(t->cuda_index) : FW_OK;
}

static int mkdirs_for(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(buf, 0755);
        *p = '/';
    }
    return 0;
}

static int parse_precisions(const char *s, int want[4])
{
    for (int i = 0; i < 4; i++) want[i] = s ? 0 : 1;
    if (!s) return 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        fw_precision p;
        if (fw_precision_parse(tok, &p) != 0) return -1;
        want[p] = 1;
    }
    return 0;
}

int fw_cmd_tune(int argc, char **argv)
{
    fw_cli cli;
    char err[1024];
    int cooldown_given = 0;
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--cooldown", 10)) cooldown_given = 1;
    if (fw_args_parse(argc, argv, 1, 1, &cli, err, sizeof err)) {
        fprintf(stderr, "flashwatt tune: %s\n", err);
        return 2;
    }
    if (cli.help) {
        fw_usage_tune(stdout);
        return 0;
    }
    if (!cooldown_given) cli.cooldown_s = 1.0;
    /* the environment's knobs, as a context would read them, for the backends called directly below */
    fw_knobs knobs;
    fw_knobs_read(&knobs);
    int want_prec[4];
    if (parse_precisions(cli.precisions, want_prec)) {
        fprintf(stderr, "flashwatt tune: --precision: '%s' is not a comma list of exact, tf32, 3xtf32, bf16\n",
                cli.precisions);
        return 2;
    }
    const fw_suite *suite = NULL;
    if (cli.suite) {
        suite = fw_suite_find(cli.suite);
        if (!suite) {
            fprintf(stderr, "flashwatt tune: no suite '%s' (see flashwatt bench --list-suites)\n", cli.suite);
            return 2;
        }
        if (fw_args_any_shape(&cli)) {
            fprintf(stderr, "flashwatt tune: --suite fixes the shapes; drop the shape flags or the suite\n");
            return 2;
        }
    }
    fw_plan plan;
    int rc = fw_args_plan(&cli, suite ? suite->gpu : 0, NULL, NULL, 0, &plan, err, sizeof err);
    if (rc) {
        fprintf(stderr, "flashwatt tune: %s\n", err);
        return rc;
    }
    const fw_device dev = plan.main_device;
    fw_shape shapes[MAX_SHAPES];
    int nshapes = 0;
    if (suite) {
        nshapes = suite->shapes(dev.kind, shapes, MAX_SHAPES);
    } else {
        /* the cross product of the shape flags, or the one serving batch they describe */
        nshapes = fw_args_shapes(&cli, shapes, MAX_SHAPES);
        if (nshapes < 0) {
            fprintf(stderr, "flashwatt tune: the shape flags give more than %d buckets\n", MAX_SHAPES);
            return 2;
        }
    }
    for (int i = 0; i < nshapes; i++) shapes[i].threads = cli.threads.n ? (int)cli.threads.v[0] : 0;

    char path[1024];
    if (cli.out) snprintf(path, sizeof path, "%s", cli.out);
    else if (fw_sched_table_path(&knobs, path, sizeof path) != 0) {
        fprintf(stderr, "flashwatt tune: no table path: %s; pass --out FILE\n", path);
        return 2;
    }
    fw_tuning_table table;
    fw_tune_init(&table);
    char why[1400] = "";
    if (fw_tune_load(&table, path, why, sizeof why) != FW_OK) {
        fprintf(stderr, "flashwatt tune: the existing table is unusable (%s); it will be replaced\n", why);
        fw_tune_free(&table);
        fw_tune_init(&table);
    }
    const int kept = table.n;

    /* energy: on by default where a GPU power reading exists */
    const int energy_asked = cli.energy.n ? (int)cli.energy.v[0] : -1;
    fw_telemetry *tel = NULL;
    int gpu = -1;
    double idle_w = 0;
    char ewhy[256] = "";
    if (energy_asked != 0 && dev.kind == FW_DEVICE_CUDA) tel = fw_energy_session(dev.index, &gpu, &idle_w, ewhy, sizeof ewhy);
    else snprintf(ewhy, sizeof ewhy, "%s", energy_asked == 0 ? "off (--energy 0)" : "cpu device");
    if (energy_asked == 1 && !tel)
        fprintf(stderr, "flashwatt tune: --energy 1 but no GPU power telemetry here (%s): energy n/a\n", ewhy);
    char devname[64];
    fw_sched_device_name(dev, devname, sizeof devname);
    printf("flashwatt tune: %d bucket%s on %s (%s), budget %.0f s, energy %s%s%s; table %s (%d entr%s kept)\n", nshapes,
           nshapes == 1 ? "" : "s", devname, dev.kind == FW_DEVICE_CUDA ? "cuda" : "cpu", cli.budget_s,
           tel ? "on" : "n/a", tel ? "" : ": ", tel ? "" : ewhy, path, kept, kept == 1 ? "y" : "ies");
    if (tel) printf("idle baseline %.1f W (NVML %d), cool-down <= %.1f s, windows %.1f s\n", idle_w, gpu, cli.cooldown_s,
                    cli.window_s);
    printf("%-15s %-22s %-6s %-6s %-5s %5s %6s %6s %4s %10s %10s %8s %8s %9s\n", "backend", "config", "prec", "call",
           "dtype", "BH", "Lq", "Lk", "D", "ms", "J/call", "avg W", "peak W", "err");

    const double start = fw_now_seconds();
    int measured = 0, failed = 0;
    for (int si = 0; si < nshapes; si++) {
        const fw_shape *s = &shapes[si];
        fw_case c = fw_shape_case(s, dev, cli.seed, 0);
        fw_run r;
        char msg[512];
        if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
            fprintf(stderr, "flashwatt tune: cannot set up B=%lld H=%lld L=%lld D=%lld: %s\n", (long long)s->batch,
                    (long long)s->heads, (long long)s->seqlen_q, (long long)s->head_dim, msg);
            failed++;
            continue;
        }
        char label[256];
        fw_problem call; /* what a backend receives (device pointers on a GPU) */
        if (fw_run_problem(&r, &call, msg, sizeof msg) != FW_OK) {
            fprintf(stderr, "flashwatt tune: cannot set up %s: %s\n", fw_shape_text(s, label, sizeof label), msg);
            fw_run_free(&r);
            failed++;
            continue;
        }
        fw_tune_key key = fw_sched_key(&call);
        /* the items: (backend, precision, config); defaults first */
        typedef struct item { const fw_backend *b; fw_precision prec; fw_config cfg; } item;
        item *items = (item *)calloc(MAX_ITEMS, sizeof *items);
        int nitems = 0;
        char refused[320] = "no backend of the plan is usable on this device";
        for (int pass = 0; pass < 2 && items; pass++)
            for (int bi = 0; bi < plan.n; bi++) {
                const fw_backend *b = fw_registry_find(plan.name[bi]);
                char bw[256];
                if (!b || b->device != dev.kind || !b->available(bw, sizeof bw)) continue;
                for (int pr = 0; pr < 4; pr++) {
                    if (!want_prec[pr] || (pr != FW_PRECISION_EXACT && s->dtype != FW_F32)) continue;
                    fw_problem pp = call;
                    pp.precision = (fw_precision)pr;
                    pp.knobs = &knobs;
                    if (!b->supports(&pp, bw, sizeof bw)) {
                        if (pr == FW_PRECISION_EXACT) snprintf(refused, sizeof refused, "%s: %.280s", b->name, bw);
                        continue;
                    }
                    fw_config all[FW_MAX_CONFIGS];
                    int n = b->configs ? b->configs(&pp, all, FW_MAX_CONFIGS) : 0;
                    if (n < 1) {
                        memset(all, 0, sizeof all[0]);
                        n = 1;
                    }
                    for (int ci = pass == 0 ? 0 : 1; ci < (pass == 0 ? 1 : n) && nitems < MAX_ITEMS; ci++) {
                        items[nitems].b = b;
                        items[nitems].prec = (fw_precision)pr;
                        items[nitems].cfg = all[ci];
                        items[nitems].cfg.precision = (fw_precision)pr;
                        nitems++;
                    }
                }
            }
        if (items && nitems == 0) {
            printf("%s: nothing to measure (%s)\n", fw_shape_text(s, label, sizeof label), refused);
            failed++;
        }
        /* the float64 comparison (the error the reduced-precision budget is held to) only where it is
         * affordable: --max-ref-s and half the bucket's share, at a conservative 2 GFLOP/s */
        /* each bucket gets an equal share of what is left, so late buckets are not starved */
        const double bucket_start = fw_now_seconds();
        const double share = (cli.budget_s - (bucket_start - start)) / (double)(nshapes - si);
        if (share <= 0) {
            printf("budget of %.0f s used up: bucket %d and later not measured\n", cli.budget_s, si + 1);
            free(items);
            fw_run_free(&r);
            break;
        }
        const double ref_est_s = fw_run_flops(&r) / 2e9; /* a conservative float64 reference rate */
        const int ref_ok = cli.max_ref_s > 0 && ref_est_s <= cli.max_ref_s && ref_est_s < 0.5 * share;
        for (int it = 0; it < nitems; it++) {
            if (fw_now_seconds() - bucket_start > share) {
                printf("bucket share of the budget (%.1f s) used: %d configuration%s of this bucket not measured\n", share,
                       nitems - it, nitems - it == 1 ? "" : "s");
                break;
            }
            item *x = &items[it];
            fw_problem pp = call;
            pp.precision = x->prec;
            pp.knobs = &knobs;
            tune_arg ta;
            memset(&ta, 0, sizeof ta);
            ta.b = x->b;
            ta.p = &pp;
            ta.cfg = &x->cfg;
            ta.ex.threads = s->threads;
            if (ta.ex.threads <= 0) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                ta.ex.threads = n > 0 ? (int)n : 1;
            }
            ta.ex.stream = NULL;
            ta.ex.err = msg;
            ta.ex.err_len = sizeof msg;
            ta.ex.knobs = &knobs;
            ta.cuda_index = dev.index;
            msg[0] = 0;
            /* probe: runs at all; error against the reference */
            fw_run_poison(&r);
            double t0 = fw_now_seconds();
            fw_status st = tune_call(&ta);
            if (st == FW_OK) st = tune_sync(&ta);
            const double probe = fw_now_seconds() - t0;
            const char *cname = x->cfg.name[0] ? x->cfg.name : "default";
            if (st != FW_OK) {
                printf("%-15s %-22s %-6s skipped: %s\n", x->b->name, cname, fw_precision_name(x->prec),
                       msg[0] ? msg : fw_status_string(st));
                failed++;
                continue;
            }
            fw_tune_entry e;
            memset(&e, 0, sizeof e);
            e.key = key;
            snprintf(e.backend, sizeof e.backend, "%s", x->b->name);
            snprintf(e.config, sizeof e.config, "%s", x->cfg.name);
            e.precision = x->prec;
            e.stamp = (int64_t)time(NULL);
            if (ref_ok) {
                fw_errors er;
                if (fw_run_compare(&r, &er) == FW_OK && er.max_abs_v > 0 && isfinite(er.max_abs) && !er.unwritten) {
                    e.err_valid = 1;
                    e.err = er.max_abs / er.max_abs_v;
                }
            }
            /* time and energy */
            fw_emeas m;
            const double left = fmin(cli.budget_s - (fw_now_seconds() - start), share - (fw_now_seconds() - bucket_start));
            const double need = 3 * probe + (tel ? cli.cooldown_s + 0.3 + cli.window_s : 0.0);
            if (need > left) {
                printf("budget: %.1f s left for this bucket, a configuration needs ~%.1f s: %d configuration%s of this "
                       "bucket not measured\n",
                       left, need, nitems - it, nitems - it == 1 ? "" : "s");
                break;
            }
            if (tel) {
                /* a warm estimate of one call (the probe may include first-call set-up) sizes the
                 * batches between syncs, so the window is back to back */
                double est = probe;
                t0 = fw_now_seconds();
                for (int w = 0; w < 3 && st == FW_OK; w++) st = tune_call(&ta);
                if (st == FW_OK) st = tune_sync(&ta);
                if (st == FW_OK) est = (fw_now_seconds() - t0) / 3.0;
                if (st == FW_OK)
                    st = fw_energy_measure(tel, gpu, idle_w, cli.cooldown_s, 0.3, cli.window_s, est, tune_call, tune_sync,
                                           &ta, &m);
                else
                    fw_emeas_init(&m);
            } else {
                fw_emeas_init(&m);
                const int batch = probe > 0.02 ? 1 : (int)(0.02 / fmax(probe, 1e-6));
                for (int w = 0; w < 2 && st == FW_OK; w++) st = tune_call(&ta); /* warm-up */
                if (st == FW_OK) st = tune_sync(&ta);
                long n = 0;
                t0 = fw_now_seconds();
                const double want = dev.kind == FW_DEVICE_CUDA ? 0.3 : fmin(0.5, fmax(3 * probe, 0.05));
                do {
                    for (int i = 0; i < batch && st == FW_OK; i++) st = tune_call(&ta);
                    n += batch;
                    if (st == FW_OK) st = tune_sync(&ta);
                } while (st == FW_OK && fw_now_seconds() - t0 < want);
                m.ms_per_call = (fw_now_seconds() - t0) * 1e3 / (double)n;
            }
            if (st != FW_OK) {
                printf("%-15s %-22s %-6s failed while timing: %s\n", x->b->name, cname, fw_precision_name(x->prec),
                       msg[0] ? msg : fw_status_string(st));
                failed++;
                fw_emeas_free(&m);
                continue;
            }
            e.ms = m.ms_per_call;
            if (m.valid) {
                e.j_per_call = m.joules_per_call;
                e.avg_w = m.watts_avg;
                if (m.peak_valid) e.peak_w = m.watts_peak;
            }
            fw_emeas_free(&m);
            if (fw_tune_put(&table, &e) != FW_OK) {
                failed++;
                continue;
            }
            measured++;
            char js[32] = "n/a", aw[32] = "n/a", pw[32] = "n/a", es[32] = "n/a";
            if (e.j_per_call > 0) snprintf(js, sizeof js, "%.4g", e.j_per_call);
            if (e.avg_w > 0) snprintf(aw, sizeof aw, "%.1f", e.avg_w);
            if (e.peak_w > 0) snprintf(pw, sizeof pw, "%.1f", e.peak_w);
            if (e.err_valid) snprintf(es, sizeof es, "%.2e", e.err);
            printf("%-15s %-22s %-6s %-6s %-5s %5lld %6lld %6lld %4d %10.4f %10s %8s %8s %9s\n", e.backend, cname,
                   fw_precision_name(e.precision), fw_tune_call_name(key.call), fw_dtype_name(key.dtype), (long long)(s->batch * s->heads),
                   (long long)s->seqlen_q, (long long)s->seqlen_k, key.head_dim, e.ms, js, aw, pw, es);
            fflush(stdout);
        }
        free(items);
        fw_run_free(&r);
        /* save after every bucket: a stopped run keeps what it measured */
        mkdirs_for(path);
        if (fw_tune_save(&table, path, why, sizeof why) != FW_OK) {
            fprintf(stderr, "flashwatt tune: %s\n", why);
            fw_tune_free(&table);
            fw_energy_session_close();
            return 1;
        }
    }
    printf("%d configuration%s measured, %d failed or skipped, %.1f s; table %s now has %d entr%s\n", measured,
           measured == 1 ? "" : "s", failed, fw_now_seconds() - start, path, table.n, table.n == 1 ? "y" : "ies");
    fw_tune_free(&table);
    fw_energy_session_close();
    return measured > 0 ? 0 : 1;
}
