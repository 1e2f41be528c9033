/* The numerics contract, row by row, for every usable CPU backend (threads 1 and 2):
 *  - a fully masked row (causal with Lq > Lk, a window that excludes every key) gives exactly 0 and
 *    LSE = -inf, never NaN; every other row is finite;
 *  - logits of about ±1e4 do not overflow: output finite and matching the float64 reference;
 *  - a NaN in one K row shows as NaN in exactly the output rows (and LSE entries) that read that key
 *    (rows whose window holds it, of the query heads of that kv head, in that batch) and nowhere else.
 * The expected mask comes from the formula in flashwatt.h, written out here independently. */
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "flashwatt_internal.h"

#define MAX_BACKENDS 16
static const char *backends[MAX_BACKENDS];
static int n_backends;
static fw_context *ctx;

/* flashwatt.h: query i sees key j when i + (Lk-Lq) - wl <= j <= i + (Lk-Lq) + wr, -1 unlimited;
 * causal means wr = 0. */
static int sees(const fw_case *c, int64_t i, int64_t j)
{
    const int64_t off = c->seqlen_k - c->seqlen_q;
    const int64_t wl = c->params.window_left;
    const int64_t wr = c->params.causal ? 0 : c->params.window_right;
    if (j < 0 || j >= c->seqlen_k) return 0;
    if (wl >= 0 && j < i + off - wl) return 0;
    if (wr >= 0 && j > i + off + wr) return 0;
    return 1;
}

static int row_masked(const fw_case *c, int64_t i)
{
    for (int64_t j = 0; j < c->seqlen_k; j++)
        if (sees(c, i, j)) return 0;
    return 1;
}

/* The output contract of every row: fully masked rows give O = 0 and LSE = -inf (bad_zero, bad_lse);
 * visible rows give finite O and LSE (bad_finite, bad_lse). */
static void count_row_contract(fw_run *r, const fw_case *c, long *bad_zero, long *bad_lse, long *bad_finite)
{
    *bad_zero = *bad_lse = *bad_finite = 0;
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t i = 0; i < c->seqlen_q; i++) {
                const int m = row_masked(c, i);
                const float lse = r->host_lse[(b * c->heads + h) * c->seqlen_q + i];
                if (m ? !(isinf(lse) && lse < 0) : !isfinite(lse)) (*bad_lse)++;
                for (int64_t d = 0; d < c->head_dim; d++) {
                    const float x = fw_run_output(r, b, h, i, d);
                    if (m && x != 0.0f) (*bad_zero)++;
                    if (!m && !isfinite(x)) (*bad_finite)++;
                }
            }
}


static fw_case mk(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, fw_dtype t, int causal,
                  int64_t wl, int64_t wr)
{
    static uint64_t seed = 7000;
    fw_case c = fw_case_shape(B, H, Hkv, Lq, Lk, D, t, seed++);
    c.params.causal = causal;
    c.params.window_left = wl;
    c.params.window_right = wr;
    return c;
}

/* Runs backend `name` with `threads` on r (poisoned first), compares. 0 = ran (e filled), 1 = skipped,
 * -1 = failed (already reported). */
static int run_one(fw_run *r, const char *what, const char *label, const char *name, int threads, fw_errors *e)
{
    char why[512] = "";
    fw_status st = fw_backend_supports(name, &r->q, &r->k, &r->v, &r->o, &r->c.params, why, sizeof why);
    if (st != FW_OK) {
        if (fwt_must_support(name) || st != FW_ERR_UNSUPPORTED || !why[0]) {
            fwt_case(0, "%s %s [%s] declined: %s: '%s'", what, name, label, fw_status_string(st), why);
            return -1;
        }
        if (threads == 1) fwt_skip("%s %s [%s]: %s", what, name, label, why);
        return 1;
    }
    if (fw_context_set_backend(ctx, name) != FW_OK || fw_context_set_threads(ctx, threads) != FW_OK ||
        fw_run_poison(r) != FW_OK) {
        fwt_case(0, "%s %s t%d [%s] setup: %s", what, name, threads, label, fw_context_last_error(ctx));
        return -1;
    }
    if ((st = fw_run_forward(r, ctx)) != FW_OK) {
        fwt_case(0, "%s %s t%d [%s] forward: %s: %s", what, name, threads, label, fw_status_string(st),
                 fw_context_last_error(ctx));
        return -1;
    }
    if ((st = fw_run_compare(r, e)) != FW_OK) {
        fwt_case(0, "%s %s t%d [%s] compare: %s", what, name, threads, label, fw_status_string(st));
        return -1;
    }
    return 0;
}

