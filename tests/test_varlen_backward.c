/* The ragged (varlen) backward (issue 27): fw_attention_varlen_backward. On the CPU (the default):
 *  - every CPU backend with a backward against cpu-ref's float64 backward through the harness
 *    (dq, dk, dv poisoned first, every element checked written, the numerics contract): ragged
 *    lengths with 0, 1, primes and one long among short ones, Lq != Lk per sequence, causal and
 *    windows, GQA 1/2/4, head dims 16/64/128, f32/f16/bf16, BSHD and padded rows; cpu-naive and
 *    "auto" say where a ragged backward runs;
 *  - cpu-ref and cpu-flash against their own dense backward run on each sequence alone, bit for bit
 *    (the same inputs, O and LSE), and the dq rows of sequences without keys and the dk/dv rows of
 *    sequences without queries exactly 0;
 *  - bad input (offsets, shape, dtype and overlap errors) refused with a message naming the argument,
 *    writing nothing.
 * With --device cuda[:N] (ctest gpu_varlen_backward; exit 77 without a device): cuda-flash and cuda-flash-f32
 * (test_varlen_backward_gpu.h says how); --quick: a subset (for compute-sanitizer). */
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "flashwatt_internal.h"

static fw_context *ctx;
static uint64_t next_seed = 27000;

static const int32_t MIXED[] = {0, 1, 2, 3, 5, 7, 11, 13, 131, 1}; /* empty, 1, primes, one long */

static fw_case varlen_case(int n, const int32_t *q, const int32_t *k, int64_t H, int64_t Hkv, int64_t D, fw_dtype t)
{
    return fw_case_serving(FW_CASE_VARLEN, n, q, k, H, Hkv, D, t, next_seed++);
}

/* One backend's ragged backward of r through the public call, against the reference. */
static void run_one(fw_run *r, fw_bwd *g, const char *backend, int threads, const char *what)
{
    char label[512];
    fw_case_label(&r->c, label, sizeof label);
    fw_context_set_backend(ctx, backend);
    fw_context_set_threads(ctx, threads);
    fw_status st = fw_bwd_poison(r, g);
    if (st == FW_OK) st = fw_bwd_run(r, g, ctx);
    if (st == FW_OK && strcmp(fw_context_last_backend(ctx), backend) != 0) st = FW_ERR_INTERNAL;
    fw_bwd_errors e;
    memset(&e, 0, sizeof e);
    if (st == FW_OK) st = fw_bwd_compare(r, g, &e);
    if (st != FW_OK) {
        fwt_case(0, "%s %s t%d [%s]: %s: %s", what, backend, threads, label, fw_status_string(st),
                 fw_context_last_error(ctx));
        return;
    }
    const fw_grad_errors *x = e.g;
    fwt_case(e.pass, "%s %s t%d [%s] dq %.2e/%.2e dk %.2e/%.2e dv %.2e/%.2e (err/tol) unwritten %ld stray %ld nan %ld",
             what, backend, threads, label, x[0].max_abs, x[0].tol, x[1].max_abs, x[1].tol, x[2].max_abs, x[2].tol,
             x[0].unwritten + x[1].unwritten + x[2].unwritten, x[0].stray + x[1].stray + x[2].stray,
             x[0].nans + x[1].nans + x[2].nans);
}

/* Rows of a packed (or dense) tensor of the run, in its dtype, into a contiguous (1, heads, n, D) buffer:
 * n rows from row0 of each head. */
static void gather(void *dst, const void *src, const fw_tensor *t, int64_t heads, int64_t row0, int64_t n, size_t es)
{
    const int64_t D = t->size[3];
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < n; i++)
            memcpy((char *)dst + (size_t)((h * n + i) * D) * es,
                   (const char *)src + (size_t)(h * t->stride[1] + (row0 + i) * t->stride[2]) * es, (size_t)D * es);
}

/* Element bits differ between a gathered dense result and the same rows of the ragged result. */
static long differ(const void *dense, const void *packed, const fw_tensor *t, int64_t heads, int64_t row0, int64_t n,
                   size_t es)
{
    const int64_t D = t->size[3];
    long bad = 0;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < n; i++)
            bad += memcmp((const char *)dense + (size_t)((h * n + i) * D) * es,
                          (const char *)packed + (size_t)(h * t->stride[1] + (row0 + i) * t->stride[2]) * es,
                          (size_t)D * es) != 0;
    return bad;
}

