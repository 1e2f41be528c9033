/* Every usable CPU backend of the registry against the float64 reference (harness), on the awkward
 * shapes: L = 1, tile ± 1, Lq != Lk both ways, odd head dims, causal with Lq > Lk and Lq < Lk,
 * GQA/MQA, windows, strided (padded rows, BSHD) inputs, f16 and bf16, plus seeded random shapes.
 * Each case runs with context threads = 1 and 2 (the random shapes also 3), on poisoned outputs
 * (unwritten and stray elements fail). A backend that declines a case must give a reason (counted
 * as skipped); cpu-ref and cpu-naive must take every case. New backends (cpu-flash) are picked up
 * from the registry. */
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"

#define MAX_BACKENDS 16

static const char *backends[MAX_BACKENDS];
static int n_backends;
static fw_context *ctx;
static int max_threads = 2; /* context threads 1..max_threads per case (3 for the random shapes) */

static void run_case_p(const fw_case *c)
{
    char label[256], msg[512];
    fw_case_label(c, label, sizeof label);
    fw_run r;
    fw_status st = fw_run_alloc(&r, c, msg, sizeof msg);
    if (st != FW_OK) {
        fwt_case(0, "[%s] alloc: %s (%s)", label, fw_status_string(st), msg);
        return;
    }
    for (int bi = 0; bi < n_backends; bi++) {
        const char *name = backends[bi];
        char why[512] = "";
        st = fw_backend_supports(name, &r.q, &r.k, &r.v, &r.o, &c->params, why, sizeof why);
        if (st != FW_OK) {
            if (fwt_must_support(name))
                fwt_case(0, "%s [%s] must support every case but says %s: %s", name, label, fw_status_string(st), why);
            else if (st != FW_ERR_UNSUPPORTED || why[0] == 0)
                fwt_case(0, "%s [%s] declined with status '%s' and reason '%s' (needs FW_ERR_UNSUPPORTED and a reason)",
                         name, label, fw_status_string(st), why);
            else
                fwt_skip("%s [%s]: %s", name, label, why);
            continue;
        }
        for (int threads = 1; threads <= max_threads; threads++) {
            if (fw_context_set_backend(ctx, name) != FW_OK || fw_context_set_threads(ctx, threads) != FW_OK) {
                fwt_case(0, "%s t%d [%s] context setup: %s", name, threads, label, fw_context_last_error(ctx));
                continue;
            }
            if ((st = fw_run_poison(&r)) != FW_OK) {
                fwt_case(0, "%s t%d [%s] poison: %s", name, threads, label, fw_status_string(st));
                continue;
            }
            st = fw_run_forward(&r, ctx);
            if (st != FW_OK) {
                fwt_case(0, "%s t%d [%s] forward: %s: %s", name, threads, label, fw_status_string(st),
                         fw_context_last_error(ctx));
                continue;
            }
            const char *ran = fw_context_last_backend(ctx);
            fw_errors e;
            st = fw_run_compare(&r, &e);
            if (st != FW_OK) {
                fwt_case(0, "%s t%d [%s] compare: %s", name, threads, label, fw_status_string(st));
                continue;
            }
            const int named_ok = ran && strcmp(ran, name) == 0;
            fwt_case(e.pass && named_ok,
                     "%s t%d [%s] max_abs %.3g tol %.3g rel_l2 %.3g lse %.3g unwritten %ld stray %ld nan_mismatch %ld%s%s",
                     name, threads, label, e.max_abs, e.tol, e.rel_l2, e.lse_max_abs, e.unwritten, e.stray,
                     e.nan_mismatch, named_ok ? "" : " last_backend=", named_ok ? "" : ran);
        }
    }
    fw_run_free(&r);
}

static void run_case(fw_case c) { run_case_p(&c); }

static fw_case mk(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, fw_dtype t)
{
    static uint64_t seed = 100;
    return fw_case_shape(B, H, Hkv, Lq, Lk, D, t, seed++);
}

static fw_case win(fw_case c, int causal, int64_t wl, int64_t wr)
{
    c.params.causal = causal;
    c.params.window_left = wl;
    c.params.window_right = wr;
    return c;
}

