/* GPU test and benchmark of cuda-naive, cuda-tiled and cuda-flash-f32 (every configuration, exact,
 * tf32 and 3xtf32), against the float64 oracle cpu-ref on fresh random inputs, outputs poisoned first.
 *
 *   gpu_cuda_f32                 correctness suite (exit 0 pass, 1 fail, 77 no GPU)
 *   gpu_cuda_f32 --small         one small causal GQA case per kernel family (for compute-sanitizer)
 *   gpu_cuda_f32 --bench [DIR]   the seed suite (B=16, H=8, D=64, L=128..2048; the anchors' seed003 at B=1 and
 *                                32) and a few more shapes:
 *                                median CUDA-event times, TFLOP/s, error vs float64; with DIR, the
 *                                inputs and outputs go there as raw float32 for the PyTorch side. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashwatt.h"
#include "flashwatt_internal.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifndef FW_HAVE_CUDA
int main(void)
{
    printf("gpu_cuda_f32: built without CUDA: skipped\n");
    return 77;
}
#else

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct tcase {
    int B, H, Hkv, Lq, Lk, D;
    int bshd, pad, causal;
    long wl, wr;
    fw_dtype dt;
    const char *what;
} tcase;

typedef struct tbuf { /* one case's tensors, host and device, same layout */
    tcase c;
    size_t nq, nkv, no;
    void *hq, *hk, *hv, *ho, *href;
    float *hlse, *hlse_ref;
    void *dq, *dk, *dv, *dO;
    float *dlse;
    fw_tensor q, k, v, o, oh, qh, kh, vh;
    fw_attn_params prm;
    double maxv;
} tbuf;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) /* [0, 1) */
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static void put(void *buf, fw_dtype t, size_t i, float x)
{
    if (t == FW_F32) ((float *)buf)[i] = x;
    else if (t == FW_F16) ((uint16_t *)buf)[i] = fw_f32_to_f16(x);
    else ((uint16_t *)buf)[i] = fw_f32_to_bf16(x);
}
static float get(const void *buf, fw_dtype t, size_t i) { return fw_load_f32(buf, t, (int64_t)i); }

static fw_tensor desc(void *data, const tcase *c, int heads, int L, fw_device dev)
{
    fw_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data; t.dtype = c->dt; t.device = dev;
    t.size[0] = c->B; t.size[1] = heads; t.size[2] = L; t.size[3] = c->D;
    const int64_t rd = c->D + c->pad;
    if (c->bshd) { t.stride[3] = 1; t.stride[1] = rd; t.stride[2] = rd * heads; t.stride[0] = rd * heads * L; }
    else { t.stride[3] = 1; t.stride[2] = rd; t.stride[1] = rd * L; t.stride[0] = rd * L * heads; }
    return t;
}

/* The host inputs to the device tensors. */
static void tb_upload(tbuf *t)
{
    const size_t es = fw_dtype_size(t->c.dt);
    CK(cudaMemcpy(t->dq, t->hq, t->nq * es, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t->dk, t->hk, t->nkv * es, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t->dv, t->hv, t->nkv * es, cudaMemcpyHostToDevice));
}

