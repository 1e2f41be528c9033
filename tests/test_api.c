/* The public API outside the attention math: version, status strings, dtype names, descriptors,
 * defaults, the backend listing (cpu-ref, cpu-naive, cpu-flash present and usable; CUDA backends
 * listed but unusable with a "no device" reason where there is no GPU), fw_backend_supports giving
 * reasons, fw_context_last_backend / last_error, and contexts used from several threads at once
 * (4 pthreads, each with its own context and its own problems, all checked against the reference). */
#include <pthread.h>
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"

static void version_and_strings(void)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FW_VERSION_MAJOR, FW_VERSION_MINOR, FW_VERSION_PATCH);
    const char *v = fw_version();
    fwt_case(v && strcmp(v, want) == 0, "fw_version() '%s' matches the header's %s", v ? v : "(null)", want);

    int ok = 1;
    const char *s[FW_ERR_INTERNAL + 1];
    for (int i = 0; i <= FW_ERR_INTERNAL; i++) {
        s[i] = fw_status_string((fw_status)i);
        if (!s[i] || !s[i][0]) { ok = 0; printf("  status %d has an empty string\n", i); continue; }
        for (int j = 0; j < i; j++)
            if (s[j] && strcmp(s[i], s[j]) == 0) { ok = 0; printf("  status %d and %d share '%s'\n", i, j, s[i]); }
    }
    const char *unknown = fw_status_string((fw_status)999);
    fwt_case(ok && unknown && unknown[0], "fw_status_string: all %d codes non-empty and distinct; unknown code -> '%s'",
             FW_ERR_INTERNAL + 1, unknown ? unknown : "(null)");
    fwt_case(strcmp(fw_status_string(FW_OK), fw_status_string(FW_ERR_INTERNAL)) != 0 &&
                 strcmp(fw_dtype_name(FW_F32), "f32") == 0 && strcmp(fw_dtype_name(FW_F16), "f16") == 0 &&
                 strcmp(fw_dtype_name(FW_BF16), "bf16") == 0 && fw_dtype_name((fw_dtype)7)[0],
             "fw_dtype_name: f32 f16 bf16, unknown -> '%s'", fw_dtype_name((fw_dtype)7));
    const char *simd = fw_cpu_simd_level();
    fwt_case(simd && (!strcmp(simd, "avx512") || !strcmp(simd, "avx2") || !strcmp(simd, "scalar")),
             "fw_cpu_simd_level() '%s'", simd ? simd : "(null)");
    fwt_case(fw_cuda_device_count() >= 0, "fw_cuda_device_count() = %d", fw_cuda_device_count());
}

static void descriptors_and_defaults(void)
{
    float x;
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    fw_tensor a = fw_tensor_bhsd(&x, FW_F16, cpu, 2, 3, 5, 7);
    fw_tensor b = fw_tensor_bshd(&x, FW_BF16, cpu, 2, 3, 5, 7);
    const int ok_a = a.data == &x && a.dtype == FW_F16 && a.size[0] == 2 && a.size[1] == 3 && a.size[2] == 5 &&
                     a.size[3] == 7 && a.stride[3] == 1 && a.stride[2] == 7 && a.stride[1] == 35 && a.stride[0] == 105;
    const int ok_b = b.size[1] == 3 && b.size[2] == 5 && b.stride[3] == 1 && b.stride[1] == 7 && b.stride[2] == 21 &&
                     b.stride[0] == 105 && b.dtype == FW_BF16;
    fwt_case(ok_a && ok_b, "fw_tensor_bhsd strides (%lld %lld %lld %lld), fw_tensor_bshd strides (%lld %lld %lld %lld)",
             (long long)a.stride[0], (long long)a.stride[1], (long long)a.stride[2], (long long)a.stride[3],
             (long long)b.stride[0], (long long)b.stride[1], (long long)b.stride[2], (long long)b.stride[3]);
    fw_attn_params p = fw_attn_params_default();
    fwt_case(p.scale == 0.0f && p.causal == 0 && p.window_left == FW_WINDOW_UNLIMITED &&
                 p.window_right == FW_WINDOW_UNLIMITED,
             "fw_attn_params_default: scale 0 (auto), not causal, windows unlimited");
    fw_policy pol = fw_policy_default();
    fwt_case(pol.objective == FW_OBJECTIVE_FASTEST && pol.power_cap_w == 0 && pol.temperature_limit_c == 0 &&
                 pol.allow_reduced_precision == 0 && pol.error_budget == 0,
             "fw_policy_default: fastest, no limits, exact");
}

