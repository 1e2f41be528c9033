/* The scheduler's table path (src/sched/sched.c) on the CPU backends, with a hand-written tuning
 * table. THE NUMBERS IN THE FIXTURE ARE FAKE: they are made up to give each policy a different
 * answer, not measurements of anything.
 *   - fastest / least energy / fastest under a power cap pick the right entry;
 *   - a cap under every entry, where the lower-power entry is slower and costs far more J/call (the
 *     H200's cuda-naive vs cuda-flash): the energy-aware ladder keeps the fast entry (paced where
 *     the loop runs), never the slow one;
 *   - the reduced-precision error budget: a reduced mode only when the policy allows it, only with a
 *     recorded error within the budget (never one whose error was not measured);
 *   - a stale entry (a configuration the backend no longer has) is skipped;
 *   - no table, or an entry-less bucket: registry order (today's behaviour);
 *   - a missing or malformed file: a clear message, built-in defaults, no crash;
 *   - serving calls have buckets of their own kind (varlen, cache, paged): a paged decode bucket's
 *     entry is chosen for that call only, never for a contiguous cache or a dense call of the same
 *     sizes; the kind survives the file (v3) and v2 files read as dense;
 *   - the outputs of the picked configurations are still correct (float64 reference);
 *   - tools/energy.c's energy window on a fake GPU drawing a constant (fake) 300 W: J/call, average,
 *     peak, standard deviation, power trace; and n/a (NaN, never 0) without telemetry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>
#include <math.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "flashwatt_internal.h"
/* the energy windows of `flashwatt bench/tune` (tools/energy.c), tested here on a fake GPU */
#include "../tools/energy.c"

#define B 1
#define H 2
#define L 64
#define D 16

/* device dtype D causal bh lq lk backend config ms J/call avgW peakW stamp precision err group */
static const char *fixture =
    "# flashwatt tuning table v2\n"
    "# TEST FIXTURE: every number below is FAKE, made up for tests/test_sched.c\n"
    "cpu\tf32\t16\t0\t2\t64\t64\tcpu-ref\t-\t1.0\t0.30\t300\t320\t0\texact\t0\t1\n"
    "cpu\tf32\t16\t0\t2\t64\t64\tcpu-naive\t-\t2.0\t0.20\t100\t110\t0\texact\t1e-7\t1\n"
    "cpu\tf32\t16\t0\t2\t64\t64\tcpu-flash\tbm64-bn64\t1.5\t0.30\t200\t210\t0\texact\t2e-7\t1\n"
    "cpu\tf32\t16\t0\t2\t64\t64\tcpu-flash\tbm32-bn32\t0.5\t0.05\t100\t105\t0\ttf32\t1e-3\t1\n"
    "cpu\tf32\t16\t0\t2\t64\t64\tcpu-flash\tbm128-bn64\t0.4\t0.04\t100\t105\t0\tbf16\t5e-2\t1\n"
    "cpu\tf32\t16\t0\t2\t64\t64\tcpu-flash\tbm256-bn64\t0.3\t0.03\t100\t105\t0\t3xtf32\tn/a\t1\n"
    "cpu\tf32\t16\t0\t2\t64\t64\tcpu-naive\tno-such-config\t0.1\t0.01\t100\t100\t0\texact\t0\t1\n"
    /* same bucket in f16: only exact entries are meaningful there */
    "cpu\tf16\t16\t0\t2\t64\t64\tcpu-naive\t-\t0.9\t0.10\t100\t100\t0\texact\t1e-4\t1\n"
    "cpu\tf16\t16\t0\t2\t64\t64\tcpu-ref\t-\t1.9\t0.20\t100\t100\t0\texact\t1e-4\t1\n"
    /* L=32, shaped like the H200: the slower entry draws 8 % less but costs 8x the J/call */
    "cpu\tf32\t16\t0\t2\t32\t32\tcpu-naive\t-\t0.2\t0.12\t600\t610\t0\texact\t1e-7\t1\n"
    "cpu\tf32\t16\t0\t2\t32\t32\tcpu-ref\t-\t1.8\t0.99\t550\t560\t0\texact\t0\t1\n";

static char table_path[64];
static long g_seqlen = L; /* the sequence length run() uses */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