static void tb_alloc(tbuf *t, const tcase *c)
{
    memset(t, 0, sizeof *t);
    t->c = *c;
    const size_t es = fw_dtype_size(c->dt), rd = (size_t)(c->D + c->pad);
    t->nq = (size_t)c->B * c->H * c->Lq * rd;
    t->nkv = (size_t)c->B * c->Hkv * c->Lk * rd;
    t->no = t->nq;
    t->hq = calloc(t->nq, es); t->hk = calloc(t->nkv, es); t->hv = calloc(t->nkv, es);
    t->ho = calloc(t->no, es); t->href = calloc(t->no, es);
    t->hlse = calloc((size_t)c->B * c->H * c->Lq, 4); t->hlse_ref = calloc((size_t)c->B * c->H * c->Lq, 4);
    if (!t->hq || !t->hk || !t->hv || !t->ho || !t->href || !t->hlse || !t->hlse_ref) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    t->maxv = 0;
    for (size_t i = 0; i < t->nq; i++) put(t->hq, c->dt, i, (float)(4 * urand() - 2));
    for (size_t i = 0; i < t->nkv; i++) put(t->hk, c->dt, i, (float)(4 * urand() - 2));
    for (size_t i = 0; i < t->nkv; i++) {
        put(t->hv, c->dt, i, (float)(2 * urand() - 1));
        const double a = fabs(get(t->hv, c->dt, i));
        if (a > t->maxv) t->maxv = a;
    }
    CK(cudaMalloc(&t->dq, t->nq * es)); CK(cudaMalloc(&t->dk, t->nkv * es)); CK(cudaMalloc(&t->dv, t->nkv * es));
    CK(cudaMalloc(&t->dO, t->no * es)); CK(cudaMalloc((void **)&t->dlse, (size_t)c->B * c->H * c->Lq * 4));
    tb_upload(t);
    fw_device gpu = {FW_DEVICE_CUDA, 0}, cpu = {FW_DEVICE_CPU, 0};
    t->q = desc(t->dq, c, c->H, c->Lq, gpu); t->k = desc(t->dk, c, c->Hkv, c->Lk, gpu);
    t->v = desc(t->dv, c, c->Hkv, c->Lk, gpu); t->o = desc(t->dO, c, c->H, c->Lq, gpu);
    t->qh = desc(t->hq, c, c->H, c->Lq, cpu); t->kh = desc(t->hk, c, c->Hkv, c->Lk, cpu);
    t->vh = desc(t->hv, c, c->Hkv, c->Lk, cpu); t->oh = desc(t->href, c, c->H, c->Lq, cpu);
    t->prm = fw_attn_params_default();
    t->prm.causal = c->causal;
    t->prm.window_left = c->wl;
    t->prm.window_right = c->wr;
}

static void tb_free(tbuf *t)
{
    free(t->hq); free(t->hk); free(t->hv); free(t->ho); free(t->href); free(t->hlse); free(t->hlse_ref);
    cudaFree(t->dq); cudaFree(t->dk); cudaFree(t->dv); cudaFree(t->dO); cudaFree(t->dlse);
}

static int tb_reference(tbuf *t)
{
    fw_context *ctx;
    fw_context_create(&ctx);
    fw_context_set_backend(ctx, "cpu-ref");
    fw_status st = fw_attention_forward(ctx, &t->qh, &t->kh, &t->vh, &t->oh, t->hlse_ref, &t->prm);
    if (st != FW_OK) fprintf(stderr, "cpu-ref failed: %s\n", fw_context_last_error(ctx));
    fw_context_destroy(ctx);
    return st == FW_OK;
}

/* Runs backend `name` (config index ci, -1 = default through the public API) once. */
static fw_status tb_run(tbuf *t, const char *name, int ci, fw_precision prec, cudaStream_t s, char *msg, size_t len)
{
    const fw_backend *b = fw_registry_find(name);
    if (!b) { snprintf(msg, len, "no backend %s", name); return FW_ERR_NO_BACKEND; }
    fw_problem p;
    fw_status st = fw_validate_forward(&t->q, &t->k, &t->v, &t->o, t->dlse, &t->prm, &p, msg, len);
    if (st != FW_OK) return st;
    p.precision = prec;
    if (!b->supports(&p, msg, len)) return FW_ERR_UNSUPPORTED;
    fw_config cfgs[FW_MAX_CONFIGS];
    memset(cfgs, 0, sizeof cfgs);
    int n = b->configs ? b->configs(&p, cfgs, FW_MAX_CONFIGS) : 1;
    if (ci >= n) { snprintf(msg, len, "config %d of %d", ci, n); return FW_ERR_INVALID_VALUE; }
    fw_exec ex = {1, (void *)s, msg, len, NULL};
    msg[0] = 0;
    return b->forward(&p, ci < 0 ? NULL : &cfgs[ci], &ex); /* ci < 0: the backend's own choice */
}