/* Rows that are not exactly +0 or -0. */
static long nonzero(const void *packed, const fw_tensor *t, int64_t heads, int64_t row0, int64_t n, fw_dtype dt)
{
    long bad = 0;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t d = 0; d < t->size[3]; d++)
                bad += fw_load_f32(packed, dt, h * t->stride[1] + (row0 + i) * t->stride[2] + d) != 0.0f;
    return bad;
}

/* backend's ragged backward of r against its dense backward on each sequence alone, bit for bit. */
static void against_dense(fw_run *r, fw_bwd *g, const char *backend, const char *what)
{
    char label[512];
    fw_case_label(&r->c, label, sizeof label);
    const fw_case *c = &r->c;
    const fw_problem *p = &r->problem;
    const int64_t H = c->heads, Hkv = c->kv_heads, D = c->head_dim;
    const size_t es = fw_dtype_size(c->dtype);
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    fw_context_set_backend(ctx, backend);
    fw_context_set_threads(ctx, 2);
    fw_status st = fw_bwd_poison(r, g);
    if (st == FW_OK) st = fw_bwd_run(r, g, ctx);
    long bad = 0, zero_bad = 0, failed = 0;
    for (int64_t b = 0; b < p->batch && st == FW_OK; b++) {
        int64_t q0, lq;
        fw_seq_q(p, b, &q0, &lq);
        const int64_t k0 = p->cu_seqlens_k[b], lk = fw_seq_k_len(p, b);
        if (lq == 0 || lk == 0) { /* the dense call has no such shape: the answer is zero rows */
            zero_bad += nonzero(g->host_dq, &g->dq, H, q0, lq, c->dtype);
            zero_bad += nonzero(g->host_dk, &g->dk, Hkv, k0, lk, c->dtype);
            zero_bad += nonzero(g->host_dv, &g->dv, Hkv, k0, lk, c->dtype);
            continue;
        }
        const size_t nq = (size_t)(H * lq * D) * es, nk = (size_t)(Hkv * lk * D) * es;
        char *buf = (char *)malloc(4 * nq + 4 * nk + (size_t)(H * lq) * sizeof(float));
        if (!buf) { failed++; break; }
        char *q = buf, *o = q + nq, *dout = o + nq, *dq = dout + nq, *k = dq + nq, *v = k + nk, *dk = v + nk, *dv = dk + nk;
        float *lse = (float *)(dv + nk);
        gather(q, r->host_q, &r->q, H, q0, lq, es);
        gather(o, r->host_o, &r->o, H, q0, lq, es);
        gather(dout, g->host_dout, &g->dout, H, q0, lq, es);
        gather(k, r->host_k, &r->k, Hkv, k0, lk, es);
        gather(v, r->host_v, &r->v, Hkv, k0, lk, es);
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < lq; i++) lse[h * lq + i] = r->host_lse[fw_lse_index(p, b, h, i)];
        const fw_tensor tq = fw_tensor_bhsd(q, c->dtype, cpu, 1, H, lq, D), to = fw_tensor_bhsd(o, c->dtype, cpu, 1, H, lq, D);
        const fw_tensor tdo = fw_tensor_bhsd(dout, c->dtype, cpu, 1, H, lq, D);
        fw_tensor tdq = fw_tensor_bhsd(dq, c->dtype, cpu, 1, H, lq, D);
        const fw_tensor tk = fw_tensor_bhsd(k, c->dtype, cpu, 1, Hkv, lk, D), tv = fw_tensor_bhsd(v, c->dtype, cpu, 1, Hkv, lk, D);
        fw_tensor tdk = fw_tensor_bhsd(dk, c->dtype, cpu, 1, Hkv, lk, D), tdv = fw_tensor_bhsd(dv, c->dtype, cpu, 1, Hkv, lk, D);
        if (fw_attention_backward(ctx, &tq, &tk, &tv, &to, lse, &tdo, &tdq, &tdk, &tdv, &c->params) != FW_OK) {
            fwt_case(0, "%s %s dense backward of sequence %lld: %s", what, backend, (long long)b, fw_context_last_error(ctx));
            failed++;
        } else {
            bad += differ(dq, g->host_dq, &g->dq, H, q0, lq, es);
            bad += differ(dk, g->host_dk, &g->dk, Hkv, k0, lk, es);
            bad += differ(dv, g->host_dv, &g->dv, Hkv, k0, lk, es);
        }
        free(buf);
    }
    if (st != FW_OK) {
        fwt_case(0, "%s %s ragged backward [%s]: %s", what, backend, label, fw_context_last_error(ctx));
        return;
    }
    fwt_case(!bad && !zero_bad && !failed,
             "%s %s equals its dense backward per sequence [%s]: %ld rows differ, %ld zero-row elements not 0", what,
             backend, label, bad, zero_bad);
}

