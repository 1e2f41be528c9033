/* Fault injection (src/core/alloc.h): every call of every backend of a device, run once to count its
 * allocations, then once per allocation with that one failing. Each failing call must return
 * FW_ERR_OUT_OF_MEMORY with a message, return at all (a watchdog turns a hang into a failure), write
 * nothing (outputs and the KV cache byte for byte as before) and leave the context working: the next
 * call succeeds and matches the reference. Leaks show in the ASan build (LeakSanitizer at exit).
 *
 *   test_faults                  the CPU backends (ctest, label cpu)
 *   test_faults --device cuda    the CUDA backends: host allocations, device scratch (the pool and the
 *                                per-stream cache) and failed launches (FW_ERR_DEVICE, then a working
 *                                context and no workspace left in use); exit 77 without a GPU
 *   --quick                      fewer calls (one thread count, no tuning-table sweep) */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "fw_harness_impl.h"

#define WATCHDOG_S 120

static const char *watch_what = "";

static void on_alarm(int sig)
{
    (void)sig;
    static const char head[] = "FAIL hang: no return within the watchdog's time: ";
    ssize_t w = write(2, head, sizeof head - 1);
    w += write(2, watch_what, strlen(watch_what));
    w += write(2, "\n", 1);
    (void)w;
    _exit(3);
}

static fw_device dev;
static int quick;

typedef enum call_kind { CALL_FORWARD, CALL_BACKWARD } call_kind;

/* One call under test: its case, backend, threads and the buffers it may write. */
typedef struct target {
    const char *label;
    fw_run r;
    fw_bwd g;
    call_kind kind;
    int have_bwd;
} target;

typedef struct region {
    void *ptr;
    size_t bytes;
    unsigned char *before;
} region;

/* The buffers a call may write: o and lse (forward; the cache too with append), dq, dk, dv (backward). */
static int regions_of(target *t, region *out)
{
    fw_run *r = &t->r;
    const size_t es = fw_dtype_size(r->c.dtype);
    int n = 0;
    if (t->kind == CALL_BACKWARD) {
        out[n++] = (region){t->g.dq.data, r->q_elems * es, NULL};
        out[n++] = (region){t->g.dk.data, r->kv_elems * es, NULL};
        out[n++] = (region){t->g.dv.data, r->kv_elems * es, NULL};
        return n;
    }
    out[n++] = (region){r->o.data, r->o_elems * es, NULL};
    const size_t lse_n = r->c.kind == FW_CASE_DENSE ? (size_t)(r->c.batch * r->c.heads * r->c.seqlen_q) : r->lse_elems;
    if (r->lse) out[n++] = (region){r->lse, lse_n * sizeof(float), NULL};
    if (r->c.kind == FW_CASE_KVCACHE && r->c.append) {
        out[n++] = (region){r->k.data, r->kv_elems * es, NULL};
        out[n++] = (region){r->v.data, r->kv_elems * es, NULL};
    }
    return n;
}

static int snapshot(target *t, region *rg, int n)
{
    for (int i = 0; i < n; i++) {
        rg[i].before = (unsigned char *)malloc(rg[i].bytes ? rg[i].bytes : 1);
        if (!rg[i].before || fwh_copy(&t->r, rg[i].before, rg[i].ptr, rg[i].bytes, 0) != FW_OK) return 0;
    }
    return 1;
}

/* Bytes of the regions that differ from their snapshot. */
static long changed(target *t, region *rg, int n)
{
    long diff = 0;
    for (int i = 0; i < n; i++) {
        unsigned char *now = (unsigned char *)malloc(rg[i].bytes ? rg[i].bytes : 1);
        if (!now || fwh_copy(&t->r, now, rg[i].ptr, rg[i].bytes, 0) != FW_OK) {
            free(now);
            return -1;
        }
        for (size_t b = 0; b < rg[i].bytes; b++) diff += now[b] != rg[i].before[b];
        free(now);
        free(rg[i].before);
        rg[i].before = NULL;
    }
    return diff;
}

