/* test_varlen_backward --device cuda: the ragged backward on the CUDA backends, cuda-flash (f16, bf16) and
 * cuda-flash-f32 (f32), each named explicitly, against cpu-ref's float64 backward under the harness's contract,
 * dq, dk, dv poisoned before every run and every element checked written:
 *  - the public API, deterministic off and on (on: twice, bit-identical), and "auto" (runs the named one);
 *  - every configuration configs() lists for the problem (each record with ragged kernels, both dQ modes), through
 *    the backend table; the deterministic ones twice (bit-identical) and against the same configuration's dense
 *    backward run on each sequence alone, bit for bit (the ragged kernels run the dense body on each sequence);
 *    sequences without keys get dq rows 0, sequences without queries dk, dv rows 0;
 *  - lengths 0, 1, primes, tile edges (64, 127..129), one long among short, Lq != Lk, 256 sequences (the
 *    offsets' search), GQA 1..8, head dims 64 and 128 and odd ones from 8 to 256, causal, windows and none,
 *    BSHD and padded rows;
 *  - NaN in one sequence's q, k, v and dout reaches no other sequence's gradients (bit-identical to a clean run in
 *    the deterministic configurations, finite in the atomic ones);
 *  - out-of-range device offsets: every configuration runs without a fault and writes nothing outside dq, dk, dv
 *    (guard bytes); fw_context_set_check_device_values refuses them by name before anything runs.
 * Included by test_varlen_backward.c (its helpers: ctx, next_seed, varlen_case, masked, gather, differ, nonzero). */
#ifndef FW_TEST_VARLEN_BACKWARD_GPU_H
#define FW_TEST_VARLEN_BACKWARD_GPU_H

#include "fw_harness_impl.h"

static fw_device gpu_dev;
static int gpu_quick;

static const char *gpu_backend_of(fw_dtype t) { return t == FW_F32 ? "cuda-flash-f32" : "cuda-flash"; }

/* dq, dk, dv host images as the last fetch left them. */
typedef struct grads {
    void *p[3];
    size_t n[3];
} grads;

static int grads_save(const fw_run *r, const fw_bwd *g, grads *s)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    const void *src[3] = {g->host_dq, g->host_dk, g->host_dv};
    const size_t n[3] = {r->q_elems * es, r->kv_elems * es, r->kv_elems * es};
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        s->n[i] = n[i];
        s->p[i] = malloc(n[i]);
        if (s->p[i]) memcpy(s->p[i], src[i], n[i]);
        ok = ok && s->p[i];
    }
    return ok;
}
static int grads_same(const fw_bwd *g, const grads *s)
{
    const void *now[3] = {g->host_dq, g->host_dk, g->host_dv};
    for (int i = 0; i < 3; i++)
        if (!s->p[i] || memcmp(s->p[i], now[i], s->n[i]) != 0) return 0;
    return 1;
}
static void grads_free(grads *s)
{
    for (int i = 0; i < 3; i++) free(s->p[i]);
    memset(s, 0, sizeof *s);
}

/* The run and gradients of c on the device; 0 (both freed, the failure reported) when either cannot be made. */
static int gpu_alloc(fw_case *c, fw_run *r, fw_bwd *g, const char *what)
{
    char msg[1024];
    c->device = gpu_dev;
    if (fw_run_alloc(r, c, msg, sizeof msg) != FW_OK) return fwt_case(0, "%s alloc: %s", what, msg);
    if (fw_bwd_alloc(r, g, c->seed, msg, sizeof msg) != FW_OK) {
        fw_run_free(r);
        return fwt_case(0, "%s gradient alloc: %s", what, msg);
    }
    return 1;
}

/* The problem backend b receives for r's ragged backward: the device tensors and the device offsets. */
static fw_status gpu_problem(const fw_run *r, const fw_bwd *g, fw_problem *p, char *err, size_t len)
{
    return fw_validate_varlen_backward(&r->q, &r->k, &r->v, &r->o, r->lse, &g->dout, &g->dq, &g->dk, &g->dv, &r->seqs,
                                       &r->c.params, p, err, len);
}