/* Every CPU backend on c: cpu-ref and cpu-flash against the reference and their dense backward,
 * the others refusing with the reason. */
static void check_case(fw_case c, const char *what, int per_sequence)
{
    fw_run r;
    fw_bwd g;
    char msg[512];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "%s alloc: %s", what, msg);
        return;
    }
    if (fw_bwd_alloc(&r, &g, c.seed, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "%s gradient alloc: %s", what, msg);
        fw_run_free(&r);
        return;
    }
    const char *names[16];
    const int n = fwt_cpu_backends(names, 16);
    for (int i = 0; i < n; i++) {
        char why[512] = "";
        const fw_status st = fw_bwd_supports(&r, &g, names[i], why, sizeof why);
        const int runs = !strcmp(names[i], "cpu-ref") || !strcmp(names[i], "cpu-flash");
        if (!runs) {
            fwt_case(st == FW_ERR_UNSUPPORTED && fwt_contains(why, FW_RAGGED_BACKWARD_WHERE), "%s %s refuses: %s",
                     what, names[i], why);
            continue;
        }
        if (st != FW_OK) {
            fwt_case(0, "%s %s does not support it: %s", what, names[i], why);
            continue;
        }
        run_one(&r, &g, names[i], 1, what);
        if (!strcmp(names[i], "cpu-flash")) run_one(&r, &g, names[i], 3, what);
        if (per_sequence) against_dense(&r, &g, names[i], what);
    }
    fw_bwd_free(&r, &g);
    fw_run_free(&r);
}

/* ---- the cases -------------------------------------------------------------------------------- */
static fw_case masked(fw_case c, int mask)
{
    c.params.causal = mask == 1;
    c.params.window_left = mask == 2 ? 7 : FW_WINDOW_UNLIMITED;
    c.params.window_right = mask == 2 ? 3 : FW_WINDOW_UNLIMITED;
    return c;
}

/* dtype x head dim x GQA on the mixed lengths, the three masks in turn. */
static void grid(void)
{
    const int n = (int)(sizeof MIXED / sizeof MIXED[0]);
    const fw_dtype dts[3] = {FW_F32, FW_F16, FW_BF16};
    const int64_t dims[3] = {16, 64, 128};
    const int64_t kv[3] = {4, 2, 1}; /* GQA 1, 2, 4 over 4 query heads */
    for (int di = 0; di < 3; di++)
        for (int ki = 0; ki < 3; ki++)
            for (int ti = 0; ti < 3; ti++) {
                fw_case c = masked(varlen_case(n, MIXED, MIXED, 4, kv[ki], dims[di], dts[ti]), (di + ki + ti) % 3);
                check_case(c, "grid", 1);
            }
}

