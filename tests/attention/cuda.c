/* The checks and timings that need the CUDA runtime itself: split-KV workspace reuse across calls,
 * streams and graphs; device time per call from a CUDA graph; the backward's store strategy under a
 * memory budget; cuda-flash's staging of misaligned base pointers. Without CUDA they have nothing to do. */
#include <stdlib.h>
#include <string.h>
#include "att.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifndef FW_HAVE_CUDA
void att_cuda_workspace_reuse(const att_opts *o, att_out *out) { (void)o; (void)out; }
double att_cuda_graph_ms(fw_run *r, fw_timed_call call, void *arg, void **stream_slot, double per_call_ms)
{
    (void)r; (void)call; (void)arg; (void)stream_slot; (void)per_call_ms;
    return -1.0;
}
void att_cuda_store_check(fw_run *r, fw_bwd *g, const fw_backend *b, const char *label, att_out *out)
{
    (void)r; (void)g; (void)b; (void)label; (void)out;
}
void att_cuda_stage_forward_checks(const att_opts *o, att_out *out) { (void)o; (void)out; }
void att_cuda_stage_backward_checks(const att_opts *o, att_out *out) { (void)o; (void)out; }
#else

#define CU_OK(call) ((call) == cudaSuccess)

/* ---- workspace reuse -------------------------------------------------------------------------- */
typedef struct reuse_arg {
    const fw_backend *b;
    fw_precision prec;
    const fw_config *cfg; /* NULL: the backend's own choice */
    cudaStream_t stream;
    char err[512];
} reuse_arg;

static fw_status table_forward(fw_run *r, reuse_arg *a)
{
    fw_problem p = r->problem;
    p.precision = a->prec;
    fw_exec ex = {1, (void *)a->stream, a->err, sizeof a->err, &att_o.knobs};
    return a->b->forward(&p, a->cfg, &ex);
}

/* r's device output against ref's reference (ref == r, or a run of the same shape whose inputs r's
 * tensors now hold: the output is copied into ref's buffers first). */
static void check_output(fw_run *r, fw_run *ref, fw_precision prec, const char *what, const char *cfg, att_out *out)
{
    const size_t es = fw_dtype_size(r->c.dtype), ln = (size_t)(r->c.batch * r->c.heads * r->c.seqlen_q);
    if (ref != r && (!CU_OK(cudaMemcpy(ref->o.data, r->o.data, r->o_elems * es, cudaMemcpyDeviceToDevice)) ||
                     !CU_OK(cudaMemcpy(ref->lse, r->lse, ln * sizeof(float), cudaMemcpyDeviceToDevice)))) {
        att_report(out, 0, "workspace reuse %s %s: copy failed", what, cfg);
        return;
    }
    fw_errors e;
    ref->c.precision = prec;
    fw_status st = fw_run_compare(ref, &e);
    att_report(out, st == FW_OK && e.pass, "workspace reuse %s %s %s: max_abs %.3g tol %.3g unwritten %ld stray %ld",
               what, att_precision_name(prec), cfg, e.max_abs, e.tol, e.unwritten, e.stray);
}

static int upload(fw_run *r)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    return CU_OK(cudaMemcpy(r->q.data, r->host_q, r->q_elems * es, cudaMemcpyHostToDevice)) &&
           CU_OK(cudaMemcpy(r->k.data, r->host_k, r->kv_elems * es, cudaMemcpyHostToDevice)) &&
           CU_OK(cudaMemcpy(r->v.data, r->host_v, r->kv_elems * es, cudaMemcpyHostToDevice));
}

/* Calls t0, t1, t0 on one stream, then a graph of both calls replayed twice (input 1's values copied
 * into input 0's tensors between the replays): each output must be its own input's answer. */