/* Configuration cfg_name of backend b on r (poisoned first), through the backend table, then a sync. */
static fw_status gpu_run_config(fw_run *r, fw_bwd *g, const fw_backend *b, const char *cfg_name, char *err, size_t len)
{
    fw_problem p;
    fw_status st = fw_bwd_poison(r, g);
    if (st == FW_OK) st = gpu_problem(r, g, &p, err, len);
    if (st != FW_OK) return st;
    p.deterministic = !strncmp(cfg_name, "bwd-deterministic", 17);
    p.precision = r->c.precision;
    fw_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.name, sizeof cfg.name, "%.*s", (int)sizeof cfg.name - 1, cfg_name);
    fw_exec ex = {1, NULL, err, len, &fw_knobs_defaults};
    err[0] = 0;
    st = b->backward(&p, &cfg, &ex);
    return st == FW_OK ? fw_run_sync(r) : st;
}

/* The comparison with the reference as one case (st: the run's status, err its message). */
static int gpu_report(fw_run *r, fw_bwd *g, fw_status st, const char *err, const char *what, const char *how,
                      const char *label)
{
    fw_bwd_errors e;
    if (st == FW_OK) st = fw_bwd_compare(r, g, &e);
    if (st != FW_OK) return fwt_case(0, "%s %s [%s]: %s: %s", what, how, label, fw_status_string(st), err);
    const fw_grad_errors *x = e.g;
    return fwt_case(e.pass, "%s %s [%s] dq %.2e/%.2e dk %.2e/%.2e dv %.2e/%.2e (err/tol) unwritten %ld stray %ld nan %ld",
                    what, how, label, x[0].max_abs, x[0].tol, x[1].max_abs, x[1].tol, x[2].max_abs, x[2].tol,
                    x[0].unwritten + x[1].unwritten + x[2].unwritten, x[0].stray + x[1].stray + x[2].stray,
                    x[0].nans + x[1].nans + x[2].nans);
}

/* The public API with the backend named (or "auto", which must run it). */
static fw_status gpu_run_api(fw_run *r, fw_bwd *g, const char *backend, const char *expect, int deterministic,
                             char *err, size_t len)
{
    fw_context_set_backend(ctx, backend);
    fw_context_set_deterministic(ctx, deterministic);
    fw_context_set_precision(ctx, r->c.precision);
    fw_status st = fw_bwd_poison(r, g);
    if (st == FW_OK) st = fw_bwd_run(r, g, ctx);
    snprintf(err, len, "%s", fw_context_last_error(ctx));
    if (st == FW_OK && strcmp(fw_context_last_backend(ctx), expect) != 0) {
        snprintf(err, len, "the call ran %s, not %s", fw_context_last_backend(ctx), expect);
        st = FW_ERR_INTERNAL;
    }
    fw_context_set_deterministic(ctx, 0);
    return st;
}

/* Device memory for the dense runs: n bytes, 256-byte aligned pieces. */
static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Configuration cfg_name of b run dense on each sequence of r alone (its rows gathered into contiguous tensors on
 * the device), bit for bit against the ragged result in g's host images (fetched); sequences without queries or keys
 * (no dense shape): their rows exactly 0. */