/* Runs one forward on fresh inputs under the policy; checks the result; returns the choice text. */
static const char *run(const fw_policy *pol, fw_dtype dtype, const char **backend, int *correct, char *choice,
                       size_t len)
{
    fw_context *ctx = NULL;
    *backend = "";
    *correct = 0;
    snprintf(choice, len, "(no run)");
    if (fw_context_create(&ctx) != FW_OK) return choice;
    fw_context_set_threads(ctx, 1);
    if (pol && fw_context_set_policy(ctx, pol) != FW_OK) {
        snprintf(choice, len, "set_policy: %s", fw_context_last_error(ctx));
        fw_context_destroy(ctx);
        return choice;
    }
    fw_case c = fw_case_default();
    c.batch = B;
    c.heads = c.kv_heads = H;
    c.seqlen_q = c.seqlen_k = g_seqlen;
    c.head_dim = D;
    c.dtype = dtype;
    c.seed = 7;
    fw_run r;
    char msg[256];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        snprintf(choice, len, "alloc: %s", msg);
        fw_context_destroy(ctx);
        return choice;
    }
    fw_errors e;
    if (fw_run_poison(&r) == FW_OK && fw_run_forward(&r, ctx) == FW_OK && fw_run_compare(&r, &e) == FW_OK)
        *correct = e.pass;
    static char bk[64];
    snprintf(bk, sizeof bk, "%s", fw_context_last_backend(ctx));
    *backend = bk;
    snprintf(choice, len, "%s", fw_sched_last_choice(fw_context_sched(ctx)));
    fw_run_free(&r);
    fw_context_destroy(ctx);
    return choice;
}

static fw_policy pol(fw_objective o, double cap, int allow, double budget)
{
    fw_policy p = fw_policy_default();
    p.objective = o;
    p.power_cap_w = cap;
    p.allow_reduced_precision = allow;
    p.error_budget = budget;
    return p;
}

static void expect(const char *label, const fw_policy *p, fw_dtype dtype, const char *want_backend,
                   const char *want_in_choice)
{
    const char *b;
    int ok;
    char choice[400];
    run(p, dtype, &b, &ok, choice, sizeof choice);
    fwt_case(ok && !strcmp(b, want_backend) && strstr(choice, want_in_choice) != NULL,
             "%s: ran %s, correct %d, choice \"%s\" (want %s, \"%s\")", label, b, ok, choice, want_backend,
             want_in_choice);
}

/* One forward of r in a fresh context; the scheduler's choice into choice, correctness into *correct. */
static void run_case(fw_run *r, char *choice, size_t len, int *correct)
{
    fw_context *ctx = NULL;
    fw_errors e;
    *correct = 0;
    snprintf(choice, len, "(no run)");
    if (fw_context_create(&ctx) != FW_OK) return;
    fw_context_set_threads(ctx, 1);
    if (fw_run_poison(r) == FW_OK && fw_run_forward(r, ctx) == FW_OK && fw_run_compare(r, &e) == FW_OK)
        *correct = e.pass;
    snprintf(choice, len, "%s", fw_sched_last_choice(fw_context_sched(ctx)));
    fw_context_destroy(ctx);
}

/* Serving buckets: a decode step against a paged cache, the same against a contiguous one, and the
 * dense call of the same sizes land in three buckets; an entry of the paged one steers only it. */
