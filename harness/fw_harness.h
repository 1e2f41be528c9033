/* The test and benchmark harness shared by `flashwatt check/bench`, the ctest programs and the GPU
 * tests: fresh random inputs in any layout on any device, poisoned outputs, a float64 reference,
 * the numerics contract of DESIGN.md, and timing. One copy of this logic for every caller:
 *   fw_harness.c          cases, the random generator, inputs, the forward reference and comparison
 *   fw_harness_serving.c  ragged (varlen) and KV-cache cases behind the same fw_run_* calls
 *   fw_harness_bwd.c      gradient buffers, the backward reference and comparison
 *   fw_harness_time.c     timing */
#ifndef FW_HARNESS_H
#define FW_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include "flashwatt.h"
#include "flashwatt_internal.h"

/* ---- random numbers: the one generator of the harness and of the tests' random cases --------
 * splitmix64 on a caller's state; reproducible from the seed. */
uint64_t fw_rng_next(uint64_t *state);
double fw_rng_uniform(uint64_t *state);             /* in (0, 1) */
float fw_rng_normal(uint64_t *state);               /* standard normal (Box-Muller) */
uint64_t fw_rng_below(uint64_t *state, uint64_t n); /* in [0, n); n >= 1 */

#define FW_CASE_MAX_SEQS 256

/* Which public call a case makes. */
typedef enum fw_case_kind {
    FW_CASE_DENSE = 0,   /* fw_attention_forward */
    FW_CASE_VARLEN = 1,  /* fw_attention_varlen_forward: q/k/v packed by per-sequence lengths */
    FW_CASE_KVCACHE = 2  /* fw_attention_kvcache_forward: new queries against a KV cache */
} fw_case_kind;

typedef struct fw_case {
    /* serving cases: batch is the number of sequences, seqlen_q / seqlen_k the longest of seq_q / seq_k */
    int64_t batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim;
    fw_dtype dtype;
    fw_device device;  /* where the backend runs: cpu, or cuda:N */
    int layout_bshd;   /* 0: (B,H,S,D) contiguous; 1: (B,S,H,D) */
    int pad;           /* > 0: every row padded by this many elements (non-contiguous tensors) */
    fw_attn_params params;
    uint64_t seed;
    int want_lse;
    /* f32 inputs: the precision the call runs in (the caller sets it on its context); the
     * comparison holds the output to that precision's tolerance */
    fw_precision precision;
    double tol_override; /* > 0: use this absolute tolerance instead of the contract's */
    /* ---- serving cases (fw_case_serving) ----
     * Varlen: sequence b has seq_q[b] queries and seq_k[b] keys, packed without padding.
     * KV cache: seq_k[b] tokens already cached, seq_q[b] new queries (and new keys/values with append);
     * the cache's rows beyond each sequence's keys, the rows the append writes and unused pages hold
     * NaN, so a kernel that reads or multiplies them in shows up as a NaN mismatch. */
    fw_case_kind kind;
    int32_t seq_q[FW_CASE_MAX_SEQS], seq_k[FW_CASE_MAX_SEQS];
    int q_packed;      /* KV cache: 1 = q packed with cu_seqlens_q (ragged new queries); 0 = q (B, Lq), every
                          seq_q equal */
    int page_size;     /* KV cache: 0 = contiguous, else a paged pool with a shuffled block table (1..256) */
    int append;        /* KV cache: new keys/values written into the cache by the call */
    int64_t capacity;  /* KV cache: keys per sequence; 0 = the longest sequence's need (paged: in whole
                          pages; contiguous: plus 3 keys of slack) */
} fw_case;

/* "cpu", "cuda" (or "gpu": device 0) or "cuda:N" (0 <= N <= 1023) into *out; 0, or -1 for anything else.
 * The command line and the test programs read --device with it. */
int fw_device_parse(const char *s, fw_device *out);

