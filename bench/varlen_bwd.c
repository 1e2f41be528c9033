/* varlen_bwd: the ragged (varlen) backward against the dense backward at the mean length, in one run on one device
 * (issue 27's target: 16 sequences spread over 128..4096 tokens at >= 0.9x the dense backward's TFLOP/s at their
 * mean length). The ragged batch: n sequences of min..max tokens, evenly spread and shuffled (the serve-prefill
 * suite's lengths); the dense batch: n sequences of their mean length. Each is timed in the backward alone (the
 * forward writes O and LSE once before), for the context's default dQ mode, the deterministic one and the atomic
 * one (FW_CUDA_BWD_DQ=atomic), without and with a causal mask. TFLOP/s counts 2.5x the forward's exact FLOPs
 * (the five products of the backward against the forward's two; per sequence, over its own lengths). The
 * gradients are checked elsewhere (test_varlen_backward --device cuda, flashwatt check --backward).
 *
 * usage: varlen_bwd [--device cuda[:N]|cpu] [--seqs 16] [--min-len 128] [--max-len 4096] [--heads 16]
 *                   [--kv-heads H] [--head-dim 128] [--dtype bf16] [--warmup 3] [--reps 10] [--target 0.9]
 * Prints one row per (mask, dQ mode) and a last line "varlen_bwd: worst ratio R (target T)". Exit 0, 1 when a call
 * failed, 2 usage, 77 no such device. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashwatt.h"
#include "fw_harness.h"
#include "fw_harness_impl.h"

typedef struct opts {
    fw_device dev;
    int seqs, min_len, max_len, heads, kv_heads, head_dim, warmup, reps;
    fw_dtype dtype;
    double target;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    o->dev = (fw_device){FW_DEVICE_CUDA, 0};
    o->seqs = 16, o->min_len = 128, o->max_len = 4096, o->heads = 16, o->kv_heads = 0, o->head_dim = 128;
    o->warmup = 3, o->reps = 10, o->dtype = FW_BF16, o->target = 0.9;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *n = !strcmp(a, "--seqs") ? &o->seqs : !strcmp(a, "--min-len") ? &o->min_len
               : !strcmp(a, "--max-len") ? &o->max_len : !strcmp(a, "--heads") ? &o->heads
               : !strcmp(a, "--kv-heads") ? &o->kv_heads : !strcmp(a, "--head-dim") ? &o->head_dim
               : !strcmp(a, "--warmup") ? &o->warmup : !strcmp(a, "--reps") ? &o->reps : NULL;
        if (!v) return 0;
        if (n) *n = atoi(v);
        else if (!strcmp(a, "--device")) {
            if (fw_device_parse(v, &o->dev)) return 0;
        } else if (!strcmp(a, "--dtype")) {
            o->dtype = !strcmp(v, "f32") ? FW_F32 : !strcmp(v, "f16") ? FW_F16 : !strcmp(v, "bf16") ? FW_BF16 : (fw_dtype)-1;
            if ((int)o->dtype < 0) return 0;
        } else if (!strcmp(a, "--target")) {
            o->target = atof(v);
        } else {
            return 0;
        }
        i++;
    }
    if (!o->kv_heads) o->kv_heads = o->heads;
    return o->seqs >= 1 && o->seqs <= FW_CASE_MAX_SEQS && o->min_len >= 1 && o->max_len >= o->min_len && o->heads >= 1 &&
           o->kv_heads >= 1 && o->heads % o->kv_heads == 0 && o->head_dim >= 1 && o->head_dim <= 256 && o->reps >= 1 &&
           o->warmup >= 0;
}

/* One batch (dense or ragged) ready for timed backward calls: inputs, dO, and O and LSE from the forward. */
typedef struct batch {
    fw_run r;
    fw_bwd g;
    double flops; /* the backward's: 2.5x the forward's exact count */
} batch;

static int batch_make(batch *b, fw_case c, fw_context *ctx, char *msg, size_t len)
{
    memset(b, 0, sizeof *b);
    c.want_lse = 1;
    if (fw_run_alloc(&b->r, &c, msg, len) != FW_OK) return 0;
    if (fw_bwd_alloc_grads(&b->r, &b->g, c.seed, msg, len) != FW_OK) {
        fw_run_free(&b->r);
        return 0;
    }
    if (fw_run_forward(&b->r, ctx) != FW_OK) {
        snprintf(msg, len, "forward: %s", fw_context_last_error(ctx));
        fw_bwd_free(&b->r, &b->g);
        fw_run_free(&b->r);
        return 0;
    }
    b->flops = 2.5 * fw_run_flops(&b->r);
    return 1;
}

static void batch_free(batch *b)
{
    fw_bwd_free(&b->r, &b->g);
    fw_run_free(&b->r);
}

typedef struct call_arg {
    fw_bwd *g;
    fw_context *ctx;
} call_arg;

static fw_status backward_call(fw_run *r, void *arg)
{
    call_arg *a = (call_arg *)arg;
    return fwh_bwd_call(r, a->g, a->ctx);
}

