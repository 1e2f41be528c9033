/* perf mode: median time and TFLOP/s of one case on every backend (each precision; each configuration
 * where the case asks for them), one line per measurement:
 *   RESULT tag B H L D causal backend precision config ms TFLOP/s max_abs rel_l2 graph_ms
 * (max_abs, rel_l2 with --check, else "-"; graph_ms: the device time per call from a CUDA graph of
 * many calls on rotating inputs, -1 on the CPU). Cases marked for the backward print
 *   BWD tag B H L D causal backend way fwd_ms bwd_ms TFLOP/s
 * with TFLOP/s of forward + backward at 3.5x the forward's exact FLOPs (FlashAttention's count). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "att.h"

#define MAX_BACKENDS 16

typedef struct call_arg {
    const fw_backend *b;
    fw_context *ctx;      /* API calls */
    const fw_config *cfg; /* backend-table calls (NULL: the backend's own choice) */
    fw_precision prec;
    const fw_knobs *knobs;
    void *stream;
    char err[512];
} call_arg;

static fw_status api_call(fw_run *r, void *arg)
{
    call_arg *a = (call_arg *)arg;
    fw_context_set_stream(a->ctx, a->stream);
    fw_status st = fw_attention_forward(a->ctx, &r->q, &r->k, &r->v, &r->o, r->lse, &r->c.params);
    if (st != FW_OK) snprintf(a->err, sizeof a->err, "%s", fw_context_last_error(a->ctx));
    return st;
}

static fw_status table_call(fw_run *r, void *arg)
{
    call_arg *a = (call_arg *)arg;
    fw_problem p = r->problem;
    p.precision = a->prec;
    fw_exec ex = {1, a->stream, a->err, sizeof a->err, a->knobs};
    return a->b->forward(&p, a->cfg, &ex);
}

static void dump(const char *tag, const char *what, const float *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s_%s.bin", att_o.dump, tag, what);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return; }
    fwrite(p, sizeof(float), n, f);
    fclose(f);
}

/* Inputs and reference of an f32 case as contiguous f32 files named <tag>_L<Lq>_D<D>_c<causal>_<what>. */
static void dump_case(fw_run *r, const att_case *t)
{
    const fw_case *c = &t->c;
    if (c->dtype != FW_F32 || c->layout_bshd || c->pad) return; /* the PyTorch side reads (B, H, L, D) f32 */
    fw_errors e;
    if (fw_run_compare(r, &e) != FW_OK) return; /* computes the reference */
    char tag[128];
    snprintf(tag, sizeof tag, "%s_L%lld_D%lld_c%d", t->tag ? t->tag : "case", (long long)c->seqlen_q,
             (long long)c->head_dim, c->params.causal);
    dump(tag, "q", (const float *)r->host_q, r->q_elems);
    dump(tag, "k", (const float *)r->host_k, r->kv_elems);
    dump(tag, "v", (const float *)r->host_v, r->kv_elems);
    dump(tag, "ref", r->ref_o, r->o_elems);
}

static void measure(att_out *out, const att_case *t, fw_run *r, call_arg *a, const char *cfg_name)
{
    const fw_case *c = &t->c;
    fw_timed_call call = a->ctx ? api_call : table_call;
    char errs[64] = "- -";
    if (att_o.check) {
        fw_errors e;
        fw_status st = fw_run_poison(r);
        if (st == FW_OK) st = call(r, a);
        if (st == FW_OK) st = fw_run_sync(r);
        r->c.precision = a->prec;
        if (st == FW_OK) st = fw_run_compare(r, &e);
        if (st != FW_OK || !e.pass) {
            att_report(out, 0, "%s %s %s [%s]: %s max_abs %.3g tol %.3g", a->b->name, att_precision_name(a->prec),
                       cfg_name, t->section, st != FW_OK ? a->err : "out of tolerance", e.max_abs, e.tol);
            return;
        }
        snprintf(errs, sizeof errs, "%.2e %.2e", e.max_abs, e.rel_l2);
    }
    const int reps = att_o.reps > 0 ? att_o.reps : 30;
    double ms = 0;
    fw_status st = fw_time_calls(r, call, a, 3, c->seqlen_q >= 1024 && reps > 15 ? reps / 2 : reps, &ms);
    if (st != FW_OK) {
        att_report(out, 0, "%s %s %s [%s] timing: %s: %s", a->b->name, att_precision_name(a->prec), cfg_name,
                   t->section, fw_status_string(st), a->err);
        return;
    }
    const double graph_ms = c->device.kind == FW_DEVICE_CUDA ? att_cuda_graph_ms(r, call, a, &a->stream, ms) : -1.0;
    fprintf(out->f, "RESULT %s %lld %lld %lld %lld %d %s %s %s %.4f %.2f %s %.4f\n", t->tag ? t->tag : t->section,
            (long long)c->batch, (long long)c->heads, (long long)c->seqlen_q, (long long)c->head_dim,
            c->params.causal, a->b->name, att_precision_name(a->prec), cfg_name, ms,
            fw_run_flops(r) / (ms * 1e-3) / 1e12, errs, graph_ms);
    fflush(out->f);
    out->passed++;
}