static int n_configs(tbuf *t, const char *name, fw_precision prec, char names[][48])
{
    const fw_backend *b = fw_registry_find(name);
    char msg[256];
    fw_problem p;
    if (!b || fw_validate_forward(&t->q, &t->k, &t->v, &t->o, t->dlse, &t->prm, &p, msg, sizeof msg) != FW_OK) return 0;
    p.precision = prec;
    fw_config cfgs[FW_MAX_CONFIGS];
    memset(cfgs, 0, sizeof cfgs);
    int n = b->configs ? b->configs(&p, cfgs, FW_MAX_CONFIGS) : 1;
    for (int i = 0; i < n; i++) {
        const char *src = cfgs[i].name[0] ? cfgs[i].name : "default";
        size_t len = strlen(src);
        if (len > 47) len = 47;
        memcpy(names[i], src, len);
        names[i][len] = 0;
    }
    return n;
}

typedef struct terr { double max_abs, rel, lse_err; long unwritten, stray; int nan; } terr;

static void tb_poison(tbuf *t)
{
    CK(cudaMemset(t->dO, 0xff, t->no * fw_dtype_size(t->c.dt)));
    CK(cudaMemset(t->dlse, 0xff, (size_t)t->c.B * t->c.H * t->c.Lq * 4));
}

static void tb_compare(tbuf *t, const tbuf *ref, terr *e);

/* Poison, run, copy back, compare with the reference (which must exist). */
static fw_status tb_check(tbuf *t, const char *name, int ci, fw_precision prec, terr *e, char *msg, size_t len)
{
    tb_poison(t);
    fw_status st = tb_run(t, name, ci, prec, 0, msg, len);
    if (st != FW_OK) return st;
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    tb_compare(t, t, e);
    return FW_OK;
}

/* t's device output (every element written, none outside) against ref's reference (ref: t, or a case of the same
 * shape whose inputs t's tensors now hold). */
