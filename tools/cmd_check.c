/* flashwatt check: one problem, fresh random inputs, every chosen backend against the float64
 * reference and DESIGN.md's numerics contract. Exit 0 only if all pass. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include "flashwatt.h"
#include "flashwatt_internal.h"
#include "args.h"
#include "commands.h"
#include "fw_harness.h"
#include "report.h"
#include "suites.h"
#include "progress.h"
#include "sched/tuning_table.h"

static fw_shape shape_of(const fw_cli *cli)
{
    fw_shape s;
    memset(&s, 0, sizeof s);
    s.batch = cli->batch.n ? cli->batch.v[0] : FW_DEFAULT_BATCH;
    s.heads = cli->heads.n ? cli->heads.v[0] : FW_DEFAULT_HEADS;
    s.kv_heads = cli->kv_heads.n ? cli->kv_heads.v[0] : s.heads;
    s.seqlen_q = cli->seqlen.n ? cli->seqlen.v[0] : FW_DEFAULT_SEQLEN;
    s.seqlen_k = cli->seqlen_k.n ? cli->seqlen_k.v[0] : s.seqlen_q;
    s.head_dim = cli->head_dim.n ? cli->head_dim.v[0] : FW_DEFAULT_HEAD_DIM;
    s.dtype = cli->dtype.n ? (fw_dtype)cli->dtype.v[0] : FW_F32;
    s.causal = cli->causal.n ? (int)cli->causal.v[0] : 0;
    s.window_left = cli->have_window ? cli->window_left : FW_WINDOW_UNLIMITED;
    s.window_right = cli->have_window ? cli->window_right : FW_WINDOW_UNLIMITED;
    s.layout_bshd = cli->layout.n ? (int)cli->layout.v[0] : 0;
    s.threads = cli->threads.n ? (int)cli->threads.v[0] : 0;
    if (cli->serving.nseq) fw_shape_set_serving(&s, &cli->serving);
    return s;
}

/* ---- --backward --------------------------------------------------------------------------- */

/* Contiguous f32 (B,H,S,D) copy of a host image described by t (strides in elements). */
static float *bhsd_f32(const void *host, const fw_tensor *t)
{
    const int64_t B = t->size[0], H = t->size[1], S = t->size[2], D = t->size[3];
    float *out = (float *)malloc((size_t)(B * H * S * D) * sizeof(float));
    if (!out) return NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t x = 0; x < S; x++)
                for (int64_t d = 0; d < D; d++)
                    out[((b * H + h) * S + x) * D + d] =
                        fw_load_f32(host, t->dtype, b * t->stride[0] + h * t->stride[1] + x * t->stride[2] + d);
    return out;
}

typedef struct grad_ref {
    float *q, *k, *v, *o, *dout, *lse; /* f32 (B,H,S,D) copies of the inputs of the backward */
    float *g[3];                       /* cpu-ref's dQ, dK, dV (float64 inside, f32 out) */
    fw_tensor tq, tk, tv, to, tdo, tg[3];
} grad_ref;

static void grad_ref_free(grad_ref *g)
{
    free(g->q); free(g->k); free(g->v); free(g->o); free(g->dout); free(g->lse);
    for (int a = 0; a < 3; a++) free(g->g[a]);
    memset(g, 0, sizeof *g);
}