/* A case with batch=heads=kv_heads=1, seqlen 128, head_dim 64, f32, cpu, bhsd, seed 1. */
fw_case fw_case_default(void);
/* fw_case_default() with this shape and dtype, LSE wanted, and the given seed. */
fw_case fw_case_shape(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seqlen_q, int64_t seqlen_k,
                      int64_t head_dim, fw_dtype dtype, uint64_t seed);
/* A serving case: nseq sequences with seq_q[b] queries and seq_k[b] keys (varlen), or seq_k[b] cached
 * tokens and seq_q[b] new queries (KV cache: contiguous, q packed only when the seq_q differ, no
 * append; set page_size, append, q_packed, capacity after). LSE wanted. */
fw_case fw_case_serving(fw_case_kind kind, int nseq, const int32_t *seq_q, const int32_t *seq_k, int64_t heads,
                        int64_t kv_heads, int64_t head_dim, fw_dtype dtype, uint64_t seed);
/* One line naming the case: shape, dtype, layout, padding, mask, LSE, seed. Returns buf. */
const char *fw_case_label(const fw_case *c, char *buf, size_t len);

/* The numerics contract (docs/DESIGN.md), for an output against the float64 reference:
 *   f32 exact and 3xtf32   max|O - O_ref| <= 1e-5 · max|V|, LSE within 1e-4
 *   f32 in tf32            5e-3 · max|V|, LSE within 5e-2 (10-bit mantissa operands)
 *   f32 in bf16            8e-3 · max|V|, LSE within 5e-2 (8-bit mantissa operands)
 *   f16, bf16 inputs       2 · (the error of the same computation done in the input dtype) + 1e-5,
 *                          LSE within 2e-2
 * (LSE also + 1e-6·|LSE|: a few f32 ulps of a large value.) */
double fw_contract_output_tol(fw_dtype dtype, fw_precision precision, double max_abs_v, double lowp_err);
double fw_contract_lse_tol(fw_dtype dtype, fw_precision precision);
/* One gradient's tolerance (fw_grad_errors): ref_max its max|g_ref|, M the largest of the three, lowp_err the
 * f16/bf16 backward's own error; f32 in tf32 holds 5e-3 · max|g_ref| + 1e-3 · M (the forward's tf32 rule, and
 * dS = dP - delta from a tf32 dP) in place of 1e-4 · max|g_ref| + 1e-5 · M. */
double fw_contract_grad_tol(fw_dtype dtype, fw_precision precision, double ref_max, double M, double lowp_err);

typedef struct fw_errors {
    double max_abs;     /* max |O - O_ref| over elements where both are finite */
    double rel_l2;      /* ||O - O_ref||_2 / ||O_ref||_2 */
    double max_abs_v;   /* max |V| over its finite values */
    double tol;         /* tolerance max_abs was held to */
    double lowp_err;    /* f16/bf16: max |O_lowp - O_ref| of the input-dtype emulation; else 0 */
    double lse_max_abs; /* max |LSE - LSE_ref| (inf on a finite/-inf mismatch); 0 without LSE */
    long unwritten;     /* output elements still holding the poison pattern */
    long stray;         /* padding elements of o (outside the tensor) that were written */
    long nan_mismatch;  /* elements NaN in one of O, O_ref but not the other */
    long cache_mismatch; /* KV cache: cache elements that differ from the reference's cache after the call
                            (the appended rows, or any other element written) */
    int pass;
} fw_errors;