static void reuse_config(fw_run r[2], reuse_arg *a, const char *cfg, att_out *out)
{
    char what[64];
    for (int i = 0; i < 3; i++) {
        fw_run *x = &r[i & 1];
        snprintf(what, sizeof what, "call %d (input %d)", i + 1, i & 1);
        fw_status st = fw_run_poison(x);
        a->stream = NULL;
        if (st == FW_OK) st = table_forward(x, a);
        if (st == FW_OK) st = fw_run_sync(x);
        if (st != FW_OK) {
            att_report(out, 0, "workspace reuse %s %s: %s: %s", what, cfg, fw_status_string(st), a->err);
            return;
        }
        check_output(x, x, a->prec, what, cfg, out);
    }
    cudaStream_t s;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge;
    if (!CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))) {
        att_report(out, 0, "workspace reuse: cudaStreamCreate failed");
        return;
    }
    a->stream = s;
    fw_status st = FW_OK;
    if (!CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal))) st = FW_ERR_DEVICE;
    for (int i = 0; i < 2 && st == FW_OK; i++) st = table_forward(&r[i], a);
    if (!CU_OK(cudaStreamEndCapture(s, &g)) && st == FW_OK) st = FW_ERR_DEVICE;
    if (st != FW_OK || !CU_OK(cudaGraphInstantiate(&ge, g, 0))) {
        att_report(out, 0, "workspace reuse graph capture %s: %s: %s", cfg, fw_status_string(st), a->err);
    } else {
        const size_t es = fw_dtype_size(r[0].c.dtype);
        for (int rep = 0; rep < 2; rep++) {
            if (rep == 1 && (!CU_OK(cudaMemcpy(r[0].q.data, r[1].q.data, r[0].q_elems * es, cudaMemcpyDeviceToDevice)) ||
                             !CU_OK(cudaMemcpy(r[0].k.data, r[1].k.data, r[0].kv_elems * es, cudaMemcpyDeviceToDevice)) ||
                             !CU_OK(cudaMemcpy(r[0].v.data, r[1].v.data, r[0].kv_elems * es, cudaMemcpyDeviceToDevice)))) {
                att_report(out, 0, "workspace reuse: input copy failed");
                break;
            }
            fw_run_poison(&r[0]);
            fw_run_poison(&r[1]);
            if (!CU_OK(cudaGraphLaunch(ge, s)) || !CU_OK(cudaStreamSynchronize(s)) || !CU_OK(cudaGetLastError())) {
                att_report(out, 0, "workspace reuse graph replay %d %s: %s", rep + 1, cfg,
                           cudaGetErrorString(cudaGetLastError()));
                break;
            }
            /* output 0 of the second replay answers input 1: checked against run 1's reference, in run 1's
             * buffers once run 1's own output has been checked */
            snprintf(what, sizeof what, "graph replay %d out 1", rep + 1);
            check_output(&r[1], &r[1], a->prec, what, cfg, out);
            snprintf(what, sizeof what, "graph replay %d out 0", rep + 1);
            check_output(&r[0], rep == 1 ? &r[1] : &r[0], a->prec, what, cfg, out);
        }
        cudaGraphExecDestroy(ge);
        if (!upload(&r[0])) att_report(out, 0, "workspace reuse: restoring input 0 failed");
    }
    if (g) cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    a->stream = NULL;
}

/* The kernels that split K/V into a workspace keep it with the stream between calls (flags of each
 * call's epoch, no reset), so two inputs of one shape in turn on one stream must each get their own
 * answer, and so must a CUDA graph of both calls replayed with new inputs (a graph takes pool memory
 * and zeroes its flags); then the streams' scratch is given back and made anew. Every backend that
 * runs the case in tf32 or 3xtf32, each configuration (--quick: its own choice). */
void att_cuda_workspace_reuse(const att_opts *o, att_out *out)
{
    fw_run r[2];
    char msg[512];
    for (int i = 0; i < 2; i++) {
        fw_case c = fw_case_shape(2, 4, 2, 512, 512, 64, FW_F32, o->seed + 77 + (uint64_t)i);
        c.device = o->device;
        if (fw_run_alloc(&r[i], &c, msg, sizeof msg) != FW_OK) {
            att_report(out, 0, "workspace reuse setup: %s", msg);
            if (i) fw_run_free(&r[0]);
            return;
        }
    }
    const fw_precision precs[2] = {FW_PRECISION_TF32, FW_PRECISION_3XTF32};
    const fw_backend *bs[16];
    const int nb = att_backends(bs, 16);
    for (int bi = 0; bi < nb; bi++)
        for (int k = 0; k < 2; k++) {
            fw_problem p = r[0].problem;
            p.precision = precs[k];
            char why[256];
            if (!bs[bi]->supports(&p, why, sizeof why)) continue;
            reuse_arg a;
            memset(&a, 0, sizeof a);
            a.b = bs[bi];
            a.prec = precs[k];
            fw_config cfgs[FW_MAX_CONFIGS];
            memset(cfgs, 0, sizeof cfgs);
            const int n = o->quick || !bs[bi]->configs ? 0 : bs[bi]->configs(&p, cfgs, FW_MAX_CONFIGS);
            for (int c = 0; c <= n; c++) { /* every configuration, then (c == n) the backend's own choice */
                char name[96];
                snprintf(name, sizeof name, "%.32s %.47s", bs[bi]->name, c < n ? cfgs[c].name : "own-choice");
                a.cfg = c < n ? &cfgs[c] : NULL;
                reuse_config(r, &a, name, out);
            }
            /* the streams' scratch given back (as a process would before it lets the device go), then made anew */
            cudaDeviceSynchronize();
            fw_cuda_ws_cache_release();
            a.cfg = NULL;
            a.stream = NULL;
            fw_status st = fw_run_poison(&r[1]);
            if (st == FW_OK) st = table_forward(&r[1], &a);
            if (st == FW_OK) st = fw_run_sync(&r[1]);
            if (st != FW_OK) att_report(out, 0, "workspace reuse after release %s: %s", bs[bi]->name, a.err);
            else check_output(&r[1], &r[1], a.prec, "after release", bs[bi]->name, out);
        }
    fw_run_free(&r[0]);
    fw_run_free(&r[1]);
}