static void backend_listing(void)
{
    const int n = fw_backend_count();
    int have_ref = 0, have_naive = 0, have_flash = 0, cuda_listed = 0, bad_info = 0, cpu_unusable = 0, cuda_bad = 0;
    const int gpus = fw_cuda_device_count();
    for (int i = 0; i < n; i++) {
        fw_backend_info info;
        memset(&info, 0x5a, sizeof info);
        if (fw_backend_get_info(i, &info) != FW_OK || !info.name || !info.name[0] || !info.description) {
            bad_info++;
            continue;
        }
        printf("  backend %-16s %-4s usable %d%s%s  (%s)\n", info.name, info.device == FW_DEVICE_CUDA ? "cuda" : "cpu",
               info.usable, info.usable ? "" : " why_not: ", info.usable ? "" : info.why_not, info.description);
        if (info.usable && info.why_not[0]) bad_info++;
        if (!info.usable && !info.why_not[0]) bad_info++;
        for (int j = 0; j < i; j++) {
            fw_backend_info other;
            if (fw_backend_get_info(j, &other) == FW_OK && strcmp(other.name, info.name) == 0) bad_info++;
        }
        if (info.device == FW_DEVICE_CPU) {
            have_ref |= !strcmp(info.name, "cpu-ref");
            have_naive |= !strcmp(info.name, "cpu-naive");
            have_flash |= !strcmp(info.name, "cpu-flash");
            if (!info.usable) cpu_unusable++;
        } else {
            cuda_listed++;
            if (gpus == 0 && (info.usable || !fwt_contains(info.why_not, "device"))) cuda_bad++;
            if (gpus > 0 && !info.usable) cuda_bad++; /* compiled in and a device is present */
        }
    }
    fwt_case(n >= 3 && !bad_info, "fw_backend_count() = %d; every entry has a unique name, a description, and why_not "
             "exactly when unusable (%d bad)", n, bad_info);
    fwt_case(have_ref && have_naive && have_flash && !cpu_unusable,
             "cpu-ref %d, cpu-naive %d, cpu-flash %d listed; CPU backends unusable: %d", have_ref, have_naive, have_flash,
             cpu_unusable);
#ifdef FW_HAVE_CUDA
    fwt_case(cuda_listed >= 1 && !cuda_bad,
             "CUDA build: %d CUDA backends listed; with %d GPUs, %d have the wrong usable flag (or, with none, lack a "
             "'no device' reason)",
             cuda_listed, gpus, cuda_bad);
#else
    fwt_case(cuda_listed == 0, "build without CUDA: no CUDA backend listed (%d)", cuda_listed);
#endif
    fw_backend_info info;
    fwt_case(fw_backend_get_info(-1, &info) == FW_ERR_INVALID_VALUE && fw_backend_get_info(n, &info) == FW_ERR_INVALID_VALUE &&
                 fw_backend_get_info(0, NULL) == FW_ERR_NULL_ARGUMENT,
             "fw_backend_get_info: index -1 and count are invalid values, info NULL a null argument");
}