static void shapes(void)
{
    /* queries and keys of different lengths both ways, sequences without keys or without queries */
    const int32_t q[] = {1, 7, 0, 13, 2, 64, 3}, k[] = {5, 3, 4, 0, 97, 64, 1};
    for (int mask = 0; mask < 3; mask++) {
        fw_case c = masked(varlen_case(7, q, k, 6, 3, 64, FW_F32), mask);
        check_case(c, "lq!=lk", 1);
        c.dtype = FW_BF16;
        check_case(c, "lq!=lk", 1);
    }
    fw_case c = varlen_case(7, q, k, 4, 2, 40, FW_F16);
    c.params.window_left = 16; /* left window only */
    check_case(c, "left-window", 1);
    /* one long sequence among short ones, BSHD; then padded rows (non-contiguous tensors) */
    const int32_t lq[] = {3, 1, 500, 2, 0}, lk[] = {3, 9, 470, 2, 5};
    c = varlen_case(5, lq, lk, 4, 1, 64, FW_F32);
    c.params.causal = 1;
    c.layout_bshd = 1;
    check_case(c, "long-bshd", 1);
    c = varlen_case(5, lq, lk, 2, 2, 32, FW_BF16);
    c.pad = 5;
    c.params.window_left = 40;
    c.params.window_right = 0;
    check_case(c, "long-pad", 1);
    /* a single sequence: the ragged call degenerates to the dense one */
    const int32_t one_q[] = {77}, one_k[] = {93};
    c = varlen_case(1, one_q, one_k, 8, 2, 128, FW_F16);
    c.params.causal = 1;
    check_case(c, "single", 1);
}

/* "auto" runs a ragged backward on cpu-flash (the first CPU backend that has one). */
static void auto_choice(void)
{
    const int32_t q[] = {4, 0, 9}, k[] = {6, 2, 9};
    fw_case c = varlen_case(3, q, k, 2, 1, 32, FW_F32);
    fw_run r;
    fw_bwd g;
    char msg[512];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "auto alloc: %s", msg);
        return;
    }
    if (fw_bwd_alloc(&r, &g, c.seed, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "auto gradient alloc: %s", msg);
        fw_run_free(&r);
        return;
    }
    fw_context_set_backend(ctx, "auto");
    fw_status st = fw_bwd_run(&r, &g, ctx);
    fwt_case(st == FW_OK && !strcmp(fw_context_last_backend(ctx), "cpu-flash"), "auto runs the ragged backward on %s (%s)",
             st == FW_OK ? fw_context_last_backend(ctx) : "nothing", fw_context_last_error(ctx));
    fw_context_set_backend(ctx, "cpu-naive");
    st = fw_bwd_run(&r, &g, ctx);
    fwt_case(st == FW_ERR_UNSUPPORTED && fwt_contains(fw_context_last_error(ctx), FW_RAGGED_BACKWARD_WHERE),
             "cpu-naive named: %s: %s", fw_status_string(st), fw_context_last_error(ctx));
    fw_bwd_free(&r, &g);
    fw_run_free(&r);
}

/* ---- bad input ---------------------------------------------------------------------------------- */
#define POISON 0x7fbadbadu
enum { NH = 4, NHKV = 2, ND = 16, TQ = 5, TK = 7 };

/* A valid ragged backward: q lengths {2, 0, 3}, k lengths {4, 1, 2}. */
typedef struct setup {
    float q[TQ * NH * ND], o[TQ * NH * ND], dout[TQ * NH * ND], dq[TQ * NH * ND], lse[NH * TQ];
    float k[TK * NHKV * ND], v[TK * NHKV * ND], dk[TK * NHKV * ND], dv[TK * NHKV * ND];
    int32_t cu_q[4], cu_k[4];
    fw_tensor tq, tk, tv, to, tdo, tdq, tdk, tdv;
    fw_varlen seqs;
    fw_attn_params params;
} setup;

static setup S;