static void gpu_against_dense(fw_run *r, fw_bwd *g, const fw_backend *b, const char *cfg_name, const char *what,
                              const char *label)
{
    const fw_case *c = &r->c;
    const fw_problem *p = &r->problem; /* host images of the offsets */
    const int64_t H = c->heads, Hkv = c->kv_heads, D = c->head_dim;
    const size_t es = fw_dtype_size(c->dtype);
    long bad = 0, zero_bad = 0, failed = 0;
    char err[1024] = "";
    for (int64_t s = 0; s < p->batch && !failed; s++) {
        int64_t q0, lq;
        fw_seq_q(p, s, &q0, &lq);
        const int64_t k0 = p->cu_seqlens_k[s], lk = fw_seq_k_len(p, s);
        if (lq == 0 || lk == 0) {
            zero_bad += nonzero(g->host_dq, &g->dq, H, q0, lq, c->dtype);
            zero_bad += nonzero(g->host_dk, &g->dk, Hkv, k0, lk, c->dtype);
            zero_bad += nonzero(g->host_dv, &g->dv, Hkv, k0, lk, c->dtype);
            continue;
        }
        const size_t nq = (size_t)(H * lq * D) * es, nk = (size_t)(Hkv * lk * D) * es, nl = (size_t)(H * lq) * 4;
        const size_t sq = round256(nq), sk = round256(nk);
        char *host = (char *)malloc(4 * nq + 4 * nk + nl);
        void *devp = NULL;
        if (!host || fwh_dev_alloc(r, &devp, 4 * sq + 4 * sk + round256(nl)) != FW_OK) {
            free(host);
            failed++;
            snprintf(err, sizeof err, "out of memory");
            break;
        }
        char *hq = host, *ho = hq + nq, *hdo = ho + nq, *hdq = hdo + nq, *hk = hdq + nq, *hv = hk + nk, *hdk = hv + nk,
             *hdv = hdk + nk;
        float *hl = (float *)(hdv + nk);
        gather(hq, r->host_q, &r->q, H, q0, lq, es);
        gather(ho, r->host_o, &r->o, H, q0, lq, es);
        gather(hdo, g->host_dout, &g->dout, H, q0, lq, es);
        gather(hk, r->host_k, &r->k, Hkv, k0, lk, es);
        gather(hv, r->host_v, &r->v, Hkv, k0, lk, es);
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < lq; i++) hl[h * lq + i] = r->host_lse[fw_lse_index(p, s, h, i)];
        char *d = (char *)devp; /* on the device: g* */
        char *gq = d, *go = gq + sq, *gdo = go + sq, *gdq = gdo + sq, *gk = gdq + sq, *gv = gk + sk, *gdk = gv + sk,
             *gdv = gdk + sk;
        float *gl = (float *)(gdv + sk);
        fw_status st = fwh_copy(r, gq, hq, nq, 1);
        if (st == FW_OK) st = fwh_copy(r, go, ho, nq, 1);
        if (st == FW_OK) st = fwh_copy(r, gdo, hdo, nq, 1);
        if (st == FW_OK) st = fwh_copy(r, gk, hk, nk, 1);
        if (st == FW_OK) st = fwh_copy(r, gv, hv, nk, 1);
        if (st == FW_OK) st = fwh_copy(r, gl, hl, nl, 1);
        const fw_dtype t = c->dtype;
        const fw_tensor tq = fw_tensor_bhsd(gq, t, gpu_dev, 1, H, lq, D), to = fw_tensor_bhsd(go, t, gpu_dev, 1, H, lq, D);
        const fw_tensor tdo = fw_tensor_bhsd(gdo, t, gpu_dev, 1, H, lq, D);
        fw_tensor tdq = fw_tensor_bhsd(gdq, t, gpu_dev, 1, H, lq, D);
        const fw_tensor tk = fw_tensor_bhsd(gk, t, gpu_dev, 1, Hkv, lk, D), tv = fw_tensor_bhsd(gv, t, gpu_dev, 1, Hkv, lk, D);
        fw_tensor tdk = fw_tensor_bhsd(gdk, t, gpu_dev, 1, Hkv, lk, D), tdv = fw_tensor_bhsd(gdv, t, gpu_dev, 1, Hkv, lk, D);
        fw_problem pd;
        if (st == FW_OK)
            st = fw_validate_backward(&tq, &tk, &tv, &to, gl, &tdo, &tdq, &tdk, &tdv, &c->params, &pd, err, sizeof err);
        if (st == FW_OK) {
            pd.deterministic = 1;
            pd.precision = c->precision;
            fw_config cfg;
            memset(&cfg, 0, sizeof cfg);
            snprintf(cfg.name, sizeof cfg.name, "%.*s", (int)sizeof cfg.name - 1, cfg_name);
            fw_exec ex = {1, NULL, err, sizeof err, &fw_knobs_defaults};
            st = b->backward(&pd, &cfg, &ex);
        }
        if (st == FW_OK) st = fwh_sync(r);
        if (st == FW_OK) st = fwh_copy(r, hdq, gdq, nq, 0);
        if (st == FW_OK) st = fwh_copy(r, hdk, gdk, nk, 0);
        if (st == FW_OK) st = fwh_copy(r, hdv, gdv, nk, 0);
        if (st == FW_OK) {
            bad += differ(hdq, g->host_dq, &g->dq, H, q0, lq, es);
            bad += differ(hdk, g->host_dk, &g->dk, Hkv, k0, lk, es);
            bad += differ(hdv, g->host_dv, &g->dv, Hkv, k0, lk, es);
        } else {
            failed++;
            if (!err[0]) snprintf(err, sizeof err, "%s", fw_status_string(st));
        }
        fwh_dev_free(r, devp);
        free(host);
    }
    fwt_case(!bad && !zero_bad && !failed,
             "%s %s %s equals its dense backward per sequence [%s]: %ld rows differ, %ld zero-row elements not 0%s%s",
             what, b->name, cfg_name, label, bad, zero_bad, failed ? ": " : "", failed ? err : "");
}