/* ---- fully masked rows --------------------------------------------------------------------- */
static void masked_rows(fw_case c)
{
    char label[200], msg[256];
    fw_case_label(&c, label, sizeof label);
    int64_t n_masked = 0;
    for (int64_t i = 0; i < c.seqlen_q; i++) n_masked += row_masked(&c, i);
    if (n_masked == 0) {
        fwt_case(0, "masked [%s]: the case has no fully masked row (test bug)", label);
        return;
    }
    fw_run r;
    fw_status st = fw_run_alloc(&r, &c, msg, sizeof msg);
    if (st != FW_OK) {
        fwt_case(0, "masked [%s] alloc: %s", label, msg);
        return;
    }
    for (int bi = 0; bi < n_backends; bi++)
        for (int threads = 1; threads <= 2; threads++) {
            fw_errors e;
            if (run_one(&r, "masked", label, backends[bi], threads, &e)) break;
            long bad_zero, bad_lse, bad_finite;
            count_row_contract(&r, &c, &bad_zero, &bad_lse, &bad_finite);
            fwt_case(e.pass && !bad_zero && !bad_lse && !bad_finite,
                     "masked %s t%d [%s] %lld of %lld rows fully masked: nonzero %ld, bad lse %ld, non-finite "
                     "in visible rows %ld; max_abs %.3g tol %.3g unwritten %ld nan_mismatch %ld",
                     backends[bi], threads, label, (long long)n_masked, (long long)c.seqlen_q, bad_zero, bad_lse,
                     bad_finite, e.max_abs, e.tol, e.unwritten, e.nan_mismatch);
        }
    fw_run_free(&r);
}