static void test_call_kinds(void)
{
    const int32_t sq[2] = {1, 1}, sk[2] = {40, 60};
    fw_case cp = fw_case_serving(FW_CASE_KVCACHE, 2, sq, sk, H, H, D, FW_F32, 11);
    cp.page_size = 16;
    fw_case cc = fw_case_serving(FW_CASE_KVCACHE, 2, sq, sk, H, H, D, FW_F32, 12);
    fw_run rp, rc, rd;
    char msg[256];
    int ok = fw_run_alloc(&rp, &cp, msg, sizeof msg) == FW_OK;
    ok = ok && fw_run_alloc(&rc, &cc, msg, sizeof msg) == FW_OK;
    fw_case cd = fw_case_shape(2, H, H, 1, rp.problem.seqlen_k, D, FW_F32, 13);
    ok = ok && fw_run_alloc(&rd, &cd, msg, sizeof msg) == FW_OK;
    if (!fwt_case(ok, "serving cases set up: %s", ok ? "" : msg)) return;
    const fw_tune_key kp = fw_sched_key(&rp.problem), kc = fw_sched_key(&rc.problem), kd = fw_sched_key(&rd.problem);
    fwt_case(kp.call == FW_TUNE_PAGED && kc.call == FW_TUNE_CACHE && kd.call == FW_TUNE_DENSE,
             "call kinds of the keys: paged %s, contiguous %s, dense %s", fw_tune_call_name(kp.call),
             fw_tune_call_name(kc.call), fw_tune_call_name(kd.call));
    fwt_case(kp.bh == kd.bh && kp.lq == kd.lq && kp.lk == kd.lk && !fw_tune_key_equal(&kp, &kd) &&
                 !fw_tune_key_equal(&kp, &kc),
             "same sizes (bh %lld lq %lld lk %lld), different buckets", (long long)kp.bh, (long long)kp.lq,
             (long long)kp.lk);
    /* the table as `flashwatt tune` writes it: one entry (cpu-ref, which the registry order never
     * picks first) for the paged bucket only */
    fw_tuning_table t;
    fw_tune_init(&t);
    fw_tune_entry e;
    memset(&e, 0, sizeof e);
    e.key = kp;
    snprintf(e.backend, sizeof e.backend, "cpu-ref");
    e.ms = 0.1; /* FAKE */
    char why[512] = "";
    ok = fw_tune_put(&t, &e) == FW_OK && fw_tune_save(&t, table_path, why, sizeof why) == FW_OK;
    fw_tune_free(&t);
    fw_tune_init(&t);
    ok = ok && fw_tune_load(&t, table_path, why, sizeof why) == FW_OK && t.n == 1 && fw_tune_key_equal(&t.e[0].key, &kp);
    fwt_case(ok, "a paged bucket's entry survives save and load (%s)", why);
    fw_tune_free(&t);
    setenv("FLASHWATT_TUNING", table_path, 1);
    char choice[400];
    int correct;
    run_case(&rp, choice, sizeof choice, &correct);
    fwt_case(correct && strstr(choice, "table: cpu-ref"), "paged decode: its entry (\"%s\", correct %d)", choice,
             correct);
    run_case(&rc, choice, sizeof choice, &correct);
    fwt_case(correct && strstr(choice, "registry order"), "contiguous cache: not the paged entry (\"%s\", correct %d)",
             choice, correct);
    run_case(&rd, choice, sizeof choice, &correct);
    fwt_case(correct && strstr(choice, "registry order"), "dense call: not the paged entry (\"%s\", correct %d)", choice,
             correct);
    fw_run_free(&rp);
    fw_run_free(&rc);
    fw_run_free(&rd);
}