/* Every way the CUDA backend of c's dtype runs c's ragged backward (see the top of this file). */
static void gpu_case(fw_case c, const char *what)
{
    c.device = gpu_dev;
    fw_run r;
    fw_bwd g;
    char msg[1024], label[512], whole[640];
    fw_case_label(&c, label, sizeof label);
    snprintf(whole, sizeof whole, "%s [%s]", what, label);
    if (!gpu_alloc(&c, &r, &g, whole)) return;
    const char *name = gpu_backend_of(c.dtype);
    const fw_backend *b = fw_registry_find(name);
    char why[512] = "";
    const fw_status sup = b ? fw_bwd_supports(&r, &g, name, why, sizeof why) : FW_ERR_NO_BACKEND;
    if (!fwt_case(sup == FW_OK, "%s %s supports [%s]: %s", what, name, label, sup == FW_OK ? "yes" : why)) {
        fw_bwd_free(&r, &g);
        fw_run_free(&r);
        return;
    }
    fw_status st = gpu_run_api(&r, &g, name, name, 0, msg, sizeof msg);
    gpu_report(&r, &g, st, msg, what, name, label);
    st = gpu_run_api(&r, &g, name, name, 1, msg, sizeof msg);
    grads first;
    memset(&first, 0, sizeof first);
    if (gpu_report(&r, &g, st, msg, what, "deterministic", label) && grads_save(&r, &g, &first)) {
        st = gpu_run_api(&r, &g, name, name, 1, msg, sizeof msg);
        if (st == FW_OK) st = fw_bwd_fetch(&r, &g);
        fwt_case(st == FW_OK && grads_same(&g, &first), "%s %s deterministic twice [%s]: %s", what, name, label,
                 st == FW_OK ? (grads_same(&g, &first) ? "bit-identical" : "DIFFERENT") : msg);
    }
    grads_free(&first);
    if (!gpu_quick) {
        st = gpu_run_api(&r, &g, "auto", name, 0, msg, sizeof msg);
        gpu_report(&r, &g, st, msg, what, "auto", label);
    }

    /* every configuration of the problem, by name */
    fw_problem p;
    fw_config cfgs[FW_MAX_CONFIGS];
    int n = 0;
    if (gpu_problem(&r, &g, &p, msg, sizeof msg) == FW_OK) {
        p.deterministic = 0;
        p.precision = c.precision;
        n = b->configs(&p, cfgs, FW_MAX_CONFIGS);
    }
    fwt_case(n > 0 && cfgs[0].name[0], "%s %s lists %d configurations [%s]%s%s", what, name, n, label,
             n > 0 ? ": first " : "", n > 0 ? cfgs[0].name : "");
    /* the dense bodies run unstaged on the gathered rows: 16-byte rows (head_dim a multiple of 8, no padding) */
    const int dense_same = c.head_dim % 8 == 0 && c.pad == 0;
    for (int i = 0; i < n; i++) {
        const char *cn = cfgs[i].name;
        const int det = !strncmp(cn, "bwd-deterministic", 17);
        st = gpu_run_config(&r, &g, b, cn, msg, sizeof msg);
        if (!gpu_report(&r, &g, st, msg, what, cn, label) || !det) continue;
        grads once;
        memset(&once, 0, sizeof once);
        if (grads_save(&r, &g, &once)) {
            st = gpu_run_config(&r, &g, b, cn, msg, sizeof msg);
            if (st == FW_OK) st = fw_bwd_fetch(&r, &g);
            fwt_case(st == FW_OK && grads_same(&g, &once), "%s %s twice [%s]: %s", what, cn, label,
                     st == FW_OK ? (grads_same(&g, &once) ? "bit-identical" : "DIFFERENT") : msg);
            if (st == FW_OK && dense_same && !gpu_quick) gpu_against_dense(&r, &g, b, cn, what, label);
        }
        grads_free(&once);
    }
    fw_bwd_free(&r, &g);
    fw_run_free(&r);
}