/* ---- large logits -------------------------------------------------------------------------- */
static void large_logits(fw_case c, float factor)
{
    char label[200], msg[256];
    fw_case_label(&c, label, sizeof label);
    fw_run r;
    fw_status st = fw_run_alloc(&r, &c, msg, sizeof msg);
    if (st == FW_OK) st = fw_run_scale_inputs(&r, factor, factor);
    if (st != FW_OK) {
        fwt_case(0, "large [%s] alloc/scale: %s", label, msg);
        return;
    }
    /* the largest |scale · q · k| over visible pairs, from the inputs as stored */
    double max_logit = 0;
    const int64_t g = c.heads / c.kv_heads;
    for (int64_t b = 0; b < c.batch; b++)
        for (int64_t h = 0; h < c.heads; h++)
            for (int64_t i = 0; i < c.seqlen_q; i++)
                for (int64_t j = 0; j < c.seqlen_k; j++) {
                    if (!sees(&c, i, j)) continue;
                    double dot = 0;
                    for (int64_t d = 0; d < c.head_dim; d++) {
                        const double qv = fw_load_f32(r.host_q, c.dtype, b * r.q.stride[0] + h * r.q.stride[1] + i * r.q.stride[2] + d);
                        const double kv = fw_load_f32(r.host_k, c.dtype, b * r.k.stride[0] + (h / g) * r.k.stride[1] + j * r.k.stride[2] + d);
                        dot += qv * kv;
                    }
                    dot = fabs(dot * (double)r.problem.scale);
                    if (dot > max_logit) max_logit = dot;
                }
    if (!(max_logit >= 5e3 && max_logit <= 1e5)) {
        fwt_case(0, "large [%s]: max |logit| %.3g not around 1e4 (test bug)", label, max_logit);
        fw_run_free(&r);
        return;
    }
    /* f32 logits of size |s| carry a rounding error of a few ulp(|s|) (2^-23 |s| each) in any backend
     * that forms them in f32, and the output moves by up to about 2·max|V| per unit of logit error:
     * the 1e-5·max|V| contract is for ordinary logits. Bound here: 2 · 2^-23 · max|s| · max|V|, plus
     * rounding P and O to the input dtype for f16/bf16. An overflow or a skipped max subtraction
     * gives NaN or O(max|V|) errors. f32 is held to the bound alone (the contract's 1e-5 is below
     * f32's resolution of such logits); f16/bf16 to the contract and the bound. */
    double max_v = 0;
    for (size_t i = 0; i < r.kv_elems; i++) max_v = fmax(max_v, fabs((double)fw_load_f32(r.host_v, c.dtype, (int64_t)i)));
    const double bound = 2.0 * 0x1p-23 * max_logit * max_v +
                         (c.dtype == FW_BF16 ? 0x1p-7 : c.dtype == FW_F16 ? 0x1p-10 : 0.0) * max_v;
    if (c.dtype == FW_F32) r.c.tol_override = bound;
    for (int bi = 0; bi < n_backends; bi++)
        for (int threads = 1; threads <= 2; threads++) {
            fw_errors e;
            if (run_one(&r, "large", label, backends[bi], threads, &e)) break;
            long bad_zero, bad_lse, bad_finite;
            count_row_contract(&r, &c, &bad_zero, &bad_lse, &bad_finite);
            const long nonfinite = bad_zero + bad_finite;
            fwt_case(e.pass && e.max_abs <= bound && !nonfinite && !bad_lse,
                     "large %s t%d [%s] max|logit| %.3g: bad outputs %ld, bad lse %ld (masked rows: 0 / -inf); max_abs %.3g "
                     "tol %.3g bound %.3g lse_err %.3g unwritten %ld",
                     backends[bi], threads, label, max_logit, nonfinite, bad_lse, e.max_abs, e.tol, bound,
                     e.lse_max_abs, e.unwritten);
        }
    fw_run_free(&r);
}

/* ---- NaN in one key ------------------------------------------------------------------------ */
static void nan_key(fw_case c, int64_t nb, int64_t nhk, int64_t nj, int64_t nd)
{
    char label[240], msg[256];
    fw_case_label(&c, label, sizeof label);
    snprintf(label + strlen(label), sizeof label - strlen(label), " NaN at k[%lld,%lld,%lld,%lld]",
             (long long)nb, (long long)nhk, (long long)nj, (long long)nd);
    fw_run r;
    fw_status st = fw_run_alloc(&r, &c, msg, sizeof msg);
    if (st == FW_OK) st = fw_run_set_input(&r, 'k', nb, nhk, nj, nd, NAN);
    if (st != FW_OK) {
        fwt_case(0, "nan [%s] alloc/set: %s", label, msg);
        return;
    }
    const int64_t g = c.heads / c.kv_heads;
    long expected_rows = 0;
    for (int64_t h = 0; h < c.heads; h++)
        for (int64_t i = 0; i < c.seqlen_q; i++) expected_rows += h / g == nhk && sees(&c, i, nj);
    for (int bi = 0; bi < n_backends; bi++)
        for (int threads = 1; threads <= 2; threads++) {
            fw_errors e;
            if (run_one(&r, "nan", label, backends[bi], threads, &e)) break;
            long nan_rows = 0, missing = 0, extra = 0, partial = 0, lse_bad = 0;
            for (int64_t b = 0; b < c.batch; b++)
                for (int64_t h = 0; h < c.heads; h++)
                    for (int64_t i = 0; i < c.seqlen_q; i++) {
                        const int want = b == nb && h / g == nhk && sees(&c, i, nj);
                        long n = 0;
                        for (int64_t d = 0; d < c.head_dim; d++) n += isnan(fw_run_output(&r, b, h, i, d)) != 0;
                        const float lse = r.host_lse[(b * c.heads + h) * c.seqlen_q + i];
                        if ((isnan(lse) != 0) != want) lse_bad++;
                        if (n) nan_rows++;
                        if (want && n == 0) missing++;
                        else if (want && n != c.head_dim) partial++;
                        else if (!want && n) extra++;
                    }
            fwt_case(e.pass && !missing && !extra && !partial && !lse_bad,
                     "nan %s t%d [%s] rows with NaN %ld (expected %ld): missing %ld, partial %ld, extra %ld, "
                     "lse wrong %ld; max_abs %.3g tol %.3g nan_mismatch %ld",
                     backends[bi], threads, label, nan_rows, expected_rows, missing, partial, extra, lse_bad,
                     e.max_abs, e.tol, e.nan_mismatch);
        }
    fw_run_free(&r);
}