static fw_status poison(target *t)
{
    return t->kind == CALL_BACKWARD ? fw_bwd_poison(&t->r, &t->g) : fw_run_poison(&t->r);
}

static fw_status call(target *t, fw_context *ctx)
{
    return t->kind == CALL_BACKWARD ? fw_bwd_run(&t->r, &t->g, ctx) : fw_run_forward(&t->r, ctx);
}

/* The call's result against the reference. */
static int correct(target *t, char *why, size_t len)
{
    if (t->kind == CALL_BACKWARD) {
        fw_bwd_errors e;
        if (fw_bwd_compare(&t->r, &t->g, &e) != FW_OK || !e.pass) {
            snprintf(why, len, "gradients differ from the reference (dq %.3g dk %.3g dv %.3g)", e.g[0].max_abs,
                     e.g[1].max_abs, e.g[2].max_abs);
            return 0;
        }
        return 1;
    }
    fw_errors e;
    if (fw_run_compare(&t->r, &e) != FW_OK || !e.pass) {
        snprintf(why, len, "output differs from the reference (max_abs %.3g tol %.3g unwritten %ld cache %ld)", e.max_abs,
                 e.tol, e.unwritten, e.cache_mismatch);
        return 0;
    }
    return 1;
}

/* The status a fault at `site` must produce. */
static fw_status expected(fw_fault_site site) { return site == FW_FAULT_LAUNCH ? FW_ERR_DEVICE : FW_ERR_OUT_OF_MEMORY; }

static size_t workspace_in_use(void)
{
#ifdef FW_HAVE_CUDA
    if (dev.kind == FW_DEVICE_CUDA) return fw_cuda_workspace_in_use(); /* the caller synchronised */
#endif
    return 0;
}

/* The sweep of one call at one site: count the events, then fail each in turn. ctx_per_run: a fresh
 * context for every run (the first call of a context also loads its tuning table). */
static void sweep(target *t, const char *backend, int threads, fw_fault_site site, int ctx_per_run)
{
    static const char *site_name[] = {"host allocation", "device allocation", "launch"};
    char label[600];
    snprintf(label, sizeof label, "%s t%d %s [%s]", backend, threads, site_name[site], t->label);
    watch_what = label;
    alarm(WATCHDOG_S);
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK || fw_context_set_backend(ctx, backend) != FW_OK ||
        fw_context_set_threads(ctx, threads) != FW_OK) {
        fwt_case(0, "%s: context setup: %s", label, fw_context_last_error(ctx));
        fw_context_destroy(ctx);
        return;
    }
    char why[512] = "";
    fw_status st = poison(t);
    fw_fault_arm(site, 0);
    if (st == FW_OK) st = call(t, ctx);
    const int64_t events = fw_fault_count(site);
    fw_fault_arm(site, -1);
    if (st != FW_OK || !correct(t, why, sizeof why)) {
        fwt_case(0, "%s: the unfaulted call: %s %s %s", label, fw_status_string(st), fw_context_last_error(ctx), why);
        fw_context_destroy(ctx);
        return;
    }
    if (events == 0 && site != FW_FAULT_HOST) { /* e.g. a call that takes the context's workspace */
        fw_context_destroy(ctx);
        return;
    }
    const size_t ws0 = workspace_in_use();
    long bad_status = 0, wrote = 0, broken = 0, silent = 0;
    char first[700] = "";
    for (int64_t n = 1; n <= events; n++) {
        if (ctx_per_run) {
            fw_context_destroy(ctx);
            ctx = NULL;
            if (fw_context_create(&ctx) != FW_OK || fw_context_set_backend(ctx, backend) != FW_OK ||
                fw_context_set_threads(ctx, threads) != FW_OK) {
                fwt_case(0, "%s: context setup", label);
                break;
            }
        }
        region rg[4];
        const int nr = regions_of(t, rg);
        if (poison(t) != FW_OK || !snapshot(t, rg, nr)) {
            fwt_case(0, "%s: poison/snapshot", label);
            break;
        }
        fw_fault_arm(site, n);
        st = call(t, ctx);
        fw_fault_arm(site, -1);
        if (dev.kind == FW_DEVICE_CUDA) (void)fw_run_sync(&t->r);
        const long diff = changed(t, rg, nr);
        const char *msg = fw_context_last_error(ctx);
        if (st != expected(site) || !msg[0]) {
            if (!bad_status++)
                snprintf(first, sizeof first, "event %lld of %lld: %s '%s' (want %s)", (long long)n, (long long)events,
                         fw_status_string(st), msg, fw_status_string(expected(site)));
        } else if (site != FW_FAULT_LAUNCH && diff != 0) { /* a launch that "failed" after it ran may have written */
            if (!wrote++)
                snprintf(first, sizeof first, "event %lld of %lld: %ld bytes of the outputs written by a failed call",
                         (long long)n, (long long)events, diff);
        }
        if (workspace_in_use() != ws0 && !broken++)
            snprintf(first, sizeof first, "event %lld: %zu bytes of device workspace still in use (was %zu)", (long long)n,
                     workspace_in_use(), ws0);
        /* the context goes on working */
        if (poison(t) != FW_OK || (st = call(t, ctx)) != FW_OK || !correct(t, why, sizeof why)) {
            if (!broken++)
                snprintf(first, sizeof first, "after event %lld: %s %s %s", (long long)n, fw_status_string(st),
                         fw_context_last_error(ctx), why);
        }
        if (fw_fault_count(site) != 0) silent++; /* disarmed sites count nothing */
    }
    fwt_case(bad_status + wrote + broken + silent == 0,
             "%s: %lld events, each failed in turn: %ld wrong status, %ld wrote, %ld left the context broken%s%s", label,
             (long long)events, bad_status, wrote, broken, first[0] ? ": " : "", first);
    fw_context_destroy(ctx);
    alarm(0);
}