/* ---- the cases ---------------------------------------------------------------------------------------------- */
/* empty, 1, primes, tile edges (64, 127..129), one long among short; and keys of other lengths */
static const int32_t GPU_Q[] = {0, 1, 2, 3, 5, 7, 11, 13, 331, 1, 64, 129, 0, 128, 17};
static const int32_t GPU_K[] = {0, 1, 3, 2, 5, 13, 7, 11, 300, 2, 64, 127, 9, 128, 0};
#define GPU_NSEQ ((int)(sizeof GPU_Q / sizeof GPU_Q[0]))

/* dtype x head dim 64, 128 x GQA 1, 2, 4, 8 (8 query heads), the three masks in turn, square or Lq != Lk; f32 also in
 * 3xtf32 and tf32 (the tf32 records' ragged kernels). */
static void gpu_grid(void)
{
    const fw_dtype dts[5] = {FW_F16, FW_BF16, FW_F32, FW_F32, FW_F32};
    const fw_precision precs[5] = {FW_PRECISION_EXACT, FW_PRECISION_EXACT, FW_PRECISION_EXACT, FW_PRECISION_3XTF32,
                                   FW_PRECISION_TF32};
    const int64_t dims[2] = {64, 128}, kv[4] = {8, 4, 2, 1};
    for (int ti = 0; ti < 5; ti++)
        for (int di = 0; di < 2; di++)
            for (int ki = 0; ki < 4; ki++) {
                if (gpu_quick && (ki + di + ti) % 3 != 0) continue;
                const int sq = (ti + ki) % 2 == 0;
                fw_case c = masked(varlen_case(GPU_NSEQ, GPU_Q, sq ? GPU_Q : GPU_K, 8, kv[ki], dims[di], dts[ti]),
                                   (di + ki + ti) % 3);
                c.precision = precs[ti];
                gpu_case(c, precs[ti] == FW_PRECISION_3XTF32 ? "grid 3xtf32" : precs[ti] == FW_PRECISION_TF32 ? "grid tf32" : "grid");
            }
}

/* Head dims the tensor-core records pad (8..120) and those only the CUDA-core records take (59, 111, 160, 256). */
static void gpu_odd_dims(void)
{
    const int64_t dims[] = {8, 24, 40, 59, 96, 111, 160, 256};
    const fw_dtype dts[3] = {FW_BF16, FW_F16, FW_F32};
    const int64_t kv[3] = {4, 2, 1};
    const int32_t q[] = {3, 0, 70, 1, 129, 17}, k[] = {5, 2, 70, 0, 131, 17};
    for (int i = 0; i < (int)(sizeof dims / sizeof dims[0]); i++) {
        if (gpu_quick && i % 3 != 0) continue;
        fw_case c = masked(varlen_case(6, q, k, 4, kv[i % 3], dims[i], dts[i % 3]), i % 3);
        gpu_case(c, "odd-dim");
    }
}

static void gpu_shapes(void)
{
    /* queries and keys of different lengths both ways, sequences without keys or without queries */
    const int32_t q[] = {1, 7, 0, 13, 2, 64, 3, 130}, k[] = {5, 3, 4, 0, 97, 64, 1, 129};
    for (int mask = 0; mask < 3; mask++) {
        fw_case c = masked(varlen_case(8, q, k, 6, 3, 64, FW_BF16), mask);
        gpu_case(c, "lq!=lk");
        if (gpu_quick) continue;
        c = masked(varlen_case(8, q, k, 6, 3, 128, FW_F32), mask);
        gpu_case(c, "lq!=lk");
    }
    fw_case c = varlen_case(8, q, k, 4, 2, 128, FW_F16);
    c.params.window_left = 16; /* left window only */
    gpu_case(c, "left-window");
    /* one long sequence among short ones, BSHD; then padded rows (16-byte rows, and rows the tensor cores cannot take) */
    const int32_t lq[] = {3, 1, 700, 2, 0}, lk[] = {3, 9, 650, 2, 5};
    c = varlen_case(5, lq, lk, 4, 1, 128, FW_BF16);
    c.params.causal = 1;
    c.layout_bshd = 1;
    gpu_case(c, "long-bshd");
    if (!gpu_quick) {
        c = varlen_case(5, lq, lk, 2, 2, 64, FW_F16);
        c.pad = 8;
        c.params.window_left = 40;
        c.params.window_right = 0;
        gpu_case(c, "long-pad8");
        c = varlen_case(5, lq, lk, 2, 1, 64, FW_BF16);
        c.pad = 5;
        c.params.causal = 1;
        gpu_case(c, "long-pad5");
    }
    /* a single sequence: the ragged call degenerates to the dense one */
    const int32_t one_q[] = {300}, one_k[] = {333};
    c = varlen_case(1, one_q, one_k, 8, 2, 128, FW_F16);
    c.params.causal = 1;
    gpu_case(c, "single");
    /* 256 sequences: the offsets' search narrows the candidates before its last round (parts/scheduler.cuh) */
    int32_t many_q[FW_CASE_MAX_SEQS], many_k[FW_CASE_MAX_SEQS];
    uint64_t rs = 99;
    for (int i = 0; i < FW_CASE_MAX_SEQS; i++) {
        many_q[i] = (int32_t)fw_rng_below(&rs, 20);
        many_k[i] = i % 7 == 0 ? many_q[i] : (int32_t)fw_rng_below(&rs, 20);
    }
    c = varlen_case(FW_CASE_MAX_SEQS, many_q, many_k, 2, 1, 64, FW_BF16);
    c.params.causal = 1;
    gpu_case(c, "many");
}