static void tb_compare(tbuf *t, const tbuf *ref, terr *e)
{
    const tcase *c = &t->c;
    const size_t es = fw_dtype_size(c->dt);
    CK(cudaMemcpy(t->ho, t->dO, t->no * es, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(t->hlse, t->dlse, (size_t)c->B * c->H * c->Lq * 4, cudaMemcpyDeviceToHost));
    memset(e, 0, sizeof *e);
    double num = 0, den = 0;
    const size_t rd = (size_t)(c->D + c->pad);
    for (size_t i = 0; i < t->no; i++) {
        const int inside = (int)(i % rd) < c->D;
        const int poisoned = es == 4 ? ((uint32_t *)t->ho)[i] == 0xffffffffu : ((uint16_t *)t->ho)[i] == 0xffffu;
        if (!inside) {
            if (!poisoned) e->stray++;
            continue;
        }
        if (poisoned) { e->unwritten++; continue; }
        const double x = get(t->ho, c->dt, i), r = get(ref->href, c->dt, i);
        if (isnan(x) || isnan(r)) { e->nan++; continue; }
        const double d = fabs(x - r);
        if (d > e->max_abs) e->max_abs = d;
        num += d * d;
        den += r * r;
    }
    e->rel = den > 0 ? sqrt(num / den) : sqrt(num);
    const size_t nl = (size_t)c->B * c->H * c->Lq;
    for (size_t i = 0; i < nl; i++) {
        const float a = t->hlse[i], r = ref->hlse_ref[i];
        if (((uint32_t *)t->hlse)[i] == 0xffffffffu) { e->unwritten++; continue; }
        double d = (isinf(a) || isinf(r)) ? (a == r ? 0 : INFINITY) : fabs((double)a - r);
        if (d > e->lse_err) e->lse_err = d;
    }
}

static double tol_for(fw_dtype dt, fw_precision prec)
{
    if (dt == FW_F16) return 1e-3;
    if (dt == FW_BF16) return 8e-3;
    if (prec == FW_PRECISION_TF32) return 5e-3;
    return 1e-5; /* exact and 3xtf32: the f32 contract */
}

static const char *prec_name(fw_precision p)
{
    return p == FW_PRECISION_TF32 ? "tf32" : p == FW_PRECISION_3XTF32 ? "3xtf32" : "exact";
}

static int tb_pass(const tbuf *t, fw_precision prec, const terr *e, const char *what, const char *cname)
{
    const double tol = tol_for(t->c.dt, prec) * t->maxv;
    const double lse_tol = prec == FW_PRECISION_TF32 ? 5e-2 : (t->c.dt == FW_F32 ? 1e-4 : 2e-3);
    const int pass = e->max_abs <= tol && e->unwritten == 0 && e->stray == 0 && e->nan == 0 && e->lse_err <= lse_tol;
    printf("  %-15s %-6s %-22s %s max|dO| %.2e (tol %.1e) rel %.2e lse %.1e unwritten %ld stray %ld nan %d\n", what,
           prec_name(prec), cname, pass ? "ok  " : "FAIL", e->max_abs, tol, e->rel, e->lse_err, e->unwritten, e->stray,
           e->nan);
    return pass;
}

static int check_case(const tcase *c, int *fails, int *runs)
{
    tbuf t;
    tb_alloc(&t, c);
    if (!tb_reference(&t)) { tb_free(&t); (*fails)++; return 0; }
    struct { const char *name; fw_precision prec; } bk[] = {
        {"cuda-naive", FW_PRECISION_EXACT}, {"cuda-naive", FW_PRECISION_TF32}, {"cuda-tiled", FW_PRECISION_EXACT},
        {"cuda-flash-f32", FW_PRECISION_EXACT}, {"cuda-flash-f32", FW_PRECISION_TF32},
        {"cuda-flash-f32", FW_PRECISION_3XTF32},
    };
    printf("case %-28s B%d H%d/%d Lq%d Lk%d D%d %s pad%d causal%d win(%ld,%ld) %s\n", c->what, c->B, c->H, c->Hkv,
           c->Lq, c->Lk, c->D, c->bshd ? "bshd" : "bhsd", c->pad, c->causal, c->wl, c->wr, fw_dtype_name(c->dt));
    for (size_t k = 0; k < sizeof bk / sizeof bk[0]; k++) {
        if (c->dt != FW_F32 && bk[k].prec != FW_PRECISION_EXACT) continue;
        char names[FW_MAX_CONFIGS][48];
        const int n = n_configs(&t, bk[k].name, bk[k].prec, names);
        for (int ix = 0; ix < n + (n > 1); ix++) { /* every configuration, then (ix == n) the default choice */
            const int ci = ix < n ? ix : -1;
            const char *cname = ix < n ? names[ix] : "default";
            terr e;
            char msg[512];
            fw_status st = tb_check(&t, bk[k].name, ci, bk[k].prec, &e, msg, sizeof msg);
            if (st == FW_ERR_UNSUPPORTED) {
                printf("  %-15s %-6s %-22s unsupported: %s\n", bk[k].name, prec_name(bk[k].prec), cname, msg);
                break;
            }
            (*runs)++;
            if (st != FW_OK) {
                printf("  %-15s %-6s %-22s FAIL status %d: %s\n", bk[k].name, prec_name(bk[k].prec), cname, (int)st, msg);
                (*fails)++;
                continue;
            }
            if (!tb_pass(&t, bk[k].prec, &e, bk[k].name, cname)) (*fails)++;
        }
    }
    tb_free(&t);
    return 1;
}

/* The kernels that split K/V into a workspace keep it with the stream between calls (fw_cuda_ws_cached: flags of
 * this call's epoch, no reset). Two inputs of one shape in turn on one stream must each get their own answer (stale
 * tiles or flags would give the other's), and so must a CUDA graph of both calls, replayed with new inputs (a graph
 * takes pool memory and zeroes its flags). Every tensor-core configuration of cuda-flash-f32, tf32 and 3xtf32 (small:
 * the default, the persistent kernel, for the sanitizers). */
static void check_reuse(int small, int *fails, int *runs)
{
    const long U = FW_WINDOW_UNLIMITED;
    const tcase c = {2, 4, 2, 512, 512, 64, 0, 0, 0, U, U, FW_F32, "reuse: two inputs, one stream"};
    tbuf t[2];
    tb_alloc(&t[0], &c);
    tb_alloc(&t[1], &c);
    if (!tb_reference(&t[0]) || !tb_reference(&t[1])) { (*fails)++; tb_free(&t[0]); tb_free(&t[1]); return; }
    printf("case %s (B%d H%d/%d L%d D%d)\n", c.what, c.B, c.H, c.Hkv, c.Lq, c.D);
    const fw_precision precs[2] = {FW_PRECISION_TF32, FW_PRECISION_3XTF32};
    for (int k = 0; k < 2; k++) {
        char names[FW_MAX_CONFIGS][48];
        const int n = small ? 1 : n_configs(&t[0], "cuda-flash-f32", precs[k], names);
        if (small) strcpy(names[0], "default");
        for (int ix = 0; ix < n; ix++) {
            const int ci = small ? -1 : ix; /* -1: the backend's own choice */
            char msg[512], what[64];
            for (int r = 0; r < 3; r++) { /* t0, t1, t0 */
                terr e;
                tbuf *tt = &t[r & 1];
                fw_status st = tb_check(tt, "cuda-flash-f32", ci, precs[k], &e, msg, sizeof msg);
                (*runs)++;
                snprintf(what, sizeof what, "call %d (input %d)", r + 1, r & 1);
                if (st != FW_OK) { printf("  %-15s %s: FAIL status %d: %s\n", what, names[ix], (int)st, msg); (*fails)++; break; }
                if (!tb_pass(tt, precs[k], &e, what, names[ix])) (*fails)++;
            }
            /* one graph of both calls; between its two replays input 0's tensors take input 1's values */
            cudaStream_t s;
            CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            cudaGraph_t g;
            cudaGraphExec_t ge;
            fw_status st = FW_OK;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < 2 && st == FW_OK; i++) st = tb_run(&t[i], "cuda-flash-f32", ci, precs[k], s, msg, sizeof msg);
            CK(cudaStreamEndCapture(s, &g));
            if (st != FW_OK) { printf("  graph capture %s: FAIL status %d: %s\n", names[ix], (int)st, msg); (*fails)++; }
            else {
                CK(cudaGraphInstantiate(&ge, g, 0));
                for (int rep = 0; rep < 2; rep++) {
                    if (rep == 1) {
                        const size_t nq = t[0].nq * 4, nkv = t[0].nkv * 4;
                        CK(cudaMemcpy(t[0].dq, t[1].dq, nq, cudaMemcpyDeviceToDevice));
                        CK(cudaMemcpy(t[0].dk, t[1].dk, nkv, cudaMemcpyDeviceToDevice));
                        CK(cudaMemcpy(t[0].dv, t[1].dv, nkv, cudaMemcpyDeviceToDevice));
                    }
                    tb_poison(&t[0]);
                    tb_poison(&t[1]);
                    CK(cudaGraphLaunch(ge, s));
                    CK(cudaStreamSynchronize(s));
                    CK(cudaGetLastError());
                    for (int i = 0; i < 2; i++) {
                        terr e;
                        const tbuf *ref = rep == 1 ? &t[1] : &t[i]; /* input 0 after the copy: input 1's */
                        tb_compare(&t[i], ref, &e);
                        snprintf(what, sizeof what, "graph replay %d out %d", rep + 1, i);
                        (*runs)++;
                        if (!tb_pass(ref, precs[k], &e, what, names[ix])) (*fails)++; /* tolerance of ref's max|V| */
                    }
                }
                CK(cudaGraphExecDestroy(ge));
                tb_upload(&t[0]); /* input 0 back */
            }
            CK(cudaGraphDestroy(g));
            CK(cudaStreamDestroy(s));
        }
    }
    /* the streams' scratch given back (as a process would before it lets the device go), then made anew */
    fw_cuda_ws_cache_release();
    for (int k = 0; k < 2; k++) {
        terr e;
        char msg[512];
        fw_status st = tb_check(&t[1], "cuda-flash-f32", -1, precs[k], &e, msg, sizeof msg);
        (*runs)++;
        if (st != FW_OK) { printf("  after release: FAIL status %d: %s\n", (int)st, msg); (*fails)++; }
        else if (!tb_pass(&t[1], precs[k], &e, "after release", "default")) (*fails)++;
    }
    tb_free(&t[0]);
    tb_free(&t[1]);
}