static void perf_backend(att_out *out, const att_case *t, fw_run *r, const fw_backend *b, fw_context *ctx,
                         const fw_knobs *knobs)
{
    for (int prec = 0; prec < ATT_PRECISIONS; prec++) {
        if (!((t->precisions >> prec) & 1u)) continue;
        fw_problem p = r->problem;
        p.precision = (fw_precision)prec;
        char why[512];
        if (!b->supports(&p, why, sizeof why)) {
            att_skip(out, "%s %s [%s]: %s", b->name, att_precision_name(p.precision), t->section, why);
            continue;
        }
        call_arg a;
        memset(&a, 0, sizeof a);
        a.b = b;
        a.prec = p.precision;
        a.knobs = knobs;
        if (!(t->flags & ATT_EVERY_CONFIG)) {
            a.ctx = ctx;
            fw_context_set_backend(ctx, b->name);
            fw_context_set_precision(ctx, p.precision);
            measure(out, t, r, &a, "default");
            continue;
        }
        fw_config cfgs[FW_MAX_CONFIGS];
        memset(cfgs, 0, sizeof cfgs);
        const int n = b->configs ? b->configs(&p, cfgs, FW_MAX_CONFIGS) : 0;
        for (int i = 0; i < n; i++) {
            a.cfg = cfgs[i].name[0] || cfgs[i].block_m ? &cfgs[i] : NULL;
            measure(out, t, r, &a, cfgs[i].name[0] ? cfgs[i].name : "default");
        }
        a.cfg = NULL; /* then the backend's own choice */
        measure(out, t, r, &a, n > 1 ? "own-choice" : "default");
    }
}

/* ---- backward timing ------------------------------------------------------------------------- */
typedef struct bwd_arg {
    fw_bwd *g;
    fw_context *ctx;
    const fw_backend *b;
    fw_config cfg;       /* no name: the public API */
    fw_problem p;        /* backend-table calls: validated once, outside the timing */
    const fw_knobs *knobs;
    char err[512];
} bwd_arg;

static fw_status bwd_call(fw_run *r, void *arg)
{
    bwd_arg *a = (bwd_arg *)arg;
    fw_bwd *g = a->g;
    if (!a->cfg.name[0]) {
        fw_status st = fw_attention_backward(a->ctx, &r->q, &r->k, &r->v, &r->o, r->lse, &g->dout, &g->dq, &g->dk,
                                             &g->dv, &r->c.params);
        if (st != FW_OK) snprintf(a->err, sizeof a->err, "%s", fw_context_last_error(a->ctx));
        return st;
    }
    fw_exec ex = {1, NULL, a->err, sizeof a->err, a->knobs};
    return a->b->backward(&a->p, &a->cfg, &ex);
}

/* The forward through the API, then each way the backend's backward runs: the API (deterministic
 * or not) and, on a CUDA device, its configurations by name. */
