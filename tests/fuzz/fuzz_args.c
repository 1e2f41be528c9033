/* Fuzz target: the command line parser of `flashwatt check/bench/tune` (tools/args.c) and the shapes,
 * plans and harness cases it leads to. The input is the argument list, one argument per line; it is
 * parsed as check parses (one value per flag) and as bench does (comma lists). Properties besides "no
 * crash, no sanitizer report": a refusal has a message, and every shape of an accepted command line
 * has sizes in 1 .. 2^31 - 1 (a wrapped or overflowed size once ran, or crashed the harness). */
#include "args.h"
#include "suites.h"
#include "fuzz_targets.h"

#define MAX_ARGS 64
#define MAX_SHAPES 256

static void check_shape(const fw_shape *s)
{
    const int64_t v[6] = {s->batch, s->heads, s->kv_heads, s->seqlen_q, s->seqlen_k, s->head_dim};
    for (int i = 0; i < 6; i++) FZ_REQUIRE(v[i] >= 1 && v[i] <= INT32_MAX, "shape size %d is %lld", i, (long long)v[i]);
    FZ_REQUIRE(s->dtype == FW_F32 || s->dtype == FW_F16 || s->dtype == FW_BF16, "shape dtype %d", (int)s->dtype);
    char text[256];
    fw_shape_text(s, text, sizeof text);
    /* the harness sizes its buffers from the case: small ones are built and freed (the sizes are
     * checked before anything is allocated; a wrapped product was a crash) */
    fw_case c = fw_shape_case(s, (fw_device){FW_DEVICE_CPU, 0}, 1, 1);
    const double elems = (double)s->batch * (double)s->heads * (double)(s->seqlen_q + s->seqlen_k) * (double)s->head_dim;
    if (elems <= 4096.0 && !s->serving) {
        fw_run r;
        char msg[512];
        if (fw_run_alloc(&r, &c, msg, sizeof msg) == FW_OK) fw_run_free(&r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = (char *)malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = 0;
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = "flashwatt";
    for (char *p = text; argc < MAX_ARGS;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        if (*p || nl) argv[argc++] = p;
        if (!nl) break;
        p = nl + 1;
    }
    argv[argc] = NULL;
    static fw_shape shapes[MAX_SHAPES];
    for (int lists = 0; lists < 2; lists++) {
        static fw_cli cli;
        char err[512] = "";
        const int rc = fw_args_parse(argc, argv, 1, lists, &cli, err, sizeof err);
        FZ_REQUIRE(rc == 0 || rc == 2, "fw_args_parse returned %d", rc);
        if (rc) {
            FZ_REQUIRE(err[0], "a refused command line without a message");
            continue;
        }
        const int n = fw_args_shapes(&cli, shapes, MAX_SHAPES);
        FZ_REQUIRE(n >= -1 && n <= MAX_SHAPES, "fw_args_shapes gave %d", n);
        for (int i = 0; i < n; i++) check_shape(&shapes[i]);
        fw_plan plan;
        fw_args_plan(&cli, 0, NULL, NULL, 1, &plan, err, sizeof err);
    }
    free(text);
    return 0;
}

const char *const fuzz_tokens[] = {"\n--seqlen\n", "\n--batch\n", "\n--heads\n", "\n--kv-heads\n", "\n--head-dim\n",
                                   "\n--seqlen-k\n", "\n--window\n", "\n--causal\n", "\n--dtype\n", "\n--layout\n",
                                   "\n--threads\n", "\n--seqlens-q\n", "\n--seqlens-k\n", "\n--kv-cache\n", "\n--page-size\n",
                                   "\n--append", "\n--backend\n", "\n--device\n", "\n--seed\n", "\n--lse", "\n--backward",
                                   "k", "K", ",", "2147483647", "2147483648", "18014398509481985k", "-1", "0", "bf16",
                                   "paged", "contiguous", "cuda:1", "cpu", "all", "auto", "9223372036854775807",
                                   "\n--suite\n", "seed", "decode", "\n--reps\n", "\n--energy\n", "\n--policy\n",
                                   "cap:300,temp:80", NULL};