/* The pure selection on the fixture, without running anything. */
static void test_select(void)
{
    fw_tuning_table t;
    fw_tune_init(&t);
    char why[512] = "";
    const fw_status lst = fw_tune_load(&t, table_path, why, sizeof why);
    fwt_case(lst == FW_OK && t.n == 11, "fixture loads: %d entries %s", t.n, why);
    fw_tune_key k = fw_tune_key_make("cpu", FW_F32, D, 0, B * H, L, L);
    struct {
        const char *label;
        fw_policy p;
        fw_dtype dt;
        fw_precision req;
        const char *backend, *config;
    } cases[] = {
        /* the stale "no-such-config" entry is fastest, but the pure function has no usable filter:
         * it is checked with the registry filter in the end-to-end cases below */
        {"fastest (no filter)", pol(FW_OBJECTIVE_FASTEST, 0, 0, 0), FW_F32, FW_PRECISION_EXACT, "cpu-naive", "no-such-config"},
        {"tf32 requested", pol(FW_OBJECTIVE_FASTEST, 0, 0, 0), FW_F32, FW_PRECISION_TF32, "cpu-flash", "bm32-bn32"},
        {"reduced, budget 1e-2", pol(FW_OBJECTIVE_FASTEST, 0, 1, 1e-2), FW_F32, FW_PRECISION_EXACT, "cpu-naive", "no-such-config"},
        {"f16 bucket", pol(FW_OBJECTIVE_FASTEST, 0, 1, 1.0), FW_F16, FW_PRECISION_EXACT, "cpu-naive", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fw_tune_key kk = k;
        kk.dtype = cases[i].dt;
        int cand[64], n = 0;
        int pick = fw_sched_select(&t, &kk, cases[i].dt, cases[i].req, &cases[i].p, NULL, NULL, cand, &n, why,
                                   sizeof why);
        int ok = pick >= 0 && !strcmp(t.e[pick].backend, cases[i].backend) && !strcmp(t.e[pick].config, cases[i].config);
        /* never a reduced entry unless allowed and measured within budget */
        for (int j = 0; j < n; j++) {
            const fw_tune_entry *e = &t.e[cand[j]];
            if (e->precision != cases[i].req &&
                (!cases[i].p.allow_reduced_precision || !e->err_valid || e->err > cases[i].p.error_budget))
                ok = 0;
        }
        fwt_case(ok, "select %s: %s %s (%d candidates) %s", cases[i].label, pick >= 0 ? t.e[pick].backend : "-",
                 pick >= 0 ? t.e[pick].config : "-", n, pick >= 0 ? "" : why);
    }
    /* the f16 bucket has no reduced entries; an entry-less bucket is -1 with a reason */
    fw_tune_key none = fw_tune_key_make("cpu", FW_F32, 32, 0, B * H, L, L);
    fw_policy p0 = pol(FW_OBJECTIVE_FASTEST, 0, 0, 0);
    int pick = fw_sched_select(&t, &none, FW_F32, FW_PRECISION_EXACT, &p0, NULL, NULL, NULL, NULL, why, sizeof why);
    fwt_case(pick < 0 && strstr(why, "no tuning table entry"), "entry-less bucket: %d (%s)", pick, why);
    /* least energy where a candidate has no joules: the policy says why */
    fw_tuning_table u;
    fw_tune_init(&u);
    fw_tune_entry e = t.e[0];
    e.j_per_call = 0;
    fw_tune_put(&u, &e);
    fw_policy pe = pol(FW_OBJECTIVE_MIN_ENERGY, 0, 0, 0);
    pick = fw_sched_select(&u, &k, FW_F32, FW_PRECISION_EXACT, &pe, NULL, NULL, NULL, NULL, why, sizeof why);
    fwt_case(pick < 0 && strstr(why, "joules"), "least energy without joules: %d (%s)", pick, why);
    fw_tune_free(&u);
    fw_tune_free(&t);
}

static fw_status sleep_call(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 1000000}; /* 1 ms "kernel" */
    nanosleep(&ts, NULL);
    return FW_OK;
}

static fw_status no_sync(void *arg)
{
    (void)arg;
    return FW_OK;
}

static void test_energy_window(void)
{
    fw_emeas m;
    fw_status st = fw_energy_measure(NULL, -1, 0, 1, 0.1, 1.0, 1e-3, sleep_call, no_sync, NULL, &m);
    fwt_case(st == FW_OK && !m.valid && isnan(m.joules_per_call) && isnan(m.watts_avg) && !strcmp(m.source, "n/a"),
             "no telemetry: energy n/a (valid %d, J/call %g, source %s)", m.valid, m.joules_per_call, m.source);
    fw_emeas_free(&m);
    fw_tel_fake *fk = fw_tel_fake_create(1, 0); /* real clock */
    fw_tel_source src = fw_tel_fake_source(fk);
    fw_telemetry *t = NULL;
    if (!fk || fw_telemetry_open_with_source(&t, &src, NULL) != FW_OK) {
        fwt_case(0, "fake telemetry could not be opened");
        return;
    }
    fw_tel_fake_set_power(fk, 0, 300.0); /* FAKE constant power */
    fw_telemetry_start_sampler(t, 20, 4096);
    st = fw_energy_measure(t, 0, 50.0, 0.3, 0.1, 1.0, 1e-3, sleep_call, no_sync, NULL, &m);
    const double expect_j = 300.0 * m.seconds / (double)m.calls;
    fwt_case(st == FW_OK && m.valid && fabs(m.watts_avg - 300) < 15 && fabs(m.joules_per_call - expect_j) < 0.05 * expect_j &&
                 m.seconds >= 1.0 && m.calls > 100,
             "fake 300 W: %s, %.3f s, %ld calls, %.4g J/call (expect %.4g), avg %.1f W", m.source, m.seconds, m.calls,
             m.joules_per_call, expect_j, m.watts_avg);
    fwt_case(m.peak_valid && fabs(m.watts_peak - 300) < 1 && m.std_valid && m.watts_std < 1 && m.ntrace >= 20 &&
                 m.trace[0][0] >= 0 && m.trace[m.ntrace - 1][0] <= m.seconds + 0.1,
             "peak %.1f W, std %.2f W, %d trace samples", m.watts_peak, m.watts_std, m.ntrace);
    fwt_case(m.settled == 0 && strstr(m.note, "did not cool") != NULL, "bounded cool-down reported: settled %d, \"%s\"",
             m.settled, m.note);
    fw_emeas_free(&m);
    fw_telemetry_stop_sampler(t);
    fw_telemetry_close(t);
    fw_tel_fake_destroy(fk);
}