static int run_tests(int small)
{
    const long U = FW_WINDOW_UNLIMITED;
    tcase cases[] = {
        {1, 2, 1, 130, 130, 64, 1, 0, 1, U, U, FW_F32, "small causal gqa"},
        {2, 4, 4, 256, 256, 64, 0, 0, 0, U, U, FW_F32, "plain"},
        {2, 4, 2, 200, 333, 64, 1, 0, 1, U, U, FW_F32, "gqa causal Lq<Lk bshd"},
        {1, 2, 2, 257, 257, 128, 0, 3, 0, 32, 0, FW_F32, "d128 unaligned window"},
        {1, 3, 3, 100, 100, 32, 1, 0, 1, 16, U, FW_F32, "d32 causal+window"},
        {1, 2, 1, 130, 150, 256, 0, 0, 0, U, U, FW_F32, "d256 gqa"},
        {1, 2, 2, 150, 150, 80, 1, 0, 1, U, U, FW_F32, "d80 (bucket 128) causal"},
        {1, 2, 2, 300, 100, 64, 0, 0, 1, U, U, FW_F32, "Lq>Lk causal: masked rows"},
        {2, 2, 2, 64, 1, 8, 0, 0, 0, U, U, FW_F32, "Lk=1 d8"},
        {1, 2, 2, 300, 300, 64, 0, 1, 0, 10, 5, FW_F32, "two-sided window pad1"},
        {2, 8, 1, 128, 128, 64, 1, 0, 0, U, U, FW_F32, "mqa bshd"},
        {1, 1, 1, 1, 700, 64, 0, 0, 0, U, U, FW_F32, "decode Lq=1"},
        {1, 2, 2, 1031, 1031, 64, 0, 0, 1, U, U, FW_F32, "causal 1031"},
        {3, 8, 2, 700, 700, 64, 0, 0, 1, U, U, FW_F32, "144 blocks causal gqa"}, /* more query blocks than SMs */
        {4, 8, 8, 640, 640, 64, 1, 0, 0, U, U, FW_F32, "160 blocks bshd"},
        {2, 4, 2, 200, 333, 64, 1, 0, 1, U, U, FW_F16, "f16 gqa causal"},
        {2, 4, 2, 200, 333, 64, 0, 2, 0, U, U, FW_BF16, "bf16 gqa padded"},
    };
    int fails = 0, runs = 0;
    const int n = small ? 1 : (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) check_case(&cases[i], &fails, &runs);
    check_reuse(small, &fails, &runs);
    printf("gpu_cuda_f32: %d runs, %d failures\n", runs, fails);
    return fails ? 1 : 0;
}

