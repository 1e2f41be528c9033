/* test_attention: every attention backend of the registry against cpu-ref's float64 reference, in
 * three modes, on the CPU or a CUDA device (att.h says what is where).
 *
 *   test_attention [test|perf|backward] [--device cpu|cuda] [options]
 *     test       every usable backend that supports a case, each precision, configuration and CPU
 *                thread count, against the reference with the numerics contract's tolerance; outputs
 *                poisoned first (unwritten and stray elements fail)
 *     perf       median time and TFLOP/s ("RESULT" lines)
 *     backward   dQ/dK/dV against cpu-ref's float64 backward, every way a backend runs it
 *   --device cpu|cuda      where the tensors live (default cpu); cuda without a device: exit 77
 *   --quick                the small subset (sanitizer runs)
 *   --long                 also the longest cases
 *   --section A,B          only these sections (--list shows them)
 *   --list                 the sections of each mode and device
 *   --dry-run              print the cases that would run (no device needed) and their count
 *   --backend NAME         only this backend
 *   --filter TEXT          only cases whose label contains TEXT
 *   --dtype f32|f16|bf16   only this dtype
 *   --min-len N, --max-len N   only cases with N <= Lq (Lq <= N)
 *   --simd avx2|scalar     the CPU kernels at this SIMD level (exit 77 where the CPU's best is not above it)
 *   --set NAME=VALUE       set an environment knob (src/core/knobs.h) before any context exists
 *   --shard I/N            only the cases whose index in the plan is I modulo N (run side by side)
 *   --jobs N               cases at once in test mode (default 1; on cuda one per core)
 *   --seed N               seed of the random sections
 *   --reps N               perf: timed calls per measurement (default 30)
 *   --check                perf: also compare every timed run with the reference
 *   --dump DIR             perf: inputs and reference as raw f32 (bench/sdpa_f32.py reads them)
 *   -v                     also print the runs skipped and why
 * The last line is "N passed, M failed"; exit 0, 1 on a failure, 77 when skipped, 2 on bad usage. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream, setenv */
#endif
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "att.h"

att_opts att_o;

/* ---- reporting -------------------------------------------------------------------------------- */
int att_report(att_out *out, int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "PASS " : "FAIL ", out->f);
    vfprintf(out->f, fmt, ap);
    fputc('\n', out->f);
    va_end(ap);
    if (ok) out->passed++;
    else out->failed++;
    return ok;
}

void att_skip(att_out *out, const char *fmt, ...)
{
    out->skipped++;
    if (!att_o.verbose) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP ", out->f);
    vfprintf(out->f, fmt, ap);
    fputc('\n', out->f);
    va_end(ap);
}

static void out_open(att_out *out)
{
    memset(out, 0, sizeof *out);
    out->f = open_memstream(&out->buf, &out->len);
    if (!out->f) { perror("open_memstream"); exit(2); }
}

/* Prints the case's lines, adds its counts, frees it. */
static void out_flush(att_out *out, att_out *total)
{
    fclose(out->f);
    fwrite(out->buf, 1, out->len, stdout);
    fflush(stdout);
    free(out->buf);
    total->passed += out->passed;
    total->failed += out->failed;
    total->skipped += out->skipped;
}

/* ---- cases ------------------------------------------------------------------------------------ */
static uint64_t next_seed = 1000;

att_case att_make(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, fw_dtype dt)
{
    att_case t;
    memset(&t, 0, sizeof t);
    t.c = fw_case_shape(B, H, Hkv, Lq, Lk, D, dt, next_seed++);
    t.c.device = att_o.device;
    t.precisions = dt == FW_F32 ? 0xfu : 1u; /* reduced modes apply to f32 inputs only */
    return t;
}

att_case att_mask(att_case t, int causal, int64_t window_left, int64_t window_right)
{
    t.c.params.causal = causal;
    t.c.params.window_left = window_left;
    t.c.params.window_right = window_right;
    return t;
}

att_case att_layout(att_case t, int bshd, int pad)
{
    t.c.layout_bshd = bshd;
    t.c.pad = pad;
    return t;
}

att_case *att_add(att_plan *p, att_case t)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->v = (att_case *)realloc(p->v, (size_t)p->cap * sizeof *p->v);
        if (!p->v) { fprintf(stderr, "out of memory\n"); exit(2); }
    }
    const fw_case *c = &t.c;
    t.cost = (double)c->batch * (double)c->heads * (double)c->seqlen_q * (double)c->seqlen_k * (double)c->head_dim;
    p->v[p->n] = t;
    return &p->v[p->n++];
}

