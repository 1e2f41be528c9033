/* The contract for non-finite values (include/flashwatt.h, "Non-finite values"), row by row and element
 * by element, on every backend of a device: each scenario plants NaN/Inf in Q, K or V, or makes logits
 * overflow float32, and every output row is checked against what the contract says of it, computed here
 * independently of the backends (in double, from the inputs as the call's dtype holds them):
 *   - a NaN or +Inf logit (NaN or Inf in q or k, overflow beyond float32) makes the row's O and LSE NaN;
 *   - a -Inf logit weighs 0; a row whose logits are all -Inf gives O = 0 and LSE = -inf;
 *   - NaN in V at a key the row sees makes that column NaN, also where the key's weight underflows to 0;
 *     Inf there makes it non-finite; LSE stays finite;
 *   - every other row is finite and matches the float64 result.
 * Rows whose largest logit lies between 2^126 and float32's largest value (where a backend may overflow
 * early) are not checked. Outputs start as a finite poison, so an unwritten row cannot pass as NaN.
 *
 *   test_nonfinite                 CPU backends (ctest, label cpu)
 *   test_nonfinite --device cuda   CUDA backends (label gpu; exit 77 without a GPU). There, NaN/Inf in V
 *                                  behind a causal mask is left out: the GPU kernels multiply whole
 *                                  tiles, and the contract leaves such rows unspecified there; so is a
 *                                  scale above 1e30. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "fw_harness_impl.h"

#define OUT_POISON 777.0f /* finite: a row the call did not write cannot look like NaN */
#define BAND_LO 8.507059173023462e37 /* 2^126: logits up to here are computed as finite by every backend */

static fw_device dev;

typedef enum row_class { ROW_FINITE, ROW_NAN, ROW_ZERO, ROW_UNCHECKED } row_class;

/* A row's expected output (head_dim <= MAX_D). */
#define MAX_D 64
typedef struct expect {
    row_class cls;
    double o[MAX_D], lse;
    int col_nan[MAX_D], col_inf[MAX_D]; /* V holds NaN / Inf (and no NaN) in this column at a seen key */
    double max_v;                       /* max |V| over the finite values of the seen keys */
} expect;

static double float_range(double x) { return fabs(x) > FLT_MAX ? copysign(INFINITY, x) : x; }

static float in(const fw_run *r, char which, int64_t b, int64_t h, int64_t s, int64_t d)
{
    const fw_tensor *t = which == 'q' ? &r->q : which == 'k' ? &r->k : &r->v;
    const void *host = which == 'q' ? r->host_q : which == 'k' ? r->host_k : r->host_v;
    return fw_load_f32(host, r->c.dtype, fwh_offset(t, b, h, s, d));
}

static int64_t seq_q(const fw_run *r, int64_t b) { return r->c.kind == FW_CASE_DENSE ? r->c.seqlen_q : r->c.seq_q[b]; }
static int64_t seq_k(const fw_run *r, int64_t b) { return r->c.kind == FW_CASE_DENSE ? r->c.seqlen_k : r->c.seq_k[b]; }

/* flashwatt.h's mask, written out: query i sees key j when i + off - wl <= j <= i + off + wr. */
static void key_range(const fw_run *r, int64_t b, int64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t Lq = seq_q(r, b), Lk = seq_k(r, b), off = Lk - Lq;
    const int64_t wl = r->c.params.window_left, wr = r->c.params.causal ? 0 : r->c.params.window_right;
    *lo = wl < 0 ? 0 : i + off - wl;
    *hi = wr < 0 ? Lk : i + off + wr + 1;
    if (*lo < 0) *lo = 0;
    if (*hi > Lk) *hi = Lk;
}

static double call_scale(const fw_run *r)
{
    return r->c.params.scale != 0.0f ? (double)r->c.params.scale : (double)(float)(1.0 / sqrt((double)r->c.head_dim));
}

