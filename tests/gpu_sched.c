/* GPU test of the scheduler's table path (src/sched/sched.c) on the CUDA backends, through the
 * public API. The tuning table is written by the test from the backends' own configs() (no backend
 * named here) with FAKE numbers (labelled so in the file): the point is which configuration runs,
 * not its speed.
 *   - fastest: the entry with the smallest (fake) time runs, output correct vs float64;
 *   - least energy: the entry with the smallest (fake) J/call runs;
 *   - a power cap below every entry's (fake) watts: the controller paces (waits for the previous
 *     launch's event, then sleeps) and the outputs stay correct; where NVML is absent it says the
 *     plan is static;
 *   - a stale configuration name is skipped.
 * Exit 77 where there is no CUDA device. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "flashwatt_internal.h"

static fw_case the_case(void)
{
    fw_case c = fw_case_default();
    c.batch = 2;
    c.heads = c.kv_heads = 4;
    c.seqlen_q = c.seqlen_k = 256;
    c.head_dim = 64;
    c.dtype = FW_F16;
    c.device.kind = FW_DEVICE_CUDA;
    c.device.index = 0;
    c.seed = 3;
    return c;
}

/* Runs n calls under the policy; 1 if every output is correct. Copies the last choice text. */
static int run(const fw_policy *pol, int n, char *choice, size_t len, char *backend, size_t blen)
{
    fw_context *ctx = NULL;
    fw_case c = the_case();
    fw_run r;
    char msg[256];
    int ok = fw_context_create(&ctx) == FW_OK && fw_context_set_policy(ctx, pol) == FW_OK &&
             fw_run_alloc(&r, &c, msg, sizeof msg) == FW_OK;
    if (!ok) {
        snprintf(choice, len, "setup failed");
        return 0;
    }
    for (int i = 0; i < n && ok; i++) {
        fw_errors e;
        ok = fw_run_poison(&r) == FW_OK && fw_run_forward(&r, ctx) == FW_OK;
        if (ok && (i == 0 || i == n - 1)) ok = fw_run_compare(&r, &e) == FW_OK && e.pass;
    }
    snprintf(choice, len, "%s", fw_sched_last_choice(fw_context_sched(ctx)));
    snprintf(backend, blen, "%s", fw_context_last_backend(ctx));
    if (!ok) snprintf(choice + strlen(choice), len - strlen(choice), " [%s]", fw_context_last_error(ctx));
    fw_run_free(&r);
    fw_context_destroy(ctx);
    return ok;
}

int main(void)
{
    if (fw_cuda_device_count() <= 0) {
        printf("gpu_sched: no CUDA device: skipped\n");
        return 77;
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/fw_gpu_sched_%d.txt", (int)getpid());
    setenv("FLASHWATT_TUNING", path, 1);
    /* the bucket's key and every (backend, config) that can run it, from the registry */
    fw_case c = the_case();
    fw_run r;
    char msg[256];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        printf("gpu_sched: setup failed: %s\n", msg);
        return 1;
    }
    fw_tune_key key = fw_sched_key(&r.problem);
    /* a copy: fw_run_free clears r, and the backends' supports/configs need the problem's shape
     * (their data pointers are not dereferenced) */
    const fw_problem problem = r.problem;
    fw_run_free(&r);
    fw_tuning_table t;
    fw_tune_init(&t);
    char names[64][96];
    int n = 0;
    for (int i = 0; i < fw_registry_count() && n < 40; i++) {
        const fw_backend *b = fw_registry_get(i);
        char why[256];
        if (b->device != FW_DEVICE_CUDA || !b->available(why, sizeof why) || !b->supports(&problem, why, sizeof why))
            continue;
        fw_config cf[FW_MAX_CONFIGS];
        int k = b->configs ? b->configs(&problem, cf, FW_MAX_CONFIGS) : 0;
        if (k < 1) { memset(cf, 0, sizeof cf[0]); k = 1; }
        for (int j = 0; j < k && n < 40; j++) {
            fw_tune_entry e;
            memset(&e, 0, sizeof e);
            e.key = key;
            snprintf(e.backend, sizeof e.backend, "%s", b->name);
            snprintf(e.config, sizeof e.config, "%.47s", cf[j].name);
            /* FAKE: entry n = 1 is the fastest, entry 0 the least energy; all draw 400-500 W */
            e.ms = n == 1 ? 0.1 : 0.2 + 0.01 * n;
            e.j_per_call = n == 0 ? 0.01 : 0.05 + 0.001 * n;
            e.avg_w = 400 + n;
            e.peak_w = 500;
            fw_tune_put(&t, &e);
            snprintf(names[n], sizeof names[n], "%.24s %.24s", b->name, cf[j].name[0] ? cf[j].name : "default");
            n++;
        }
    }
    if (n < 2) {
        printf("gpu_sched: fewer than 2 CUDA configurations for the bucket: skipped\n");
        return 77;
    }
    fw_tune_entry stale = t.e[0];
    snprintf(stale.config, sizeof stale.config, "no-such-config");
    stale.ms = 0.01;
    fw_tune_put(&t, &stale);
    char why[512];
    if (fw_tune_save(&t, path, why, sizeof why) != FW_OK) {
        printf("gpu_sched: cannot write %s: %s\n", path, why);
        return 1;
    }
    char choice[400], backend[64];
    fw_policy p = fw_policy_default();
    int ok = run(&p, 3, choice, sizeof choice, backend, sizeof backend);
    fwt_case(ok && strstr(choice, names[1]) != NULL, "fastest (fake) runs %s: \"%s\"", names[1], choice);
    p.objective = FW_OBJECTIVE_MIN_ENERGY;
    ok = run(&p, 3, choice, sizeof choice, backend, sizeof backend);
    fwt_case(ok && strstr(choice, names[0]) != NULL, "least energy (fake) runs %s: \"%s\"", names[0], choice);
    p = fw_policy_default();
    p.objective = FW_OBJECTIVE_POWER_CAP;
    p.power_cap_w = 100; /* below every fake entry: the plan paces from the start */
    const double t0 = fw_now_seconds();
    ok = run(&p, 50, choice, sizeof choice, backend, sizeof backend);
    const double el = fw_now_seconds() - t0;
    int paced = strstr(choice, "controller") != NULL && strstr(choice, "gap 0 us") == NULL;
    int static_plan = strstr(choice, "static (no GPU telemetry loop)") != NULL;
    fwt_case(ok && (paced || static_plan), "cap 100 W: %d calls in %.2f s, correct; \"%s\"", 50, el, choice);
    remove(path);
    fw_tune_free(&t);
    printf("%d passed, %d failed\n", fwt_passed, fwt_failed);
    return fwt_failed ? 1 : 0;
}