/* ---- device time per call from a graph -------------------------------------------------------- */
#define NSET 4 /* input copies: NSET·(Q, K, V, O) is past the L2 at every benchmark shape */

static void point_at(fw_run *r, void *const set[4])
{
    r->q.data = set[0]; r->k.data = set[1]; r->v.data = set[2]; r->o.data = set[3];
    r->problem.q = set[0]; r->problem.k = set[1]; r->problem.v = set[2]; r->problem.o = set[3];
}

double att_cuda_graph_ms(fw_run *r, fw_timed_call call, void *arg, void **stream_slot, double per_call_ms)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    const size_t n[4] = {r->q_elems, r->kv_elems, r->kv_elems, r->o_elems};
    void *sets[NSET][4] = {{r->q.data, r->k.data, r->v.data, r->o.data}};
    int ok = 1;
    for (int i = 1; i < NSET; i++)
        for (int j = 0; j < 4; j++) {
            sets[i][j] = NULL;
            ok = ok && CU_OK(cudaMalloc(&sets[i][j], n[j] * es)) &&
                 CU_OK(cudaMemcpy(sets[i][j], sets[0][j], n[j] * es, cudaMemcpyDeviceToDevice));
        }
    int G = (int)(2.0 / (per_call_ms > 0.001 ? per_call_ms : 0.001)); /* ~2 ms of work per replay */
    G = G < NSET ? NSET : (G > 256 ? 256 : G);
    cudaStream_t s = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    double med = -1;
    ok = ok && CU_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (ok && CU_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal))) {
        *stream_slot = (void *)s;
        fw_status st = FW_OK;
        for (int i = 0; i < G && st == FW_OK; i++) {
            point_at(r, sets[i % NSET]);
            st = call(r, arg);
        }
        point_at(r, sets[0]);
        *stream_slot = NULL;
        ok = CU_OK(cudaStreamEndCapture(s, &g)) && st == FW_OK && CU_OK(cudaGraphInstantiate(&ge, g, 0));
    }
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (ok && CU_OK(cudaEventCreate(&e0)) && CU_OK(cudaEventCreate(&e1))) {
        double ms[16];
        enum { R = 11 };
        for (int rep = -2; rep < R && ok; rep++) {
            float f = 0;
            ok = CU_OK(cudaEventRecord(e0, s)) && CU_OK(cudaGraphLaunch(ge, s)) && CU_OK(cudaEventRecord(e1, s)) &&
                 CU_OK(cudaEventSynchronize(e1)) && CU_OK(cudaEventElapsedTime(&f, e0, e1));
            if (rep >= 0) ms[rep] = f / G;
        }
        if (ok) { /* median of R */
            for (int i = 1; i < R; i++)
                for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
                    const double x = ms[j];
                    ms[j] = ms[j - 1];
                    ms[j - 1] = x;
                }
            med = ms[R / 2];
        }
    }
    (void)cudaGetLastError(); /* a failed capture leaves -1, not a sticky error for the next timing */
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    if (s) cudaStreamDestroy(s);
    for (int i = 1; i < NSET; i++)
        for (int j = 0; j < 4; j++) cudaFree(sets[i][j]);
    return med;
}

