/* test mode: one case through every usable backend that supports it, in each precision the case asks
 * for, with the default configuration through the public API (and, where the case says so, every
 * configuration of the backend's configs() through the backend table), at each CPU thread count;
 * outputs poisoned first, compared with the float64 reference under the numerics contract. */
#include <math.h>
#include <string.h>
#include "att.h"

#define MAX_BACKENDS 16

/* The CPU baselines take every problem the API accepts, and a case may say its backend must take it: a refusal
 * there is a bug, not a skip. */
static int must_support(const att_case *t, const fw_backend *b)
{
    return (t->flags & ATT_MUST_SUPPORT) || !strcmp(b->name, "cpu-ref") || !strcmp(b->name, "cpu-naive");
}

/* Does row i (of a Lq x Lk problem) see key j? The mask formula of flashwatt.h, written out here
 * independently of the library. */
static int sees(const fw_case *c, int64_t i, int64_t j)
{
    const int64_t off = c->seqlen_k - c->seqlen_q;
    const int64_t wl = c->params.window_left, wr = c->params.causal ? 0 : c->params.window_right;
    if (j < 0 || j >= c->seqlen_k) return 0;
    if (wl >= 0 && j < i + off - wl) return 0;
    if (wr >= 0 && j > i + off + wr) return 0;
    return 1;
}

/* With planted non-finite keys (batch 0): output (h, i, d) of batch 0 must be non-finite exactly
 * where row i of a head reading that kv head sees a planted key (in column d for a value in v,
 * every column for one in k) and finite elsewhere. Returns the count of wrong elements. */
static long nan_rows_wrong(const fw_run *r, const att_case *t)
{
    const fw_case *c = &t->c;
    const int64_t group = c->heads / c->kv_heads;
    long wrong = 0;
    for (int64_t h = 0; h < c->heads; h++)
        for (int64_t i = 0; i < c->seqlen_q; i++)
            for (int64_t d = 0; d < c->head_dim; d++) {
                int expect = 0;
                for (int k = 0; k < ATT_MAX_PLANTS; k++) {
                    const att_plant *pl = &t->plant[k];
                    if (!pl->tensor || pl->tensor == 'q' || pl->head != h / group || !sees(c, i, pl->row)) continue;
                    if (pl->tensor == 'k' || pl->col == d) expect = 1;
                }
                const float x = fw_run_output(r, 0, h, i, d);
                if (expect == !!isfinite(x)) wrong++;
            }
    return wrong;
}

typedef struct run_ctx {
    const att_case *t;
    fw_run *r;
    fw_context *ctx;
    const fw_knobs *knobs;
    att_out *out;
    const char *label;
} run_ctx;

/* Poisons, runs b (cfg NULL: through the public API; else that configuration, or the backend's own
 * choice when cfg has no name, through the backend table), compares and reports one line. */
static void run_one(run_ctx *x, const fw_backend *b, fw_precision prec, const fw_config *cfg, const char *cfg_name,
                    int threads)
{
    fw_run *r = x->r;
    char err[1024] = "";
    const char *pname = att_precision_name(prec);
    fw_status st = fw_run_poison(r);
    if (st == FW_OK && !cfg) {
        if ((st = fw_context_set_backend(x->ctx, b->name)) == FW_OK &&
            (st = fw_context_set_threads(x->ctx, threads)) == FW_OK &&
            (st = fw_context_set_precision(x->ctx, prec)) == FW_OK)
            st = fw_run_forward(r, x->ctx);
        snprintf(err, sizeof err, "%s", fw_context_last_error(x->ctx));
        if (st == FW_OK && strcmp(fw_context_last_backend(x->ctx), b->name) != 0) {
            att_report(x->out, 0, "%s %s t%d [%s]: the call ran %s", b->name, pname, threads, x->label,
                       fw_context_last_backend(x->ctx));
            return;
        }
    } else if (st == FW_OK) {
        fw_problem p = r->problem;
        p.precision = prec;
        fw_exec ex = {threads, NULL, err, sizeof err, x->knobs};
        st = b->forward(&p, cfg->name[0] || cfg->block_m ? cfg : NULL, &ex);
        if (st == FW_OK) st = fw_run_sync(r);
    }
    if (st != FW_OK) {
        att_report(x->out, 0, "%s %s %s t%d [%s]: %s: %s", b->name, pname, cfg_name, threads, x->label,
                   fw_status_string(st), err);
        return;
    }
    fw_errors e;
    r->c.precision = prec; /* the tolerance of the precision it ran in */
    st = fw_run_compare(r, &e);
    if (st != FW_OK) {
        att_report(x->out, 0, "%s %s %s t%d [%s]: compare: %s", b->name, pname, cfg_name, threads, x->label,
                   fw_status_string(st));
        return;
    }
    long nan_wrong = (x->t->flags & ATT_NAN_ROWS) ? nan_rows_wrong(r, x->t) : 0;
    att_report(x->out, e.pass && nan_wrong == 0,
               "%s %s %s t%d [%s] max_abs %.3g tol %.3g rel_l2 %.3g lse %.3g unwritten %ld stray %ld nan_mismatch %ld%s",
               b->name, pname, cfg_name, threads, x->label, e.max_abs, e.tol, e.rel_l2, e.lse_max_abs, e.unwritten,
               e.stray, e.nan_mismatch, nan_wrong ? " WRONG NON-FINITE ROWS" : "");
}

