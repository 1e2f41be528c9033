/* backward mode: one case's dQ, dK, dV from every usable backend with a backward (cpu-ref, the oracle,
 * aside) against cpu-ref's float64 backward, gradients poisoned before each run and checked as
 * written, within the contract (fw_harness.h), every way the backward can run:
 *   api            the public API, deterministic off (the backend's faster reduction)
 *   determ         the public API, deterministic on, twice: the second result bit-identical
 * and on a CUDA device the backend's configurations by name, through the backend table:
 *   bwd-deterministic (twice, bit-identical), bwd-atomic, bwd-materialize (twice, bit-identical),
 *   cores          f16/bf16: bwd-atomic with FW_CUDA_BWD_TC=0 (the CUDA-core kernels)
 *   store          the store strategy chosen by a memory budget (att_cuda_store_check)
 * each in every precision of the case (f32: exact, and on a CUDA device tf32 and 3xtf32, which run the tf32
 * records; the comparison holds each to its precision's contract). O and LSE come from cpu-ref's forward
 * (fw_bwd_alloc). */
#include <stdlib.h>
#include <string.h>
#include "att.h"

#define MAX_BACKENDS 16

typedef struct way {
    const char *name;
    const char *config; /* NULL: the public API */
    int deterministic;
    int twice;          /* run again: the result must be bit-identical */
    const char *env;    /* forced knobs for this way */
    int lowp_only;      /* f16/bf16 only */
} way;

static const way cpu_ways[] = {
    {"api", NULL, 0, 0, NULL, 0},
    {"determ", NULL, 1, 1, NULL, 0},
};

static const way cuda_ways[] = {
    {"api", NULL, 0, 0, NULL, 0},
    {"determ", NULL, 1, 1, NULL, 0},
    {"bwd-deterministic", "bwd-deterministic", 1, 1, NULL, 0},
    {"bwd-atomic", "bwd-atomic", 0, 0, NULL, 0},
    {"bwd-materialize", "bwd-materialize", 1, 1, NULL, 0},
    {"cores", "bwd-atomic", 0, 0, "FW_CUDA_BWD_TC=0", 1},
};

typedef struct bwd_ctx {
    const att_case *t;
    fw_run *r;
    fw_bwd *g;
    fw_context *ctx;
    att_out *out;
    const char *label;
    fw_precision precision;
} bwd_ctx;

static fw_status run_way(bwd_ctx *x, const fw_backend *b, const way *w, const fw_knobs *knobs, char *err, size_t len)
{
    fw_run *r = x->r;
    fw_bwd *g = x->g;
    fw_status st = fw_bwd_poison(r, g);
    if (st != FW_OK) return st;
    if (!w->config) {
        fw_context_set_backend(x->ctx, b->name);
        fw_context_set_deterministic(x->ctx, w->deterministic);
        fw_context_set_precision(x->ctx, x->precision);
        if (x->t->c.device.kind == FW_DEVICE_CPU) fw_context_set_threads(x->ctx, x->t->threads[0] ? x->t->threads[0] : 2);
        st = fw_bwd_run(r, g, x->ctx);
        snprintf(err, len, "%s", fw_context_last_error(x->ctx));
        if (st == FW_OK && strcmp(fw_context_last_backend(x->ctx), b->name) != 0) {
            snprintf(err, len, "the call ran %s", fw_context_last_backend(x->ctx));
            st = FW_ERR_INTERNAL;
        }
        return st;
    }
    fw_problem p;
    st = fw_validate_backward(&r->q, &r->k, &r->v, &r->o, r->lse, &g->dout, &g->dq, &g->dk, &g->dv, &r->c.params, &p,
                              err, len);
    if (st != FW_OK) return st;
    p.deterministic = w->deterministic;
    p.precision = x->precision;
    fw_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.name, sizeof cfg.name, "%s", w->config);
    fw_exec ex = {2, NULL, err, len, knobs};
    err[0] = 0;
    st = b->backward(&p, &cfg, &ex);
    return st == FW_OK ? fw_run_sync(r) : st;
}

/* " tf32", " 3xtf32": the precision of a way's report line (nothing for exact). */
static const char *precision_tag(fw_precision p)
{
    return p == FW_PRECISION_TF32 ? " tf32" : p == FW_PRECISION_3XTF32 ? " 3xtf32" : p == FW_PRECISION_BF16 ? " bf16" : "";
}

static void check_way(bwd_ctx *x, const fw_backend *b, const way *w)
{
    att_env env;
    att_env_apply(w->env, &env);
    char err[1024] = "";
    fw_status st = run_way(x, b, w, &env.knobs, err, sizeof err);
    fw_bwd_errors e;
    if (st == FW_OK) st = fw_bwd_compare(x->r, x->g, &e);
    if (st != FW_OK) {
        att_report(x->out, 0, "%s %s%s [%s]: %s: %s", b->name, w->name, precision_tag(x->precision), x->label,
                   fw_status_string(st), err);
        att_env_restore(&env);
        return;
    }
    int identical = 1;
    if (w->twice) { /* the host images hold the first result; run again and compare bit for bit */
        const size_t es = fw_dtype_size(x->r->c.dtype);
        const size_t n[3] = {x->r->q_elems * es, x->r->kv_elems * es, x->r->kv_elems * es};
        void *first[3] = {malloc(n[0]), malloc(n[1]), malloc(n[2])};
        const void *host[3] = {x->g->host_dq, x->g->host_dk, x->g->host_dv};
        for (int i = 0; i < 3; i++)
            if (first[i]) memcpy(first[i], host[i], n[i]);
        st = run_way(x, b, w, &env.knobs, err, sizeof err);
        if (st == FW_OK) st = fw_bwd_fetch(x->r, x->g);
        for (int i = 0; i < 3; i++) {
            identical = identical && st == FW_OK && first[i] && memcmp(first[i], host[i], n[i]) == 0;
            free(first[i]);
        }
    }
    att_env_restore(&env);
    const fw_grad_errors *g = e.g;
    att_report(x->out, e.pass && identical,
               "%s %s%s [%s] dq %.2e/%.2e dk %.2e/%.2e dv %.2e/%.2e (err/tol) lowp %.2e %.2e %.2e unwritten %ld "
               "stray %ld nan %ld%s",
               b->name, w->name, precision_tag(x->precision), x->label, g[0].max_abs, g[0].tol, g[1].max_abs, g[1].tol, g[2].max_abs, g[2].tol,
               g[0].lowp, g[1].lowp, g[2].lowp, g[0].unwritten + g[1].unwritten + g[2].unwritten,
               g[0].stray + g[1].stray + g[2].stray, g[0].nans + g[1].nans + g[2].nans,
               identical ? "" : w->twice ? " SECOND RUN NOT BIT-IDENTICAL" : "");
}