/* ---- the backward's store strategy ------------------------------------------------------------- */
void att_cuda_store_check(fw_run *r, fw_bwd *g, const fw_backend *b, const char *label, att_out *out)
{
    const fw_case *c = &r->c;
    char err[512] = "";
    fw_problem p;
    fw_bwd_mat_plan pl;
    if (fw_validate_backward(&r->q, &r->k, &r->v, &r->o, r->lse, &g->dout, &g->dq, &g->dk, &g->dv, &c->params, &p, err,
                             sizeof err) != FW_OK) {
        att_report(out, 0, "%s store [%s]: validate: %s", b->name, label, err);
        return;
    }
    fw_bwd_materialize_plan(&p, &pl);
    p.memory_budget = pl.fixed_bytes + 3 * pl.slice_bytes + 1024; /* the fixed part and 3 slices */
    p.deterministic = 1;
    /* the rule stores only for deterministic f32 at head_dim > 64; elsewhere it must decline */
    const int expect = c->dtype == FW_F32 && c->head_dim > 64 && c->seqlen_q * c->seqlen_k <= FW_BWD_MATERIALIZE_MAX_PAIRS;
    if (!expect && fw_bwd_materialize_wanted(&p, NULL)) {
        att_report(out, 0, "%s store [%s]: the rule chose the store path outside deterministic f32, D > 64", b->name, label);
        return;
    }
    if (expect && (!fw_bwd_materialize_wanted(&p, NULL) || !fw_bwd_materialize_plan(&p, &pl) ||
                   pl.units_per_chunk * pl.heads_per_pass > 3)) {
        att_report(out, 0, "%s store [%s]: budget %zu: plan fits %d, %lld units x %lld heads per chunk", b->name, label,
                   p.memory_budget, pl.fits, (long long)pl.units_per_chunk, (long long)pl.heads_per_pass);
        return;
    }
    const size_t need = expect ? pl.fixed_bytes + pl.chunk_bytes : 0;
    fw_context *ctx = NULL;
    fw_status st = fw_context_create(&ctx);
    if (st == FW_OK) {
        fw_context_set_backend(ctx, b->name);
        fw_context_set_deterministic(ctx, 1);
        fw_context_set_memory_budget(ctx, p.memory_budget);
        st = fw_bwd_poison(r, g);
        if (st == FW_OK && !CU_OK(cudaDeviceSynchronize())) st = FW_ERR_DEVICE;
        fw_cuda_workspace_reset_peak();
        if (st == FW_OK) st = fw_bwd_run(r, g, ctx);
        if (st != FW_OK) snprintf(err, sizeof err, "%s", fw_context_last_error(ctx));
    }
    fw_context_destroy(ctx);
    fw_bwd_errors e;
    if (st == FW_OK) st = fw_bwd_compare(r, g, &e);
    if (st != FW_OK) {
        att_report(out, 0, "%s store [%s]: %s: %s", b->name, label, fw_status_string(st), err);
        return;
    }
    const size_t peak = fw_cuda_workspace_peak();
    att_report(out, e.pass && peak >= need,
               "%s store [%s] budget %zu (%s) dq %.2e/%.2e dk %.2e/%.2e dv %.2e/%.2e workspace peak %zu (need %zu)",
               b->name, label, p.memory_budget, expect ? "stores" : "recomputes", e.g[0].max_abs, e.g[0].tol,
               e.g[1].max_abs, e.g[1].tol, e.g[2].max_abs, e.g[2].tol, peak, need);
}

/* ---- staging: base pointers off the 16-byte boundary ------------------------------------------- */
/* *moved = tensor t (n elements from its data) copied one element further on into a buffer of its own (*buf): every
 * row then starts off the 16-byte boundary, whatever the strides. */
static int shift_copy(const fw_tensor *t, size_t n, fw_tensor *moved, void **buf)
{
    const size_t es = fw_dtype_size(t->dtype);
    *moved = *t;
    *buf = NULL;
    if (!CU_OK(cudaMalloc(buf, (n + 1) * es))) return 0;
    moved->data = (char *)*buf + es;
    return CU_OK(cudaMemcpy(moved->data, t->data, n * es, cudaMemcpyDeviceToDevice));
}

/* The shifted copy's contents back into t (the harness compares t's buffer, padding included). */
static int shift_back(const fw_tensor *moved, size_t n, fw_tensor *t)
{
    return CU_OK(cudaMemcpy(t->data, moved->data, n * fw_dtype_size(t->dtype), cudaMemcpyDeviceToDevice));
}

typedef struct stage_case {
    int64_t H, Hkv, Lq, Lk, D;
    int causal, pad;
    fw_dtype dt;
} stage_case;

