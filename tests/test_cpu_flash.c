/* cpu-flash against the float64 reference (the harness contract), on the shapes that stress its
 * tiling: L = 1, tile edges ±1, Lq != Lk both ways, head dims 1..256 (fast paths 64/128 and the
 * generic one), causal with Lq > Lk and Lq < Lk, GQA 8:1, MQA, sliding windows, BSHD and padded
 * strides, f16/bf16, split-KV (few items, many threads), every entry of configs(), a NaN in V
 * behind a mask, and a random sweep. Outputs are poisoned first; every element must be written.
 * It runs at the CPU's SIMD level and then re-runs itself with FLASHWATT_SIMD lowered to each
 * level below (avx2, scalar), so every micro-kernel this machine can run is covered.
 *   test_cpu_flash [--long]   (--long adds L = 16384) */
#include <stdint.h>
#include <unistd.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "flashwatt_internal.h"

static fw_context *ctx;
static uint64_t next_seed = 9100;

static fw_case mk(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, fw_dtype t)
{
    return fw_case_shape(B, H, Hkv, Lq, Lk, D, t, next_seed++);
}

/* Runs r through cpu-flash (the public API, or cfg directly through the backend table) with
 * `threads`, compares, reports. */
static int check_run(fw_run *r, const char *what, int threads, const fw_config *cfg)
{
    char label[256];
    fw_case_label(&r->c, label, sizeof label);
    fw_status st = fw_run_poison(r);
    if (st == FW_OK && !cfg) {
        fw_context_set_threads(ctx, threads);
        st = fw_run_forward(r, ctx);
    } else if (st == FW_OK) {
        char err[256] = "";
        fw_exec ex = {threads, NULL, err, sizeof err, NULL};
        const fw_backend *b = fw_registry_find("cpu-flash");
        st = b->forward(&r->problem, cfg, &ex);
    }
    fw_errors e;
    memset(&e, 0, sizeof e);
    if (st == FW_OK) st = fw_run_compare(r, &e);
    if (st != FW_OK)
        return fwt_case(0, "%s t%d %s [%s]: %s: %s", what, threads, cfg ? cfg->name : "", label, fw_status_string(st),
                        fw_context_last_error(ctx));
    return fwt_case(e.pass, "%s t%d %s [%s] max_abs %.3g tol %.3g lse %.3g unwritten %ld stray %ld nan_mismatch %ld",
                    what, threads, cfg ? cfg->name : "", label, e.max_abs, e.tol, e.lse_max_abs, e.unwritten, e.stray,
                    e.nan_mismatch);
}

static void run_case(fw_case c, const char *what)
{
    fw_run r;
    char msg[256];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "%s alloc: %s", what, msg);
        return;
    }
    check_run(&r, what, 1, NULL);
    check_run(&r, what, 2, NULL);
    check_run(&r, what, 7, NULL); /* more threads than items on small cases: split-KV */
    fw_run_free(&r);
}

static void shapes(void)
{
    const int64_t dims[] = {1, 40, 64, 80, 96, 128, 256};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        run_case(mk(1, 2, 2, 77, 130, dims[i], FW_F32), "dim");
        fw_case c = mk(1, 2, 1, 130, 77, dims[i], FW_F32);
        c.params.causal = 1;
        run_case(c, "dim-causal");
    }
    const int64_t ls[] = {1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
        run_case(mk(1, 1, 1, ls[i], ls[i], 64, FW_F32), "len");
        fw_case c = mk(1, 1, 1, ls[i], ls[i], 128, FW_F32);
        c.params.causal = 1;
        run_case(c, "len-causal");
        run_case(mk(1, 2, 2, 1, ls[i] * 3 + 1, 64, FW_F32), "decode");
    }
    run_case(mk(2, 2, 2, 100, 300, 64, FW_F32), "lq<lk");
    run_case(mk(2, 2, 2, 300, 100, 64, FW_F32), "lq>lk");
    for (int causal_first = 0; causal_first < 2; causal_first++) {
        fw_case a = mk(1, 2, 2, 300, 77, 64, FW_F32), b = mk(1, 2, 2, 77, 300, 64, FW_F32);
        a.params.causal = b.params.causal = 1;
        if (causal_first) { a.dtype = FW_F16; b.dtype = FW_BF16; }
        run_case(a, "causal lq>lk");
        run_case(b, "causal lq<lk");
    }
    run_case(mk(2, 16, 2, 150, 150, 64, FW_F32), "gqa8:1");
    fw_case g = mk(1, 16, 2, 150, 90, 128, FW_BF16);
    g.params.causal = 1;
    run_case(g, "gqa8:1 causal");
    run_case(mk(1, 4, 1, 200, 200, 96, FW_F32), "mqa");
    run_case(mk(1, 64, 1, 3, 500, 64, FW_F32), "mqa decode wide group");
    const int64_t windows[][2] = {{30, 10}, {0, 0}, {5, -1}, {-1, 7}, {100, 100}};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        fw_case c = mk(1, 2, 2, 300, 280, 64, FW_F32);
        c.params.window_left = windows[i][0];
        c.params.window_right = windows[i][1];
        run_case(c, "window");
        c.params.causal = 1;
        c.seed = next_seed++;
        run_case(c, "window causal");
    }
    for (int t = 0; t < 3; t++) {
        fw_case c = mk(2, 4, 2, 70, 90, t == 2 ? 80 : 64, (fw_dtype)t);
        c.layout_bshd = 1;
        run_case(c, "bshd");
        c.layout_bshd = 0;
        c.pad = 3;
        run_case(c, "pad");
        c.layout_bshd = 1;
        c.params.causal = 1;
        run_case(c, "bshd+pad causal");
    }
    run_case(mk(1, 8, 8, 257, 257, 64, FW_F16), "f16");
    run_case(mk(1, 8, 8, 257, 257, 128, FW_BF16), "bf16");
}