static fw_status grad_ref_make(const fw_run *r, const fw_bwd *bw, grad_ref *g, char *msg, size_t len)
{
    const fw_case *c = &r->c;
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    memset(g, 0, sizeof *g);
    if (c->kind != FW_CASE_DENSE) return FW_OK; /* a ragged batch's reference is the harness's (fw_bwd_compare) */
    g->q = bhsd_f32(r->host_q, &r->q);
    g->k = bhsd_f32(r->host_k, &r->k);
    g->v = bhsd_f32(r->host_v, &r->v);
    g->o = bhsd_f32(r->host_o, &r->o);
    g->dout = bhsd_f32(bw->host_dout, &bw->dout);
    const size_t ln = (size_t)(c->batch * c->heads * c->seqlen_q);
    g->lse = (float *)malloc(ln * sizeof(float));
    const size_t nq = (size_t)(c->batch * c->heads * c->seqlen_q * c->head_dim);
    const size_t nk = (size_t)(c->batch * c->kv_heads * c->seqlen_k * c->head_dim);
    g->g[0] = (float *)malloc(nq * sizeof(float));
    g->g[1] = (float *)malloc(nk * sizeof(float));
    g->g[2] = (float *)malloc(nk * sizeof(float));
    if (!g->q || !g->k || !g->v || !g->o || !g->dout || !g->lse || !g->g[0] || !g->g[1] || !g->g[2]) {
        snprintf(msg, len, "out of host memory for the reference gradients");
        return FW_ERR_OUT_OF_MEMORY;
    }
    memcpy(g->lse, r->host_lse, ln * sizeof(float));
    g->tq = fw_tensor_bhsd(g->q, FW_F32, cpu, c->batch, c->heads, c->seqlen_q, c->head_dim);
    g->tk = fw_tensor_bhsd(g->k, FW_F32, cpu, c->batch, c->kv_heads, c->seqlen_k, c->head_dim);
    g->tv = fw_tensor_bhsd(g->v, FW_F32, cpu, c->batch, c->kv_heads, c->seqlen_k, c->head_dim);
    g->to = fw_tensor_bhsd(g->o, FW_F32, cpu, c->batch, c->heads, c->seqlen_q, c->head_dim);
    g->tdo = fw_tensor_bhsd(g->dout, FW_F32, cpu, c->batch, c->heads, c->seqlen_q, c->head_dim);
    g->tg[0] = fw_tensor_bhsd(g->g[0], FW_F32, cpu, c->batch, c->heads, c->seqlen_q, c->head_dim);
    g->tg[1] = fw_tensor_bhsd(g->g[1], FW_F32, cpu, c->batch, c->kv_heads, c->seqlen_k, c->head_dim);
    g->tg[2] = fw_tensor_bhsd(g->g[2], FW_F32, cpu, c->batch, c->kv_heads, c->seqlen_k, c->head_dim);
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) return FW_ERR_OUT_OF_MEMORY;
    fw_context_set_backend(ctx, "cpu-ref");
    fw_status st = fw_attention_backward(ctx, &g->tq, &g->tk, &g->tv, &g->to, g->lse, &g->tdo, &g->tg[0], &g->tg[1],
                                         &g->tg[2], &c->params);
    if (st != FW_OK) snprintf(msg, len, "cpu-ref backward failed: %s", fw_context_last_error(ctx));
    fw_context_destroy(ctx);
    return st;
}

/* Central differences of sum(O ∘ dO) (cpu-ref forward, f32) against cpu-ref's gradients; returns
 * the worst |fd - grad| (NaN/inf when something failed). */
static double finite_differences(grad_ref *g, const fw_attn_params *params)
{
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) return INFINITY;
    fw_context_set_backend(ctx, "cpu-ref");
    const int64_t nq = g->tq.size[0] * g->tq.size[1] * g->tq.size[2] * g->tq.size[3];
    const int64_t nk = g->tk.size[0] * g->tk.size[1] * g->tk.size[2] * g->tk.size[3];
    float *o = (float *)malloc((size_t)nq * sizeof(float));
    if (!o) { fw_context_destroy(ctx); return INFINITY; }
    fw_tensor to = g->to;
    to.data = o;
    float *arr[3] = {g->q, g->k, g->v};
    const int64_t n[3] = {nq, nk, nk};
    const float eps = 1e-2f;
    double worst = 0;
    for (int a = 0; a < 3; a++)
        for (int64_t i = 0; i < n[a]; i++) {
            double l[2];
            const float keep = arr[a][i];
            for (int side = 0; side < 2; side++) {
                arr[a][i] = keep + (side ? -eps : eps);
                l[side] = 0;
                if (fw_attention_forward(ctx, &g->tq, &g->tk, &g->tv, &to, NULL, params) != FW_OK) l[side] = NAN;
                for (int64_t x = 0; x < nq; x++) l[side] += (double)o[x] * g->dout[x];
            }
            arr[a][i] = keep;
            const double err = fabs((l[0] - l[1]) / (2.0 * eps) - g->g[a][i]);
            if (!(err <= worst)) worst = err;
        }
    free(o);
    fw_context_destroy(ctx);
    return worst;
}