static void expect_row(const fw_run *r, int64_t b, int64_t h, int64_t i, expect *e)
{
    const int64_t D = r->c.head_dim, hk = h / (r->c.heads / r->c.kv_heads);
    int64_t lo, hi;
    key_range(r, b, i, &lo, &hi);
    memset(e, 0, sizeof *e);
    double *x = (double *)malloc(sizeof(double) * (size_t)(hi > lo ? hi - lo : 1));
    double m = -INFINITY;
    int nan_logit = 0, band = 0;
    for (int64_t j = lo; j < hi; j++) {
        double dot = 0;
        for (int64_t d = 0; d < D; d++) dot += (double)in(r, 'q', b, h, i, d) * in(r, 'k', b, hk, j, d);
        const double fd = float_range(dot), xj = float_range(fd * call_scale(r));
        if (isfinite(fd) && fabs(fd) >= BAND_LO) band = 1;
        x[j - lo] = xj;
        if (xj != xj || xj == INFINITY) nan_logit = 1;
        else if (xj > m) m = xj;
        for (int64_t d = 0; d < D; d++) {
            const float v = in(r, 'v', b, hk, j, d);
            if (v != v) e->col_nan[d] = 1;
            else if (isinf(v)) e->col_inf[d] = 1;
            else if (fabs(v) > e->max_v) e->max_v = fabs(v);
        }
    }
    if (nan_logit) e->cls = ROW_NAN;
    else if (m == -INFINITY) e->cls = ROW_ZERO; /* no key seen, or every logit -inf */
    else if (band || fabs(m) >= BAND_LO) e->cls = ROW_UNCHECKED;
    else {
        e->cls = ROW_FINITE;
        double l = 0;
        for (int64_t j = lo; j < hi; j++) {
            const double w = exp(x[j - lo] - m);
            l += w;
            for (int64_t d = 0; d < D; d++) e->o[d] += w * in(r, 'v', b, hk, j, d);
        }
        for (int64_t d = 0; d < D; d++) e->o[d] /= l;
        e->lse = m + log(l);
    }
    free(x);
}

static int64_t lse_index(const fw_run *r, int64_t b, int64_t h, int64_t i)
{
    return (b * r->c.heads + h) * seq_q(r, b) + i; /* dense, and a cache case with unpacked q */
}

/* The call's output against the contract: rows that break it, and the first one described. */
static long check_rows(const fw_run *r, long counts[4], char *first, size_t len)
{
    const int64_t D = r->c.head_dim;
    const int lowp = r->c.dtype != FW_F32;
    long bad = 0;
    for (int64_t b = 0; b < r->c.batch; b++)
        for (int64_t h = 0; h < r->c.heads; h++)
            for (int64_t i = 0; i < seq_q(r, b); i++) {
                expect e;
                expect_row(r, b, h, i, &e);
                counts[e.cls]++;
                if (e.cls == ROW_UNCHECKED) continue;
                const float lse = r->host_lse[lse_index(r, b, h, i)];
                const double tol = (lowp ? 8e-3 : 2e-5) * e.max_v + 1e-6;
                char why[200] = "";
                if (e.cls == ROW_NAN && !isnan(lse)) snprintf(why, sizeof why, "LSE %g, want NaN", (double)lse);
                if (e.cls == ROW_ZERO && !(isinf(lse) && lse < 0)) snprintf(why, sizeof why, "LSE %g, want -inf", (double)lse);
                if (e.cls == ROW_FINITE && !(fabs(lse - e.lse) <= 1e-3 * (1 + fabs(e.lse))))
                    snprintf(why, sizeof why, "LSE %.9g, want %.9g", (double)lse, e.lse);
                for (int64_t d = 0; d < D && !why[0]; d++) {
                    const float o = fw_run_output(r, b, h, i, d);
                    if (e.cls == ROW_NAN && !isnan(o)) snprintf(why, sizeof why, "O[%lld] %g, want NaN", (long long)d, (double)o);
                    if (e.cls == ROW_ZERO && !e.col_nan[d] && !e.col_inf[d] && o != 0.0f)
                        snprintf(why, sizeof why, "O[%lld] %g, want 0", (long long)d, (double)o);
                    if (e.cls != ROW_FINITE) continue;
                    if (e.col_nan[d] && !isnan(o)) snprintf(why, sizeof why, "O[%lld] %g, want NaN (V)", (long long)d, (double)o);
                    else if (!e.col_nan[d] && e.col_inf[d] && isfinite(o))
                        snprintf(why, sizeof why, "O[%lld] %g, want non-finite (V)", (long long)d, (double)o);
                    else if (!e.col_nan[d] && !e.col_inf[d] && !(fabs(o - e.o[d]) <= tol))
                        snprintf(why, sizeof why, "O[%lld] %.9g, want %.9g (tol %.2g)", (long long)d, (double)o, e.o[d], tol);
                }
                if (why[0] && !bad++)
                    snprintf(first, len, "b %lld h %lld row %lld: %s", (long long)b, (long long)h, (long long)i, why);
            }
    return bad;
}