static void reset(void)
{
    uint32_t x = 7;
    float *ins[5] = {S.q, S.o, S.dout, S.k, S.v};
    const size_t ns[5] = {TQ * NH * ND, TQ * NH * ND, TQ * NH * ND, TK * NHKV * ND, TK * NHKV * ND};
    for (int a = 0; a < 5; a++)
        for (size_t i = 0; i < ns[a]; i++) ins[a][i] = (float)((x = x * 1664525u + 1013904223u) >> 24) / 256.0f - 0.5f;
    for (size_t i = 0; i < NH * TQ; i++) S.lse[i] = 1.0f;
    uint32_t *outs[3] = {(uint32_t *)S.dq, (uint32_t *)S.dk, (uint32_t *)S.dv};
    const size_t no[3] = {TQ * NH * ND, TK * NHKV * ND, TK * NHKV * ND};
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < no[a]; i++) outs[a][i] = POISON;
    const int32_t cq[4] = {0, 2, 2, 5}, ck[4] = {0, 4, 5, 7};
    memcpy(S.cu_q, cq, sizeof cq);
    memcpy(S.cu_k, ck, sizeof ck);
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    S.tq = fw_tensor_bshd(S.q, FW_F32, cpu, 1, NH, TQ, ND);
    S.to = fw_tensor_bshd(S.o, FW_F32, cpu, 1, NH, TQ, ND);
    S.tdo = fw_tensor_bshd(S.dout, FW_F32, cpu, 1, NH, TQ, ND);
    S.tdq = fw_tensor_bshd(S.dq, FW_F32, cpu, 1, NH, TQ, ND);
    S.tk = fw_tensor_bshd(S.k, FW_F32, cpu, 1, NHKV, TK, ND);
    S.tv = fw_tensor_bshd(S.v, FW_F32, cpu, 1, NHKV, TK, ND);
    S.tdk = fw_tensor_bshd(S.dk, FW_F32, cpu, 1, NHKV, TK, ND);
    S.tdv = fw_tensor_bshd(S.dv, FW_F32, cpu, 1, NHKV, TK, ND);
    S.seqs = (fw_varlen){3, S.cu_q, S.cu_k, 3, 4};
    S.params = fw_attn_params_default();
    S.params.causal = 1;
}

/* Elements of dq, dk, dv written (no longer the poison). */
static long written(void)
{
    const uint32_t *outs[3] = {(const uint32_t *)S.dq, (const uint32_t *)S.dk, (const uint32_t *)S.dv};
    const size_t no[3] = {TQ * NH * ND, TK * NHKV * ND, TK * NHKV * ND};
    long n = 0;
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < no[a]; i++) n += outs[a][i] != POISON;
    return n;
}

static fw_status call_lse(const float *lse)
{
    return fw_attention_varlen_backward(ctx, &S.tq, &S.tk, &S.tv, &S.to, lse, &S.tdo, &S.tdq, &S.tdk, &S.tdv, &S.seqs,
                                        &S.params);
}

static fw_status call(void) { return call_lse(S.lse); }

/* The call st was refused with want, its message holds both needles, and nothing was written. */
static void expect(const char *what, fw_status st, fw_status want, const char *n1, const char *n2)
{
    const char *m = fw_context_last_error(ctx);
    const long w = written();
    fwt_case(st == want && fwt_contains(m, n1) && (!n2 || fwt_contains(m, n2)) && !w, "%s: %s (want %s) \"%s\"%s", what,
             fw_status_string(st), fw_status_string(want), m, w ? " [GRADIENTS WRITTEN]" : "");
}