const char *att_label(const att_case *t, char *buf, size_t len)
{
    char c[256];
    fw_case_label(&t->c, c, sizeof c);
    snprintf(buf, len, "%s%s%s%s%s%s%s", t->section ? t->section : "", t->section ? ": " : "", t->tag ? t->tag : "",
             t->tag ? " " : "", c, t->env ? " env " : "", t->env ? t->env : "");
    return buf;
}

fw_status att_alloc_call(const att_case *t, const fw_case *c, fw_run *r, char *msg, size_t len)
{
    switch (t->call.kind) {
    case ATT_CALL_DENSE: return fw_run_alloc(r, c, msg, len);
    }
    snprintf(msg, len, "call kind %d is not known to this program", (int)t->call.kind);
    return FW_ERR_NOT_IMPLEMENTED;
}

int att_backends(const fw_backend **out, int max)
{
    int n = 0;
    char why[256];
    for (int i = 0; i < fw_registry_count() && n < max; i++) {
        const fw_backend *b = fw_registry_get(i);
        if (b->device != att_o.device.kind || !b->available(why, sizeof why)) continue;
        if (att_o.backend && strcmp(att_o.backend, b->name) != 0) continue;
        out[n++] = b;
    }
    return n;
}

int att_precision_count(unsigned precisions)
{
    int n = 0;
    for (int p = 0; p < ATT_PRECISIONS; p++) n += (precisions >> p) & 1u;
    return n;
}

const char *att_precision_name(fw_precision p) { return fw_precision_name(p); }

/* ---- the environment of forced configurations -------------------------------------------------- */
void att_env_apply(const char *env, att_env *e)
{
    memset(e, 0, sizeof *e);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", env ? env : "");
    for (char *tok = strtok(buf, " "); tok && e->n < 4; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        const char *old = getenv(tok);
        snprintf(e->saved[e->n][0], sizeof e->saved[e->n][0], "%s", tok);
        snprintf(e->saved[e->n][1], sizeof e->saved[e->n][1], "%s", old ? old : "");
        e->had[e->n] = old != NULL;
        e->n++;
        setenv(tok, eq + 1, 1);
    }
    fw_knobs_read(&e->knobs);
}

void att_env_restore(att_env *e)
{
    for (int i = e->n - 1; i >= 0; i--) {
        if (e->had[i]) setenv(e->saved[i][0], e->saved[i][1], 1);
        else unsetenv(e->saved[i][0]);
    }
    e->n = 0;
}

/* ---- command line ----------------------------------------------------------------------------- */
static const char *mode_names[3] = {"test", "perf", "backward"};

static int usage(const char *why)
{
    FILE *f = why ? stderr : stdout;
    if (why) fprintf(f, "test_attention: %s\n", why);
    fprintf(f, "usage: test_attention [test|perf|backward] [--device cpu|cuda] [--quick] [--long]\n"
            "  [--section A,B] [--list] [--dry-run] [--backend NAME] [--filter TEXT] [--dtype f32|f16|bf16]\n"
            "  [--min-len N] [--max-len N] [--simd avx2|scalar] [--set NAME=VALUE] [--shard I/N] [--jobs N]\n"
            "  [--seed N] [--reps N] [--check] [--dump DIR] [-v]\n"
            "(the first lines of tests/attention/main.c say what each does)\n");
    return why ? 2 : 0;
}