/* ---- scenarios -------------------------------------------------------------------------------- */
typedef struct shape_info {
    const char *name;
    int64_t j0, i0; /* the planted key (sequence 0) and query row */
} shape_info;

static void set(fw_run *r, char which, int64_t b, int64_t h, int64_t s, int64_t d, float x)
{
    if (fw_run_set_input(r, which, b, h, s, d, x) != FW_OK) {
        fprintf(stderr, "test_nonfinite: cannot set an input\n");
        exit(1);
    }
}

/* Column 0 of every query row made positive and at least 4: a key's logit then has the sign of its
 * column-0 value times a large factor. */
static void positive_q0(fw_run *r)
{
    for (int64_t b = 0; b < r->c.batch; b++)
        for (int64_t h = 0; h < r->c.heads; h++)
            for (int64_t i = 0; i < seq_q(r, b); i++) set(r, 'q', b, h, i, 0, 4.0f + fabsf(in(r, 'q', b, h, i, 0)));
}

static void only_k0(fw_run *r, int64_t j, float x)
{
    for (int64_t d = 0; d < r->c.head_dim; d++) set(r, 'k', 0, 0, j, d, d ? 0.0f : x);
}

typedef struct scenario {
    const char *name;
    int v_plant;  /* plants in V: left out behind masks on the GPU */
    int wide_only; /* needs f32/bf16 range (values beyond f16's) */
    float scale;  /* 0: the default; above 1e30 the CPU backends only (the header says why) */
    void (*plant)(fw_run *r, const shape_info *s);
} scenario;

static void nan_q(fw_run *r, const shape_info *s) { set(r, 'q', 0, r->c.heads - 1, s->i0, 2, NAN); }
static void nan_k(fw_run *r, const shape_info *s) { set(r, 'k', 0, 0, s->j0, 3, NAN); }
static void nan_v_underflow(fw_run *r, const shape_info *s)
{
    positive_q0(r);
    only_k0(r, s->j0, -400.0f); /* logit <= -400: its weight is 0 in float32 */
    set(r, 'v', 0, 0, s->j0, 5, NAN);
}
static void inf_v(fw_run *r, const shape_info *s) { set(r, 'v', 0, 0, s->j0, 5, INFINITY); }
static void pinf_logit(fw_run *r, const shape_info *s)
{
    positive_q0(r);
    set(r, 'k', 0, 0, s->j0, 0, INFINITY);
}
static void ninf_logit(fw_run *r, const shape_info *s)
{
    positive_q0(r);
    set(r, 'k', 0, 0, s->j0, 0, -INFINITY);
}
static void all_ninf(fw_run *r, const shape_info *s)
{
    for (int64_t j = 0; j < seq_k(r, 0); j++) set(r, 'k', 0, 0, j, 0, 0.5f + fabsf(in(r, 'k', 0, 0, j, 0)));
    set(r, 'q', 0, 0, s->i0, 0, -INFINITY);
}
/* Rows alternately small (logits below 2^126) and large (logits beyond float32's range). */
static void scale_overflow(fw_run *r, const shape_info *s)
{
    (void)s;
    for (int64_t b = 0; b < r->c.batch; b++)
        for (int64_t h = 0; h < r->c.heads; h++)
            for (int64_t i = 0; i < seq_q(r, b); i++)
                for (int64_t d = 0; d < r->c.head_dim; d++) set(r, 'q', b, h, i, d, in(r, 'q', b, h, i, d) * (i % 2 ? 10.0f : 0.02f));
}
/* q·k itself beyond float32's range in the odd rows (a small scale brings it back). */
static void dot_overflow(fw_run *r, const shape_info *s)
{
    (void)s;
    for (int64_t b = 0; b < r->c.batch; b++) {
        for (int64_t h = 0; h < r->c.heads; h++)
            for (int64_t i = 0; i < seq_q(r, b); i++)
                set(r, 'q', b, h, i, 0, (in(r, 'q', b, h, i, 0) < 0 ? -1.0f : 1.0f) * (i % 2 ? 1e20f : 1e19f));
        for (int64_t hk = 0; hk < r->c.kv_heads; hk++)
            for (int64_t j = 0; j < seq_k(r, b); j++) {
                const float k0 = in(r, 'k', b, hk, j, 0);
                set(r, 'k', b, hk, j, 0, (k0 < 0 ? -1.0f : 1.0f) * (4e18f + 3e18f * fminf(fabsf(k0), 1.0f)));
            }
    }
}

