/* Threads and contexts (the rule of include/flashwatt.h: a context serves one call at a time; contexts
 * of their own let threads call at once). Run in the plain and ASan builds and under ThreadSanitizer
 * (scripts/test.sh):
 *  - a context per thread: every CPU backend and "auto", dense forward and backward, ragged forward and
 *    backward and KV-cache calls at once, each result checked against the reference;
 *  - one context shared by threads: a call made while another thread's call runs on it returns
 *    FW_ERR_CONTEXT_BUSY without touching the context, and every call that runs is right; the lazy
 *    scheduler state (tuning table read on the first auto call) is never built twice (it leaked) and
 *    never raced (TSan);
 *  - process-wide state first touched from several threads at once: the SIMD level, the backend list,
 *    telemetry, the warning about an unusable tuning table. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fw_check.h"
#include "fw_harness.h"

#define N_THREADS 4

static pthread_barrier_t start_line;

typedef struct worker {
    int id;
    fw_context *shared; /* NULL: the worker makes its own */
    int runs, busy, failures;
    char first_failure[1100];
} worker;

static void fail(worker *w, const char *fmt, const char *a, const char *b)
{
    if (!w->failures++) snprintf(w->first_failure, sizeof w->first_failure, fmt, a, b);
}

/* One case through one backend on ctx, checked; a busy shared context is counted, not failed. */
static void run_case(worker *w, fw_context *ctx, const fw_case *c, const char *backend, int backward)
{
    fw_run r;
    fw_bwd g;
    char msg[512];
    if (fw_run_alloc(&r, c, msg, sizeof msg) != FW_OK) {
        fail(w, "alloc: %s%s", msg, "");
        return;
    }
    if (backward && fw_bwd_alloc(&r, &g, c->seed + 1, msg, sizeof msg) != FW_OK) {
        fail(w, "backward alloc: %s%s", msg, "");
        fw_run_free(&r);
        return;
    }
    const fw_backend *b = strcmp(backend, "auto") ? fw_registry_find(backend) : NULL;
    if (b && (fw_run_supports(&r, backend, msg, sizeof msg) != FW_OK || (backward && !b->backward))) {
        if (backward) fw_bwd_free(&r, &g);
        fw_run_free(&r);
        return;
    }
    fw_status st = w->shared ? FW_OK : fw_context_set_backend(ctx, backend);
    if (st == FW_OK) st = backward ? fw_bwd_poison(&r, &g) : fw_run_poison(&r);
    if (st == FW_OK) st = backward ? fw_bwd_run(&r, &g, ctx) : fw_run_forward(&r, ctx);
    if (st == FW_ERR_CONTEXT_BUSY && w->shared) {
        w->busy++;
    } else if (st != FW_OK) {
        fail(w, "%s: %s", backend, fw_status_string(st));
    } else {
        int pass;
        if (backward) {
            fw_bwd_errors e;
            pass = fw_bwd_compare(&r, &g, &e) == FW_OK && e.pass;
        } else {
            fw_errors e;
            pass = fw_run_compare(&r, &e) == FW_OK && e.pass;
        }
        w->runs++;
        if (!pass) fail(w, "%s: wrong result (%s)", backend, backward ? "backward" : "forward");
    }
    if (backward) fw_bwd_free(&r, &g);
    fw_run_free(&r);
}