static int supported(const target *t, const char *backend)
{
    char why[512];
    if (t->kind == CALL_BACKWARD) return fw_bwd_supports(&t->r, &t->g, backend, why, sizeof why) == FW_OK;
    return fw_run_supports(&t->r, backend, why, sizeof why) == FW_OK;
}

static int make_target(target *t, const char *label, fw_case c, call_kind kind)
{
    memset(t, 0, sizeof *t);
    t->label = label;
    t->kind = kind;
    c.device = dev;
    char msg[512];
    if (fw_run_alloc(&t->r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "%s: setup: %s", label, msg);
        return 0;
    }
    if (kind == CALL_BACKWARD) {
        if (fw_bwd_alloc(&t->r, &t->g, c.seed + 5, msg, sizeof msg) != FW_OK) {
            fwt_case(0, "%s: backward setup: %s", label, msg);
            fw_run_free(&t->r);
            return 0;
        }
        t->have_bwd = 1;
    }
    return 1;
}

static void free_target(target *t)
{
    if (t->have_bwd) fw_bwd_free(&t->r, &t->g);
    fw_run_free(&t->r);
}

/* Every usable backend of the device that runs the target (and has a backward, for one). */
static void sweep_backends(target *t, const fw_fault_site *sites, int nsites)
{
    const int thread_counts[2] = {1, 2};
    for (int i = 0; i < fw_registry_count(); i++) {
        const fw_backend *b = fw_registry_get(i);
        char why[256];
        if (b->device != dev.kind || !b->available(why, sizeof why) || !supported(t, b->name)) continue;
        if (t->kind == CALL_BACKWARD && !b->backward) continue;
        for (int ti = 0; ti < (dev.kind == FW_DEVICE_CPU && !quick ? 2 : 1); ti++)
            for (int s = 0; s < nsites; s++) sweep(t, b->name, dev.kind == FW_DEVICE_CPU ? thread_counts[ti] : 1, sites[s], 0);
    }
}

static fw_case dense(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, fw_dtype dt, int causal)
{
    fw_case c = fw_case_shape(B, H, Hkv, Lq, Lk, D, dt, 11);
    c.params.causal = causal;
    return c;
}

