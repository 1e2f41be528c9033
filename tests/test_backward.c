/* The backward pass on the CPU: cpu-ref's float64 gradients against central finite differences of
 * the forward on tiny shapes, then every CPU backend that has a backward against cpu-ref on random
 * shapes (GQA/MQA, causal with Lq != Lk both ways, windows, BSHD, f16/bf16), gradients poisoned
 * first and checked as written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashwatt.h"
#include "flashwatt_internal.h"
#include "fw_check.h"
#include "fw_harness.h"

typedef struct {
    int B, H, Hk, Lq, Lk, D, causal, wl, wr, bshd;
    fw_dtype dt;
} bwd_case;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static fw_tensor desc(void *p, const bwd_case *c, int heads, int seq)
{
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    return c->bshd ? fw_tensor_bshd(p, c->dt, cpu, c->B, heads, seq, c->D)
                   : fw_tensor_bhsd(p, c->dt, cpu, c->B, heads, seq, c->D);
}

static fw_attn_params params_of(const bwd_case *c)
{
    fw_attn_params p = fw_attn_params_default();
    p.causal = c->causal;
    p.window_left = c->wl;
    p.window_right = c->wr;
    return p;
}

/* Runs forward (cpu-ref) then backward with `backend`; gradients come back as float. */
static fw_status last_status;
static int run_backward(const char *backend, const bwd_case *c, void *q, void *k, void *v, void *dout,
                        float *dq, float *dk, float *dv, long *unwritten)
{
    const size_t es = fw_dtype_size(c->dt);
    const size_t nq = (size_t)c->B * c->H * c->Lq * c->D, nk = (size_t)c->B * c->Hk * c->Lk * c->D;
    void *o = malloc(nq * es), *gq = malloc(nq * es), *gk = malloc(nk * es), *gv = malloc(nk * es);
    float *lse = malloc((size_t)c->B * c->H * c->Lq * sizeof(float));
    fw_tensor tq = desc(q, c, c->H, c->Lq), tk = desc(k, c, c->Hk, c->Lk), tv = desc(v, c, c->Hk, c->Lk);
    fw_tensor to = desc(o, c, c->H, c->Lq), tdo = desc(dout, c, c->H, c->Lq);
    fw_tensor tdq = desc(gq, c, c->H, c->Lq), tdk = desc(gk, c, c->Hk, c->Lk), tdv = desc(gv, c, c->Hk, c->Lk);
    fw_attn_params p = params_of(c);
    fw_context *ctx;
    fw_context_create(&ctx);
    fw_context_set_backend(ctx, "cpu-ref");
    int ok = fw_attention_forward(ctx, &tq, &tk, &tv, &to, lse, &p) == FW_OK;
    memset(gq, 0xff, nq * es); memset(gk, 0xff, nk * es); memset(gv, 0xff, nk * es); /* NaN poison */
    fw_context_set_backend(ctx, backend);
    fw_status st = ok ? fw_attention_backward(ctx, &tq, &tk, &tv, &to, lse, &tdo, &tdq, &tdk, &tdv, &p) : FW_ERR_INTERNAL;
    last_status = st;
    if (st != FW_OK && st != FW_ERR_NOT_IMPLEMENTED) {
        printf("  %s backward: %s: %s\n", backend, fw_status_string(st), fw_context_last_error(ctx));
        ok = 0;
    }
    *unwritten = 0;
    for (size_t i = 0; i < nq; i++) { dq[i] = fw_load_f32(gq, c->dt, (int64_t)i); if (isnan(dq[i])) (*unwritten)++; }
    for (size_t i = 0; i < nk; i++) {
        dk[i] = fw_load_f32(gk, c->dt, (int64_t)i);
        dv[i] = fw_load_f32(gv, c->dt, (int64_t)i);
        if (isnan(dk[i]) || isnan(dv[i])) (*unwritten)++;
    }
    fw_context_destroy(ctx);
    free(o); free(gq); free(gk); free(gv); free(lse);
    return ok;
}

static double loss(fw_context *ctx, const bwd_case *c, float *q, float *k, float *v, float *o, const float *dout)
{
    fw_tensor tq = desc(q, c, c->H, c->Lq), tk = desc(k, c, c->Hk, c->Lk), tv = desc(v, c, c->Hk, c->Lk);
    fw_tensor to = desc(o, c, c->H, c->Lq);
    fw_attn_params p = params_of(c);
    fw_attention_forward(ctx, &tq, &tk, &tv, &to, NULL, &p);
    double s = 0;
    for (int i = 0; i < c->B * c->H * c->Lq * c->D; i++) s += (double)o[i] * dout[i];
    return s;
}