/* Rows row0 .. row0 + n - 1 of every head whose bits differ between two copies of the same packed tensor. */
static long differ_packed(const void *before, const void *now, const fw_tensor *t, int64_t heads, int64_t row0,
                          int64_t n, size_t es)
{
    long bad = 0;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < n; i++) {
            const size_t at = (size_t)(h * t->stride[1] + (row0 + i) * t->stride[2]) * es;
            bad += memcmp((const char *)before + at, (const char *)now + at, (size_t)t->size[3] * es) != 0;
        }
    return bad;
}

/* NaN in sequence 1's first query row (q, dout) and last key row (k, v): the gradients of sequences 0 and 2 are
 * those of a clean run (bit for bit in the deterministic configurations, finite in the atomic ones). */
static void gpu_neighbour_nan(fw_dtype t, int64_t D)
{
    const int32_t q[] = {37, 64, 50}, k[] = {41, 64, 50};
    fw_case c = varlen_case(3, q, k, 4, 2, D, t);
    c.params.causal = t == FW_F16;
    fw_run r;
    fw_bwd g;
    char msg[1024] = "";
    if (!gpu_alloc(&c, &r, &g, "neighbour NaN")) return;
    const char *name = gpu_backend_of(t);
    const fw_backend *b = fw_registry_find(name);
    fw_problem p;
    fw_config cfgs[FW_MAX_CONFIGS];
    int n = 0;
    if (b && gpu_problem(&r, &g, &p, msg, sizeof msg) == FW_OK) n = b->configs(&p, cfgs, FW_MAX_CONFIGS);
    grads clean[FW_MAX_CONFIGS];
    memset(clean, 0, sizeof clean);
    int ok_clean = n > 0;
    for (int i = 0; i < n && ok_clean; i++)
        ok_clean = gpu_run_config(&r, &g, b, cfgs[i].name, msg, sizeof msg) == FW_OK && fw_bwd_fetch(&r, &g) == FW_OK &&
                   grads_save(&r, &g, &clean[i]);
    /* sequence 1: query rows 37.., key rows 41.. */
    const int64_t qrow = 37, krow = 41 + 64 - 1, H = c.heads, Hkv = c.kv_heads;
    const size_t es = fw_dtype_size(t);
    for (int64_t d = 0; d < D && ok_clean; d += 3) {
        for (int64_t h = 0; h < H; h++) {
            fw_run_set_input(&r, 'q', 0, h, qrow, d, NAN);
            const int64_t at = fwh_offset(&g.dout, 0, h, qrow, d);
            fw_store_f32(g.host_dout, t, at, INFINITY);
            ok_clean = ok_clean && fwh_copy(&r, (char *)g.dout.data + at * (int64_t)es, (char *)g.host_dout + at * (int64_t)es,
                                            es, 1) == FW_OK;
        }
        for (int64_t h = 0; h < Hkv; h++) {
            fw_run_set_input(&r, 'k', 0, h, krow, d, NAN);
            fw_run_set_input(&r, 'v', 0, h, krow, d, -INFINITY);
        }
    }
    for (int i = 0; i < n && ok_clean; i++) {
        const int det = !strncmp(cfgs[i].name, "bwd-deterministic", 17);
        fw_status st = gpu_run_config(&r, &g, b, cfgs[i].name, msg, sizeof msg);
        if (st == FW_OK) st = fw_bwd_fetch(&r, &g);
        long bad = 0, nonfinite = 0;
        const int64_t seq_q0[2] = {0, 37 + 64}, seq_lq[2] = {37, 50}, seq_k0[2] = {0, 41 + 64}, seq_lk[2] = {41, 50};
        for (int s = 0; s < 2 && st == FW_OK; s++) {
            const void *now[3] = {g.host_dq, g.host_dk, g.host_dv};
            const fw_tensor *ts[3] = {&g.dq, &g.dk, &g.dv};
            for (int a = 0; a < 3; a++) {
                const int64_t heads = a ? Hkv : H, row0 = a ? seq_k0[s] : seq_q0[s], rows = a ? seq_lk[s] : seq_lq[s];
                if (det) bad += differ_packed(clean[i].p[a], now[a], ts[a], heads, row0, rows, es);
                for (int64_t h = 0; h < heads; h++)
                    for (int64_t x = 0; x < rows; x++)
                        for (int64_t d = 0; d < D; d++)
                            nonfinite += !isfinite(fw_load_f32(now[a], t, fwh_offset(ts[a], 0, h, row0 + x, d)));
            }
        }
        fwt_case(st == FW_OK && !bad && !nonfinite, "%s %s NaN/Inf in sequence 1 (D=%lld): %s; sequences 0 and 2: %ld "
                 "rows differ from the clean run, %ld non-finite", name, cfgs[i].name, (long long)D,
                 st == FW_OK ? "ok" : msg, bad, nonfinite);
    }
    if (!ok_clean) fwt_case(0, "%s neighbour NaN: the clean runs failed (%d configurations): %s", name, n, msg);
    for (int i = 0; i < n; i++) grads_free(&clean[i]);
    fw_bwd_free(&r, &g);
    fw_run_free(&r);
}

