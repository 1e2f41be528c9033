/* NVTX ranges of libflashwatt as a profiler sees them: run under the injection library of
 * nvtx_inject.c (NVTX_INJECTION64_PATH), a forward, a backward, a ragged and a KV-cache call on
 * cpu-flash must each open one range in the "flashwatt" domain named "<backend> <call> <config>", and
 * close it. Without NVTX_INJECTION64_PATH the calls must run as usual and log nothing.
 *   nvtx_ranges LOGFILE   (FW_NVTX_LOG=LOGFILE is what the injection library writes to) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashwatt.h"

enum { H = 2, L = 16, D = 8, N = H * L * D };

static int failures;

static void expect(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    failures += !ok;
}

static int run_calls(fw_context *ctx)
{
    static float q[N], k[N], v[N], o[N], dout[N], dq[N], dk[N], dv[N], lse[H * L];
    for (int i = 0; i < N; i++) {
        q[i] = sinf(0.37f * (float)i);
        k[i] = cosf(0.11f * (float)i);
        v[i] = sinf(0.05f * (float)i + 1.0f);
        dout[i] = cosf(0.29f * (float)i);
    }
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    fw_tensor tq = fw_tensor_bhsd(q, FW_F32, cpu, 1, H, L, D), tk = fw_tensor_bhsd(k, FW_F32, cpu, 1, H, L, D);
    fw_tensor tv = fw_tensor_bhsd(v, FW_F32, cpu, 1, H, L, D), to = fw_tensor_bhsd(o, FW_F32, cpu, 1, H, L, D);
    fw_tensor tdo = fw_tensor_bhsd(dout, FW_F32, cpu, 1, H, L, D), tdq = fw_tensor_bhsd(dq, FW_F32, cpu, 1, H, L, D);
    fw_tensor tdk = fw_tensor_bhsd(dk, FW_F32, cpu, 1, H, L, D), tdv = fw_tensor_bhsd(dv, FW_F32, cpu, 1, H, L, D);
    fw_attn_params p = fw_attn_params_default();
    p.causal = 1;
    int ok = fw_attention_forward(ctx, &tq, &tk, &tv, &to, lse, &p) == FW_OK;
    ok = ok && fw_attention_backward(ctx, &tq, &tk, &tv, &to, lse, &tdo, &tdq, &tdk, &tdv, &p) == FW_OK;
    const int32_t cu[3] = {0, 5, L};
    const fw_varlen seqs = {2, cu, cu, L - 5, L - 5};
    ok = ok && fw_attention_varlen_forward(ctx, &tq, &tk, &tv, &to, NULL, &seqs, &p) == FW_OK;
    const int32_t cached[1] = {L - 1};
    fw_kv_cache cache = {tk, tv, cached, NULL, 0, 0};
    fw_tensor q1 = fw_tensor_bhsd(q, FW_F32, cpu, 1, H, 1, D), o1 = fw_tensor_bhsd(o, FW_F32, cpu, 1, H, 1, D);
    ok = ok && fw_attention_kvcache_forward(ctx, &q1, &cache, NULL, NULL, &o1, NULL, NULL, &p) == FW_OK;
    if (!ok) printf("a call failed: %s\n", fw_context_last_error(ctx));
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: nvtx_ranges LOGFILE\n");
        return 2;
    }
    const int injected = getenv("NVTX_INJECTION64_PATH") != NULL;
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK || fw_context_set_backend(ctx, "cpu-flash") != FW_OK) return 1;
    expect(run_calls(ctx), "forward, backward, ragged and KV-cache calls on cpu-flash");
    fw_context_destroy(ctx);

    FILE *f = fopen(argv[1], "r");
    if (!injected) {
        expect(f == NULL, "no tool injected: nothing logged");
        if (f) fclose(f);
        return failures != 0;
    }
    if (!f) {
        printf("FAIL: the injection library wrote no log at %s\n", argv[1]);
        return 1;
    }
    const char *want[] = {"domain flashwatt", "push cpu-flash fwd ", "pop", "push cpu-flash bwd ", "pop",
                          "push cpu-flash varlen ", "pop", "push cpu-flash kvcache ", "pop"};
    const int nwant = (int)(sizeof want / sizeof want[0]);
    char line[256];
    int n = 0, in_order = 1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        printf("  logged: %s\n", line);
        if (n < nwant && strncmp(line, want[n], strlen(want[n])) != 0) in_order = 0;
        /* a range's name ends in the configuration that ran: never empty */
        if (!strncmp(line, "push ", 5) && line[strlen(line) - 1] == ' ') in_order = 0;
        n++;
    }
    fclose(f);
    expect(in_order && n == nwant, "one range per call, named '<backend> <call> <config>', each closed");
    return failures != 0;
}