static const stage_case stage_cases[] = {
    {4, 2, 130, 190, 64, 1, 0, FW_F16},  /* only the pointers break the rule */
    {4, 1, 97, 211, 59, 0, 3, FW_BF16},  /* and the head dim and the strides */
    {8, 2, 1, 400, 64, 0, 0, FW_BF16},   /* decode: the serving kernel on the staged problem */
};

static fw_status stage_case_alloc(const att_opts *o, const stage_case *sc, uint64_t seed, fw_run *r, char *label,
                                  size_t len, char *msg, size_t msg_len)
{
    fw_case c = fw_case_shape(1, sc->H, sc->Hkv, sc->Lq, sc->Lk, sc->D, sc->dt, seed);
    c.device = o->device;
    c.params.causal = sc->causal;
    c.pad = sc->pad;
    char cl[256];
    snprintf(label, len, "headdims: base pointers + 1 element %s", fw_case_label(&c, cl, sizeof cl));
    return fw_run_alloc(r, &c, msg, msg_len);
}

/* The forward of each stage case on cuda-flash by name with every tensor moved one element; then a context with
 * a workspace (no allocation) refuses a call that would stage, with the reason, and still runs one that would
 * not. */
void att_cuda_stage_forward_checks(const att_opts *o, att_out *out)
{
    const int n = o->quick ? 1 : (int)(sizeof stage_cases / sizeof stage_cases[0]);
    for (int i = 0; i < n; i++) {
        char label[512], msg[512];
        fw_run r;
        if (stage_case_alloc(o, &stage_cases[i], o->seed + 300 + (uint64_t)i, &r, label, sizeof label, msg,
                             sizeof msg) != FW_OK) {
            att_report(out, 0, "[%s] setup: %s", label, msg);
            continue;
        }
        fw_context *ctx = NULL;
        fw_tensor t[4];
        void *buf[4] = {NULL, NULL, NULL, NULL};
        const fw_tensor *src[4] = {&r.q, &r.k, &r.v, &r.o};
        const size_t elems[4] = {r.q_elems, r.kv_elems, r.kv_elems, r.o_elems};
        fw_status st = fw_run_poison(&r);
        for (int j = 0; j < 4 && st == FW_OK; j++)
            if (!shift_copy(src[j], elems[j], &t[j], &buf[j])) st = FW_ERR_DEVICE;
        if (st == FW_OK) st = fw_context_create(&ctx);
        if (st == FW_OK) st = fw_context_set_backend(ctx, "cuda-flash");
        if (st == FW_OK) st = fw_attention_forward(ctx, &t[0], &t[1], &t[2], &t[3], r.lse, &r.c.params);
        snprintf(msg, sizeof msg, "%s", ctx ? fw_context_last_error(ctx) : "");
        if (st == FW_OK && (!CU_OK(cudaDeviceSynchronize()) || !shift_back(&t[3], r.o_elems, &r.o))) st = FW_ERR_DEVICE;
        fw_errors e;
        if (st == FW_OK) st = fw_run_compare(&r, &e);
        if (st != FW_OK) att_report(out, 0, "cuda-flash [%s]: %s: %s", label, fw_status_string(st), msg);
        else
            att_report(out, e.pass, "cuda-flash [%s] max_abs %.3g tol %.3g lse %.3g unwritten %ld stray %ld", label,
                       e.max_abs, e.tol, e.lse_max_abs, e.unwritten, e.stray);
        for (int j = 0; j < 4; j++) cudaFree(buf[j]);
        fw_context_destroy(ctx);
        fw_run_free(&r);
    }
    /* a context workspace: head_dim 59 refused with the reason, 64 runs */
    void *ws = NULL;
    fw_context *ctx = NULL;
    if (!CU_OK(cudaMalloc(&ws, 1 << 20)) || fw_context_create(&ctx) != FW_OK ||
        fw_context_set_backend(ctx, "cuda-flash") != FW_OK || fw_context_set_workspace(ctx, ws, 1 << 20) != FW_OK) {
        att_report(out, 0, "headdims: workspace refusal setup failed");
    } else {
        for (int d = 0; d < 2; d++) {
            fw_case c = fw_case_shape(1, 2, 2, 100, 120, d ? 64 : 59, FW_F16, o->seed + 310 + (uint64_t)d);
            c.device = o->device;
            char label[256], msg[512];
            fw_case_label(&c, label, sizeof label);
            fw_run r;
            if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
                att_report(out, 0, "headdims: workspace [%s] setup: %s", label, msg);
                continue;
            }
            fw_status st = fw_run_poison(&r);
            if (st == FW_OK) st = fw_run_forward(&r, ctx);
            const char *why = fw_context_last_error(ctx);
            if (!d) {
                att_report(out, st == FW_ERR_UNSUPPORTED && strstr(why, "head_dim 59") && strstr(why, "workspace"),
                           "headdims: cuda-flash with a context workspace refuses staging [%s]: %s: %s", label,
                           fw_status_string(st), why);
            } else {
                fw_errors e;
                if (st == FW_OK) st = fw_run_compare(&r, &e);
                att_report(out, st == FW_OK && e.pass,
                           "headdims: cuda-flash with a context workspace runs what needs no staging [%s]: %s %s",
                           label, fw_status_string(st), why);
            }
            fw_run_free(&r);
        }
    }
    fw_context_destroy(ctx);
    cudaFree(ws);
}