/* ---- benchmark ----------------------------------------------------------------------------------- */
static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double time_run(tbuf *t, const char *name, int ci, fw_precision prec, int reps)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    char msg[512];
    double ms[64];
    if (reps > 64) reps = 64;
    for (int w = 0; w < 3; w++)
        if (tb_run(t, name, ci, prec, 0, msg, sizeof msg) != FW_OK) { printf("  %s: %s\n", name, msg); return -1; }
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, 0));
        tb_run(t, name, ci, prec, 0, msg, sizeof msg);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        float f;
        CK(cudaEventElapsedTime(&f, e0, e1));
        ms[r] = f;
    }
    CK(cudaGetLastError());
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    qsort(ms, (size_t)reps, sizeof(double), cmpd);
    return ms[reps / 2];
}

/* Device time per call: a CUDA graph of G calls, the inputs rotating over NSET copies (NSET·(Q,K,V,O) is 67 MB or
 * more at every bench shape, past the 50 MB L2, so a call does not find the last one's inputs cached), replayed R times;
 * median replay / G. This takes the host's launch work out of the number (time_run keeps it in: one call from a
 * host that waits), as METHOD.md asks for short launches; bench/sdpa_f32.py times PyTorch the same way. */
#define NSET 4
static double time_graph(tbuf *t, const char *name, int ci, fw_precision prec, double per_call_ms)
{
    const size_t es = fw_dtype_size(t->c.dt);
    void *sets[NSET][4];
    sets[0][0] = t->dq; sets[0][1] = t->dk; sets[0][2] = t->dv; sets[0][3] = t->dO;
    for (int i = 1; i < NSET; i++) {
        const size_t n[4] = {t->nq, t->nkv, t->nkv, t->no};
        for (int j = 0; j < 4; j++) {
            CK(cudaMalloc(&sets[i][j], n[j] * es));
            CK(cudaMemcpy(sets[i][j], sets[0][j], n[j] * es, cudaMemcpyDeviceToDevice));
        }
    }
    int G = (int)(2.0 / (per_call_ms > 0.001 ? per_call_ms : 0.001)); /* ~2 ms of work per replay */
    G = G < NSET ? NSET : (G > 256 ? 256 : G);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    char msg[512];
    cudaGraph_t g;
    cudaGraphExec_t ge;
    fw_status st = FW_OK;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < G && st == FW_OK; i++) {
        t->q.data = sets[i % NSET][0]; t->k.data = sets[i % NSET][1];
        t->v.data = sets[i % NSET][2]; t->o.data = sets[i % NSET][3];
        st = tb_run(t, name, ci, prec, s, msg, sizeof msg);
    }
    const cudaError_t ce = cudaStreamEndCapture(s, &g);
    t->q.data = t->dq; t->k.data = t->dk; t->v.data = t->dv; t->o.data = t->dO;
    double med = -1;
    if (ce != cudaSuccess) g = NULL; /* no graph to destroy */
    if (st != FW_OK || ce != cudaSuccess) {
        printf("  %s graph capture: %s %s\n", name, msg, cudaGetErrorString(ce));
        cudaGetLastError();
    } else {
        CK(cudaGraphInstantiate(&ge, g, 0));
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
        double ms[16];
        const int R = 11;
        for (int r = -2; r < R; r++) {
            CK(cudaEventRecord(e0, s));
            CK(cudaGraphLaunch(ge, s));
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            float f;
            CK(cudaEventElapsedTime(&f, e0, e1));
            if (r >= 0) ms[r] = f / G;
        }
        CK(cudaGetLastError());
        qsort(ms, R, sizeof(double), cmpd);
        med = ms[R / 2];
        cudaEventDestroy(e0); cudaEventDestroy(e1);
        CK(cudaGraphExecDestroy(ge));
    }
    if (g) CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    for (int i = 1; i < NSET; i++)
        for (int j = 0; j < 4; j++) CK(cudaFree(sets[i][j]));
    return med;
}