/* Marks row skipped, with the reason, when its backend is not usable here or cannot run r's problem
 * (with bw: its backward; a backend without any backward says "no backward"). */
static void skip_unless_runnable(fw_row *row, const fw_run *r, const fw_bwd *bw)
{
    fw_backend_info info;
    char why[512] = "";
    fw_args_backend_info(row->backend, &info);
    const fw_status st = !info.usable ? FW_OK
                         : bw         ? fw_bwd_supports(r, bw, row->backend, why, sizeof why)
                                      : fw_run_supports(r, row->backend, why, sizeof why);
    if (!info.usable) {
        snprintf(row->note, sizeof row->note, "not usable here: %.230s", info.why_not);
        row->status = FW_ROW_SKIPPED;
    } else if (st == FW_ERR_NOT_IMPLEMENTED) {
        snprintf(row->note, sizeof row->note, "no backward");
        row->status = FW_ROW_SKIPPED;
    } else if (st != FW_OK) {
        snprintf(row->note, sizeof row->note, "does not support this problem: %.220s", why);
        row->status = FW_ROW_SKIPPED;
    }
}

/* A ragged batch's gradients against the harness's reference (cpu-ref's ragged backward on the
 * same inputs) under the numerics contract: one row per gradient; returns the failures. */
static int ragged_grad_rows(fw_run *r, fw_bwd *bw, const fw_row *row, int *passed)
{
    static const char *gname[3] = {"dQ", "dK", "dV"};
    fw_bwd_errors e;
    const fw_status st = fw_bwd_compare(r, bw, &e);
    if (st != FW_OK) {
        fw_row er = *row;
        snprintf(er.note, sizeof er.note, "comparison failed: %s", fw_status_string(st));
        er.status = FW_ROW_ERROR;
        fw_report_check_row(stdout, &er);
        return 1;
    }
    int failed = 0;
    for (int a = 0; a < 3; a++) {
        const fw_grad_errors *x = &e.g[a];
        fw_row gr = *row;
        gr.checked = 1;
        gr.max_abs_err = x->max_abs;
        gr.rel_l2 = x->rel_l2;
        gr.tol = x->tol;
        gr.pass = x->max_abs <= x->tol && !x->unwritten && !x->stray && !x->nans;
        snprintf(gr.note, sizeof gr.note, "%s", gname[a]);
        if (x->unwritten || x->nans)
            snprintf(gr.note, sizeof gr.note, "%s: %ld unwritten, %ld NaN", gname[a], x->unwritten, x->nans);
        if (r->c.dtype != FW_F32) {
            const size_t n = strlen(gr.note);
            snprintf(gr.note + n, sizeof gr.note - n, "; input-dtype emulation err %.2e", x->lowp);
        }
        if (gr.pass) (*passed)++;
        else failed++;
        fw_report_check_row(stdout, &gr);
    }
    return failed;
}