/* cuda-flash-f32 in tf32 or 3xtf32 on a head dim and rows the tf32 records take: its default plan must name one
 * (else the checks above would pass on the exact CUDA-core kernels). */
static void check_tf32_default(bwd_ctx *x, const fw_backend *b)
{
    const fw_case *c = &x->r->c;
    if (strcmp(b->name, "cuda-flash-f32") != 0 || x->precision == FW_PRECISION_EXACT || !b->configs || c->head_dim > 128 ||
        c->head_dim % 4 || (c->head_dim + c->pad) % 4)
        return;
    char err[512] = "";
    fw_problem p;
    fw_status st = fw_validate_backward(&x->r->q, &x->r->k, &x->r->v, &x->r->o, x->r->lse, &x->g->dout, &x->g->dq,
                                        &x->g->dk, &x->g->dv, &c->params, &p, err, sizeof err);
    fw_config cfgs[FW_MAX_CONFIGS];
    memset(cfgs, 0, sizeof cfgs);
    p.precision = x->precision;
    p.deterministic = 0;
    if (st == FW_OK && b->configs(&p, cfgs, FW_MAX_CONFIGS) < 1) st = FW_ERR_INTERNAL;
    att_report(x->out, st == FW_OK && strstr(cfgs[0].name, ":tf32-") != NULL, "%s%s [%s] default plan %s %s",
               b->name, precision_tag(x->precision), x->label, cfgs[0].name, err);
}

/* Is name one of the comma-separated list? */
static int in_list(const char *list, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

void att_backward_case(const att_case *t, att_out *out)
{
    char label[512], msg[512];
    att_label(t, label, sizeof label);
    fw_run r;
    fw_bwd g;
    fw_context *ctx = NULL;
    fw_case c = t->c;
    c.want_lse = 1;
    if (att_alloc_call(t, &c, &r, msg, sizeof msg) != FW_OK) {
        att_report(out, 0, "[%s] setup: %s", label, msg);
        return;
    }
    if (fw_bwd_alloc(&r, &g, c.seed, msg, sizeof msg) != FW_OK || fw_context_create(&ctx) != FW_OK) {
        att_report(out, 0, "[%s] gradient setup: %s", label, msg);
        fw_run_free(&r);
        return;
    }
    bwd_ctx x = {t, &r, &g, ctx, out, label, FW_PRECISION_EXACT};
    const int cuda = c.device.kind == FW_DEVICE_CUDA;
    const way *ways = cuda ? cuda_ways : cpu_ways;
    const int nways = cuda ? (int)(sizeof cuda_ways / sizeof cuda_ways[0]) : (int)(sizeof cpu_ways / sizeof cpu_ways[0]);
    const fw_backend *bs[MAX_BACKENDS];
    const int nb = att_backends(bs, MAX_BACKENDS);
    for (int i = 0; i < nb; i++) {
        const fw_backend *b = bs[i];
        char why[512] = "";
        if (t->backend && strcmp(t->backend, b->name) != 0) continue;
        if (!strcmp(b->name, "cpu-ref")) continue; /* the oracle; the finite differences check it */
        if (!b->backward) {
            att_skip(out, "%s [%s]: no backward", b->name, label);
            continue;
        }
        if (!b->supports(&r.problem, why, sizeof why)) {
            if (t->flags & ATT_MUST_SUPPORT) att_report(out, 0, "%s [%s] must take this case but says: %s", b->name, label, why);
            else att_skip(out, "%s [%s]: %s", b->name, label, why);
            continue;
        }
        for (int prec = 0; prec < ATT_PRECISIONS; prec++) {
            if (!((t->precisions >> prec) & 1u) || (prec != FW_PRECISION_EXACT && c.dtype != FW_F32)) continue;
            x.precision = (fw_precision)prec;
            r.c.precision = x.precision; /* the comparison's contract */
            if (cuda && !t->env) check_tf32_default(&x, b);
            for (int w = 0; w < nways; w++) {
                if (ways[w].lowp_only && c.dtype == FW_F32) continue; /* f32 runs the CUDA-core kernels anyway */
                if (t->config && !in_list(t->config, ways[w].name)) continue;
                check_way(&x, b, &ways[w]);
            }
        }
        r.c.precision = FW_PRECISION_EXACT;
        if (cuda && (!t->config || in_list(t->config, "store"))) att_cuda_store_check(&r, &g, b, label, out);
    }
    fw_context_destroy(ctx);
    fw_bwd_free(&r, &g);
    fw_run_free(&r);
}