static void dump(const char *dir, const char *tag, const char *what, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s_%s.bin", dir, tag, what);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return; }
    fwrite(p, 4, n, f);
    fclose(f);
}

static int run_bench(const char *dir)
{
    const long U = FW_WINDOW_UNLIMITED;
    tcase cases[] = {
        {16, 8, 8, 128, 128, 64, 0, 0, 0, U, U, FW_F32, "seed"},
        {16, 8, 8, 256, 256, 64, 0, 0, 0, U, U, FW_F32, "seed"},
        {16, 8, 8, 512, 512, 64, 0, 0, 0, U, U, FW_F32, "seed"},
        {16, 8, 8, 1024, 1024, 64, 0, 0, 0, U, U, FW_F32, "seed"},
        {16, 8, 8, 2048, 2048, 64, 0, 0, 0, U, U, FW_F32, "seed"},
        {16, 8, 8, 2048, 2048, 64, 0, 0, 1, U, U, FW_F32, "seed-causal"},
        /* the anchors' seed003 (the assignment's S = 128/512/1024, 8 heads, D = 64) at batch 1 and 32 */
        {1, 8, 8, 128, 128, 64, 0, 0, 0, U, U, FW_F32, "seed003-b1"},
        {1, 8, 8, 512, 512, 64, 0, 0, 0, U, U, FW_F32, "seed003-b1"},
        {1, 8, 8, 1024, 1024, 64, 0, 0, 0, U, U, FW_F32, "seed003-b1"},
        {32, 8, 8, 128, 128, 64, 0, 0, 0, U, U, FW_F32, "seed003-b32"},
        {32, 8, 8, 512, 512, 64, 0, 0, 0, U, U, FW_F32, "seed003-b32"},
        {32, 8, 8, 1024, 1024, 64, 0, 0, 0, U, U, FW_F32, "seed003-b32"},
        {8, 8, 8, 1024, 1024, 128, 0, 0, 0, U, U, FW_F32, "d128"},
        {4, 8, 8, 1024, 1024, 32, 0, 0, 0, U, U, FW_F32, "d32"},
        {2, 8, 8, 512, 512, 256, 0, 0, 0, U, U, FW_F32, "d256"},
    };
    struct { const char *name; fw_precision prec; int all_cfgs; } bk[] = {
        {"cuda-naive", FW_PRECISION_EXACT, 0}, {"cuda-tiled", FW_PRECISION_EXACT, 0},
        {"cuda-flash-f32", FW_PRECISION_EXACT, 1}, {"cuda-flash-f32", FW_PRECISION_TF32, 1},
        {"cuda-flash-f32", FW_PRECISION_3XTF32, 1},
    };
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    printf("RESULT tag B H L D causal backend precision config ms TFLOPs max_abs rel_l2 graph_ms\n");
    const char *only = getenv("FW_F32_BENCH_ONLY"); /* "tag:L", e.g. seed:2048: that case alone (profiling) */
    for (size_t ic = 0; ic < sizeof cases / sizeof cases[0]; ic++) {
        const tcase *c = &cases[ic];
        if (only) {
            char want[64];
            snprintf(want, sizeof want, "%s:%d", c->what, c->Lq);
            if (strcmp(only, want)) continue;
        }
        tbuf t;
        tb_alloc(&t, c);
        const int have_ref = tb_reference(&t);
        double pairs = 0;
        for (int i = 0; i < c->Lq; i++) {
            long lo = i + (c->Lk - c->Lq) - (c->wl < 0 ? 1L << 40 : c->wl);
            long hi = c->causal ? i + (c->Lk - c->Lq) + 1 : (c->wr < 0 ? c->Lk : i + (c->Lk - c->Lq) + c->wr + 1);
            if (lo < 0) lo = 0;
            if (hi > c->Lk) hi = c->Lk;
            if (hi > lo) pairs += (double)(hi - lo);
        }
        const double flops = 4.0 * c->B * c->H * c->D * pairs;
        char tag[64];
        snprintf(tag, sizeof tag, "%s_L%d_D%d_c%d", c->what, c->Lq, c->D, c->causal);
        if (dir) {
            dump(dir, tag, "q", t.hq, t.nq);
            dump(dir, tag, "k", t.hk, t.nkv);
            dump(dir, tag, "v", t.hv, t.nkv);
            dump(dir, tag, "ref", t.href, t.no);
        }
        for (size_t k = 0; k < sizeof bk / sizeof bk[0]; k++) {
            char names[FW_MAX_CONFIGS][48];
            int n = n_configs(&t, bk[k].name, bk[k].prec, names);
            if (!bk[k].all_cfgs && n > 1) n = 1;
            if (!strcmp(bk[k].name, "cuda-tiled") && c->Lq > 1024) n = 0; /* slow: skip the largest */
            for (int ix = 0; ix < n + (bk[k].all_cfgs && n > 1); ix++) { /* then (ix == n) the default choice */
                const int ci = ix < n ? ix : -1;
                const char *cname = ix < n ? names[ix] : "default";
                terr e;
                char msg[512];
                memset(&e, 0, sizeof e);
                if (have_ref && tb_check(&t, bk[k].name, ci, bk[k].prec, &e, msg, sizeof msg) != FW_OK) {
                    printf("  %s %s: %s\n", bk[k].name, cname, msg);
                    continue;
                }
                if (dir && ci == 0 && !strcmp(bk[k].name, "cuda-flash-f32")) {
                    char w[32];
                    snprintf(w, sizeof w, "o_%s", prec_name(bk[k].prec));
                    dump(dir, tag, w, t.ho, t.no);
                }
                const double ms = time_run(&t, bk[k].name, ci, bk[k].prec, c->Lq >= 1024 ? 15 : 30);
                const double gms = ms > 0 ? time_graph(&t, bk[k].name, ci, bk[k].prec, ms) : -1;
                printf("RESULT %s %d %d %d %d %d %s %s %s %.4f %.2f %.2e %.2e %.4f\n", c->what, c->B, c->H, c->Lq, c->D,
                       c->causal, bk[k].name, prec_name(bk[k].prec), cname, ms, flops / (ms * 1e-3) / 1e12,
                       e.max_abs, e.rel, gms);
                fflush(stdout);
            }
        }
        tb_free(&t);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (fw_cuda_device_count() <= 0) {
        printf("gpu_cuda_f32: no CUDA device: skipped\n");
        return 77;
    }
    if (argc > 1 && !strcmp(argv[1], "--bench")) return run_bench(argc > 2 ? argv[2] : NULL);
    return run_tests(argc > 1 && !strcmp(argv[1], "--small"));
}
#endif