/* fw_backend_supports: yes for cpu-ref/naive, a reason whenever the answer is no. */
static void supports_reasons(void)
{
    fw_case c = fw_case_default();
    c.seqlen_q = 8; c.seqlen_k = 8; c.head_dim = 16;
    fw_run r;
    char msg[256];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) { fwt_case(0, "supports: alloc: %s", msg); return; }
    for (int i = 0; i < fw_backend_count(); i++) {
        fw_backend_info info;
        if (fw_backend_get_info(i, &info) != FW_OK) continue;
        char why[512];
        memset(why, 'x', sizeof why);
        why[sizeof why - 1] = 0;
        fw_status st = fw_backend_supports(info.name, &r.q, &r.k, &r.v, &r.o, &c.params, why, sizeof why);
        if (st == FW_OK)
            fwt_case(why[0] == 0 && info.device == FW_DEVICE_CPU, "fw_backend_supports(%s, cpu f32 problem): yes, why ''", info.name);
        else
            fwt_case(why[0] && strlen(why) < sizeof why - 1 && !fwt_must_support(info.name),
                     "fw_backend_supports(%s, cpu f32 problem): %s, because '%s'", info.name, fw_status_string(st), why);
    }
    /* a short buffer is cut, not overrun; NULL is allowed */
    char small[8];
    memset(small, 'x', sizeof small);
    fw_status st = fw_backend_supports("no-such-backend", &r.q, &r.k, &r.v, &r.o, &c.params, small, 5);
    fwt_case(st == FW_ERR_NO_BACKEND && strlen(small) == 4 && small[5] == 'x' && small[7] == 'x',
             "fw_backend_supports with a 5-byte why: truncated to '%s', bytes past it untouched", small);
    st = fw_backend_supports("no-such-backend", &r.q, &r.k, &r.v, &r.o, &c.params, NULL, 0);
    fwt_case(st == FW_ERR_NO_BACKEND, "fw_backend_supports with why NULL: %s", fw_status_string(st));
    fw_run_free(&r);
}

/* last_backend names what ran; last_error is "" after a success and kept until the next call. */
static void last_backend(void)
{
    fw_context *ctx;
    if (fw_context_create(&ctx) != FW_OK) { fwt_case(0, "fw_context_create"); return; }
    fwt_case(fw_context_last_backend(ctx) && fw_context_last_backend(ctx)[0] == 0 && fw_context_last_error(ctx)[0] == 0,
             "fresh context: last_backend '' and last_error ''");
    fw_case c = fw_case_default();
    c.seqlen_q = 20; c.seqlen_k = 30; c.head_dim = 32; c.want_lse = 1;
    fw_run r;
    char msg[256];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) { fwt_case(0, "alloc: %s", msg); fw_context_destroy(ctx); return; }
    const char *cpu[16];
    const int ncpu = fwt_cpu_backends(cpu, 16);
    for (int i = 0; i < ncpu; i++) {
        fw_context_set_backend(ctx, cpu[i]);
        fw_run_poison(&r);
        fw_status st = fw_run_forward(&r, ctx);
        fw_errors e;
        memset(&e, 0, sizeof e);
        if (st == FW_OK) fw_run_compare(&r, &e);
        fwt_case(st == FW_OK && e.pass && strcmp(fw_context_last_backend(ctx), cpu[i]) == 0 && !fw_context_last_error(ctx)[0],
                 "backend '%s' named: ran, last_backend '%s', max_abs %.3g tol %.3g", cpu[i], fw_context_last_backend(ctx),
                 e.max_abs, e.tol);
    }
    fw_context_set_backend(ctx, "auto");
    fw_run_poison(&r);
    fw_status st = fw_run_forward(&r, ctx);
    const char *ran = fw_context_last_backend(ctx);
    int listed = 0;
    for (int i = 0; i < ncpu; i++) listed |= strcmp(cpu[i], ran) == 0;
    fwt_case(st == FW_OK && listed, "auto: ran '%s', a usable CPU backend", ran);
    /* a failing call keeps the last backend and sets the error */
    const char *before = ran;
    fw_attn_params bad = c.params;
    bad.window_left = -7;
    st = fw_attention_forward(ctx, &r.q, &r.k, &r.v, &r.o, r.lse, &bad);
    fwt_case(st == FW_ERR_INVALID_VALUE && strcmp(fw_context_last_backend(ctx), before) == 0 &&
                 fwt_contains(fw_context_last_error(ctx), "window_left"),
             "after a failed call: last_backend still '%s', last_error '%s'", fw_context_last_backend(ctx),
             fw_context_last_error(ctx));
    st = fw_run_forward(&r, ctx);
    fwt_case(st == FW_OK && fw_context_last_error(ctx)[0] == 0, "a success clears last_error");
    fwt_case(fw_context_last_backend(NULL) != NULL && fw_context_last_error(NULL) != NULL,
             "last_backend(NULL) '%s', last_error(NULL) '%s' (no crash)", fw_context_last_backend(NULL), fw_context_last_error(NULL));
    fw_run_free(&r);
    fw_context_destroy(ctx);
}