/* Every configuration the tuner may pick, on an awkward shape (tails everywhere, GQA, causal). */
static void all_configs(void)
{
    fw_case c = mk(1, 4, 2, 203, 333, 72, FW_F32);
    c.params.causal = 1;
    fw_run r;
    char msg[256];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "configs alloc: %s", msg);
        return;
    }
    fw_config cfgs[FW_MAX_CONFIGS];
    const fw_backend *b = fw_registry_find("cpu-flash");
    const int n = b->configs(&r.problem, cfgs, FW_MAX_CONFIGS);
    fwt_case(n >= 1 && cfgs[0].splits == 0, "configs: %d entries, entry 0 '%s'", n, n ? cfgs[0].name : "");
    for (int i = 0; i < n; i++) check_run(&r, "config", 2, &cfgs[i]);
    fw_run_free(&r);
}

/* A NaN (and an inf) in one V row behind a causal mask: only the rows that see that key go NaN. */
static void nan_in_v(void)
{
    for (int t = 0; t < 3; t++) {
        fw_case c = mk(1, 2, 1, 160, 160, 64, (fw_dtype)t);
        c.params.causal = 1;
        fw_run r;
        char msg[256];
        if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
            fwt_case(0, "nan-v alloc: %s", msg);
            return;
        }
        fw_run_set_input(&r, 'v', 0, 0, 70, 5, NAN);
        fw_run_set_input(&r, 'v', 0, 0, 100, 9, INFINITY);
        fw_run_set_input(&r, 'k', 0, 0, 130, 3, NAN);
        check_run(&r, "nan/inf in v and k, causal", 1, NULL);
        check_run(&r, "nan/inf in v and k, causal", 2, NULL);
        /* the harness counts NaN mismatches against the reference; check the expected rows directly too */
        long wrong = 0;
        for (int64_t h = 0; h < 2; h++)
            for (int64_t i = 0; i < 160; i++) {
                const float x = fw_run_output(&r, 0, h, i, 5);
                if ((i >= 70) != isnan(x)) wrong++;
            }
        fwt_case(wrong == 0, "nan-v %s: rows before the NaN key are clean, rows after are NaN (%ld wrong)",
                 fw_dtype_name(c.dtype), wrong);
        fw_run_free(&r);
    }
}

static void random_sweep(int n)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < n; k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t x = s >> 11;
        const int64_t groups[] = {1, 1, 2, 4, 8};
        const int64_t g = groups[x % 5], hkv = 1 + (int64_t)((x >> 3) % 3);
        const int64_t dims[] = {8, 16, 24, 32, 48, 64, 100, 128, 160, 256};
        fw_case c = mk(1 + (int64_t)((x >> 5) % 2), g * hkv, hkv, 1 + (int64_t)((x >> 7) % 300),
                       1 + (int64_t)((x >> 17) % 400), dims[(x >> 27) % 10], (fw_dtype)((x >> 31) % 3));
        c.params.causal = (x >> 33) % 3 == 0;
        if ((x >> 35) % 4 == 0) c.params.window_left = (int64_t)((x >> 37) % 90);
        if ((x >> 43) % 5 == 0) c.params.window_right = (int64_t)((x >> 45) % 40);
        c.layout_bshd = (x >> 50) % 2;
        c.pad = (x >> 51) % 3 == 0 ? 5 : 0;
        c.want_lse = (x >> 53) % 4 != 0;
        run_case(c, "random");
    }
}

int main(int argc, char **argv)
{
    const double t0 = fw_now_seconds();
    int long_run = argc > 1 && !strcmp(argv[1], "--long");
    if (fw_context_create(&ctx) != FW_OK) return 1;
    fw_context_set_backend(ctx, "cpu-flash");
    const char *level = fw_cpu_simd_level();
    printf("cpu-flash at simd %s\n", level);
    shapes();
    all_configs();
    nan_in_v();
    random_sweep(60);
    if (long_run) {
        fw_case c = mk(1, 1, 1, 256, 16384, 64, FW_F32);
        run_case(c, "long L16k");
        c.params.causal = 1;
        c.seqlen_q = 16384;
        run_case(c, "long L16k causal");
    }
    fw_context_destroy(ctx);
    printf("test_cpu_flash (%s): %.1f s\n", level, fw_now_seconds() - t0);
    printf("%d passed, %d failed\n", fwt_passed, fwt_failed);
    int bad = fwt_failed > 0;
    /* re-run below this level (the level is fixed once per process) */
    if (!getenv("FLASHWATT_SIMD")) {
        const char *lower[] = {"avx2", "scalar"};
        for (size_t i = 0; i < 2; i++) {
            if (!strcmp(level, "scalar") || (!strcmp(level, "avx2") && i == 0)) continue;
            char cmd[4200], self[4096];
            const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
            if (n <= 0) break;
            self[n] = 0;
            snprintf(cmd, sizeof cmd, "FLASHWATT_SIMD=%s '%s'%s", lower[i], self, long_run ? " --long" : "");
            printf("---- %s\n", cmd);
            fflush(stdout);
            if (system(cmd) != 0) bad = 1;
        }
    }
    return bad;
}