static void perf_backward(att_out *out, const att_case *t, fw_run *r, const fw_backend *b, fw_context *ctx,
                          const fw_knobs *knobs)
{
    const fw_case *c = &t->c;
    fw_problem p = r->problem;
    char why[512];
    if (!b->backward || !b->supports(&p, why, sizeof why)) {
        att_skip(out, "%s [%s]: %s", b->name, t->section, b->backward ? why : "no backward");
        return;
    }
    fw_bwd g;
    char msg[512];
    if (fw_bwd_alloc_grads(r, &g, c->seed, msg, sizeof msg) != FW_OK) { /* o, lse: the timed forward's */
        att_report(out, 0, "%s [%s] gradient buffers: %s", b->name, t->section, msg);
        return;
    }
    fw_context_set_backend(ctx, b->name);
    fw_context_set_precision(ctx, FW_PRECISION_EXACT);
    double fwd_ms = 0;
    const int reps = att_o.reps > 0 ? att_o.reps : 5;
    fw_status st = fw_run_time(r, ctx, 2, reps, &fwd_ms); /* also the o and lse the backward reads */
    static const char *const cuda_ways[] = {"bwd-deterministic", "bwd-atomic", "bwd-materialize"};
    const int nways = 2 + (c->device.kind == FW_DEVICE_CUDA ? 3 : 0);
    for (int w = 0; w < nways && st == FW_OK; w++) {
        bwd_arg a;
        memset(&a, 0, sizeof a);
        a.g = &g;
        a.ctx = ctx;
        a.b = b;
        a.knobs = knobs;
        const char *way = w == 0 ? "api" : w == 1 ? "api-deterministic" : cuda_ways[w - 2];
        fw_context_set_deterministic(ctx, w == 1);
        if (w >= 2) {
            snprintf(a.cfg.name, sizeof a.cfg.name, "%s", way);
            if (fw_validate_backward(&r->q, &r->k, &r->v, &r->o, r->lse, &g.dout, &g.dq, &g.dk, &g.dv, &c->params, &a.p,
                                     msg, sizeof msg) != FW_OK) {
                att_report(out, 0, "%s %s [%s]: %s", b->name, way, t->section, msg);
                continue;
            }
        }
#ifdef FW_HAVE_CUDA
        if (w == 4) { /* the store strategy, every (batch, head) slice at once where that fits 8 GiB */
            fw_bwd_mat_plan pl;
            a.p.memory_budget = (size_t)8 << 30;
            if (!fw_bwd_materialize_plan(&a.p, &pl) || pl.units_per_chunk * pl.heads_per_pass < a.p.batch * a.p.heads) {
                att_skip(out, "%s %s [%s]: its slices do not fit 8 GiB at once", b->name, way, t->section);
                continue;
            }
        }
#endif
        double bwd_ms = 0;
        fw_status bst = fw_time_calls(r, bwd_call, &a, 1, reps, &bwd_ms);
        if (bst != FW_OK) {
            att_report(out, 0, "%s %s [%s]: %s: %s", b->name, way, t->section, fw_status_string(bst), a.err);
            continue;
        }
        fprintf(out->f, "BWD %s %lld %lld %lld %lld %d %s %s %.3f %.3f %.1f\n", t->tag ? t->tag : t->section,
                (long long)c->batch, (long long)c->heads, (long long)c->seqlen_q, (long long)c->head_dim,
                c->params.causal, b->name, way, fwd_ms, bwd_ms,
                3.5 * fw_run_flops(r) / ((fwd_ms + bwd_ms) * 1e-3) / 1e12);
        fflush(out->f);
        out->passed++;
    }
    fw_context_set_deterministic(ctx, 0);
    if (st != FW_OK) att_report(out, 0, "%s [%s] forward: %s", b->name, t->section, fw_context_last_error(ctx));
    fw_bwd_free(r, &g);
}

void att_perf_case(const att_case *t, att_out *out)
{
    char msg[512];
    att_env env;
    att_env_apply(t->env, &env);
    fw_run r;
    fw_context *ctx = NULL;
    if (att_alloc_call(t, &t->c, &r, msg, sizeof msg) != FW_OK || fw_context_create(&ctx) != FW_OK) {
        att_report(out, 0, "[%s] setup: %s", t->section, msg);
        att_env_restore(&env);
        return;
    }
    if (att_o.dump) dump_case(&r, t);
    const fw_backend *bs[MAX_BACKENDS];
    const int nb = att_backends(bs, MAX_BACKENDS);
    for (int i = 0; i < nb; i++) {
        if (t->backend && strcmp(t->backend, bs[i]->name) != 0) continue;
        if (t->flags & ATT_TIME_BACKWARD) perf_backward(out, t, &r, bs[i], ctx, &env.knobs);
        else perf_backend(out, t, &r, bs[i], ctx, &env.knobs);
    }
    fw_context_destroy(ctx);
    fw_run_free(&r);
    att_env_restore(&env);
}