static const scenario scenarios[] = {
    {"NaN in q", 0, 0, 0, nan_q},
    {"NaN in k", 0, 0, 0, nan_k},
    {"NaN in v at a key whose weight underflows", 1, 0, 0, nan_v_underflow},
    {"+Inf in v", 1, 0, 0, inf_v},
    {"+Inf logit", 0, 0, 0, pinf_logit},
    {"-Inf logit", 0, 0, 0, ninf_logit},
    {"a row of -Inf logits", 0, 0, 0, all_ninf},
    {"scale*q.k beyond float32", 0, 0, 1e37f, scale_overflow},
    {"q.k beyond float32", 0, 1, 1e-36f, dot_overflow},
};

static fw_status fetch(fw_run *r)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    const size_t lse_n = r->c.kind == FW_CASE_DENSE ? (size_t)(r->c.batch * r->c.heads * r->c.seqlen_q) : r->lse_elems;
    fw_status st = fw_run_sync(r);
    if (st == FW_OK) st = fwh_copy(r, r->host_o, r->o.data, r->o_elems * es, 0);
    if (st == FW_OK) st = fwh_copy(r, r->host_lse, r->lse, lse_n * sizeof(float), 0);
    return st;
}

static fw_status poison(fw_run *r)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    const size_t lse_n = r->c.kind == FW_CASE_DENSE ? (size_t)(r->c.batch * r->c.heads * r->c.seqlen_q) : r->lse_elems;
    for (size_t i = 0; i < r->o_elems; i++) fw_store_f32(r->host_o, r->c.dtype, (int64_t)i, OUT_POISON);
    for (size_t i = 0; i < lse_n; i++) r->host_lse[i] = OUT_POISON;
    fw_status st = fwh_copy(r, r->o.data, r->host_o, r->o_elems * es, 1);
    if (st == FW_OK) st = fwh_copy(r, r->lse, r->host_lse, lse_n * sizeof(float), 1);
    return st;
}