static int section_selected(const att_section *s)
{
    if (!((s->modes >> att_o.mode) & 1u) || !((s->devices >> att_o.device.kind) & 1u)) return 0;
    if (!att_o.sections) return s->by_default;
    const size_t n = strlen(s->name);
    for (const char *p = att_o.sections; (p = strstr(p, s->name)) != NULL; p += n)
        if ((p == att_o.sections || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

static void list_sections(void)
{
    for (int m = 0; m < 3; m++)
        for (int d = 0; d < 2; d++) {
            printf("%s --device %s:\n", mode_names[m], d ? "cuda" : "cpu");
            for (int i = 0; i < att_n_sections; i++) {
                const att_section *s = &att_sections[i];
                if ((s->modes >> m) & 1u && (s->devices >> d) & 1u)
                    printf("  %-12s %s%s\n", s->name, s->what, s->by_default ? "" : " (only when named)");
            }
        }
}

/* The CPU's best SIMD level as the library detects it (before FLASHWATT_SIMD lowers it). */
static int cpu_best_simd(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

static int keep_case(const att_case *t)
{
    char label[512];
    if (att_o.dtype >= 0 && (int)t->c.dtype != att_o.dtype) return 0;
    if (att_o.min_len > 0 && t->c.seqlen_q < att_o.min_len) return 0;
    if (att_o.max_len > 0 && t->c.seqlen_q > att_o.max_len) return 0;
    if (att_o.filter && !strstr(att_label(t, label, sizeof label), att_o.filter)) return 0;
    return 1;
}

static void run_case(const att_case *t, att_out *out)
{
    if (att_o.mode == ATT_TEST) att_forward_case(t, out);
    else if (att_o.mode == ATT_BACKWARD) att_backward_case(t, out);
    else att_perf_case(t, out);
}

static int by_cost_desc(const void *a, const void *b)
{
    const double x = (*(const att_case *const *)a)->cost, y = (*(const att_case *const *)b)->cost;
    return (x < y) - (x > y);
}

int main(int argc, char **argv)
{
    const double t0 = fw_now_seconds();
    att_o.device.kind = FW_DEVICE_CPU;
    att_o.dtype = -1;
    att_o.reps = 30;
    att_o.seed = 0x5eedf00dull;
    att_o.jobs = 0;
    int list = 0, dry_run = 0, shard = 0, shards = 1;
    const char *simd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE() (v ? (i++, v) : (exit(usage("a flag needs a value")), ""))
        if (i == 1 && (!strcmp(a, "test") || !strcmp(a, "perf") || !strcmp(a, "backward")))
            att_o.mode = !strcmp(a, "test") ? ATT_TEST : !strcmp(a, "perf") ? ATT_PERF : ATT_BACKWARD;
        else if (!strcmp(a, "--device")) {
            if (fw_device_parse(VALUE(), &att_o.device)) return usage("--device is cpu or cuda[:N]");
        } else if (!strcmp(a, "--quick")) att_o.quick = 1;
        else if (!strcmp(a, "--long")) att_o.long_cases = 1;
        else if (!strcmp(a, "--section")) att_o.sections = VALUE();
        else if (!strcmp(a, "--list")) list = 1;
        else if (!strcmp(a, "--dry-run")) dry_run = 1;
        else if (!strcmp(a, "--backend")) att_o.backend = VALUE();
        else if (!strcmp(a, "--filter")) att_o.filter = VALUE();
        else if (!strcmp(a, "--dtype")) {
            const char *d = VALUE();
            att_o.dtype = !strcmp(d, "f32") ? FW_F32 : !strcmp(d, "f16") ? FW_F16 : !strcmp(d, "bf16") ? FW_BF16 : -2;
            if (att_o.dtype == -2) return usage("--dtype is f32, f16 or bf16");
        } else if (!strcmp(a, "--min-len")) att_o.min_len = atoll(VALUE());
        else if (!strcmp(a, "--max-len")) att_o.max_len = atoll(VALUE());
        else if (!strcmp(a, "--simd")) simd = VALUE();
        else if (!strcmp(a, "--set")) {
            char *kv = strdup(VALUE()), *eq = kv ? strchr(kv, '=') : NULL;
            if (!eq) return usage("--set takes NAME=VALUE");
            *eq = 0;
            setenv(kv, eq + 1, 1);
            free(kv);
        } else if (!strcmp(a, "--jobs")) att_o.jobs = atoi(VALUE());
        else if (!strcmp(a, "--shard")) {
            if (sscanf(VALUE(), "%d/%d", &shard, &shards) != 2 || shards < 1 || shard < 0 || shard >= shards)
                return usage("--shard is I/N with 0 <= I < N");
        }
        else if (!strcmp(a, "--seed")) att_o.seed = strtoull(VALUE(), NULL, 0);
        else if (!strcmp(a, "--reps")) att_o.reps = atoi(VALUE());
        else if (!strcmp(a, "--check")) att_o.check = 1;
        else if (!strcmp(a, "--dump")) att_o.dump = VALUE();
        else if (!strcmp(a, "-v")) att_o.verbose = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(NULL);
        else return usage(a);
#undef VALUE
    }
    if (list) {
        list_sections();
        return 0;
    }
    if (simd) { /* before anything asks the CPU's level: it is fixed once per process */
        const int want = !strcmp(simd, "scalar") ? 0 : !strcmp(simd, "avx2") ? 1 : !strcmp(simd, "avx512") ? 2 : -1;
        if (want < 0) return usage("--simd is avx2, scalar or avx512");
        if (want >= cpu_best_simd()) {
            printf("test_attention: the CPU's best SIMD level is not above %s: the default run covers it; skipped\n", simd);
            return 77;
        }
        setenv("FLASHWATT_SIMD", simd, 1);
    }
    fw_knobs_read(&att_o.knobs);
    if (!dry_run && att_o.device.kind == FW_DEVICE_CUDA && fw_cuda_device_count() <= att_o.device.index) {
        printf("test_attention: no CUDA device %d here (%d visible): skipped\n", att_o.device.index,
               fw_cuda_device_count());
        return 77;
    }
    /* On a GPU the host's float64 references dominate: one case per core, as each reference then runs
     * on one thread. The CPU backends are tested at given thread counts: one case at a time. */
    if (att_o.jobs <= 0) att_o.jobs = att_o.mode == ATT_TEST && att_o.device.kind == FW_DEVICE_CUDA ? omp_get_max_threads() : 1;
    if (att_o.mode != ATT_TEST) att_o.jobs = 1; /* timings alone on the device; backward ways set knobs */

    int selected = 0;
    for (int i = 0; i < att_n_sections; i++) selected += section_selected(&att_sections[i]);
    if (!selected) return usage("no section of this mode and device matches --section (see --list)");
    printf("test_attention %s --device %s%s (simd %s)\n", mode_names[att_o.mode],
           att_o.device.kind == FW_DEVICE_CUDA ? "cuda" : "cpu", att_o.quick ? " --quick" : "", fw_cpu_simd_level());
    att_plan plan = {0};
    for (int i = 0; i < att_n_sections; i++) {
        const att_section *s = &att_sections[i];
        if (!section_selected(s) || !s->add) continue;
        const int first = plan.n;
        s->add(&plan, &att_o);
        for (int j = first; j < plan.n; j++)
            if (!plan.v[j].section) plan.v[j].section = s->name;
    }
    /* the filters, then the order: in the plan's order alone, largest first at once */
    att_case **todo = (att_case **)calloc((size_t)plan.n + 1, sizeof *todo);
    int n = 0;
    for (int i = 0; i < plan.n; i++)
        if (i % shards == shard && keep_case(&plan.v[i])) todo[n++] = &plan.v[i];
    if (dry_run) {
        char label[512];
        for (int i = 0; i < n; i++)
            printf("%s%s%s%s\n", att_label(todo[i], label, sizeof label),
                   todo[i]->flags & ATT_EVERY_CONFIG ? " [every configuration]" : "",
                   todo[i]->flags & ATT_REFUSED ? " [must be refused]" : "",
                   att_precision_count(todo[i]->precisions) > 1 ? " [each precision]" : "");
        for (int i = 0; i < att_n_sections; i++)
            if (section_selected(&att_sections[i]) && att_sections[i].run)
                printf("%s: %s\n", att_sections[i].name, att_sections[i].what);
        printf("%d cases\n", n);
        free(todo);
        free(plan.v);
        return 0;
    }
    att_out total;
    memset(&total, 0, sizeof total);
    int nserial = 0;
    if (att_o.jobs > 1) {
        qsort(todo, (size_t)n, sizeof *todo, by_cost_desc);
        for (int i = 0; i < n; i++) /* cases that set the environment go last, one at a time */
            if (todo[i]->env) {
                att_case *x = todo[i];
                memmove(&todo[i], &todo[i + 1], (size_t)(n - i - 1) * sizeof *todo);
                todo[n - 1] = x;
                i--;
                n--;
                nserial++;
            }
#pragma omp parallel for schedule(dynamic, 1) num_threads(att_o.jobs)
        for (int i = 0; i < n; i++) {
            att_out out;
            out_open(&out);
            run_case(todo[i], &out);
#pragma omp critical(att_print)
            out_flush(&out, &total);
        }
    } else {
        nserial = n;
        n = 0;
    }
    for (int i = n; i < n + nserial; i++) {
        att_out out;
        out_open(&out);
        run_case(todo[i], &out);
        out_flush(&out, &total);
    }
    for (int i = 0; i < att_n_sections; i++) {
        const att_section *s = &att_sections[i];
        if (!section_selected(s) || !s->run) continue;
        att_out out;
        out_open(&out);
        s->run(&att_o, &out);
        out_flush(&out, &total);
    }
    free(todo);
    free(plan.v);
    printf("test_attention %s --device %s: %d cases, %d skipped runs (-v lists them), %.1f s\n",
           mode_names[att_o.mode], att_o.device.kind == FW_DEVICE_CUDA ? "cuda" : "cpu", n + nserial, total.skipped,
           fw_now_seconds() - t0);
    printf("%d passed, %d failed\n", total.passed, total.failed);
    return total.failed ? 1 : 0;
}