static int check_backward(const fw_cli *cli, const fw_shape *s, const fw_plan *plan, fw_precision prec,
                          fw_context *ctx)
{
    static const char *gname[3] = {"dQ", "dK", "dV"};
    const int tf32 = prec == FW_PRECISION_TF32;
    const double rel_tol = s->dtype == FW_F32 ? (tf32 ? 5e-3 : 1e-5) : s->dtype == FW_F16 ? 2e-3 : 1.6e-2;
    if (s->serving)
        printf("backward: dQ, dK, dV of the ragged batch against cpu-ref's float64 backward; tolerance max|g - g_ref| <= "
               "1e-4*max|g_ref| + 1e-5*max over dQ,dK,dV + 1e-6%s\n",
               s->dtype == FW_F32 ? (tf32 ? " (tf32: 5e-3*max|g_ref| + 1e-3*max)" : "")
                                  : " + 3x the error of the backward done in the input dtype");
    else if (s->dtype == FW_F32 && tf32)
        printf("backward: dQ, dK, dV against cpu-ref's float64 backward; tolerance max|g - g_ref| <= "
               "5e-3*max|g_ref| + 1e-3*max over dQ,dK,dV + 1e-6 (f32 in tf32)\n");
    else if (s->dtype == FW_F32)
        printf("backward: dQ, dK, dV against cpu-ref's float64 backward; tolerance max|g - g_ref| <= "
               "1e-5*max|g_ref| + 1e-6 (f32)\n");
    else
        printf("backward: dQ, dK, dV against cpu-ref's float64 backward; tolerance max|g - g_ref| <= "
               "%g*max|g_ref| (%s output rounding)\n", rel_tol, fw_dtype_name(s->dtype));
    const int named = cli->backends.n > 0 && strcmp(cli->backends.v[0], "all") != 0;
    fw_run runs[2];
    fw_bwd bwds[2];
    grad_ref refs[2];
    int have_run[2] = {0, 0};
    int passed = 0, failed = 0, skipped = 0, header = 0, rc = 0;
    memset(refs, 0, sizeof refs);

    /* finite differences of cpu-ref itself, on tiny f32 shapes */
    const int64_t nq = s->batch * s->heads * s->seqlen_q * s->head_dim;
    const int64_t nk = s->batch * s->kv_heads * s->seqlen_k * s->head_dim;
    for (int i = 0; i < plan->n && rc == 0; i++) {
        fw_row row;
        fw_row_init(&row);
        row.s = *s;
        snprintf(row.backend, sizeof row.backend, "%s", plan->name[i]);
        fw_args_device_name(plan->device[i], row.device, sizeof row.device);
        const int di = plan->device[i].kind == FW_DEVICE_CUDA;
        if (!have_run[di]) {
            fw_case c = fw_shape_case(s, plan->device[i], cli->seed, 1);
            c.precision = prec; /* the harness's contract for the ragged rows */
            char msg[1024] = "";
            fw_status st = fw_run_alloc(&runs[di], &c, msg, sizeof msg);
            if (st != FW_OK) {
                const int usage = st == FW_ERR_INVALID_SHAPE || st == FW_ERR_INVALID_VALUE || st == FW_ERR_INVALID_STRIDE;
                fprintf(stderr, "flashwatt check: %s\n", msg);
                rc = usage ? 2 : 1;
                break;
            }
            st = fw_bwd_alloc(&runs[di], &bwds[di], cli->seed, msg, sizeof msg);
            if (st == FW_OK) {
                fw_progress_begin("check", "cpu-ref's float64 backward (the reference gradients)");
                st = grad_ref_make(&runs[di], &bwds[di], &refs[di], msg, sizeof msg);
                fw_progress_end();
            }
            if (st != FW_OK) {
                fprintf(stderr, "flashwatt check: backward setup: %s\n", msg[0] ? msg : fw_status_string(st));
                if (bwds[di].host_dout) fw_bwd_free(&runs[di], &bwds[di]);
                grad_ref_free(&refs[di]);
                fw_run_free(&runs[di]);
                rc = 1;
                break;
            }
            have_run[di] = 1;
            if (s->dtype == FW_F32 && !s->serving && nq <= 4096 && nk <= 4096 && !have_run[!di]) {
                const double worst = finite_differences(&refs[di], &runs[di].c.params);
                const int ok = worst <= 1e-3;
                printf("finite differences of cpu-ref (central, eps 1e-2, sum(O*dO)): max |fd - grad| %.2e (tol 1e-3): %s\n",
                       worst, ok ? "pass" : "FAIL");
                if (ok) passed++;
                else failed++;
            }
        }
        fw_run *r = &runs[di];
        fw_bwd *bw = &bwds[di];
        const grad_ref *g = &refs[di];
        if (!header) { fw_report_check_header(stdout); header = 1; }

        skip_unless_runnable(&row, r, bw);
        fw_status st = FW_OK;
        if (row.status != FW_ROW_SKIPPED) {
            st = fw_context_set_backend(ctx, row.backend);
            if (st == FW_OK) st = fw_bwd_poison(r, bw);
            if (st == FW_OK) {
                fw_progress_begin("check", "%s backward", row.backend);
                st = fw_bwd_run(r, bw, ctx);
                fw_progress_end();
            }
            if (st == FW_ERR_NOT_IMPLEMENTED) {
                snprintf(row.note, sizeof row.note, "no backward");
                row.status = FW_ROW_SKIPPED;
            } else if (st == FW_ERR_UNSUPPORTED) { /* e.g. a --precision the backend has no mode for */
                snprintf(row.note, sizeof row.note, "does not support this problem: %.220s", fw_context_last_error(ctx));
                row.status = FW_ROW_SKIPPED;
            }
        }
        if (row.status == FW_ROW_SKIPPED) {
            if (named) { row.status = FW_ROW_ERROR; failed++; }
            else skipped++;
            fw_report_check_row(stdout, &row);
            continue;
        }
        if (st == FW_OK) st = fw_bwd_fetch(r, bw);
        if (st != FW_OK) {
            snprintf(row.note, sizeof row.note, "%s: %s", fw_status_string(st), fw_context_last_error(ctx));
            row.status = FW_ROW_ERROR;
            failed++;
            fw_report_check_row(stdout, &row);
            continue;
        }
        if (s->serving) {
            failed += ragged_grad_rows(r, bw, &row, &passed);
            continue;
        }
        const void *host[3] = {bw->host_dq, bw->host_dk, bw->host_dv};
        const fw_tensor *t[3] = {&bw->dq, &bw->dk, &bw->dv};
        double M = 0; /* the largest reference gradient: tf32's noise on gradients that vanish analytically */
        for (int a = 0; a < 3; a++) {
            const int64_t n = t[a]->size[0] * t[a]->size[1] * t[a]->size[2] * t[a]->size[3];
            for (int64_t x = 0; x < n; x++)
                if (fabs(g->g[a][x]) > M) M = fabs(g->g[a][x]);
        }
        for (int a = 0; a < 3; a++) {
            fw_row gr = row;
            const int64_t B = t[a]->size[0], H = t[a]->size[1], S = t[a]->size[2], D = t[a]->size[3];
            double worst = 0, scale = 0, num = 0, den = 0;
            long unwritten = 0;
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t x = 0; x < S; x++)
                        for (int64_t d = 0; d < D; d++) {
                            const double y = g->g[a][((b * H + h) * S + x) * D + d];
                            const double v = fw_load_f32(host[a], t[a]->dtype,
                                                         b * t[a]->stride[0] + h * t[a]->stride[1] + x * t[a]->stride[2] + d);
                            if (isnan(v)) unwritten++; /* poison still there, or a NaN the reference has not */
                            const double diff = fabs(v - y);
                            if (!(diff <= worst)) worst = diff;
                            if (fabs(y) > scale) scale = fabs(y);
                            num += diff * diff;
                            den += y * y;
                        }
            gr.checked = 1;
            gr.max_abs_err = worst;
            gr.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
            gr.tol = s->dtype == FW_F32 ? rel_tol * scale + (tf32 ? 1e-3 * M : 0) + 1e-6 : rel_tol * scale;
            gr.pass = unwritten == 0 && worst <= gr.tol;
            snprintf(gr.note, sizeof gr.note, "%s", gname[a]);
            if (unwritten) snprintf(gr.note, sizeof gr.note, "%s: %ld NaN or unwritten", gname[a], unwritten);
            if (gr.pass) passed++;
            else failed++;
            fw_report_check_row(stdout, &gr);
        }
    }
    for (int d = 0; d < 2; d++)
        if (have_run[d]) {
            grad_ref_free(&refs[d]);
            fw_bwd_free(&runs[d], &bwds[d]);
            fw_run_free(&runs[d]);
        }
    if (rc) return rc;
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (passed == 0 && failed == 0) {
        fprintf(stderr, "flashwatt check: no backend could run this backward\n");
        return 1;
    }
    return failed ? 1 : 0;
}