/* The thread counts of a run: the case's list on the CPU, one run on a GPU. */
static int thread_list(const att_case *t, int *out)
{
    if (t->c.device.kind != FW_DEVICE_CPU) {
        out[0] = 1;
        return 1;
    }
    int n = 0;
    for (int i = 0; i < 4 && t->threads[i]; i++) out[n++] = t->threads[i];
    if (!n) {
        out[n++] = 1;
        out[n++] = 2;
    }
    return n;
}

static void run_backend(run_ctx *x, const fw_backend *b)
{
    const att_case *t = x->t;
    int threads[4];
    const int nt = thread_list(t, threads);
    for (int prec = 0; prec < ATT_PRECISIONS; prec++) {
        if (!((t->precisions >> prec) & 1u)) continue;
        fw_problem p = x->r->problem;
        p.precision = (fw_precision)prec;
        char why[512] = "";
        if (!b->supports(&p, why, sizeof why)) {
            if (prec == FW_PRECISION_EXACT && must_support(t, b))
                att_report(x->out, 0, "%s [%s] must support every case but says: %s", b->name, x->label, why);
            else if (!why[0])
                att_report(x->out, 0, "%s %s [%s] declined without a reason", b->name, att_precision_name(p.precision),
                           x->label);
            else
                att_skip(x->out, "%s %s [%s]: %s", b->name, att_precision_name(p.precision), x->label, why);
            continue;
        }
        fw_config cfgs[FW_MAX_CONFIGS];
        memset(cfgs, 0, sizeof cfgs);
        if (t->config) { /* one configuration by name, as a tuning table entry would run it */
            snprintf(cfgs[0].name, sizeof cfgs[0].name, "%s", t->config);
            cfgs[0].precision = p.precision;
            for (int i = 0; i < nt; i++) run_one(x, b, p.precision, &cfgs[0], t->config, threads[i]);
            continue;
        }
        for (int i = 0; i < nt; i++) run_one(x, b, p.precision, NULL, "api", threads[i]);
        if (!(t->flags & ATT_EVERY_CONFIG)) continue;
        const int n = b->configs ? b->configs(&p, cfgs, FW_MAX_CONFIGS) : 0;
        for (int c = 0; c < n; c++) {
            char name[64];
            snprintf(name, sizeof name, "cfg=%.47s", cfgs[c].name[0] ? cfgs[c].name : "default");
            for (int i = 0; i < nt; i++) run_one(x, b, p.precision, &cfgs[c], name, threads[i]);
        }
        if (n > 1) { /* the backend's own choice (no configuration handed in) */
            fw_config own;
            memset(&own, 0, sizeof own);
            for (int i = 0; i < nt; i++) run_one(x, b, p.precision, &own, "cfg=own-choice", threads[i]);
        }
    }
}

/* The named backend must refuse the case (FW_ERR_UNSUPPORTED with a reason), through the API. */
static void check_refusal(run_ctx *x)
{
    fw_precision prec = FW_PRECISION_EXACT; /* the case's first precision */
    while (prec < ATT_PRECISIONS - 1 && !((x->t->precisions >> prec) & 1u)) prec = (fw_precision)(prec + 1);
    fw_status st = fw_run_poison(x->r);
    if (st == FW_OK && (st = fw_context_set_backend(x->ctx, x->t->backend)) == FW_OK &&
        (st = fw_context_set_precision(x->ctx, prec)) == FW_OK)
        st = fw_run_forward(x->r, x->ctx);
    const char *msg = fw_context_last_error(x->ctx);
    att_report(x->out, st == FW_ERR_UNSUPPORTED && msg[0], "%s %s [%s] refuses: %s: %s", x->t->backend,
               att_precision_name(prec), x->label, fw_status_string(st), msg);
}

void att_forward_case(const att_case *t, att_out *out)
{
    char label[512], msg[512];
    att_label(t, label, sizeof label);
    att_env env;
    att_env_apply(t->env, &env);
    fw_run r;
    fw_context *ctx = NULL;
    fw_status st = att_alloc_call(t, &t->c, &r, msg, sizeof msg);
    if (st != FW_OK) {
        att_report(out, 0, "[%s] setup: %s (%s)", label, fw_status_string(st), msg);
        att_env_restore(&env);
        return;
    }
    for (int k = 0; k < ATT_MAX_PLANTS && st == FW_OK; k++)
        if (t->plant[k].tensor)
            st = fw_run_set_input(&r, t->plant[k].tensor, 0, t->plant[k].head, t->plant[k].row, t->plant[k].col,
                                  t->plant[k].value);
    if (st == FW_OK && t->input_scale > 0) st = fw_run_scale_inputs(&r, t->input_scale, t->input_scale);
    if (st == FW_OK && fw_context_create(&ctx) != FW_OK) st = FW_ERR_OUT_OF_MEMORY;
    if (st != FW_OK) {
        att_report(out, 0, "[%s] setup: %s", label, fw_status_string(st));
    } else {
        run_ctx x = {t, &r, ctx, &env.knobs, out, label};
        if (t->flags & ATT_REFUSED) {
            check_refusal(&x);
        } else {
            const fw_backend *bs[MAX_BACKENDS];
            const int nb = att_backends(bs, MAX_BACKENDS);
            int ran = 0;
            for (int i = 0; i < nb; i++)
                if (!t->backend || !strcmp(t->backend, bs[i]->name)) {
                    run_backend(&x, bs[i]);
                    ran++;
                }
            if (!ran) att_skip(out, "[%s]: no usable backend%s%s here", label, t->backend ? " " : "",
                               t->backend ? t->backend : "");
        }
    }
    fw_context_destroy(ctx);
    fw_run_free(&r);
    att_env_restore(&env);
}