static void errors(void)
{
    reset();
    fw_status st = call();
    /* sequence 1 has one key and no query: its dk, dv rows are zero; every element is written */
    long zero_bad = 0;
    for (int64_t hk = 0; hk < NHKV; hk++)
        for (int64_t d = 0; d < ND; d++)
            zero_bad += S.dk[(4 * NHKV + hk) * ND + d] != 0.0f || S.dv[(4 * NHKV + hk) * ND + d] != 0.0f;
    fwt_case(st == FW_OK && written() == (long)(TQ * NH * ND + 2 * TK * NHKV * ND) && !zero_bad,
             "the valid call writes every gradient element, zero for the keys of the sequence without queries (%s)",
             fw_context_last_error(ctx));

    reset();
    expect("no lse", call_lse(NULL), FW_ERR_NULL_ARGUMENT, "lse", "log-sum-exp");
    reset(); S.cu_k[2] = 3;
    expect("cu_seqlens_k decreasing", call(), FW_ERR_INVALID_VALUE, "cu_seqlens_k", "non-decreasing");
    reset(); S.cu_q[3] = 4;
    expect("last offset not the packed length", call(), FW_ERR_INVALID_VALUE, "cu_seqlens_q[3]", "packed length");
    reset(); S.cu_q[0] = 1;
    expect("first offset not 0", call(), FW_ERR_INVALID_VALUE, "cu_seqlens_q[0]", "start at 0");
    reset(); S.seqs.max_seqlen_k = 3;
    expect("a sequence longer than max_seqlen_k", call(), FW_ERR_INVALID_VALUE, "sequence 0", "max_seqlen_k = 3");
    reset(); S.seqs.cu_seqlens_k = NULL;
    expect("no cu_seqlens_k", call(), FW_ERR_NULL_ARGUMENT, "cu_seqlens_k", NULL);
    reset();
    expect("no seqs", fw_attention_varlen_backward(ctx, &S.tq, &S.tk, &S.tv, &S.to, S.lse, &S.tdo, &S.tdq, &S.tdk,
                                                   &S.tdv, NULL, &S.params),
           FW_ERR_NULL_ARGUMENT, "seqs", NULL);
    reset(); S.tdo.size[2] = TQ - 1;
    expect("dout shorter than o", call(), FW_ERR_INVALID_SHAPE, "dout.size[2]", NULL);
    reset(); S.tdq.size[1] = 2;
    expect("dq with q's heads wrong", call(), FW_ERR_INVALID_SHAPE, "dq.size[1]", NULL);
    reset(); S.tdk.size[2] = TK + 1;
    expect("dk longer than k", call(), FW_ERR_INVALID_SHAPE, "dk.size[2]", NULL);
    reset(); S.tdv.size[3] = 8;
    expect("dv with another head_dim", call(), FW_ERR_INVALID_SHAPE, "dv.size[3]", NULL);
    reset(); S.tdv.dtype = FW_F16;
    expect("dv of another dtype", call(), FW_ERR_DTYPE_MISMATCH, "dv", "f16");
    reset(); S.tdk.size[0] = 2; S.tk.size[0] = 2; S.tv.size[0] = 2;
    expect("packed k of batch 2", call(), FW_ERR_INVALID_SHAPE, "k.size[0]", "batch size 1");
    reset(); S.tdq.data = S.q;
    expect("dq overlapping q", call(), FW_ERR_OVERLAP, "output dq", "q");
    reset(); S.seqs.cu_seqlens_k = (const int32_t *)(const void *)(S.dk + 3);
    expect("dk overlapping the offsets", call(), FW_ERR_OVERLAP, "output dk", "cu_seqlens_k");
    reset(); S.tdv.data = S.dk;
    expect("dk and dv in one memory", call(), FW_ERR_OVERLAP, "dk", "dv");
    reset();
    expect("dq overlapping lse", call_lse(S.dq + 8), FW_ERR_OVERLAP, "output dq", "lse");
    reset();
    expect("lse not aligned to a float", call_lse((const float *)(const void *)((const char *)S.lse + 2)),
           FW_ERR_INVALID_VALUE, "lse", "aligned");
    reset(); S.tdq.stride[2] = 0;
    expect("dq with overlapping rows", call(), FW_ERR_INVALID_STRIDE, "dq.stride[2]", NULL);
    reset(); S.params.window_right = -3;
    expect("window_right", call(), FW_ERR_INVALID_VALUE, "window_right", NULL);
}

#include "test_varlen_backward_gpu.h"

int main(int argc, char **argv)
{
    const double t0 = fw_now_seconds();
    gpu_dev.kind = FW_DEVICE_CPU;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) gpu_quick = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (fw_device_parse(argv[++i], &gpu_dev)) {
                fprintf(stderr, "test_varlen_backward: --device cpu|cuda[:N]\n");
                return 2;
            }
        } else {
            printf("usage: test_varlen_backward [--device cpu|cuda[:N]] [--quick]\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (fw_context_create(&ctx) != FW_OK) return 1;
    if (gpu_dev.kind == FW_DEVICE_CUDA) {
        const int rc = gpu_main();
        fw_context_destroy(ctx);
        return rc >= 0 ? rc : fwt_finish("test_varlen_backward --device cuda", fw_now_seconds() - t0);
    }
    grid();
    shapes();
    auto_choice();
    const char *backends[] = {"cpu-ref", "cpu-flash", "auto"};
    for (int i = 0; i < 3; i++) {
        fw_context_set_backend(ctx, backends[i]);
        printf("-- bad input, %s\n", backends[i]);
        errors();
    }
    fw_context_destroy(ctx);
    return fwt_finish("test_varlen_backward", fw_now_seconds() - t0);
}