/* ---- several contexts, several threads ------------------------------------------------------ */
#define N_THREADS 4
#define ROUNDS 4
static pthread_barrier_t start_line; /* every thread starts its calls at once */

typedef struct worker {
    int id;
    int runs, failures;
    char first_failure[512];
} worker;

static void *work(void *arg)
{
    worker *w = (worker *)arg;
    fw_context *ctx;
    if (fw_context_create(&ctx) != FW_OK) {
        w->failures++;
        snprintf(w->first_failure, sizeof w->first_failure, "create");
        ctx = NULL;
    }
    if (!ctx) { pthread_barrier_wait(&start_line); return NULL; }
    const char *cpu[16];
    const int ncpu = fwt_cpu_backends(cpu, 16);
    const fw_dtype dts[3] = {FW_F32, FW_F16, FW_BF16};
    pthread_barrier_wait(&start_line);
    for (int round = 0; round < ROUNDS; round++) {
        fw_case c = fw_case_default();
        c.batch = 1 + (w->id & 1);
        c.kv_heads = 1 + w->id % 3;
        c.heads = c.kv_heads * (1 + round % 2);
        c.seqlen_q = 17 + 23 * w->id + 5 * round;
        c.seqlen_k = 29 + 19 * w->id + 7 * round;
        c.head_dim = (int64_t[]){16, 40, 64, 80}[w->id];
        c.dtype = dts[(w->id + round) % 3];
        c.params.causal = (w->id + round) & 1;
        c.layout_bshd = w->id == 2;
        c.pad = w->id == 3 ? 3 : 0;
        c.want_lse = 1;
        c.seed = (uint64_t)(1000 * w->id + round);
        fw_run r;
        char msg[256];
        if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
            if (!w->failures++) snprintf(w->first_failure, sizeof w->first_failure, "alloc: %s", msg);
            continue;
        }
        /* each thread runs every backend plus auto, with its own thread count */
        for (int bi = 0; bi <= ncpu; bi++) {
            const char *name = bi < ncpu ? cpu[bi] : "auto";
            if (bi < ncpu && fw_backend_supports(name, &r.q, &r.k, &r.v, &r.o, &c.params, NULL, 0) != FW_OK) continue;
            fw_context_set_backend(ctx, name);
            fw_context_set_threads(ctx, 1 + (w->id + bi) % 2);
            fw_run_poison(&r);
            fw_status st = fw_run_forward(&r, ctx);
            fw_errors e;
            memset(&e, 0, sizeof e);
            if (st == FW_OK) st = fw_run_compare(&r, &e);
            const int named = bi == ncpu || strcmp(fw_context_last_backend(ctx), name) == 0;
            w->runs++;
            if (st != FW_OK || !e.pass || !named) {
                if (!w->failures++)
                    snprintf(w->first_failure, sizeof w->first_failure,
                             "%s Lq%lld Lk%lld D%lld %s: %s %s max_abs %.3g tol %.3g unwritten %ld last_backend %s", name,
                             (long long)c.seqlen_q, (long long)c.seqlen_k, (long long)c.head_dim,
                             fw_dtype_name(c.dtype), fw_status_string(st), fw_context_last_error(ctx), e.max_abs, e.tol,
                             e.unwritten, fw_context_last_backend(ctx));
            }
        }
        fw_run_free(&r);
    }
    fw_context_destroy(ctx);
    return NULL;
}