static void calls(void)
{
    const fw_fault_site cpu_sites[] = {FW_FAULT_HOST};
    const fw_fault_site gpu_sites[] = {FW_FAULT_HOST, FW_FAULT_DEVICE, FW_FAULT_LAUNCH};
    const fw_fault_site *sites = dev.kind == FW_DEVICE_CPU ? cpu_sites : gpu_sites;
    const int nsites = dev.kind == FW_DEVICE_CPU ? 1 : 3;
    const fw_dtype low = dev.kind == FW_DEVICE_CPU ? FW_F32 : FW_F16; /* the 16-bit kernels on a GPU */
    target t;
    if (make_target(&t, "dense f32 causal GQA", dense(2, 4, 2, 70, 90, 40, FW_F32, 1), CALL_FORWARD)) {
        sweep_backends(&t, sites, nsites);
        free_target(&t);
    }
    if (make_target(&t, "dense 16-bit decode (split-KV)", dense(1, 4, 1, 1, 700, 64, low == FW_F32 ? FW_BF16 : low, 0),
                    CALL_FORWARD)) {
        sweep_backends(&t, sites, nsites);
        free_target(&t);
    }
    if (make_target(&t, "backward f32 causal GQA", dense(1, 4, 2, 50, 70, 32, FW_F32, 1), CALL_BACKWARD)) {
        sweep_backends(&t, sites, nsites);
        free_target(&t);
    }
    if (!quick && low != FW_F32 &&
        make_target(&t, "backward 16-bit", dense(1, 2, 1, 128, 128, 64, low, 1), CALL_BACKWARD)) {
        sweep_backends(&t, sites, nsites);
        free_target(&t);
    }
    /* cuda-flash stages head dims that are not multiples of 8 (common/stage.h): its workspace and copies too */
    if (low != FW_F32 && make_target(&t, "dense 16-bit head_dim 59 (staged)", dense(1, 4, 2, 70, 90, 59, low, 1),
                                     CALL_FORWARD)) {
        sweep_backends(&t, sites, nsites);
        free_target(&t);
    }
    if (low != FW_F32 && make_target(&t, "backward 16-bit head_dim 59 (staged)", dense(1, 2, 1, 70, 90, 59, low, 0),
                                     CALL_BACKWARD)) {
        sweep_backends(&t, sites, nsites);
        free_target(&t);
    }
    const int32_t sq[3] = {5, 0, 33}, sk[3] = {40, 7, 33};
    for (int dt = 0; dt < 2; dt++) {
        const fw_dtype d = dt ? low : FW_F32;
        if (dt && d == FW_F32) break;
        fw_case c = fw_case_serving(FW_CASE_VARLEN, 3, sq, sk, 4, 2, 64, d, 21);
        c.params.causal = 1;
        if (make_target(&t, d == FW_F32 ? "varlen f32" : "varlen 16-bit", c, CALL_FORWARD)) {
            sweep_backends(&t, sites, nsites);
            free_target(&t);
        }
        if (make_target(&t, d == FW_F32 ? "varlen backward f32" : "varlen backward 16-bit", c, CALL_BACKWARD)) {
            sweep_backends(&t, sites, nsites);
            free_target(&t);
        }
        const int32_t nq[3] = {1, 3, 2}, cached[3] = {30, 0, 17};
        c = fw_case_serving(FW_CASE_KVCACHE, 3, nq, cached, 4, 2, 64, d, 22);
        c.page_size = 16;
        c.append = 1;
        if (make_target(&t, d == FW_F32 ? "kvcache paged append f32" : "kvcache paged append 16-bit", c, CALL_FORWARD)) {
            sweep_backends(&t, sites, nsites);
            free_target(&t);
        }
    }
}