/* NaN in one V element (b, hk, j, d): NaN in column d of exactly the rows that read key j, every
 * other element finite, LSE untouched (finite). NaN in one Q element (b, h, i, d) of a row that sees
 * keys: that whole row and its LSE are NaN, nothing else. */
static void nan_qv(fw_case c, char which, int64_t nb, int64_t nh, int64_t ns, int64_t nd)
{
    char label[240], msg[256];
    fw_case_label(&c, label, sizeof label);
    snprintf(label + strlen(label), sizeof label - strlen(label), " NaN at %c[%lld,%lld,%lld,%lld]", which,
             (long long)nb, (long long)nh, (long long)ns, (long long)nd);
    fw_run r;
    fw_status st = fw_run_alloc(&r, &c, msg, sizeof msg);
    if (st == FW_OK) st = fw_run_set_input(&r, which, nb, nh, ns, nd, NAN);
    if (st != FW_OK || (which == 'q' && row_masked(&c, ns))) {
        fwt_case(0, "nan [%s] alloc/set: %s", label, st != FW_OK ? msg : "row is masked (test bug)");
        if (st == FW_OK) fw_run_free(&r);
        return;
    }
    const int64_t g = c.heads / c.kv_heads;
    for (int bi = 0; bi < n_backends; bi++)
        for (int threads = 1; threads <= 2; threads++) {
            fw_errors e;
            if (run_one(&r, "nan", label, backends[bi], threads, &e)) break;
            long nan_elems = 0, expected = 0, missing = 0, extra = 0, lse_bad = 0;
            for (int64_t b = 0; b < c.batch; b++)
                for (int64_t h = 0; h < c.heads; h++)
                    for (int64_t i = 0; i < c.seqlen_q; i++) {
                        const int row = which == 'v' ? b == nb && h / g == nh && sees(&c, i, ns)
                                                     : b == nb && h == nh && i == ns;
                        const float lse = r.host_lse[(b * c.heads + h) * c.seqlen_q + i];
                        if ((isnan(lse) != 0) != (row && which == 'q')) lse_bad++;
                        for (int64_t d = 0; d < c.head_dim; d++) {
                            const int want = row && (which == 'q' || d == nd);
                            const int got = isnan(fw_run_output(&r, b, h, i, d)) != 0;
                            expected += want;
                            nan_elems += got;
                            missing += want && !got;
                            extra += got && !want;
                        }
                    }
            fwt_case(e.pass && !missing && !extra && !lse_bad,
                     "nan %s t%d [%s] NaN elements %ld (expected %ld): missing %ld, extra %ld, lse wrong %ld; "
                     "max_abs %.3g tol %.3g nan_mismatch %ld",
                     backends[bi], threads, label, nan_elems, expected, missing, extra, lse_bad, e.max_abs, e.tol,
                     e.nan_mismatch);
        }
    fw_run_free(&r);
}