/* cpu-ref's analytic gradients vs central differences of sum(O ∘ dO), f32, tiny shapes. */
static void test_finite_differences(void)
{
    const bwd_case cases[] = {
        {1, 2, 1, 5, 7, 3, 1, 3, -1, 0, FW_F32},
        {2, 2, 2, 4, 4, 2, 0, -1, -1, 1, FW_F32},
        {1, 4, 2, 6, 3, 4, 1, -1, -1, 0, FW_F32},
        {1, 1, 1, 3, 8, 5, 0, 2, 1, 0, FW_F32},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const bwd_case *c = &cases[ci];
        const int nq = c->B * c->H * c->Lq * c->D, nk = c->B * c->Hk * c->Lk * c->D;
        float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *o = malloc(nq * 4), *dout = malloc(nq * 4);
        float *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
        for (int i = 0; i < nq; i++) { q[i] = frand(); dout[i] = frand(); }
        for (int i = 0; i < nk; i++) { k[i] = frand(); v[i] = frand(); }
        long unwritten;
        int ok = run_backward("cpu-ref", c, q, k, v, dout, dq, dk, dv, &unwritten);
        fw_context *ctx;
        fw_context_create(&ctx);
        fw_context_set_backend(ctx, "cpu-ref");
        const float eps = 1e-2f;
        double worst = 0;
        float *arr[3] = {q, k, v}, *grad[3] = {dq, dk, dv};
        const int n[3] = {nq, nk, nk};
        for (int a = 0; a < 3; a++)
            for (int i = 0; i < n[a]; i++) {
                const float s = arr[a][i];
                arr[a][i] = s + eps;
                const double lp = loss(ctx, c, q, k, v, o, dout);
                arr[a][i] = s - eps;
                const double lm = loss(ctx, c, q, k, v, o, dout);
                arr[a][i] = s;
                const double err = fabs((lp - lm) / (2 * eps) - grad[a][i]);
                if (err > worst || err != err) worst = err;
            }
        fw_context_destroy(ctx);
        /* central differences of an f32 forward: O(eps^2) truncation + f32 rounding / eps */
        fwt_case(ok && unwritten == 0 && worst < 1e-3, "finite differences B%d H%d/%d Lq%d Lk%d D%d causal%d w(%d,%d): max |fd - grad| %.2e",
                 c->B, c->H, c->Hk, c->Lq, c->Lk, c->D, c->causal, c->wl, c->wr, worst);
        free(q); free(k); free(v); free(o); free(dout); free(dq); free(dk); free(dv);
    }
}

/* Every CPU backend with a backward against cpu-ref. */
static void test_backends_against_ref(void)
{
    const bwd_case cases[] = {
        {1, 4, 4, 64, 64, 64, 0, -1, -1, 0, FW_F32},
        {2, 8, 1, 65, 129, 40, 1, -1, -1, 1, FW_F32},
        {1, 8, 2, 130, 33, 96, 1, -1, -1, 0, FW_F32},
        {1, 2, 2, 1, 77, 128, 0, -1, -1, 0, FW_F32},
        {1, 2, 1, 100, 100, 64, 1, 16, -1, 0, FW_F32},
        {1, 2, 2, 90, 70, 32, 0, 5, 7, 1, FW_F32},
        {1, 4, 2, 70, 90, 64, 1, -1, -1, 0, FW_F16},
        {1, 4, 2, 90, 70, 64, 0, -1, -1, 1, FW_BF16},
        {1, 2, 2, 33, 45, 256, 0, -1, -1, 0, FW_F32},
    };
    for (int bi = 0; bi < fw_backend_count(); bi++) {
        fw_backend_info info;
        fw_backend_get_info(bi, &info);
        if (info.device != FW_DEVICE_CPU || !info.usable || !strcmp(info.name, "cpu-ref")) continue;
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const bwd_case *c = &cases[ci];
            const size_t es = fw_dtype_size(c->dt);
            const int nq = c->B * c->H * c->Lq * c->D, nk = c->B * c->Hk * c->Lk * c->D;
            void *q = malloc(nq * es), *k = malloc(nk * es), *v = malloc(nk * es), *dout = malloc(nq * es);
            for (int i = 0; i < nq; i++) { fw_store_f32(q, c->dt, i, 2 * frand()); fw_store_f32(dout, c->dt, i, frand()); }
            for (int i = 0; i < nk; i++) { fw_store_f32(k, c->dt, i, 2 * frand()); fw_store_f32(v, c->dt, i, frand()); }
            float *r[3], *g[3];
            const int n[3] = {nq, nk, nk};
            for (int a = 0; a < 3; a++) { r[a] = malloc(n[a] * 4); g[a] = malloc(n[a] * 4); }
            long u_ref, u;
            int ok_ref = run_backward("cpu-ref", c, q, k, v, dout, r[0], r[1], r[2], &u_ref);
            int ok = run_backward(info.name, c, q, k, v, dout, g[0], g[1], g[2], &u);
            if (last_status == FW_ERR_NOT_IMPLEMENTED) { /* a backend without a backward: skipped, said so */
                fwt_skip("%s has no backward pass", info.name);
                for (int a = 0; a < 3; a++) { free(r[a]); free(g[a]); }
                free(q); free(k); free(v); free(dout);
                break;
            }
            double worst = 0, scale = 0;
            for (int a = 0; a < 3; a++)
                for (int i = 0; i < n[a]; i++) {
                    const double d = fabs((double)g[a][i] - r[a][i]);
                    if (d > worst || d != d) worst = d;
                    if (fabs(r[a][i]) > scale) scale = fabs(r[a][i]);
                }
            /* f32: f32 accumulation over <= 256 terms per dot; f16/bf16: the output rounding of
             * the gradients themselves dominates (half an ulp of the dtype) */
            const double tol = c->dt == FW_F32 ? 1e-5 * scale + 1e-6 : (c->dt == FW_F16 ? 2e-3 : 1.6e-2) * scale;
            fwt_case(ok_ref && ok && u_ref == 0 && u == 0 && worst <= tol,
                     "%s backward B%d H%d/%d Lq%d Lk%d D%d %s causal%d w(%d,%d) %s: max |g - g_ref| %.2e (tol %.2e, unwritten %ld)",
                     info.name, c->B, c->H, c->Hk, c->Lq, c->Lk, c->D, fw_dtype_name(c->dt), c->causal, c->wl, c->wr,
                     c->bshd ? "bshd" : "bhsd", worst, tol, u);
            for (int a = 0; a < 3; a++) { free(r[a]); free(g[a]); }
            free(q); free(k); free(v); free(dout);
        }
    }
}

int main(void)
{
    const double t0 = fw_now_seconds();
    test_finite_differences();
    test_backends_against_ref();
    return fwt_finish("test_backward", fw_now_seconds() - t0);
}
