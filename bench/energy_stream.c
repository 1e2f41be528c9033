/* energy_stream: a sustained stream of one attention problem under a power cap, for
 * `bench/device.sh energy`. Modes:
 *   sched          the product path: fw_attention_forward on an "auto" context with the policy
 *                  power-cap W (tuning table + controller + pacing in src/sched/sched.c)
 *   static-best    the fastest configuration in the tuning table whose measured average power is
 *                  within the cap (else the lowest-power one, flagged), run back to back
 *   pace-fastest   the fastest configuration alone, paced by the controller (one-point frontier:
 *                  idle gaps after waiting for the previous launch's event)
 *   static-fastest the fastest configuration back to back, no control (reference)
 * Prints and writes (--json) one object: calls, calls/s, J/call (energy counter over the stream),
 * the 1-s average powers, the largest one after the first second, and whether all of those stay
 * within cap + 5 %. Never changes clocks or power limits.
 *
 * usage: energy_stream --mode M --cap W [--seconds S] [--cooldown S (2)] [--table FILE] [--json FILE]
 *                      [--batch 16] [--heads 8] [--seqlen 1024] [--head-dim 64] [--dtype f16]
 * exit 0 ok, 2 usage, 3 no GPU telemetry / table entry, 77 no CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "flashwatt.h"
#include "fw_harness.h"
#include "flashwatt_internal.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifndef FW_HAVE_CUDA
int main(void)
{
    printf("energy_stream: this build has no CUDA backends: skipped\n");
    return 77;
}
#else

typedef struct cand {
    const fw_backend *b;
    fw_config cfg;
    const fw_tune_entry *e;
} cand;

static int resolve(const fw_tune_entry *e, const fw_problem *p, cand *c)
{
    char why[256];
    const fw_backend *b = fw_registry_find(e->backend);
    if (!b || b->device != FW_DEVICE_CUDA || !b->available(why, sizeof why)) return 0;
    fw_problem pp = *p;
    pp.precision = e->precision;
    if (!b->supports(&pp, why, sizeof why)) return 0;
    fw_config all[FW_MAX_CONFIGS];
    int n = b->configs ? b->configs(&pp, all, FW_MAX_CONFIGS) : 0;
    memset(&c->cfg, 0, sizeof c->cfg);
    int found = e->config[0] ? -1 : 0;
    for (int i = 0; i < n && found < 0; i++)
        if (!strcmp(all[i].name, e->config)) found = i;
    if (found < 0) return 0;
    if (n > 0) c->cfg = all[found];
    c->cfg.precision = e->precision;
    c->b = b;
    c->e = e;
    return 1;
}

int main(int argc, char **argv)
{
    const char *mode = "sched", *table_path = getenv("FLASHWATT_TUNING"), *json = NULL;
    double cap = 0, seconds = 20, cooldown = 2;
    long B = 16, H = 8, L = 1024, D = 64;
    fw_dtype dtype = FW_F16;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "--cap")) cap = atof(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--cooldown")) cooldown = atof(v);
        else if (!strcmp(a, "--table")) table_path = v;
        else if (!strcmp(a, "--json")) json = v;
        else if (!strcmp(a, "--batch")) B = atol(v);
        else if (!strcmp(a, "--heads")) H = atol(v);
        else if (!strcmp(a, "--seqlen")) L = atol(v);
        else if (!strcmp(a, "--head-dim")) D = atol(v);
        else if (!strcmp(a, "--dtype")) dtype = !strcmp(v, "f32") ? FW_F32 : !strcmp(v, "bf16") ? FW_BF16 : FW_F16;
        else {
            fprintf(stderr, "energy_stream: unknown flag %s\n", a);
            return 2;
        }
    }
    if (!(cap > 0) || seconds < 2 || B < 1 || H < 1 || L < 1 || D < 1) {
        fprintf(stderr, "energy_stream: need --cap W > 0 and --seconds >= 2\n");
        return 2;
    }
    if (table_path) setenv("FLASHWATT_TUNING", table_path, 1);
    if (fw_cuda_device_count() <= 0) {
        printf("energy_stream: no CUDA device: skipped\n");
        return 77;
    }
    fw_telemetry *tel = NULL;
    int gpu = -1;
    char bus[64];
    if (fw_telemetry_open(&tel) == FW_OK && fw_telemetry_gpu_count(tel) > 0) {
        if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, 0) == cudaSuccess) gpu = fw_telemetry_gpu_for_pci_bus_id(tel, bus);
        if (gpu < 0) gpu = 0;
    }
    if (gpu < 0) {
        printf("energy_stream: no GPU telemetry (%s): n/a\n", tel ? fw_telemetry_describe(tel) : "cannot open");
        return 3;
    }
    fw_telemetry_start_sampler(tel, 20, 16384);
    fw_case c = fw_case_default();
    c.batch = B; c.heads = c.kv_heads = H; c.seqlen_q = c.seqlen_k = L; c.head_dim = D;
    c.dtype = dtype; c.device.kind = FW_DEVICE_CUDA; c.device.index = 0; c.seed = 11;
    fw_run r;
    char msg[512];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fprintf(stderr, "energy_stream: %s\n", msg);
        return 1;
    }
    /* the bucket's configurations from the table (exact precision only) */
    fw_tuning_table t;
    fw_tune_init(&t);
    char why[1400] = "", path[1024];
    fw_knobs knobs; /* the path the API's contexts read */
    fw_knobs_read(&knobs);
    fw_sched_table_path(&knobs, path, sizeof path);
    fw_tune_load(&t, path, why, sizeof why);
    fw_tune_key key = fw_sched_key(&r.problem);
    cand cs[FW_CTRL_MAX_POINTS];
    int n = 0;
    for (int i = 0; i < t.n && n < FW_CTRL_MAX_POINTS; i++)
        if (fw_tune_key_equal(&t.e[i].key, &key) && t.e[i].precision == FW_PRECISION_EXACT && resolve(&t.e[i], &r.problem, &cs[n]))
            n++;
    int fastest = -1, best = -1, lowest = -1;
    for (int i = 0; i < n; i++) {
        if (fastest < 0 || cs[i].e->ms < cs[fastest].e->ms) fastest = i;
        if (cs[i].e->avg_w > 0 && (lowest < 0 || cs[i].e->avg_w < cs[lowest].e->avg_w)) lowest = i;
        if (cs[i].e->avg_w > 0 && cs[i].e->avg_w <= cap && (best < 0 || cs[i].e->ms < cs[best].e->ms)) best = i;
    }
    const int use_api = !strcmp(mode, "sched");
    int pick = -1, meets = 1;
    char note[256] = "";
    if (!strcmp(mode, "static-best")) {
        pick = best;
        if (pick < 0) {
            pick = lowest;
            meets = 0;
            snprintf(note, sizeof note, "no configuration's measured power is within the cap: the lowest-power one");
        }
    } else if (!strcmp(mode, "pace-fastest") || !strcmp(mode, "static-fastest")) {
        pick = fastest;
    } else if (!use_api) {
        fprintf(stderr, "energy_stream: --mode is sched, static-best, pace-fastest or static-fastest\n");
        return 2;
    }
    if (!use_api && pick < 0) {
        printf("energy_stream: no usable tuning table entry with power for this bucket in %s (%s): run flashwatt tune "
               "first\n", path, why);
        return 3;
    }
    fw_controller ctrl;
    double idle_w = 0;
    int paced = !strcmp(mode, "pace-fastest");
    if (paced) {
        fw_frontier_point pt;
        memset(&pt, 0, sizeof pt);
        snprintf(pt.name, sizeof pt.name, "%.30s %.30s", cs[pick].e->backend, cs[pick].e->config);
        pt.ms = cs[pick].e->ms;
        pt.j_per_call = cs[pick].e->j_per_call;
        pt.avg_w = cs[pick].e->avg_w;
        fw_policy pol = fw_policy_default();
        pol.objective = FW_OBJECTIVE_POWER_CAP;
        pol.power_cap_w = cap;
        fw_ctrl_params prm = fw_ctrl_params_default();
        double idle = 0;
        if (fw_telemetry_mean_power(tel, gpu, 0.5, &idle) == FW_OK) prm.idle_w = idle;
        idle_w = idle;
        if (fw_ctrl_init(&ctrl, &pt, 1, &pol, &prm, why, sizeof why) != FW_OK) {
            fprintf(stderr, "energy_stream: controller: %s\n", why);
            return 1;
        }
    }
    fw_context *ctx = NULL;
    fw_context_create(&ctx);
    if (use_api) {
        fw_policy pol = fw_policy_default();
        pol.objective = FW_OBJECTIVE_POWER_CAP;
        pol.power_cap_w = cap;
        fw_context_set_policy(ctx, &pol);
    }
    fw_exec ex;
    memset(&ex, 0, sizeof ex);
    ex.threads = 1;
    ex.err = msg;
    ex.err_len = sizeof msg;
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return 1;
    int ev_recorded = 0;
    /* cool-down (bounded) */
    double last_w = 0;
    if (!(idle_w > 0)) fw_telemetry_mean_power(tel, gpu, 0.5, &idle_w);
    if (cooldown > 0) fw_telemetry_wait_settled(tel, gpu, idle_w, fmax(10, 0.1 * idle_w), 0.5, cooldown, &last_w);

    const double est_ms = pick >= 0 ? cs[pick].e->ms : (n ? cs[fastest].e->ms : 1.0);
    long batch = (long)(20.0 / fmax(est_ms, 1e-3));
    if (batch < 1) batch = 1;
    if (batch > 2000) batch = 2000;
    double p1[1024];
    int np1 = 0;
    fw_gpu_reading rd;
    fw_energy_window w;
    cudaDeviceSynchronize();
    fw_energy_begin(tel, gpu, &w);
    const double t0 = fw_now_seconds();
    double sec_t = t0;
    uint64_t sec_mj = w.begin_energy_mj;
    int have_counter = w.begin_energy_valid;
    long calls = 0;
    fw_status st = FW_OK;
    while (st == FW_OK && fw_now_seconds() - t0 < seconds) {
        for (long i = 0; i < batch && st == FW_OK; i++) {
            if (use_api) {
                st = fw_attention_forward(ctx, &r.q, &r.k, &r.v, &r.o, NULL, &r.c.params);
            } else {
                if (paced) {
                    fw_ctrl_tick(&ctrl, tel, gpu);
                    if (fw_ctrl_gap_us(&ctrl) > 0) {
                        if (ev_recorded) cudaEventSynchronize(ev); /* the gap must be device idle */
                        fw_ctrl_sleep_gap(&ctrl);
                    }
                }
                fw_problem pp = r.problem;
                pp.precision = cs[pick].cfg.precision;
                st = cs[pick].b->forward(&pp, &cs[pick].cfg, &ex);
                if (paced) ev_recorded = cudaEventRecord(ev, 0) == cudaSuccess;
            }
            calls++;
        }
        if (cudaDeviceSynchronize() != cudaSuccess) st = FW_ERR_DEVICE;
        const double now = fw_now_seconds();
        if (now - sec_t >= 1.0 && np1 < 1024) { /* the 1-s average power */
            double pw = NAN;
            if (have_counter && fw_telemetry_read(tel, gpu, &rd) == FW_OK && (rd.valid & FW_TEL_ENERGY)) {
                pw = (double)(rd.energy_mj - sec_mj) * 1e-3 / (now - sec_t);
                sec_mj = rd.energy_mj;
            } else {
                fw_gpu_reading s[256];
                const double tn = fw_telemetry_now(tel);
                int k = fw_telemetry_samples(tel, gpu, tn - (now - sec_t), s, 256), m = 0;
                double sum = 0;
                for (int j = 0; j < k; j++)
                    if (s[j].valid & FW_TEL_POWER_INSTANT) { sum += s[j].power_instant_w; m++; }
                if (m) pw = sum / m;
            }
            p1[np1++] = pw;
            sec_t = now;
        }
    }
    fw_energy_end(&w);
    if (st != FW_OK) {
        fprintf(stderr, "energy_stream: call failed: %s %s\n", fw_status_string(st), use_api ? fw_context_last_error(ctx) : msg);
        return 1;
    }
    double max_after = 0;
    int within = 1;
    for (int i = 1; i < np1; i++) { /* after the first second */
        if (isfinite(p1[i]) && p1[i] > max_after) max_after = p1[i];
        if (isfinite(p1[i]) && p1[i] > 1.05 * cap) within = 0;
    }
    char cfgname[200];
    if (use_api) snprintf(cfgname, sizeof cfgname, "%s", fw_sched_last_choice(fw_context_sched(ctx)));
    else snprintf(cfgname, sizeof cfgname, "%s %s", cs[pick].e->backend, cs[pick].e->config[0] ? cs[pick].e->config : "default");
    for (char *q = cfgname; *q; q++)
        if (*q == '"' || *q == '\\') *q = '\'';
    const double jpc = w.valid ? w.joules / (double)calls : NAN;
    printf("stream %-14s cap %4.0f W: %-50.50s %7.1f calls/s  %s J/call  avg %.0f W  max 1-s avg after 1 s %.0f W  %s%s%s\n",
           mode, cap, cfgname, calls / w.seconds, w.valid ? "" : "n/a", w.avg_w, max_after,
           within ? "within cap+5%" : "OVER cap+5%", note[0] ? "; " : "", note);
    if (w.valid) printf("    J/call %.5f\n", jpc);
    if (paced) printf("    controller: gap %.0f us, %ld pace changes (%s)\n", fw_ctrl_gap_us(&ctrl), ctrl.pace_changes, ctrl.reason);
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"kind\": \"stream\", \"mode\": \"%s\", \"cap_w\": %.1f, \"shape\": \"B=%ld H=%ld L=%ld D=%ld %s\", "
                       "\"config\": \"%s\", \"seconds\": %.3f, \"calls\": %ld, \"calls_per_s\": %.3f, ",
                    mode, cap, B, H, L, D, fw_dtype_name(dtype), cfgname, w.seconds, calls, calls / w.seconds);
            if (w.valid) fprintf(f, "\"joules\": %.3f, \"j_per_call\": %.6g, \"avg_w\": %.2f, ", w.joules, jpc, w.avg_w);
            else fprintf(f, "\"joules\": null, \"j_per_call\": null, \"avg_w\": null, ");
            fprintf(f, "\"energy_source\": \"%s\", \"idle_w\": %.1f, \"static_meets_cap\": %s, \"max_1s_w_after_first\": %.2f, "
                       "\"within_cap_5pct\": %s, \"power_1s\": [",
                    w.source ? w.source : "n/a", idle_w, meets ? "true" : "false", max_after, within ? "true" : "false");
            for (int i = 0; i < np1; i++) {
                if (isfinite(p1[i])) fprintf(f, "%s%.2f", i ? ", " : "", p1[i]);
                else fprintf(f, "%snull", i ? ", " : "");
            }
            fprintf(f, "], \"note\": \"%s\"}\n", note);
            fclose(f);
        }
    }
    cudaEventDestroy(ev);
    fw_context_destroy(ctx);
    fw_run_free(&r);
    fw_tune_free(&t);
    fw_telemetry_stop_sampler(tel);
    fw_telemetry_close(tel);
    return 0;
}
#endif