/* ---- out-of-range device offsets ------------------------------------------------------------------------------ */
#define GUARD 4096
static void *guarded_alloc(fw_run *r, size_t bytes)
{
    void *p = NULL;
    unsigned char *h = (unsigned char *)malloc(bytes + 2 * GUARD);
    if (!h || fwh_dev_alloc(r, &p, bytes + 2 * GUARD) != FW_OK) {
        free(h);
        return NULL;
    }
    memset(h, 0x5a, bytes + 2 * GUARD);
    const fw_status st = fwh_copy(r, p, h, bytes + 2 * GUARD, 1);
    free(h);
    if (st != FW_OK) {
        fwh_dev_free(r, p);
        return NULL;
    }
    return (char *)p + GUARD;
}
static int guard_intact(fw_run *r, const void *inner, size_t bytes)
{
    unsigned char *h = (unsigned char *)malloc(bytes + 2 * GUARD);
    int ok = h && fwh_copy(r, h, (const char *)inner - GUARD, bytes + 2 * GUARD, 0) == FW_OK;
    for (size_t i = 0; i < GUARD && ok; i++) ok = h[i] == 0x5a && h[GUARD + bytes + i] == 0x5a;
    free(h);
    return ok;
}

static void gpu_garbage_offsets(fw_dtype t)
{
    const int32_t q[] = {3, 0, 17, 2}, k[] = {5, 1, 17, 9};
    fw_case c = varlen_case(4, q, k, 8, 2, 64, t);
    c.params.causal = 1;
    fw_run r;
    fw_bwd g;
    char msg[1024] = "";
    if (!gpu_alloc(&c, &r, &g, "out-of-range offsets")) return;
    const size_t es = fw_dtype_size(t), nq = r.q_elems * es, nk = r.kv_elems * es;
    void *keep[3] = {g.dq.data, g.dk.data, g.dv.data};
    g.dq.data = guarded_alloc(&r, nq);
    g.dk.data = guarded_alloc(&r, nk);
    g.dv.data = guarded_alloc(&r, nk);
    const int32_t big = 2147483647, small = -2147483647 - 1;
    const int32_t sets[3][2][5] = {{{0, -3, 1000000000, 2, small}, {7, big, -1, 3, 1 << 30}},
                                   /* decreasing, and a sequence longer than max_seqlen (cut) */
                                   {{0, 22, 4, 22, 22}, {0, 30, 30, 2, 32}},
                                   {{small, small, big, big, big}, {big, 0, small, 32, -5}}};
    const char *name = gpu_backend_of(t);
    const fw_backend *b = fw_registry_find(name);
    for (int s = 0; s < 3 && g.dq.data && g.dk.data && g.dv.data; s++) {
        fw_status st = fwh_copy(&r, (void *)r.seqs.cu_seqlens_q, sets[s][0], sizeof sets[s][0], 1);
        if (st == FW_OK) st = fwh_copy(&r, (void *)r.seqs.cu_seqlens_k, sets[s][1], sizeof sets[s][1], 1);
        fw_problem p;
        fw_config cfgs[FW_MAX_CONFIGS];
        int n = 0;
        if (st == FW_OK && b && gpu_problem(&r, &g, &p, msg, sizeof msg) == FW_OK) n = b->configs(&p, cfgs, FW_MAX_CONFIGS);
        for (int i = 0; i < n; i++) {
            st = gpu_run_config(&r, &g, b, cfgs[i].name, msg, sizeof msg);
            const int ok = st == FW_OK && guard_intact(&r, g.dq.data, nq) && guard_intact(&r, g.dk.data, nk) &&
                           guard_intact(&r, g.dv.data, nk);
            fwt_case(ok, "%s %s out-of-range offsets (set %d): %s, guards %s", name, cfgs[i].name, s,
                     st == FW_OK ? "ran" : msg, ok ? "intact" : "checked");
            if (st == FW_ERR_DEVICE) exit(1); /* a fault leaves the device unusable */
        }
        fwt_case(n > 0, "%s out-of-range offsets (set %d): %d configurations", name, s, n);
    }
    /* checked on request: refused by name before anything runs */
    fw_context_set_backend(ctx, name);
    fw_context_set_check_device_values(ctx, 1);
    fw_status st = fw_bwd_poison(&r, &g);
    if (st == FW_OK) st = fw_bwd_run(&r, &g, ctx);
    const char *m = fw_context_last_error(ctx);
    fwt_case(st == FW_ERR_INVALID_VALUE && fwt_contains(m, "cu_seqlens"), "%s out-of-range offsets with "
             "fw_context_set_check_device_values: %s '%s'", name, fw_status_string(st), m);
    fw_context_set_check_device_values(ctx, 0);
    for (int i = 0; i < 3; i++) {
        void **d = i == 0 ? &g.dq.data : i == 1 ? &g.dk.data : &g.dv.data;
        if (*d) fwh_dev_free(&r, (char *)*d - GUARD);
        *d = keep[i];
    }
    fw_bwd_free(&r, &g);
    fw_run_free(&r);
}