/* Median ms of the backward of b on ctx; < 0 when a call failed (the message printed). */
static double time_backward(batch *b, fw_context *ctx, const opts *o, const char *what)
{
    call_arg a = {&b->g, ctx};
    double ms = -1;
    if (fw_time_calls(&b->r, backward_call, &a, o->warmup, o->reps, &ms) != FW_OK) {
        printf("%s: %s\n", what, fw_context_last_error(ctx));
        return -1;
    }
    return ms;
}

int main(int argc, char **argv)
{
    opts o;
    if (!parse(argc, argv, &o)) {
        fprintf(stderr, "usage: varlen_bwd [--device cuda[:N]|cpu] [--seqs 16] [--min-len 128] [--max-len 4096] "
                        "[--heads 16] [--kv-heads H] [--head-dim 128] [--dtype f32|f16|bf16] [--warmup 3] [--reps 10] "
                        "[--target 0.9]\n");
        return 2;
    }
    if (o.dev.kind == FW_DEVICE_CUDA && fw_cuda_device_count() <= o.dev.index) {
        printf("varlen_bwd: no CUDA device %d here: skipped\n", o.dev.index);
        return 77;
    }
    int32_t lens[FW_CASE_MAX_SEQS];
    long long total = 0;
    for (int i = 0; i < o.seqs; i++) { /* evenly spread, shuffled by a stride prime to 16 */
        const int k = o.seqs > 1 ? (int)((long long)i * 7 % o.seqs) : 0;
        lens[i] = o.min_len + (o.seqs > 1 ? (int)((long long)k * (o.max_len - o.min_len) / (o.seqs - 1)) : 0);
        total += lens[i];
    }
    const int mean = (int)((total + o.seqs / 2) / o.seqs);
    /* three contexts: the default dQ mode, deterministic, atomic (the knob is read when a context is made) */
    static const char *modes[3] = {"default", "deterministic", "atomic"};
    fw_context *ctxs[3] = {NULL, NULL, NULL};
    for (int m = 0; m < 3; m++) {
        if (m == 2) setenv("FW_CUDA_BWD_DQ", "atomic", 1);
        if (fw_context_create(&ctxs[m]) != FW_OK) return 1;
        if (m == 1) fw_context_set_deterministic(ctxs[m], 1);
        if (m == 2) unsetenv("FW_CUDA_BWD_DQ");
    }
    char dev[32];
    snprintf(dev, sizeof dev, o.dev.kind == FW_DEVICE_CUDA ? "cuda:%d" : "cpu", o.dev.index);
    printf("varlen_bwd: %d sequences of %d..%d tokens (%lld, mean %d), H=%d/%d D=%d %s on %s; the backward alone, "
           "median of %d after %d; TFLOP/s = 2.5x the forward's exact FLOPs / time\n",
           o.seqs, o.min_len, o.max_len, total, mean, o.heads, o.kv_heads, o.head_dim, fw_dtype_name(o.dtype), dev,
           o.reps, o.warmup);
    printf("%-7s %-14s %12s %9s %12s %9s %7s  %s\n", "mask", "dQ", "ragged ms", "TFLOP/s", "dense ms", "TFLOP/s",
           "ratio", "backend");
    int failed = 0;
    double worst = -1;
    for (int causal = 0; causal < 2; causal++) {
        char msg[1024];
        fw_case rc = fw_case_serving(FW_CASE_VARLEN, o.seqs, lens, lens, o.heads, o.kv_heads, o.head_dim, o.dtype, 27);
        fw_case dc = fw_case_shape(o.seqs, o.heads, o.kv_heads, mean, mean, o.head_dim, o.dtype, 28);
        rc.device = dc.device = o.dev;
        rc.params.causal = dc.params.causal = causal;
        batch rb, db;
        if (!batch_make(&rb, rc, ctxs[0], msg, sizeof msg)) {
            printf("ragged batch: %s\n", msg);
            failed++;
            continue;
        }
        if (!batch_make(&db, dc, ctxs[0], msg, sizeof msg)) {
            printf("dense batch: %s\n", msg);
            batch_free(&rb);
            failed++;
            continue;
        }
        for (int m = 0; m < 3; m++) {
            const double rms = time_backward(&rb, ctxs[m], &o, "ragged");
            const char *rbk = fw_context_last_backend(ctxs[m]);
            char backend[64];
            snprintf(backend, sizeof backend, "%s", rbk ? rbk : "?");
            const double dms = time_backward(&db, ctxs[m], &o, "dense");
            if (rms <= 0 || dms <= 0) {
                failed++;
                continue;
            }
            const double rt = rb.flops / rms * 1e-9, dt = db.flops / dms * 1e-9, ratio = rt / dt;
            if (worst < 0 || ratio < worst) worst = ratio;
            printf("%-7s %-14s %12.3f %9.2f %12.3f %9.2f %7.3f  %s\n", causal ? "causal" : "none", modes[m], rms, rt,
                   dms, dt, ratio, backend);
        }
        batch_free(&db);
        batch_free(&rb);
    }
    for (int m = 0; m < 3; m++) fw_context_destroy(ctxs[m]);
    printf("varlen_bwd: worst ratio %.3f (target %.2f): %s\n", worst, o.target,
           worst < 0 ? "not measured" : worst >= o.target ? "met" : "missed");
    return failed ? 1 : 0;
}