/* A FIFO as the table must not block the first auto call (it waited for a writer); a table of 40k
 * entries loads in linear time (it was quadratic: 6 s), and a later line replaces an earlier one. */
static void test_special_files(void)
{
    char fifo[96];
    snprintf(fifo, sizeof fifo, "/tmp/fw_sched_fifo_%d", (int)getpid());
    remove(fifo);
    if (mkfifo(fifo, 0600) != 0) {
        fwt_case(0, "mkfifo %s", fifo);
    } else {
        setenv("FLASHWATT_TUNING", fifo, 1);
        alarm(20); /* a hang is a failure (SIGALRM ends the test) */
        fw_context *ctx;
        fw_context_create(&ctx);
        const char *st = fw_sched_table_status(fw_context_sched(ctx));
        fwt_case(strstr(st, "unusable") != NULL && strstr(st, "regular file") != NULL, "FIFO as table: \"%s\"", st);
        fw_context_destroy(ctx);
        const char *b;
        int ok;
        char choice[400];
        fw_policy f = pol(FW_OBJECTIVE_FASTEST, 0, 0, 0);
        run(&f, FW_F32, &b, &ok, choice, sizeof choice);
        fwt_case(ok, "an auto call with a FIFO as table runs: %s (%s)", b, choice);
        alarm(0);
        remove(fifo);
    }
    FILE *fp = fopen(table_path, "w");
    if (!fp) {
        fwt_case(0, "write %s", table_path);
        return;
    }
    enum { N = 40000 };
    fprintf(fp, "# flashwatt tuning table v2\n");
    for (int pass = 0; pass < 2; pass++) /* every entry twice: the second line (ms 2 + i) replaces the first */
        for (int i = 0; i < N; i++)
            fprintf(fp, "cpu\tf32\t64\t0\t%d\t128\t128\tcpu-flash\tbm64-bn64\t%d\tn/a\tn/a\tn/a\t0\texact\tn/a\t1\n",
                    i + 1, pass + 1 + i);
    fclose(fp);
    fw_tuning_table t;
    fw_tune_init(&t);
    char why[512] = "";
    const double t0 = fw_now_seconds();
    const fw_status st = fw_tune_load(&t, table_path, why, sizeof why);
    const double secs = fw_now_seconds() - t0;
    int replaced = t.n == N;
    for (int i = 0; i < t.n && replaced; i++) replaced = t.e[i].ms == (double)(t.e[i].key.bh + 1);
    fwt_case(st == FW_OK && t.n == N && replaced && secs < 2.0,
             "%d lines of %d entries load in %.3f s (< 2 s): %s, %d entries, later lines replace earlier: %d %s", 2 * N, N,
             secs, fw_status_string(st), t.n, replaced, why);
    fw_tune_free(&t);
}