/* cuda-naive, named, says where the ragged backward runs. */
static void gpu_refusals(void)
{
    const int32_t q[] = {4, 0, 9}, k[] = {6, 2, 9};
    fw_case c = varlen_case(3, q, k, 2, 1, 64, FW_F16);
    fw_run r;
    fw_bwd g;
    if (!gpu_alloc(&c, &r, &g, "refusals")) return;
    const char *others[2] = {"cuda-naive", "cuda-tiled"};
    for (int i = 0; i < 2; i++) {
        char why[512] = "";
        const fw_status st = fw_bwd_supports(&r, &g, others[i], why, sizeof why);
        fwt_case(st == FW_ERR_NO_BACKEND || (st == FW_ERR_UNSUPPORTED && fwt_contains(why, FW_RAGGED_BACKWARD_WHERE)),
                 "%s refuses a ragged backward: %s", others[i], why);
    }
    char why[512] = "";
    const fw_status st = fw_bwd_supports(&r, &g, "cuda-flash-f32", why, sizeof why);
    fwt_case(st == FW_ERR_UNSUPPORTED && fwt_contains(why, "float32"), "cuda-flash-f32 refuses f16: %s", why);
    fw_bwd_free(&r, &g);
    fw_run_free(&r);
}

static int gpu_main(void)
{
    if (fw_cuda_device_count() <= gpu_dev.index) {
        printf("SKIP no CUDA device %d here\n", gpu_dev.index);
        return 77;
    }
    gpu_refusals();
    gpu_grid();
    gpu_odd_dims();
    gpu_shapes();
    const fw_dtype dts[3] = {FW_F16, FW_BF16, FW_F32};
    for (int i = 0; i < 3; i++) {
        gpu_neighbour_nan(dts[i], i == 1 ? 128 : 64);
        gpu_garbage_offsets(dts[i]);
    }
    return -1;
}

#endif