static fw_case lay(fw_case c, int bshd, int pad)
{
    c.layout_bshd = bshd;
    c.pad = pad;
    return c;
}

static uint64_t rng_state = 0x5eedf00dull;
static uint64_t rnd(uint64_t n)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) % n;
}

int main(void)
{
    const double t0 = fw_now_seconds();
    n_backends = fwt_cpu_backends(backends, MAX_BACKENDS);
    printf("usable cpu backends:");
    for (int i = 0; i < n_backends; i++) printf(" %s", backends[i]);
    printf(" (simd %s)\n", fw_cpu_simd_level());
    int have_ref = 0, have_naive = 0;
    for (int i = 0; i < n_backends; i++) {
        have_ref |= strcmp(backends[i], "cpu-ref") == 0;
        have_naive |= strcmp(backends[i], "cpu-naive") == 0;
    }
    fwt_case(have_ref && have_naive, "registry lists usable cpu-ref and cpu-naive");
    if (fw_context_create(&ctx) != FW_OK) {
        fwt_case(0, "fw_context_create");
        return fwt_finish("test_backends", fw_now_seconds() - t0);
    }

    const fw_dtype dts[3] = {FW_F32, FW_F16, FW_BF16};
    /* L = 1 and decode-like shapes */
    run_case(mk(1, 1, 1, 1, 1, 64, FW_F32));
    run_case(mk(1, 2, 1, 1, 128, 64, FW_F32));
    run_case(win(mk(1, 2, 2, 1, 129, 128, FW_F16), 1, -1, -1));
    run_case(mk(1, 1, 1, 128, 1, 64, FW_F32));
    run_case(win(mk(1, 1, 1, 65, 1, 64, FW_BF16), 1, -1, -1));
    /* tile ± 1, square, plain and causal */
    const int64_t tiles[6] = {63, 64, 65, 127, 128, 129};
    for (int i = 0; i < 6; i++) {
        run_case(mk(1, 2, 2, tiles[i], tiles[i], 64, FW_F32));
        run_case(win(mk(1, 1, 1, tiles[i], tiles[i], 64, i % 2 ? FW_F16 : FW_BF16), 1, -1, -1));
    }
    /* Lq != Lk both ways */
    run_case(mk(1, 2, 2, 65, 129, 64, FW_F32));
    run_case(mk(1, 2, 2, 129, 65, 64, FW_F32));
    run_case(mk(2, 1, 1, 200, 17, 32, FW_F16));
    run_case(mk(1, 1, 1, 17, 200, 32, FW_BF16));
    /* head dims, each dtype */
    const int64_t dims[8] = {1, 40, 64, 80, 96, 128, 256, 3};
    for (int i = 0; i < 8; i++)
        for (int t = 0; t < 3; t++) run_case(mk(1, 1, 1, t == 0 ? 65 : 33, t == 0 ? 63 : 70, dims[i], dts[t]));
    /* causal, bottom-right aligned, Lq > Lk and Lq < Lk */
    run_case(win(mk(1, 2, 2, 129, 64, 64, FW_F32), 1, -1, -1));
    run_case(win(mk(1, 2, 2, 64, 129, 64, FW_F32), 1, -1, -1));
    run_case(win(mk(1, 1, 1, 100, 37, 80, FW_F16), 1, -1, -1));
    run_case(win(mk(1, 1, 1, 37, 100, 96, FW_BF16), 1, -1, -1));
    /* GQA 8:1 and MQA, with batch */
    run_case(mk(2, 16, 2, 65, 65, 64, FW_F32));
    run_case(win(mk(1, 8, 1, 64, 96, 64, FW_F32), 1, -1, -1));
    run_case(mk(2, 4, 1, 33, 47, 128, FW_F16));
    run_case(win(mk(1, 8, 1, 70, 50, 40, FW_BF16), 1, -1, -1));
    run_case(mk(3, 6, 3, 20, 30, 64, FW_F32));
    /* windows: left only, right only, both, with causal; square and not */
    run_case(win(mk(1, 2, 2, 128, 128, 64, FW_F32), 0, 16, -1));
    run_case(win(mk(1, 2, 2, 128, 128, 64, FW_F32), 0, -1, 8));
    run_case(win(mk(1, 2, 2, 128, 128, 64, FW_F32), 0, 5, 7));
    run_case(win(mk(1, 2, 2, 128, 128, 64, FW_F32), 1, 20, -1));
    run_case(win(mk(1, 2, 2, 128, 128, 64, FW_F32), 0, 0, 0));
    run_case(win(mk(1, 2, 1, 100, 40, 64, FW_F32), 0, 2, 5));  /* leading rows fully masked */
    run_case(win(mk(1, 2, 1, 40, 100, 64, FW_F16), 0, 3, 9));
    run_case(win(mk(1, 2, 1, 90, 60, 64, FW_BF16), 1, 11, -1));
    run_case(win(mk(1, 1, 1, 64, 129, 96, FW_F32), 0, 0, -1));
    run_case(win(mk(1, 1, 1, 129, 64, 80, FW_F32), 0, -1, 0));
    /* strided: padded rows, BSHD, both; with every dtype */
    for (int t = 0; t < 3; t++) {
        run_case(lay(mk(2, 4, 2, 65, 63, 64, dts[t]), 0, 3));
        run_case(lay(mk(2, 4, 2, 65, 63, 64, dts[t]), 1, 0));
        run_case(lay(win(mk(1, 4, 1, 77, 99, 80, dts[t]), 1, -1, -1), 1, 5));
    }
    {   /* no LSE requested */
        fw_case c = mk(1, 2, 1, 64, 64, 64, FW_F32);
        c.want_lse = 0;
        run_case(c);
        c = win(mk(1, 2, 1, 64, 40, 64, FW_F16), 1, -1, -1);
        c.want_lse = 0;
        run_case(c);
    }
    {   /* an explicit scale */
        fw_case c = mk(1, 2, 2, 64, 64, 64, FW_F32);
        c.params.scale = 0.37f;
        run_case(c);
    }
    /* longer: decode shapes (Lq tiny, Lk long: split-KV territory), longer sequences, long windows */
    run_case(mk(1, 4, 1, 1, 2048, 128, FW_F32));
    run_case(mk(2, 8, 2, 1, 1500, 64, FW_F16));
    run_case(win(mk(1, 2, 2, 3, 1777, 80, FW_BF16), 1, -1, -1));
    run_case(win(mk(1, 2, 1, 512, 512, 128, FW_F32), 1, -1, -1));
    run_case(lay(mk(1, 1, 1, 300, 700, 64, FW_BF16), 1, 1));
    run_case(win(mk(1, 2, 2, 1024, 1024, 64, FW_F32), 0, 100, 0));
    run_case(win(mk(1, 2, 2, 700, 1000, 256, FW_F16), 0, 31, 17));
    /* seeded random shapes */
    const int64_t rdims[10] = {1, 8, 16, 32, 40, 64, 80, 96, 128, 160};
    max_threads = 3; /* an odd count too: uneven splits of rows and keys */
    for (int i = 0; i < 64; i++) {
        const int64_t hkv = 1 + (int64_t)rnd(3), group = 1 + (int64_t)rnd(4), lmax = i % 4 == 3 ? 260 : 150;
        fw_case c = mk(1 + (int64_t)rnd(2), hkv * group, hkv, 1 + (int64_t)rnd(lmax), 1 + (int64_t)rnd(lmax),
                       rdims[rnd(10)], dts[rnd(3)]);
        c.params.causal = (int)rnd(3) == 0;
        c.params.window_left = rnd(3) == 0 ? (int64_t)rnd(40) : -1;
        c.params.window_right = rnd(3) == 0 ? (int64_t)rnd(40) : -1;
        c.layout_bshd = (int)rnd(2);
        c.pad = rnd(2) ? (int)rnd(6) : 0;
        c.want_lse = rnd(4) != 0;
        run_case(c);
    }
    fw_context_destroy(ctx);
    return fwt_finish("test_backends", fw_now_seconds() - t0);
}