int fw_cmd_check(int argc, char **argv)
{
    fw_cli cli;
    char err[1024];
    if (fw_args_parse(argc, argv, 1, 0, &cli, err, sizeof err)) {
        fprintf(stderr, "flashwatt check: %s\n", err);
        return 2;
    }
    if (cli.help) {
        fw_usage_check(stdout);
        return 0;
    }
    fw_plan plan;
    int rc = fw_args_plan(&cli, 0, NULL, NULL, 1, &plan, err, sizeof err);
    if (rc) {
        fprintf(stderr, "flashwatt check: %s\n", err);
        return rc;
    }
    fw_precision prec;
    if ((rc = fw_args_precision(&cli, "check", &prec, err, sizeof err))) {
        fprintf(stderr, "flashwatt check: %s\n", err);
        return rc;
    }
    const fw_shape s = shape_of(&cli);
    char text[256];
    printf("flashwatt check: %s, seed %llu%s%s%s%s\n", fw_shape_text(&s, text, sizeof text), (unsigned long long)cli.seed,
           cli.lse ? ", with lse" : "", cli.backward ? ", backward" : "", prec ? ", precision " : "",
           prec ? fw_precision_name(prec) : "");

    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) {
        fprintf(stderr, "flashwatt check: cannot create a context\n");
        return 1;
    }
    if (fw_context_set_threads(ctx, s.threads) != FW_OK) {
        fprintf(stderr, "flashwatt check: --threads: %s\n", fw_context_last_error(ctx));
        fw_context_destroy(ctx);
        return 2;
    }
    fw_context_set_precision(ctx, prec);

    if (cli.backward) {
        rc = check_backward(&cli, &s, &plan, prec, ctx);
        fw_context_destroy(ctx);
        return rc;
    }

    /* one run (inputs + reference) per device, shared by that device's backends */
    fw_run runs[2];
    int have_run[2] = {0, 0};
    int passed = 0, failed = 0, skipped = 0, header = 0;
    rc = 0;
    for (int i = 0; i < plan.n && rc == 0; i++) {
        fw_row row;
        fw_row_init(&row);
        row.s = s;
        snprintf(row.backend, sizeof row.backend, "%s", plan.name[i]);
        fw_args_device_name(plan.device[i], row.device, sizeof row.device);
        const int di = plan.device[i].kind == FW_DEVICE_CUDA;
        const int named = cli.backends.n > 0 && strcmp(cli.backends.v[0], "all") != 0;
        if (!have_run[di]) {
            fw_case c = fw_shape_case(&s, plan.device[i], cli.seed, cli.lse);
            c.precision = prec; /* the contract the comparison holds */
            char msg[1024];
            fw_status st = fw_run_alloc(&runs[di], &c, msg, sizeof msg);
            if (st != FW_OK) {
                const int usage = st == FW_ERR_INVALID_SHAPE || st == FW_ERR_INVALID_VALUE ||
                                  st == FW_ERR_INVALID_STRIDE;
                fprintf(stderr, "flashwatt check: %s\n", msg);
                rc = usage ? 2 : 1;
                break;
            }
            have_run[di] = 1;
        }
        fw_run *r = &runs[di];
        if (!header) { fw_report_check_header(stdout); header = 1; }

        skip_unless_runnable(&row, r, NULL);
        if (row.status == FW_ROW_SKIPPED) {
            /* a backend the user named must run; the default set skips what does not apply */
            if (named) { row.status = FW_ROW_ERROR; failed++; }
            else skipped++;
            fw_report_check_row(stdout, &row);
            continue;
        }
        fw_status st = fw_context_set_backend(ctx, row.backend);
        if (st == FW_OK) st = fw_run_poison(r);
        if (st == FW_OK) {
            fw_progress_begin("check", "%s forward", row.backend);
            st = fw_run_forward(r, ctx);
            fw_progress_end();
        }
        if (st == FW_ERR_UNSUPPORTED) { /* e.g. a --precision the backend has no mode for */
            snprintf(row.note, sizeof row.note, "does not support this problem: %.220s", fw_context_last_error(ctx));
            if (named) { row.status = FW_ROW_ERROR; failed++; }
            else { row.status = FW_ROW_SKIPPED; skipped++; }
            fw_report_check_row(stdout, &row);
            continue;
        }
        if (st != FW_OK) {
            snprintf(row.note, sizeof row.note, "%s: %s", fw_status_string(st), fw_context_last_error(ctx));
            row.status = FW_ROW_ERROR;
            failed++;
            fw_report_check_row(stdout, &row);
            continue;
        }
        fw_errors e;
        fw_progress_begin("check", "%s against the float64 reference%s", row.backend,
                          r->have_ref ? "" : " (computing it first, on the CPU)");
        st = fw_run_compare(r, &e);
        fw_progress_end();
        if (st != FW_OK) {
            snprintf(row.note, sizeof row.note, "comparison failed: %s", fw_status_string(st));
            row.status = FW_ROW_ERROR;
            failed++;
            fw_report_check_row(stdout, &row);
            continue;
        }
        row.checked = 1;
        row.pass = e.pass;
        row.max_abs_err = e.max_abs;
        row.rel_l2 = e.rel_l2;
        row.tol = e.tol;
        size_t n = 0;
        if (e.unwritten) n += (size_t)snprintf(row.note + n, sizeof row.note - n, "%ld unwritten; ", e.unwritten);
        if (e.cache_mismatch && n < sizeof row.note)
            n += (size_t)snprintf(row.note + n, sizeof row.note - n, "%ld cache elements wrong; ", e.cache_mismatch);
        if (e.stray) n += (size_t)snprintf(row.note + n, sizeof row.note - n, "%ld stray writes; ", e.stray);
        if (e.nan_mismatch) n += (size_t)snprintf(row.note + n, sizeof row.note - n, "%ld NaN mismatches; ", e.nan_mismatch);
        if (r->lse && n < sizeof row.note)
            n += (size_t)snprintf(row.note + n, sizeof row.note - n, "lse err %.2e; ", e.lse_max_abs);
        if (s.dtype != FW_F32 && n < sizeof row.note)
            n += (size_t)snprintf(row.note + n, sizeof row.note - n, "input-dtype emulation err %.2e; ", e.lowp_err);
        if (n >= 2 && n < sizeof row.note) row.note[n - 2] = 0;
        if (e.pass) passed++;
        else failed++;
        fw_report_check_row(stdout, &row);
    }
    for (int d = 0; d < 2; d++)
        if (have_run[d]) fw_run_free(&runs[d]);
    fw_context_destroy(ctx);
    if (rc) return rc;
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (passed == 0 && failed == 0) {
        fprintf(stderr, "flashwatt check: no backend could run this problem\n");
        return 1;
    }
    return failed ? 1 : 0;
}