static void *work(void *arg)
{
    worker *w = (worker *)arg;
    fw_context *ctx = w->shared;
    if (!ctx && fw_context_create(&ctx) != FW_OK) {
        fail(w, "context create%s%s", "", "");
        pthread_barrier_wait(&start_line);
        return NULL;
    }
    if (!w->shared) fw_context_set_threads(ctx, 1 + w->id % 2);
    const char *names[8];
    int n = w->shared ? 0 : fwt_cpu_backends(names, 7);
    names[n++] = "auto";
    pthread_barrier_wait(&start_line);
    for (int round = 0; round < 3; round++)
        for (int bi = 0; bi < n; bi++) {
            fw_case c = fw_case_shape(1 + (w->id & 1), 4, 2, 33 + 7 * w->id, 41 + 5 * round, 32, (fw_dtype)(round % 3),
                                      (uint64_t)(100 * w->id + round));
            c.params.causal = (w->id + round) & 1;
            run_case(w, ctx, &c, names[bi], 0);
            if (round == 0) run_case(w, ctx, &c, names[bi], 1);
            const int32_t sq[3] = {3, 0, 9 + w->id}, sk[3] = {20, 5, 9 + w->id};
            fw_case s = fw_case_serving(round == 1 ? FW_CASE_VARLEN : FW_CASE_KVCACHE, 3, sq, sk, 4, 2, 32, FW_F32,
                                        (uint64_t)(7 + w->id));
            if (round == 2) {
                s.page_size = 8;
                s.append = 1;
            }
            run_case(w, ctx, &s, names[bi], 0);
            if (round == 1) run_case(w, ctx, &s, names[bi], 1); /* the ragged backward */
        }
    if (!w->shared) fw_context_destroy(ctx);
    return NULL;
}

static void run_workers(fw_context *shared, const char *what)
{
    pthread_t th[N_THREADS];
    worker w[N_THREADS];
    int started = 0;
    pthread_barrier_init(&start_line, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].id = i;
        w[i].shared = shared;
        if (pthread_create(&th[i], NULL, work, &w[i]) == 0) started++;
    }
    if (started != N_THREADS) {
        fwt_case(0, "%s: %d of %d threads started", what, started, N_THREADS);
        exit(1); /* the barrier would wait forever */
    }
    int runs = 0, busy = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        runs += w[i].runs;
        busy += w[i].busy;
        fwt_case(w[i].failures == 0 && (w[i].runs > 0 || shared), "%s, thread %d: %d calls ran and were right, %d busy%s%s",
                 what, i, w[i].runs, w[i].busy, w[i].failures ? ": " : "", w[i].first_failure);
    }
    fwt_case(runs > 0, "%s: %d calls ran, %d found the context busy", what, runs, busy);
    pthread_barrier_destroy(&start_line);
}

/* A call made while another thread's call runs on the same context is refused at once. */
typedef struct slow_call {
    fw_context *ctx;
    fw_run *r;
    atomic_int started;
    fw_status st;
} slow_call;

static void *slow(void *arg)
{
    slow_call *s = (slow_call *)arg;
    atomic_store(&s->started, 1);
    s->st = fw_run_forward(s->r, s->ctx);
    return NULL;
}

static void busy_is_refused(void)
{
    fw_context *ctx = NULL;
    fw_case big = fw_case_shape(1, 8, 8, 1024, 1024, 64, FW_F32, 3), small = fw_case_shape(1, 1, 1, 8, 8, 16, FW_F32, 4);
    fw_run rb, rs;
    char msg[512];
    if (fw_context_create(&ctx) != FW_OK || fw_run_alloc(&rb, &big, msg, sizeof msg) != FW_OK ||
        fw_run_alloc(&rs, &small, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "busy setup: %s", msg);
        return;
    }
    fw_context_set_backend(ctx, "cpu-ref"); /* float64, one thread: long enough to be caught running */
    fw_context_set_threads(ctx, 1);
    slow_call s = {ctx, &rb, 0, FW_OK};
    pthread_t th;
    if (pthread_create(&th, NULL, slow, &s) != 0) {
        fwt_case(0, "thread");
        return;
    }
    while (!atomic_load(&s.started)) sched_yield();
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    fw_run_poison(&rs);
    const fw_status st = fw_run_forward(&rs, ctx);
    const fw_status set = fw_context_set_threads(ctx, 2);
    pthread_join(th, NULL);
    fw_errors e;
    const int right = s.st == FW_OK && fw_run_compare(&rb, &e) == FW_OK && e.pass;
    fwt_case(st == FW_ERR_CONTEXT_BUSY && set == FW_ERR_CONTEXT_BUSY && right,
             "a call and a setter while another thread's call runs: %s, %s; the running call: %s, right %d",
             fw_status_string(st), fw_status_string(set), fw_status_string(s.st), right);
    const fw_status after = fw_run_forward(&rs, ctx);
    fwt_case(after == FW_OK && fw_run_compare(&rs, &e) == FW_OK && e.pass, "the context works after: %s",
             fw_status_string(after));
    fw_run_free(&rb);
    fw_run_free(&rs);
    fw_context_destroy(ctx);
}