/* The backward of the first two stage cases on cuda-flash by name, every tensor (q, k, v, o, dout, dq, dk, dv)
 * moved one element, in both dQ modes. */
void att_cuda_stage_backward_checks(const att_opts *o, att_out *out)
{
    const int n = o->quick ? 1 : 2;
    for (int i = 0; i < n; i++) {
        char label[512], msg[512];
        fw_run r;
        fw_bwd g;
        if (stage_case_alloc(o, &stage_cases[i], o->seed + 320 + (uint64_t)i, &r, label, sizeof label, msg,
                             sizeof msg) != FW_OK) {
            att_report(out, 0, "[%s] setup: %s", label, msg);
            continue;
        }
        if (fw_bwd_alloc(&r, &g, r.c.seed, msg, sizeof msg) != FW_OK) {
            att_report(out, 0, "[%s] gradient setup: %s", label, msg);
            fw_run_free(&r);
            continue;
        }
        fw_context *ctx = NULL;
        fw_status st = fw_context_create(&ctx);
        if (st == FW_OK) st = fw_context_set_backend(ctx, "cuda-flash");
        for (int det = 0; det < 2 && st == FW_OK; det++) {
            fw_tensor t[8];
            void *buf[8] = {NULL};
            fw_tensor *src[8] = {&r.q, &r.k, &r.v, &r.o, &g.dout, &g.dq, &g.dk, &g.dv};
            const size_t elems[8] = {r.q_elems, r.kv_elems, r.kv_elems, r.o_elems, r.o_elems, r.q_elems, r.kv_elems,
                                     r.kv_elems};
            fw_status rs = fw_context_set_deterministic(ctx, det);
            if (rs == FW_OK) rs = fw_bwd_poison(&r, &g);
            for (int j = 0; j < 8 && rs == FW_OK; j++)
                if (!shift_copy(src[j], elems[j], &t[j], &buf[j])) rs = FW_ERR_DEVICE;
            if (rs == FW_OK)
                rs = fw_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], r.lse, &t[4], &t[5], &t[6], &t[7], &r.c.params);
            snprintf(msg, sizeof msg, "%s", fw_context_last_error(ctx));
            if (rs == FW_OK && !CU_OK(cudaDeviceSynchronize())) rs = FW_ERR_DEVICE;
            for (int j = 5; j < 8 && rs == FW_OK; j++)
                if (!shift_back(&t[j], elems[j], src[j])) rs = FW_ERR_DEVICE;
            fw_bwd_errors e;
            if (rs == FW_OK) rs = fw_bwd_compare(&r, &g, &e);
            if (rs != FW_OK) att_report(out, 0, "cuda-flash %s [%s]: %s: %s", det ? "determ" : "api", label,
                                        fw_status_string(rs), msg);
            else
                att_report(out, e.pass, "cuda-flash %s [%s] dq %.2e/%.2e dk %.2e/%.2e dv %.2e/%.2e (err/tol) unwritten %ld "
                           "stray %ld", det ? "determ" : "api", label, e.g[0].max_abs, e.g[0].tol, e.g[1].max_abs,
                           e.g[1].tol, e.g[2].max_abs, e.g[2].tol, e.g[0].unwritten + e.g[1].unwritten + e.g[2].unwritten,
                           e.g[0].stray + e.g[1].stray + e.g[2].stray);
            for (int j = 0; j < 8; j++) cudaFree(buf[j]);
        }
        if (st != FW_OK) att_report(out, 0, "[%s] context: %s", label, fw_status_string(st));
        fw_context_destroy(ctx);
        fw_bwd_free(&r, &g);
        fw_run_free(&r);
    }
}
#endif