typedef struct fw_run {
    fw_case c;
    fw_problem problem;      /* the validated problem (for FLOP/byte counts) */
    fw_tensor q, k, v, o;    /* descriptors of the call's tensors, on c.device */
    float *lse;              /* on c.device, or NULL */
    size_t q_elems, kv_elems, o_elems; /* allocated elements of each buffer, padding included */
    void *host_q, *host_k, *host_v, *host_o; /* host images in c.dtype, same layout */
    float *host_lse;
    float *ref_o, *ref_lse;  /* float64-accumulated reference, contiguous (B,H,Lq,D) / (B,H,Lq) */
    float *lowp_o;           /* f16/bf16 only: the computation done in the input dtype */
    int have_ref;
    /* ---- serving cases ---- k, v are the cache tensors of a KV-cache case */
    fw_varlen seqs;          /* offsets of the call, on c.device (q_seqs of a KV-cache case) */
    fw_kv_cache cache;       /* KV cache: the call's cache description, on c.device */
    fw_tensor k_new, v_new;  /* KV cache with append, on c.device */
    void *host_kn, *host_vn; /* host images of k_new, v_new */
    size_t kn_elems, lse_elems;
    int32_t *host_ints;      /* cu_seqlens_q [B+1], cu_seqlens_k [B+1], cache_seqlens [B], block table */
    void *dev_ints;          /* their copy on the device (GPU runs) */
    size_t n_ints;
    void *host_kc, *host_vc; /* the cache as the last run left it (fw_run_compare) */
    float *ref_k, *ref_v;    /* the reference's cache after its append, f32, the cache's layout */
} fw_run;

fw_status fw_run_alloc(fw_run *r, const fw_case *c, char *msg, size_t len);
void fw_run_free(fw_run *r);
/* Writes into one element of q/k/v on both the host image and the device copy (for NaN tests).
 * which: 'q', 'k' or 'v'. */
fw_status fw_run_set_input(fw_run *r, char which, int64_t b, int64_t h, int64_t s, int64_t d, float x);
/* Scales every input of q (and k) by factor, to make large logits. */
fw_status fw_run_scale_inputs(fw_run *r, float q_factor, float k_factor);
/* Poisons o and lse; a KV-cache case also gets its initial cache back (the appended rows NaN again). */
fw_status fw_run_poison(fw_run *r);
/* The case's call, then a device sync. */
fw_status fw_run_forward(fw_run *r, fw_context *ctx);
/* The problem a backend receives for the case's call (the tensors' own pointers, device ones on a GPU),
 * for callers that drive a backend directly (flashwatt tune). r->problem of a GPU serving case holds
 * host images instead (its counts and the comparison read them). */
fw_status fw_run_problem(const fw_run *r, fw_problem *p, char *msg, size_t len);
/* The case's call alone (asynchronous on a GPU), for timing loops. */
fw_status fw_run_call(fw_run *r, fw_context *ctx);
/* Can backend `name` run this case? FW_OK, or the status with the backend's reason in why (serving
 * cases too, which fw_backend_supports does not describe). */
fw_status fw_run_supports(const fw_run *r, const char *name, char *why, size_t why_len);
/* Waits for the run's device and reports a failed launch (after calling a backend directly). */
fw_status fw_run_sync(fw_run *r);
/* Computes the reference (once), copies the output back and compares. */
fw_status fw_run_compare(fw_run *r, fw_errors *e);
/* Median milliseconds of reps forward calls after warmup calls (CUDA events on the GPU). */
fw_status fw_run_time(fw_run *r, fw_context *ctx, int warmup, int reps, double *median_ms);
/* Milliseconds a call within one window of `calls` back-to-back calls (a GPU: between events, the host
 * enqueuing ahead as an engine's loop does; the CPU: wall time), after the window's sync. */
fw_status fw_run_time_window(fw_run *r, fw_context *ctx, int calls, double *ms_per_call);
/* The same for any call: median milliseconds of reps calls of call(r, arg) after warmup ones, CUDA
 * events on the legacy default stream on the GPU, the host clock on the CPU. */
typedef fw_status (*fw_timed_call)(fw_run *r, void *arg);
fw_status fw_time_calls(fw_run *r, fw_timed_call call, void *arg, int warmup, int reps, double *median_ms);

/* Exact forward FLOPs (4 · visible pairs · D · B · H; serving cases: over the sequences' own lengths)
 * and compulsory bytes (q, k, v read once, o written once, lse if requested; a KV cache: each
 * sequence's keys read once, new keys and values read and written into the cache). */
double fw_run_flops(const fw_run *r);
double fw_run_bytes(const fw_run *r);
/* Bytes of keys and values the call must read: every sequence's keys once (the decode roofline). */
double fw_run_kv_bytes(const fw_run *r);