static void threads_contexts(void)
{
    pthread_t th[N_THREADS];
    worker w[N_THREADS];
    int started = 0;
    if (pthread_barrier_init(&start_line, NULL, N_THREADS) != 0) { fwt_case(0, "pthread_barrier_init"); return; }
    for (int i = 0; i < N_THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].id = i;
        if (pthread_create(&th[i], NULL, work, &w[i]) == 0) started++;
        else w[i].failures = -1;
    }
    for (int i = 0; i < N_THREADS; i++)
        if (w[i].failures != -1) pthread_join(th[i], NULL);
    for (int i = 0; i < N_THREADS; i++)
        fwt_case(w[i].failures == 0 && w[i].runs > 0, "thread %d (own context, own problems): %d runs, %d failures%s%s", i,
                 w[i].runs, w[i].failures, w[i].failures ? ": " : "", w[i].first_failure);
    fwt_case(started == N_THREADS, "%d of %d threads started", started, N_THREADS);
    pthread_barrier_destroy(&start_line);
}

/* fw_context_set_memory_budget: NULL context refused; any size accepted (0 = no budget); a CPU backward
 * runs the same under a budget (it steers only the CUDA backward's recompute-vs-store choice). */
static void memory_budget(void)
{
    fwt_case(fw_context_set_memory_budget(NULL, 1) == FW_ERR_NULL_ARGUMENT, "set_memory_budget(NULL ctx) refused");
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) { fwt_case(0, "context"); return; }
    const size_t sizes[3] = {(size_t)1 << 30, SIZE_MAX, 0};
    for (int i = 0; i < 3; i++) {
        fw_status st = fw_context_set_memory_budget(ctx, sizes[i]);
        fwt_case(st == FW_OK, "set_memory_budget(%zu): %s", sizes[i], fw_status_string(st));
    }
    fw_context_set_memory_budget(ctx, 1);
    fw_context_set_backend(ctx, "cpu-ref");
    enum { B = 1, H = 2, L = 9, D = 8, N = B * H * L * D };
    static float q[N], k[N], v[N], o[N], dout[N], dq[N], dk[N], dv[N], lse[B * H * L];
    for (int i = 0; i < N; i++) {
        q[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
        k[i] = (float)((i * 17) % 13) / 13.0f - 0.5f;
        v[i] = (float)((i * 7) % 5) / 5.0f;
        dout[i] = (float)((i * 3) % 7) / 7.0f - 0.4f;
    }
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    fw_tensor tq = fw_tensor_bhsd(q, FW_F32, cpu, B, H, L, D), tk = fw_tensor_bhsd(k, FW_F32, cpu, B, H, L, D);
    fw_tensor tv = fw_tensor_bhsd(v, FW_F32, cpu, B, H, L, D), to = fw_tensor_bhsd(o, FW_F32, cpu, B, H, L, D);
    fw_tensor tdo = fw_tensor_bhsd(dout, FW_F32, cpu, B, H, L, D), tdq = fw_tensor_bhsd(dq, FW_F32, cpu, B, H, L, D);
    fw_tensor tdk = fw_tensor_bhsd(dk, FW_F32, cpu, B, H, L, D), tdv = fw_tensor_bhsd(dv, FW_F32, cpu, B, H, L, D);
    fw_attn_params prm = fw_attn_params_default();
    prm.causal = 1;
    fw_status st = fw_attention_forward(ctx, &tq, &tk, &tv, &to, lse, &prm);
    if (st == FW_OK) st = fw_attention_backward(ctx, &tq, &tk, &tv, &to, lse, &tdo, &tdq, &tdk, &tdv, &prm);
    fwt_case(st == FW_OK, "cpu-ref forward + backward under a 1-byte memory budget: %s %s", fw_status_string(st),
             fw_context_last_error(ctx));
    fw_context_destroy(ctx);
}

int main(void)
{
    const double t0 = fw_now_seconds();
    version_and_strings();
    descriptors_and_defaults();
    backend_listing();
    supports_reasons();
    last_backend();
    threads_contexts();
    memory_budget();
    return fwt_finish("test_api", fw_now_seconds() - t0);
}