/* One scenario on one case, every usable backend of the device. */
static void run_scenario(const scenario *sc, fw_case c, const shape_info *si, long totals[4])
{
    char label[160];
    c.device = dev;
    c.want_lse = 1;
    c.params.scale = sc->scale;
    fw_run r;
    char msg[512];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "%s %s: setup: %s", sc->name, si->name, msg);
        return;
    }
    sc->plant(&r, si);
    for (int i = 0; i < fw_backend_count(); i++) {
        fw_backend_info info;
        if (fw_backend_get_info(i, &info) != FW_OK || info.device != dev.kind || !info.usable) continue;
        if (fw_run_supports(&r, info.name, msg, sizeof msg) != FW_OK) continue;
        fw_context *ctx = NULL;
        if (fw_context_create(&ctx) != FW_OK || fw_context_set_backend(ctx, info.name) != FW_OK ||
            fw_context_set_threads(ctx, 2) != FW_OK) {
            fwt_case(0, "%s: context", info.name);
            fw_context_destroy(ctx);
            continue;
        }
        snprintf(label, sizeof label, "%s %s %s%s: %s", info.name, fw_dtype_name(c.dtype), si->name,
                 c.params.causal ? " causal" : "", sc->name);
        fw_status st = poison(&r);
        if (st == FW_OK) st = fw_run_forward(&r, ctx);
        if (st != FW_OK) {
            fwt_case(0, "%s: %s %s", label, fw_status_string(st), fw_context_last_error(ctx));
        } else if ((st = fetch(&r)) != FW_OK) {
            fwt_case(0, "%s: fetching the output: %s", label, fw_status_string(st));
        } else {
            long counts[4] = {0, 0, 0, 0};
            char first[300] = "";
            const long bad = check_rows(&r, counts, first, sizeof first);
            for (int k = 0; k < 4; k++) totals[k] += counts[k];
            fwt_case(bad == 0, "%s: rows finite %ld, NaN %ld, zero %ld, unchecked %ld; %ld break the contract%s%s", label,
                     counts[ROW_FINITE], counts[ROW_NAN], counts[ROW_ZERO], counts[ROW_UNCHECKED], bad, bad ? ": " : "", first);
        }
        fw_context_destroy(ctx);
    }
    fw_run_free(&r);
}

int main(int argc, char **argv)
{
    const double t0 = fw_now_seconds();
    dev.kind = FW_DEVICE_CPU;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (fw_device_parse(argv[++i], &dev)) {
                fprintf(stderr, "test_nonfinite: --device cpu|cuda[:N]\n");
                return 2;
            }
        } else {
            printf("usage: test_nonfinite [--device cpu|cuda[:N]]\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (dev.kind == FW_DEVICE_CUDA && fw_cuda_device_count() <= dev.index) {
        printf("SKIP no CUDA device %d here\n", dev.index);
        return 77;
    }
    const fw_dtype dtypes[3] = {FW_F32, FW_BF16, FW_F16};
    const int32_t sq[2] = {3, 3}, sk[2] = {200, 90};
    long totals[4] = {0, 0, 0, 0};
    for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++)
        for (int t = 0; t < 3; t++) {
            const scenario *sc = &scenarios[s];
            if (sc->wide_only && dtypes[t] == FW_F16) continue;
            if (sc->scale > 1e30f && dev.kind == FW_DEVICE_CUDA) continue; /* outside the GPU's contract */
            for (int causal = 0; causal < 2; causal++) {
                if (causal && sc->v_plant && dev.kind == FW_DEVICE_CUDA) continue; /* unspecified there */
                /* prefill with Lq < Lk (the causal mask's corner), decode long enough to split, a KV cache */
                fw_case c = fw_case_shape(1, 2, 1, 120, 150, 16, dtypes[t], 31 + s);
                c.params.causal = causal;
                run_scenario(sc, c, &(shape_info){"prefill 120x150", 100, 60}, totals);
                c = fw_case_shape(1, 2, 1, 1, 1500, 16, dtypes[t], 41 + s);
                c.params.causal = causal;
                run_scenario(sc, c, &(shape_info){"decode 1x1500", 1000, 0}, totals);
                c = fw_case_serving(FW_CASE_KVCACHE, 2, sq, sk, 2, 1, 16, dtypes[t], 51 + s);
                c.params.causal = causal;
                run_scenario(sc, c, &(shape_info){"kvcache 2 x (3 new, 200|90 cached)", 150, 1}, totals);
            }
        }
    /* the scenarios are not vacuous: each kind of row occurred */
    fwt_case(totals[ROW_FINITE] > 0 && totals[ROW_NAN] > 0 && totals[ROW_ZERO] > 0,
             "rows checked: %ld finite, %ld NaN, %ld zero (%ld unchecked)", totals[ROW_FINITE], totals[ROW_NAN],
             totals[ROW_ZERO], totals[ROW_UNCHECKED]);
    return fwt_finish("test_nonfinite", fw_now_seconds() - t0);
}