/* Output element (b, h, s, d) of the last run, as float, from the host image (after compare). */
float fw_run_output(const fw_run *r, int64_t b, int64_t h, int64_t s, int64_t d);

/* ---- backward ------------------------------------------------------------------------------
 * Gradient buffers for a run (made with want_lse = 1), dense or ragged (varlen; a KV-cache run has no
 * backward): dO random from seed, dQ/dK/dV, on the run's device in the layouts of o, q, k, v; host
 * images in the run's dtype. fw_bwd_alloc also computes O and LSE with cpu-ref (float64) on the host
 * and puts them in the run's o and lse. The run's call decides the backward's: fw_attention_backward
 * or fw_attention_varlen_backward. */
typedef struct fw_bwd {
    fw_tensor dout, dq, dk, dv;
    void *host_dout, *host_dq, *host_dk, *host_dv;
    float *ref[3];  /* cpu-ref's float64-accumulated dq, dk, dv in f32, in the layouts of dq, dk, dv */
    float *lowp[3]; /* f16/bf16: the backward computed in the input dtype (same layouts); else NULL */
    int have_ref;
} fw_bwd;

/* One gradient against the reference. The contract, with M the largest max|g_ref| of the three:
 *   max|g - g_ref| <= 1e-4 · max|g_ref| + 1e-5 · M + 1e-6 (+ 3 · max|g_lowp - g_ref| for f16/bf16; f32 in tf32:
 *   5e-3 · max|g_ref| + 1e-3 · M + 1e-6, fw_contract_grad_tol)
 * (FlashAttention's rule; 1e-5 · M covers gradients that vanish analytically, such as dq = dk = 0
 * at Lk = 1, where f32 cancellation leaves noise of order 1e-7 · |dP|). */
typedef struct fw_grad_errors {
    double max_abs, ref_max, lowp, tol;
    double rel_l2; /* ||g - g_ref||_2 / ||g_ref||_2 over the written, non-NaN elements */
    long unwritten, stray, nans;
} fw_grad_errors;

typedef struct fw_bwd_errors {
    fw_grad_errors g[3]; /* dq, dk, dv */
    int pass;
} fw_bwd_errors;

fw_status fw_bwd_alloc(fw_run *r, fw_bwd *b, uint64_t seed, char *msg, size_t len);
/* The buffers and dO only: the run's o and lse are left to the caller's forward (timings at sizes
 * where a float64 forward on the host would take minutes). */
fw_status fw_bwd_alloc_grads(fw_run *r, fw_bwd *b, uint64_t seed, char *msg, size_t len);
void fw_bwd_free(fw_run *r, fw_bwd *b);
/* NaN-poisons dq, dk, dv (host and device, padding included). */
fw_status fw_bwd_poison(fw_run *r, fw_bwd *b);
/* The run's backward call on its o and lse, then a device sync. */
fw_status fw_bwd_run(fw_run *r, fw_bwd *b, fw_context *ctx);
/* Can backend `name` run this backward? FW_OK; else the status with the reason in why
 * (FW_ERR_NOT_IMPLEMENTED: the backend has no backward at all). */
fw_status fw_bwd_supports(const fw_run *r, const fw_bwd *b, const char *name, char *why, size_t why_len);
/* Copies dq, dk, dv back into the host images. */
fw_status fw_bwd_fetch(fw_run *r, fw_bwd *b);
/* Computes the reference (once), fetches dq, dk, dv and compares them (written, no stray writes,
 * no NaN, within the contract). */
fw_status fw_bwd_compare(fw_run *r, fw_bwd *b, fw_bwd_errors *e);
/* Median milliseconds of forward + backward (the forward writes the run's o and lse) over reps
 * after warmup (CUDA events on the GPU). */
fw_status fw_bwd_time(fw_run *r, fw_bwd *b, fw_context *ctx, int warmup, int reps, double *median_ms);

double fw_now_seconds(void);

#endif