int main(void)
{
    test_energy_window();
    snprintf(table_path, sizeof table_path, "/tmp/fw_sched_fixture_%d.txt", (int)getpid());
    char missing[96];
    snprintf(missing, sizeof missing, "/tmp/fw_sched_missing_%d/none.txt", (int)getpid());

    /* 1. no table: registry order, as before the scheduler */
    setenv("FLASHWATT_TUNING", missing, 1);
    {
        fw_context *ctx;
        fw_context_create(&ctx);
        const char *st = fw_sched_table_status(fw_context_sched(ctx));
        fwt_case(strstr(st, "no tuning table") != NULL, "missing table status: \"%s\"", st);
        fw_context_destroy(ctx);
        fw_policy f = pol(FW_OBJECTIVE_FASTEST, 0, 0, 0);
        expect("no table, fastest", &f, FW_F32, fw_registry_get(0)->device == FW_DEVICE_CPU ? fw_registry_get(0)->name
                                                                                              : "cpu-flash",
               "registry order");
        fw_policy m = pol(FW_OBJECTIVE_MIN_ENERGY, 0, 0, 0);
        expect("no table, least energy", &m, FW_F32, "cpu-flash", "registry order");
    }

    /* 2. the fixture */
    write_file(table_path, fixture);
    setenv("FLASHWATT_TUNING", table_path, 1);
    test_select();
    fw_policy p;
    p = pol(FW_OBJECTIVE_FASTEST, 0, 0, 0);
    expect("fastest (stale faster entry skipped)", &p, FW_F32, "cpu-ref", "table: cpu-ref");
    p = pol(FW_OBJECTIVE_MIN_ENERGY, 0, 0, 0);
    expect("least energy", &p, FW_F32, "cpu-naive", "least energy");
    p = pol(FW_OBJECTIVE_POWER_CAP, 250, 0, 0);
    expect("power cap 250 W", &p, FW_F32, "cpu-flash", "bm64-bn64");
    p = pol(FW_OBJECTIVE_POWER_CAP, 150, 0, 0);
    expect("power cap 150 W", &p, FW_F32, "cpu-naive", "cpu-naive");
    /* the H200 shape: a cap under both entries keeps the fast, low-J one (the old ladder stepped to the
     * slower, 8 % lower-power entry: 8x the energy per call) */
    g_seqlen = 32;
    p = pol(FW_OBJECTIVE_POWER_CAP, 300, 0, 0);
    expect("cap under every entry, L=32: not the slow high-J entry", &p, FW_F32, "cpu-naive", "table: cpu-naive");
    p = pol(FW_OBJECTIVE_POWER_CAP, 580, 0, 0);
    expect("cap 580 W, L=32: still the fast entry", &p, FW_F32, "cpu-naive", "table: cpu-naive");
    g_seqlen = L;
    p = pol(FW_OBJECTIVE_FASTEST, 0, 0, 1.0);
    expect("reduced not allowed (budget 1)", &p, FW_F32, "cpu-ref", "cpu-ref");
    p = pol(FW_OBJECTIVE_FASTEST, 0, 1, 1e-4);
    expect("reduced allowed, budget 1e-4", &p, FW_F32, "cpu-ref", "cpu-ref");
    /* The CPU backends refuse every reduced mode (they compute exact f32/f64 only), so the reduced
     * entries of the fixture are within budget but not runnable: the scheduler must skip them and
     * take the best exact entry. (fw_sched_select's budget logic itself is checked in test_select.) */
    p = pol(FW_OBJECTIVE_FASTEST, 0, 1, 1e-2);
    expect("reduced allowed, budget 1e-2, no backend runs tf32 here", &p, FW_F32, "cpu-ref", "cpu-ref");
    p = pol(FW_OBJECTIVE_FASTEST, 0, 1, 0.1);
    expect("reduced allowed, budget 0.1, no backend runs bf16 here", &p, FW_F32, "cpu-ref", "cpu-ref");
    p = pol(FW_OBJECTIVE_MIN_ENERGY, 0, 1, 10.0); /* reduced entries cheaper, but not runnable */
    expect("least energy, budget 10, only exact entries runnable", &p, FW_F32, "cpu-naive", "cpu-naive");
    p = pol(FW_OBJECTIVE_FASTEST, 0, 1, 1.0);
    expect("f16 inputs never reduced", &p, FW_F16, "cpu-naive", "cpu-naive");
    {
        /* an explicitly requested precision runs only where a backend has it: none on the CPU, so
         * the call fails with a message naming the refusals, and nothing silently runs exact */
        fw_context *ctx;
        fw_context_create(&ctx);
        fw_context_set_precision(ctx, FW_PRECISION_TF32);
        fw_case c = fw_case_default();
        c.batch = B; c.heads = c.kv_heads = H; c.seqlen_q = c.seqlen_k = L; c.head_dim = D;
        fw_run r;
        char msg[256];
        int ok = fw_run_alloc(&r, &c, msg, sizeof msg) == FW_OK;
        const fw_status st = ok ? fw_run_forward(&r, ctx) : FW_ERR_INTERNAL;
        const char *err = fw_context_last_error(ctx);
        fwt_case(ok && st == FW_ERR_NO_BACKEND && strstr(err, "reduced precision") != NULL,
                 "precision tf32 requested on the cpu: %s: \"%s\"", fw_status_string(st), err);
        if (ok) fw_run_free(&r);
        fw_context_destroy(ctx);
    }
    /* a bucket the table lacks (D=32): registry order */
    {
        fw_context *ctx;
        fw_context_create(&ctx);
        fw_case c = fw_case_default();
        c.head_dim = 32;
        fw_run r;
        char msg[256];
        int ok = fw_run_alloc(&r, &c, msg, sizeof msg) == FW_OK;
        ok = ok && fw_run_forward(&r, ctx) == FW_OK;
        const char *ch = fw_sched_last_choice(fw_context_sched(ctx));
        fwt_case(ok && strstr(ch, "registry order") && strstr(ch, "no tuning table entry"), "entry-less bucket: \"%s\"",
                 ch);
        if (ok) fw_run_free(&r);
        fw_context_destroy(ctx);
    }

    /* 3. serving buckets */
    test_call_kinds();

    /* 4. malformed files: clear message, built-in defaults, still runs */
    const char *bad[] = {
        "not a table\n",
        "# flashwatt tuning table v2\ncpu\tf32\t16\t0\t2\t64\t64\tcpu-ref\t-\tfast\t0.3\t300\t320\t0\texact\t0\t1\n",
        "# flashwatt tuning table v2\ncpu\tf32\t16\t0\t2\t64\t64\tcpu-ref\t-\t1.0\t0.3\t300\t320\t0\tfp8\t0\t1\n",
        "# flashwatt tuning table v2\ncpu\tf32\t16\n",
        "# flashwatt tuning table v3\ncpu\tf32\t16\t0\t2\t64\t64\tcpu-ref\t-\t1.0\t0.3\t300\t320\t0\texact\t0\t1\tpacked\n",
        "# flashwatt tuning table v3\ncpu\tf32\t16\t0\t2\t64\t64\tcpu-ref\t-\t1.0\t0.3\t300\t320\t0\texact\t0\t1\n",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(table_path, bad[i]);
        fw_context *ctx;
        fw_context_create(&ctx);
        char st[1500];
        snprintf(st, sizeof st, "%s", fw_sched_table_status(fw_context_sched(ctx)));
        fw_context_destroy(ctx);
        const char *b;
        int ok;
        char choice[400];
        fw_policy f = pol(FW_OBJECTIVE_FASTEST, 0, 0, 0);
        run(&f, FW_F32, &b, &ok, choice, sizeof choice);
        fwt_case(strstr(st, "unusable") != NULL && strstr(st, table_path) != NULL && ok && !strcmp(b, "cpu-flash"),
                 "malformed file %zu: \"%s\"; ran %s (%s)", i, st, b, choice);
    }
    test_special_files();
    /* a directory where the file should be */
    setenv("FLASHWATT_TUNING", "/tmp", 1);
    {
        fw_context *ctx;
        fw_context_create(&ctx);
        const char *st = fw_sched_table_status(fw_context_sched(ctx));
        fwt_case(strstr(st, "unusable") != NULL || strstr(st, "built-in") != NULL, "directory as table: \"%s\"", st);
        fw_context_destroy(ctx);
    }
    remove(table_path);
    printf("%d passed, %d failed\n", fwt_passed, fwt_failed);
    return fwt_failed ? 1 : 0;
}