/* A context's first "auto" call reads its tuning table: fail each allocation of that too. */
static void auto_with_table(void)
{
    char path[] = "/tmp/fw_faults_table_XXXXXX";
    const int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fwt_case(0, "tuning table: temporary file");
        return;
    }
    fprintf(f, "# flashwatt tuning table v2\n");
    for (int i = 0; i < 70; i++) /* more entries than the table's first capacity: it grows */
        fprintf(f, "cpu\tf32\t40\t1\t%d\t128\t128\tcpu-flash\tbm%d-bn64\t0.5\tn/a\tn/a\tn/a\t0\texact\tn/a\t1\n", 1 << (i % 20),
                i % 2 ? 64 : 128);
    fprintf(f, "cpu\tf32\t40\t1\t8\t128\t128\tcpu-flash\tbm64-bn64\t0.1\tn/a\tn/a\tn/a\t0\texact\tn/a\t1\n");
    fclose(f);
    const char *old = getenv("FLASHWATT_TUNING");
    char saved[1024] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    setenv("FLASHWATT_TUNING", path, 1);
    target t;
    if (make_target(&t, "auto, tuning table read on the first call", dense(2, 4, 2, 70, 90, 40, FW_F32, 1), CALL_FORWARD)) {
        sweep(&t, "auto", 2, FW_FAULT_HOST, 1);
        free_target(&t);
    }
    if (old) setenv("FLASHWATT_TUNING", saved, 1);
    else unsetenv("FLASHWATT_TUNING");
    remove(path);
}

/* fw_context_create and fw_telemetry_open: each allocation failing in turn gives out-of-memory and
 * nothing to free (LeakSanitizer would see it). */
static void creation(void)
{
    fw_context *ctx = NULL;
    fw_fault_arm(FW_FAULT_HOST, 0);
    fw_status st = fw_context_create(&ctx);
    int64_t n = fw_fault_count(FW_FAULT_HOST);
    fw_fault_arm(FW_FAULT_HOST, -1);
    fw_context_destroy(ctx);
    long bad = st != FW_OK;
    for (int64_t i = 1; i <= n; i++) {
        ctx = NULL;
        fw_fault_arm(FW_FAULT_HOST, i);
        st = fw_context_create(&ctx);
        fw_fault_arm(FW_FAULT_HOST, -1);
        bad += st != FW_ERR_OUT_OF_MEMORY || ctx != NULL;
        if (st == FW_OK) fw_context_destroy(ctx);
    }
    fwt_case(bad == 0, "fw_context_create: %lld allocations, each failed in turn: %ld not out-of-memory", (long long)n, bad);

    fw_telemetry *tel = NULL;
    fw_fault_arm(FW_FAULT_HOST, 0);
    st = fw_telemetry_open(&tel);
    n = fw_fault_count(FW_FAULT_HOST);
    fw_fault_arm(FW_FAULT_HOST, -1);
    fw_telemetry_close(tel);
    bad = st != FW_OK;
    for (int64_t i = 1; i <= n; i++) {
        tel = NULL;
        fw_fault_arm(FW_FAULT_HOST, i);
        st = fw_telemetry_open(&tel);
        fw_fault_arm(FW_FAULT_HOST, -1);
        bad += st != FW_ERR_OUT_OF_MEMORY || tel != NULL;
        if (st == FW_OK) fw_telemetry_close(tel);
    }
    fwt_case(bad == 0, "fw_telemetry_open: %lld allocations, each failed in turn: %ld not out-of-memory", (long long)n, bad);
}

int main(int argc, char **argv)
{
    const double t0 = fw_now_seconds();
    dev.kind = FW_DEVICE_CPU;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (fw_device_parse(argv[++i], &dev)) {
                fprintf(stderr, "test_faults: --device cpu|cuda[:N]\n");
                return 2;
            }
        } else {
            printf("usage: test_faults [--device cpu|cuda[:N]] [--quick]\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (dev.kind == FW_DEVICE_CUDA && fw_cuda_device_count() <= dev.index) {
        printf("SKIP no CUDA device %d here\n", dev.index);
        return 77;
    }
    signal(SIGALRM, on_alarm);
    if (dev.kind == FW_DEVICE_CPU) creation();
    calls();
    if (dev.kind == FW_DEVICE_CPU && !quick) auto_with_table();
    return fwt_finish("test_faults", fw_now_seconds() - t0);
}