/* Process-wide state first reached from several threads at once. */
static void *first_touch(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&start_line);
    (void)fw_cpu_simd_level();
    fw_backend_info info;
    for (int i = 0; i < fw_backend_count(); i++) fw_backend_get_info(i, &info);
    fw_telemetry *t = NULL;
    if (fw_telemetry_open(&t) == FW_OK) fw_telemetry_close(t);
    fw_context *ctx = NULL; /* the tuning table is unusable: the first auto call warns, once per process */
    if (fw_context_create(&ctx) == FW_OK) {
        fw_case c = fw_case_shape(1, 1, 1, 16, 16, 16, FW_F32, 9);
        fw_run r;
        char msg[256];
        if (fw_run_alloc(&r, &c, msg, sizeof msg) == FW_OK) {
            (void)fw_run_forward(&r, ctx);
            fw_run_free(&r);
        }
        fw_context_destroy(ctx);
    }
    return NULL;
}

static void statics(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/fw_threads_table_%d.txt", (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("not a tuning table\n", f);
        fclose(f);
    }
    setenv("FLASHWATT_TUNING", path, 1);
    pthread_t th[N_THREADS];
    pthread_barrier_init(&start_line, NULL, N_THREADS);
    int started = 0;
    for (int i = 0; i < N_THREADS; i++) started += pthread_create(&th[i], NULL, first_touch, NULL) == 0;
    if (started != N_THREADS) exit(1);
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start_line);
    remove(path);
    fwt_case(1, "first touches from %d threads at once (ThreadSanitizer checks them)", N_THREADS);
}

/* A small valid table, so that "auto" calls build the scheduler's lazy state (slots) from it. */
static void valid_table(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("# flashwatt tuning table v2\n", f);
    for (int causal = 0; causal < 2; causal++)
        for (int bh = 4; bh <= 8; bh *= 2)
            fprintf(f, "cpu\tf32\t32\t%d\t%d\t64\t64\tcpu-flash\tbm64-bn64\t0.1\tn/a\tn/a\tn/a\t0\texact\tn/a\t2\n"
                       "cpu\tf32\t32\t%d\t%d\t64\t64\tcpu-ref\t-\t0.3\tn/a\tn/a\tn/a\t0\texact\tn/a\t2\n",
                    causal, bh, causal, bh);
    fclose(f);
}

int main(void)
{
    const double t0 = fw_now_seconds();
    const char *env = getenv("FLASHWATT_TUNING");
    char saved[1024] = "", table[64];
    if (env) snprintf(saved, sizeof saved, "%s", env);
    statics();
    snprintf(table, sizeof table, "/tmp/fw_threads_valid_%d.txt", (int)getpid());
    valid_table(table);
    setenv("FLASHWATT_TUNING", table, 1);
    run_workers(NULL, "a context per thread");
    fw_context *shared = NULL;
    if (fw_context_create(&shared) != FW_OK) return 1;
    fw_context_set_threads(shared, 1);
    run_workers(shared, "one context shared by the threads");
    fw_context_destroy(shared);
    busy_is_refused();
    remove(table);
    if (env) setenv("FLASHWATT_TUNING", saved, 1);
    return fwt_finish("test_threads", fw_now_seconds() - t0);
}