int main(void)
{
    const double t0 = fw_now_seconds();
    n_backends = fwt_cpu_backends(backends, MAX_BACKENDS);
    if (fw_context_create(&ctx) != FW_OK) {
        fwt_case(0, "fw_context_create");
        return fwt_finish("test_numerics", fw_now_seconds() - t0);
    }
    const fw_dtype dts[3] = {FW_F32, FW_F16, FW_BF16};
    for (int t = 0; t < 3; t++) {
        /* causal with Lq > Lk: the first Lq - Lk rows see nothing */
        masked_rows(mk(2, 4, 2, 100, 37, 64, dts[t], 1, -1, -1));
        /* a window (left and right) that excludes every key for the first rows */
        masked_rows(mk(1, 2, 1, 100, 40, 80, dts[t], 0, 2, 5));
    }
    {
        fw_case c = mk(1, 2, 2, 129, 64, 64, FW_F32, 0, -1, 0); /* right-only window, strided */
        c.layout_bshd = 1; c.pad = 3;
        masked_rows(c);
        masked_rows(mk(1, 1, 1, 64, 1, 32, FW_F32, 1, -1, -1)); /* Lk = 1: all but the last row */
        masked_rows(mk(1, 1, 1, 70, 65, 96, FW_BF16, 1, 3, -1)); /* causal + window */
    }

    /* |scale·q·k| up to ~1e4: randn inputs, scale 1/sqrt(D); q·k has std sqrt(D), so factor f
     * on q and k gives logits of std f², max about 4 f² over 128x128 pairs. */
    large_logits(mk(1, 2, 2, 128, 128, 64, FW_F32, 0, -1, -1), 50.0f);
    large_logits(mk(1, 2, 1, 128, 96, 64, FW_F32, 1, -1, -1), 50.0f);
    large_logits(mk(1, 2, 2, 65, 130, 128, FW_BF16, 0, -1, -1), 50.0f);
    large_logits(mk(1, 2, 2, 64, 64, 64, FW_F16, 0, -1, -1), 45.0f);

    /* NaN in one K element: GQA with batch, causal */
    nan_key(mk(2, 4, 2, 64, 64, 64, FW_F32, 1, -1, -1), 1, 1, 20, 3);
    /* window (left and right), Lq > Lk */
    nan_key(mk(2, 4, 2, 80, 50, 40, FW_F32, 0, 5, 3), 0, 0, 10, 0);
    /* MQA, every row of that batch reads the key */
    nan_key(mk(2, 4, 1, 30, 70, 64, FW_F16, 0, -1, -1), 1, 0, 69, 63);
    /* causal Lq < Lk with a left window: key 10 is read by no row */
    nan_key(mk(1, 2, 1, 10, 60, 64, FW_F32, 1, 5, -1), 0, 0, 10, 5);
    /* diagonal band, strided BSHD, bf16 */
    {
        fw_case c = mk(2, 6, 3, 64, 64, 80, FW_BF16, 0, 2, 2);
        c.layout_bshd = 1; c.pad = 2;
        nan_key(c, 1, 2, 30, 79);
    }
    /* NaN in the first and in the last key */
    nan_key(mk(1, 2, 2, 65, 65, 64, FW_F32, 1, -1, -1), 0, 1, 0, 0);
    nan_key(mk(1, 2, 2, 129, 129, 32, FW_F32, 1, -1, -1), 0, 0, 128, 31);

    /* NaN in V: one column of the rows that read the key; NaN in Q: one row */
    nan_qv(mk(2, 4, 2, 64, 64, 64, FW_F32, 1, -1, -1), 'v', 1, 1, 20, 3);
    nan_qv(mk(1, 4, 1, 80, 50, 80, FW_F16, 0, 5, 3), 'v', 0, 0, 10, 79);
    nan_qv(mk(1, 2, 2, 70, 70, 96, FW_BF16, 0, -1, -1), 'v', 0, 1, 0, 0);
    nan_qv(mk(2, 4, 2, 64, 64, 64, FW_F32, 1, -1, -1), 'q', 1, 3, 40, 7);
    nan_qv(mk(1, 4, 4, 100, 37, 64, FW_F16, 1, -1, -1), 'q', 0, 2, 99, 0);
    nan_qv(mk(1, 2, 1, 33, 65, 128, FW_BF16, 0, 4, 4), 'q', 0, 1, 0, 127);

    fw_context_destroy(ctx);
    return fwt_finish("test_numerics", fw_now_seconds() - t0);
}
