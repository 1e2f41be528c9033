/* GPU test of the CUDA backward (src/backends/cuda/bwd_*.cu) against cpu-ref's float64 backward.
 *
 * Every case: fresh random q, k, v, dO; the forward on the GPU (backend "auto") gives O and LSE (and
 * is itself checked); dq, dk, dv are poisoned (all bytes 0xff), then computed on the GPU four ways:
 *   determ  fw_cuda_backward with the config "bwd-deterministic" (separate dQ pass, no atomics), run
 *           twice: the second result must be bit-identical to the first
 *   atomic  fw_cuda_backward with "bwd-atomic" (dQ by atomicAdd into an f32 workspace)
 *   api     fw_attention_backward through the backend table (FW_BWD_SKIP_API=1 skips it)
 *   cores   f16/bf16 only: "bwd-atomic" with FW_CUDA_BWD_TC=0, i.e. the CUDA-core kernels that f16/bf16
 *           shapes the tensor-core kernels do not take fall back to
 *   mater   fw_cuda_backward with "bwd-materialize" (bwd/materialize.cu: S/P, dP/dS stored, cuBLAS), no
 *           memory budget (one chunk), run twice: the second result must be bit-identical to the first
 *   matchk  fw_attention_backward with fw_context_set_memory_budget(fixed + 3 slices) on a deterministic
 *           context: for f32 at head_dim > 64 the budget rule must pick the materialised backward (the
 *           only case measured faster; elsewhere it must decline) and run it in chunks of at most 3 (batch, head) slices
 *           (GQA groups above 3 heads in passes accumulating dK/dV); the device workspace peak must
 *           show it ran (FW_BWD_SKIP_API=1 skips it)
 * f16/bf16 with head_dim <= 128 (multiple of 8) run the tensor-core kernels in determ/atomic/api;
 * FW_BWD_TC_SWEEP=1 repeats the suite's 16-bit cases for every tensor-core record of their head dim
 * (FW_CUDA_BWD_CONFIG=<record>, in both dQ modes).
 * and compared with cpu-ref's backward (float64 accumulation) on f32 copies of the same inputs.
 * Unwritten elements (poison left inside the view), stray writes (padding of padded rows changed)
 * and NaNs fail a case.
 *
 * Tolerance, per gradient g in {dq, dk, dv}, M = the largest max|g_ref| of the three:
 *   f32:      max|g − g_ref| ≤ 1e-4·max|g_ref| + 1e-5·M + 1e-6
 *   f16/bf16: max|g − g_ref| ≤ 3·max|g_lowp − g_ref| + 1e-4·max|g_ref| + 1e-5·M + 1e-6
 * where g_lowp is the same backward computed in the input dtype on the CPU (FlashAttention's rule; the
 * emulation rounds q·scale, S, P, dP, dS and the results to the dtype as PyTorch's autograd in that
 * dtype does). The 1e-5·M term covers gradients that vanish analytically (Lk = 1: dq = dk = 0 exactly,
 * while dS = P∘(dP − Δ) leaves f32 cancellation noise of order 1e-7·|dP|).
 *
 *   gpu_backward            the suite
 *   gpu_backward --quick    three small runs (for compute-sanitizer)
 *   gpu_backward --bench [REPS]  fwd and bwd (both dQ modes) timings on the FA grid, bf16 causal; column
 *                           "mat": the materialised backward where all its slices fit 8 GiB at once
 *   gpu_backward --list-variants  the backward's records (kernels.tsv), "D ARCH NAME" a line: the names that
 *                           FW_CUDA_BWD_CONFIG takes (bench/device.sh loops over them)
 *   gpu_backward --cpu      the same flow on the host with the tiled CPU backward standing in (checks
 *                           this program's logic where there is no GPU; not a test of the kernels)
 * Exit 77 where there is no CUDA device; 1 when a case fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fw_harness.h"
#include "backends/backend.h"
#include "core/dtype.h"
#include "core/validate.h"
#include "backends/cuda/bwd/heuristics.h"
#include "backends/cuda/bwd/materialize.h"
#include "flashwatt.h"

#ifndef FW_HAVE_CUDA
int main(void)
{
    printf("gpu_backward: skipped (built without CUDA)\n");
    return 77;
}
#else
#include <cuda_runtime.h>

size_t fw_cuda_workspace_peak(void);
/* The environment's knobs for the direct backend calls (a context reads them for the public API); read again
 * where the test changes the environment. */
static fw_knobs test_knobs;
void fw_cuda_workspace_reset_peak(void);
fw_status fw_cuda_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);
fw_status fw_cpu_tiled_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);

/* --cpu: the same flow with every tensor on the host and src/backends/cpu/cpu_bwd_tiled.c standing in for
 * fw_cuda_backward (f32 math, outputs rounded to the dtype, like the GPU kernels): a check of this
 * program's own logic (layouts, poison, tolerances) on a machine without a GPU. */
static int use_cpu;

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

static int passed, failed;

static void *dmalloc(size_t bytes)
{
    void *p = NULL;
    if (use_cpu) {
        p = malloc(bytes);
        if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    } else {
        CK(cudaMalloc(&p, bytes));
    }
    return p;
}
static void dfree(void *p)
{
    if (use_cpu) free(p);
    else CK(cudaFree(p));
}
static void dcopy(void *dst, const void *src, size_t bytes, int to_device)
{
    if (use_cpu) memcpy(dst, src, bytes);
    else CK(cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
}
static void dpoison(void *p, size_t bytes)
{
    if (use_cpu) memset(p, 0xff, bytes);
    else CK(cudaMemset(p, 0xff, bytes));
}

/* ---- host helpers ----------------------------------------------------------------------------- */
static uint64_t rng_state;
static double urand(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static float randn(void) { return (float)(sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand())); }

static int64_t off_of(const fw_tensor *t, int64_t b, int64_t h, int64_t s) { return b * t->stride[0] + h * t->stride[1] + s * t->stride[2]; }

/* contiguous f32 (B, H, S, D) copy of a host image with t's strides */
static float *to_f32(const void *host, fw_dtype dt, const fw_tensor *t)
{
    const int64_t B = t->size[0], H = t->size[1], S = t->size[2], D = t->size[3];
    float *out = (float *)malloc((size_t)(B * H * S * D) * sizeof(float));
    if (!out) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t s = 0; s < S; s++)
                for (int64_t d = 0; d < D; d++)
                    out[((b * H + h) * S + s) * D + d] = fw_load_f32(host, dt, off_of(t, b, h, s) + d);
    return out;
}

static float rnd(fw_dtype t, float x)
{
    if (t == FW_F16) return fw_f16_to_f32(fw_f32_to_f16(x));
    if (t == FW_BF16) return fw_bf16_to_f32(fw_f32_to_bf16(x));
    return x;
}

/* The backward in the input dtype (what PyTorch's autograd does on f16/bf16 tensors): qs = q·scale,
 * S = qs·Kᵀ, P = softmax(S), dP = dO·Vᵀ, dS = P∘(dP − rowsum(P∘dP)) each rounded to the dtype, f32
 * accumulation inside every product; dq = (dS·K)·scale, dk = dSᵀ·qs, dv = Pᵀ·dO rounded at the end.
 * Inputs contiguous f32 (exact images of the dtype values); outputs contiguous f32. */
static void lowp_backward(const fw_problem *p, fw_dtype t, const float *q, const float *k, const float *v,
                          const float *dO, float *dq, float *dk, float *dv)
{
    const int64_t D = p->head_dim, Lq = p->seqlen_q, Lk = p->seqlen_k;
    const float scale = rnd(t, p->scale);
    float *S = (float *)malloc((size_t)Lk * sizeof(float)), *dP = (float *)malloc((size_t)Lk * sizeof(float));
    float *qs = (float *)malloc((size_t)D * sizeof(float)), *acc = (float *)malloc((size_t)D * sizeof(float));
    if (!S || !dP || !qs || !acc) { fprintf(stderr, "out of memory\n"); exit(2); }
    const size_t nk = (size_t)(p->batch * p->kv_heads * Lk * D);
    float *dkf = (float *)calloc(nk, sizeof(float)), *dvf = (float *)calloc(nk, sizeof(float));
    if (!dkf || !dvf) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++) {
            const int64_t hk = h / p->group, bh = b * p->heads + h, bhk = b * p->kv_heads + hk;
            const float *K = k + bhk * Lk * D, *V = v + bhk * Lk * D;
            float *dK = dkf + bhk * Lk * D, *dV = dvf + bhk * Lk * D;
            for (int64_t i = 0; i < Lq; i++) {
                const float *qi = q + (bh * Lq + i) * D, *doi = dO + (bh * Lq + i) * D;
                float *dqi = dq + (bh * Lq + i) * D;
                int64_t lo, hi;
                fw_key_range(p, i, &lo, &hi);
                for (int64_t d = 0; d < D; d++) { qs[d] = rnd(t, qi[d] * scale); acc[d] = 0; }
                float m = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    float s = 0, dp = 0;
                    for (int64_t d = 0; d < D; d++) { s += qs[d] * K[j * D + d]; dp += doi[d] * V[j * D + d]; }
                    S[j] = rnd(t, s);
                    dP[j] = rnd(t, dp);
                    if (S[j] > m) m = S[j];
                }
                float l = 0;
                for (int64_t j = lo; j < hi; j++) { S[j] = expf(S[j] - m); l += S[j]; }
                float delta = 0;
                for (int64_t j = lo; j < hi; j++) { S[j] = rnd(t, S[j] / l); delta += S[j] * dP[j]; }
                for (int64_t j = lo; j < hi; j++) {
                    const float P = S[j], dS = rnd(t, P * (dP[j] - delta));
                    for (int64_t d = 0; d < D; d++) {
                        acc[d] += dS * K[j * D + d];
                        dK[j * D + d] += dS * qs[d];
                        dV[j * D + d] += P * doi[d];
                    }
                }
                for (int64_t d = 0; d < D; d++) dqi[d] = rnd(t, rnd(t, acc[d]) * scale);
            }
        }
    for (size_t x = 0; x < nk; x++) { dk[x] = rnd(t, dkf[x]); dv[x] = rnd(t, dvf[x]); }
    free(S); free(dP); free(qs); free(acc); free(dkf); free(dvf);
}

/* ---- one case ----------------------------------------------------------------------------------- */
typedef struct grad_err {
    double max_abs, ref_max, lowp, tol;
    long unwritten, stray, nans;
} grad_err;

static int is_poison(const void *buf, fw_dtype t, int64_t i)
{
    if (t == FW_F32) return ((const uint32_t *)buf)[i] == 0xffffffffu;
    return ((const uint16_t *)buf)[i] == 0xffffu;
}

static void compare(grad_err *e, const void *host, fw_dtype dt, const fw_tensor *t, int64_t row_elems,
                    const float *ref, const float *lowp)
{
    const int64_t B = t->size[0], H = t->size[1], S = t->size[2], D = t->size[3];
    memset(e, 0, sizeof *e);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t s = 0; s < S; s++) {
                const int64_t base = off_of(t, b, h, s);
                for (int64_t d = D; d < row_elems; d++)
                    if (!is_poison(host, dt, base + d)) e->stray++;
                for (int64_t d = 0; d < D; d++) {
                    const size_t ri = (size_t)(((b * H + h) * S + s) * D + d);
                    const double y = ref[ri];
                    if (fabs(y) > e->ref_max) e->ref_max = fabs(y);
                    if (lowp && fabs(lowp[ri] - y) > e->lowp) e->lowp = fabs(lowp[ri] - y);
                    if (is_poison(host, dt, base + d)) { e->unwritten++; continue; }
                    const double x = fw_load_f32(host, dt, base + d);
                    if (isnan(x)) { e->nans++; continue; }
                    if (fabs(x - y) > e->max_abs) e->max_abs = fabs(x - y);
                }
            }
}

typedef struct bcase {
    int64_t B, H, Hkv, Lq, Lk, D;
    int causal;
    int64_t wl, wr;
    int bshd, pad;
} bcase;

#define NMODES 6
static const char *mode_name[NMODES] = {"determ", "atomic", "api", "cores", "mater", "matchk"};

static void run_case(const bcase *bc, fw_dtype dt, int modes_mask, uint64_t seed)
{
    char label[200];
    snprintf(label, sizeof label, "%-4s B%lld H%lld/%lld Lq%5lld Lk%5lld D%3lld %s%s wl%lld wr%lld %s pad%d",
             fw_dtype_name(dt), (long long)bc->B, (long long)bc->H, (long long)bc->Hkv, (long long)bc->Lq,
             (long long)bc->Lk, (long long)bc->D, bc->causal ? "causal" : "full  ", "", (long long)bc->wl,
             (long long)bc->wr, bc->bshd ? "bshd" : "bhsd", bc->pad);
    fw_case c = fw_case_default();
    c.batch = bc->B; c.heads = bc->H; c.kv_heads = bc->Hkv; c.seqlen_q = bc->Lq; c.seqlen_k = bc->Lk;
    c.head_dim = bc->D; c.dtype = dt; c.device.kind = use_cpu ? FW_DEVICE_CPU : FW_DEVICE_CUDA; c.device.index = 0;
    c.layout_bshd = bc->bshd; c.pad = bc->pad; c.want_lse = 1; c.seed = seed;
    c.params.causal = bc->causal; c.params.window_left = bc->wl; c.params.window_right = bc->wr;
    fw_run r;
    char msg[512];
    fw_status st = fw_run_alloc(&r, &c, msg, sizeof msg);
    if (st != FW_OK) {
        printf("FAIL %s: setup: %s\n", label, msg);
        failed++;
        return;
    }
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) { fprintf(stderr, "context\n"); exit(2); }
    fw_errors fe;
    st = fw_run_poison(&r);
    if (st == FW_OK) st = fw_run_forward(&r, ctx);
    if (st != FW_OK) {
        printf("FAIL %s: forward: %s\n", label, fw_context_last_error(ctx));
        failed++;
        fw_context_destroy(ctx);
        fw_run_free(&r);
        return;
    }
    const char *fwd_backend = fw_context_last_backend(ctx);
    if (fw_run_compare(&r, &fe) != FW_OK) { fprintf(stderr, "forward compare failed\n"); exit(2); }
    const int fwd_ok = fe.pass;
    if (!fwd_ok) {
        printf("FAIL %s: forward (%s) max_abs %.3g > tol %.3g, unwritten %ld\n", label, fwd_backend, fe.max_abs,
               fe.tol, fe.unwritten);
        failed++;
    }

    /* dO and the gradient buffers, in the layout of o (q) and k */
    const size_t es = fw_dtype_size(dt);
    const int64_t row_elems = bc->D + bc->pad;
    void *h_do = malloc(r.o_elems * es), *h_dq = malloc(r.q_elems * es);
    void *h_dk = malloc(r.kv_elems * es), *h_dv = malloc(r.kv_elems * es);
    if (!h_do || !h_dq || !h_dk || !h_dv) { fprintf(stderr, "out of memory\n"); exit(2); }
    rng_state = seed * 7919u + 3;
    for (size_t i = 0; i < r.o_elems; i++) fw_store_f32(h_do, dt, (int64_t)i, randn());
    void *d_do = dmalloc(r.o_elems * es), *d_dq = dmalloc(r.q_elems * es);
    void *d_dk = dmalloc(r.kv_elems * es), *d_dv = dmalloc(r.kv_elems * es);
    dcopy(d_do, h_do, r.o_elems * es, 1);
    fw_tensor tdo = r.o, tdq = r.q, tdk = r.k, tdv = r.v;
    tdo.data = d_do; tdq.data = d_dq; tdk.data = d_dk; tdv.data = d_dv;

    /* reference: cpu-ref backward on f32 copies; the low-precision emulation for f16/bf16 */
    float *fq = to_f32(r.host_q, dt, &r.q), *fk = to_f32(r.host_k, dt, &r.k), *fv = to_f32(r.host_v, dt, &r.v);
    float *fo = to_f32(r.host_o, dt, &r.o), *fdo = to_f32(h_do, dt, &r.o);
    const size_t nq = (size_t)(bc->B * bc->H * bc->Lq * bc->D), nk = (size_t)(bc->B * bc->Hkv * bc->Lk * bc->D);
    float *rdq = (float *)malloc(nq * 4), *rdk = (float *)malloc(nk * 4), *rdv = (float *)malloc(nk * 4);
    float *lse_dummy = (float *)malloc((size_t)(bc->B * bc->H * bc->Lq) * 4);
    float *ldq = NULL, *ldk = NULL, *ldv = NULL;
    if (!rdq || !rdk || !rdv || !lse_dummy) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (int64_t i = 0; i < bc->B * bc->H * bc->Lq; i++) lse_dummy[i] = 0;
    {
        const fw_device cpu = {FW_DEVICE_CPU, 0};
        fw_tensor q = fw_tensor_bhsd(fq, FW_F32, cpu, bc->B, bc->H, bc->Lq, bc->D);
        fw_tensor k = fw_tensor_bhsd(fk, FW_F32, cpu, bc->B, bc->Hkv, bc->Lk, bc->D);
        fw_tensor v = fw_tensor_bhsd(fv, FW_F32, cpu, bc->B, bc->Hkv, bc->Lk, bc->D);
        fw_tensor o = fw_tensor_bhsd(fo, FW_F32, cpu, bc->B, bc->H, bc->Lq, bc->D);
        fw_tensor dO = fw_tensor_bhsd(fdo, FW_F32, cpu, bc->B, bc->H, bc->Lq, bc->D);
        fw_tensor dq = fw_tensor_bhsd(rdq, FW_F32, cpu, bc->B, bc->H, bc->Lq, bc->D);
        fw_tensor dk = fw_tensor_bhsd(rdk, FW_F32, cpu, bc->B, bc->Hkv, bc->Lk, bc->D);
        fw_tensor dv = fw_tensor_bhsd(rdv, FW_F32, cpu, bc->B, bc->Hkv, bc->Lk, bc->D);
        fw_context *rc = NULL;
        if (fw_context_create(&rc) != FW_OK || fw_context_set_backend(rc, "cpu-ref") != FW_OK ||
            fw_attention_backward(rc, &q, &k, &v, &o, lse_dummy, &dO, &dq, &dk, &dv, &c.params) != FW_OK) {
            fprintf(stderr, "reference backward failed: %s\n", rc ? fw_context_last_error(rc) : "no context");
            exit(2);
        }
        fw_context_destroy(rc);
        if (dt != FW_F32) {
            ldq = (float *)malloc(nq * 4); ldk = (float *)malloc(nk * 4); ldv = (float *)malloc(nk * 4);
            if (!ldq || !ldk || !ldv) { fprintf(stderr, "out of memory\n"); exit(2); }
            lowp_backward(&r.problem, dt, fq, fk, fv, fdo, ldq, ldk, ldv);
        }
    }

    for (int mode = 0; mode < NMODES; mode++) {
        if (!(modes_mask & (1 << mode))) continue;
        if (mode == 3 && dt == FW_F32) continue; /* f32 always runs the CUDA-core kernels */
        if (mode == 3) setenv("FW_CUDA_BWD_TC", "0", 1);
        dpoison(d_dq, r.q_elems * es);
        dpoison(d_dk, r.kv_elems * es);
        dpoison(d_dv, r.kv_elems * es);
        if (!use_cpu) CK(cudaDeviceSynchronize());
        char err[512] = "";
        const char *who = use_cpu ? "fw_cpu_tiled_backward" : "fw_cuda_backward";
        size_t mat_need = 0; /* matchk: the workspace the materialised backward takes */
        if (mode != 2 && mode != 5) {
            fw_problem p;
            st = fw_validate_backward(&r.q, &r.k, &r.v, &r.o, r.lse, &tdo, &tdq, &tdk, &tdv, &c.params, &p, err,
                                      sizeof err);
            if (st == FW_OK) {
                p.precision = FW_PRECISION_EXACT;
                fw_config cfg;
                memset(&cfg, 0, sizeof cfg);
                snprintf(cfg.name, sizeof cfg.name, "%s",
                         mode == 0 ? "bwd-deterministic" : mode == 4 ? "bwd-materialize" : "bwd-atomic");
                fw_exec ex;
                ex.threads = 1; ex.stream = NULL; ex.err = err; ex.err_len = sizeof err; ex.knobs = &test_knobs;
                st = use_cpu ? fw_cpu_tiled_backward(&p, &cfg, &ex) : fw_cuda_backward(&p, &cfg, &ex);
                if (st == FW_OK && (mode == 0 || mode == 4)) { /* again: must be bit-identical */
                    void *first[3] = {malloc(r.q_elems * es), malloc(r.kv_elems * es), malloc(r.kv_elems * es)};
                    if (!first[0] || !first[1] || !first[2]) { fprintf(stderr, "out of memory\n"); exit(2); }
                    dcopy(first[0], d_dq, r.q_elems * es, 0);
                    dcopy(first[1], d_dk, r.kv_elems * es, 0);
                    dcopy(first[2], d_dv, r.kv_elems * es, 0);
                    st = use_cpu ? fw_cpu_tiled_backward(&p, &cfg, &ex) : fw_cuda_backward(&p, &cfg, &ex);
                    if (st == FW_OK && !use_cpu) CK(cudaDeviceSynchronize());
                    if (st == FW_OK) {
                        dcopy(h_dq, d_dq, r.q_elems * es, 0);
                        dcopy(h_dk, d_dk, r.kv_elems * es, 0);
                        dcopy(h_dv, d_dv, r.kv_elems * es, 0);
                        if (memcmp(first[0], h_dq, r.q_elems * es) || memcmp(first[1], h_dk, r.kv_elems * es) ||
                            memcmp(first[2], h_dv, r.kv_elems * es)) {
                            printf("FAIL %s %s: a second run is not bit-identical\n", label, mode_name[mode]);
                            failed++;
                        }
                    }
                    free(first[0]); free(first[1]); free(first[2]);
                }
            }
        } else {
            if (mode == 5) { /* a budget for the fixed part and 3 slices: the auto rule must pick the store path */
                fw_problem p;
                fw_bwd_mat_plan pl;
                st = fw_validate_backward(&r.q, &r.k, &r.v, &r.o, r.lse, &tdo, &tdq, &tdk, &tdv, &c.params, &p, err,
                                          sizeof err);
                if (st != FW_OK) { printf("FAIL %s matchk: validate: %s\n", label, err); failed++; continue; }
                fw_bwd_materialize_plan(&p, &pl);
                p.memory_budget = pl.fixed_bytes + 3 * pl.slice_bytes + 1024;
                p.deterministic = 1;
                fw_context_set_deterministic(ctx, 1);
                /* the rule stores only for deterministic f32 at head_dim > 64; elsewhere it must decline */
                const int expect_store = dt == FW_F32 && bc->D > 64 && bc->Lq * bc->Lk <= FW_BWD_MATERIALIZE_MAX_PAIRS;
                if (!expect_store && fw_bwd_materialize_wanted(&p, NULL)) {
                    printf("FAIL %s matchk: the rule chose the store path outside deterministic f32, D > 64\n", label);
                    failed++;
                    fw_context_set_deterministic(ctx, 0);
                    continue;
                }
                if (expect_store && (!fw_bwd_materialize_wanted(&p, NULL) || !fw_bwd_materialize_plan(&p, &pl) ||
                    pl.units_per_chunk * pl.heads_per_pass > 3)) {
                    printf("FAIL %s matchk: budget %zu: plan fits %d, %lld units x %lld heads per chunk\n", label,
                           p.memory_budget, pl.fits, (long long)pl.units_per_chunk, (long long)pl.heads_per_pass);
                    failed++;
                    fw_context_set_deterministic(ctx, 0);
                    continue;
                }
                mat_need = expect_store ? pl.fixed_bytes + pl.chunk_bytes : 0;
                fw_context_set_memory_budget(ctx, p.memory_budget);
                if (!use_cpu) {
                    CK(cudaDeviceSynchronize());
                    fw_cuda_workspace_reset_peak();
                }
            }
            st = fw_attention_backward(ctx, &r.q, &r.k, &r.v, &r.o, r.lse, &tdo, &tdq, &tdk, &tdv, &c.params);
            if (mode == 5) {
                fw_context_set_memory_budget(ctx, 0);
                fw_context_set_deterministic(ctx, 0);
            }
            if (st != FW_OK) snprintf(err, sizeof err, "%s", fw_context_last_error(ctx));
            else who = fw_context_last_backend(ctx);
            if (st == FW_ERR_NO_BACKEND || st == FW_ERR_NOT_IMPLEMENTED)
                snprintf(err + strlen(err), sizeof err - strlen(err),
                         " [not wired: point the cuda-flash/cuda-flash-f32 .backward at fw_cuda_backward]");
        }
        if (mode == 3) unsetenv("FW_CUDA_BWD_TC");
        if (st == FW_OK && !use_cpu) {
            cudaError_t e = cudaDeviceSynchronize();
            if (e == cudaSuccess) e = cudaGetLastError();
            if (e != cudaSuccess) {
                printf("FAIL %s %s: CUDA error after the backward: %s\n", label, mode_name[mode], cudaGetErrorString(e));
                failed++;
                exit(1); /* the context is unusable after a kernel fault */
            }
        }
        if (st != FW_OK) {
            printf("FAIL %s %s: %s: %s\n", label, mode_name[mode], fw_status_string(st), err);
            failed++;
            continue;
        }
        dcopy(h_dq, d_dq, r.q_elems * es, 0);
        dcopy(h_dk, d_dk, r.kv_elems * es, 0);
        dcopy(h_dv, d_dv, r.kv_elems * es, 0);
        grad_err g[3];
        compare(&g[0], h_dq, dt, &tdq, row_elems, rdq, ldq);
        compare(&g[1], h_dk, dt, &tdk, row_elems, rdk, ldk);
        compare(&g[2], h_dv, dt, &tdv, row_elems, rdv, ldv);
        double M = 0;
        for (int x = 0; x < 3; x++) if (g[x].ref_max > M) M = g[x].ref_max;
        int ok = 1;
        for (int x = 0; x < 3; x++) {
            g[x].tol = 1e-4 * g[x].ref_max + 1e-5 * M + 1e-6 + (dt == FW_F32 ? 0.0 : 3.0 * g[x].lowp);
            ok = ok && g[x].max_abs <= g[x].tol && !g[x].unwritten && !g[x].stray && !g[x].nans;
        }
        if (mode == 5 && !use_cpu && fw_cuda_workspace_peak() < mat_need) {
            printf("FAIL %s matchk: workspace peak %zu < %zu: the materialised backward did not run\n", label,
                   fw_cuda_workspace_peak(), mat_need);
            ok = 0;
        }
        printf("%s %s %-6s | dq %.2e/%.2e dk %.2e/%.2e dv %.2e/%.2e (err/tol) |g_ref| %.2e %.2e %.2e",
               ok ? "PASS" : "FAIL", label, mode_name[mode], g[0].max_abs, g[0].tol, g[1].max_abs, g[1].tol,
               g[2].max_abs, g[2].tol, g[0].ref_max, g[1].ref_max, g[2].ref_max);
        if (dt != FW_F32) printf(" lowp %.2e %.2e %.2e", g[0].lowp, g[1].lowp, g[2].lowp);
        printf(" unwritten %ld stray %ld nan %ld [%s; fwd %s]\n", g[0].unwritten + g[1].unwritten + g[2].unwritten,
               g[0].stray + g[1].stray + g[2].stray, g[0].nans + g[1].nans + g[2].nans, who, fwd_backend);
        fflush(stdout);
        if (ok) passed++;
        else failed++;
    }

    free(fq); free(fk); free(fv); free(fo); free(fdo); free(rdq); free(rdk); free(rdv); free(lse_dummy);
    free(ldq); free(ldk); free(ldv);
    free(h_do); free(h_dq); free(h_dk); free(h_dv);
    dfree(d_do); dfree(d_dq); dfree(d_dk); dfree(d_dv);
    fw_context_destroy(ctx);
    fw_run_free(&r);
}

/* --bench: the FA grid (16k tokens, hidden 2048, bf16, causal, D 64/128, L 1k..16k): the forward
 * through the API and fw_cuda_backward in both dQ modes, CUDA-event medians; TFLOP/s of fwd+bwd at
 * 3.5x the forward's exact FLOPs (FlashAttention's count). */
static int cmp_dbl(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The "mat" column: fw_cuda_backward with "bwd-materialize" and an 8 GiB memory budget, so that every
 * (batch, head) slice is materialised at once (one chunk); -1 ("-") where that workspace would exceed
 * 8 GiB, -2 when it failed. t: reps doubles of scratch. */
/* Median of reps CUDA-event timings of fw_cuda_backward with config cfg_name, after a warm-up call;
 * t holds reps doubles of scratch. On failure the status, with the message in err. */
static fw_status time_backward(const fw_problem *p, const char *cfg_name, int reps, double *t, double *median_ms,
                               char *err, size_t err_len)
{
    fw_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.name, sizeof cfg.name, "%s", cfg_name);
    fw_exec ex;
    ex.threads = 1; ex.stream = NULL; ex.err = err; ex.err_len = err_len; ex.knobs = &test_knobs;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    fw_status st = fw_cuda_backward(p, &cfg, &ex); /* warm-up */
    for (int i = 0; i < reps && st == FW_OK; i++) {
        CK(cudaEventRecord(e0, 0));
        st = fw_cuda_backward(p, &cfg, &ex);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[i] = ms;
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    if (st == FW_OK) {
        qsort(t, (size_t)reps, sizeof(double), cmp_dbl);
        *median_ms = t[reps / 2];
    }
    return st;
}

static double bench_mat(const fw_problem *p0, int reps, double *t)
{
    fw_problem p = *p0;
    fw_bwd_mat_plan pl;
    p.memory_budget = (size_t)8 << 30;
    if (!fw_bwd_materialize_plan(&p, &pl) || pl.units_per_chunk * pl.heads_per_pass < p.batch * p.heads) return -1.0;
    char err[512] = "";
    double ms = 0;
    if (time_backward(&p, "bwd-materialize", reps, t, &ms, err, sizeof err) != FW_OK) {
        printf("materialised backward failed: %s\n", err);
        failed++;
        return -2.0;
    }
    return ms;
}

/* The tensor-core records of padded head dim d, at most max, into out; their count. */
enum { BENCH_MAX_RECORDS = 24 };
static int tc_records(int d, const fw_bwd_record **out, int max)
{
    int n = 0, count = 0;
    const fw_bwd_record *rs = fw_bwd_records_of(d, &n);
    for (int i = 0; i < n && count < max; i++)
        if (rs[i].kernel != FW_BWD_CORES) out[count++] = &rs[i];
    return count;
}

/* FW_CUDA_BWD_CONFIG=name (NULL: unset) for the direct calls that follow. */
static void set_bwd_config(const char *name)
{
    if (name) setenv("FW_CUDA_BWD_CONFIG", name, 1);
    else unsetenv("FW_CUDA_BWD_CONFIG");
    fw_knobs_read(&test_knobs);
}

static void bench(int reps)
{
    const int Ds[2] = {64, 128};
    /* FW_BWD_BENCH_ONLY=D:L runs one shape (for profilers) */
    int only_d = 0;
    long long only_l = 0;
    const char *only = getenv("FW_BWD_BENCH_ONLY");
    if (only && sscanf(only, "%d:%lld", &only_d, &only_l) != 2) only_d = 0;
    /* FW_BWD_BENCH_DTYPE=f32|f16 (default bf16), FW_BWD_BENCH_MINL / _MAXL (default 1024 / 16384) */
    const char *dts = getenv("FW_BWD_BENCH_DTYPE"), *maxl_s = getenv("FW_BWD_BENCH_MAXL");
    const fw_dtype bench_dt = dts && !strcmp(dts, "f32") ? FW_F32 : dts && !strcmp(dts, "f16") ? FW_F16 : FW_BF16;
    const long long maxl = maxl_s && atoll(maxl_s) > 0 ? atoll(maxl_s) : 16384;
    const char *minl_s = getenv("FW_BWD_BENCH_MINL"); /* default 1024 */
    const long long minl = minl_s && atoll(minl_s) > 0 ? atoll(minl_s) : 1024;
    printf("# dtype %s\n", fw_dtype_name(bench_dt));
    for (int di = 0; di < 2; di++) {
        if (only_d && only_d != Ds[di]) continue;
        /* columns: the default record of each dQ mode (det, atom), then every tensor-core record v<i> per mode */
        const fw_bwd_record *recs[BENCH_MAX_RECORDS];
        const int nvar = tc_records(Ds[di], recs, BENCH_MAX_RECORDS), ncol = 2 + 2 * nvar;
        const char *col_cfg[2 + 2 * BENCH_MAX_RECORDS], *col_rec[2 + 2 * BENCH_MAX_RECORDS]; /* NULL: the default */
        char col_name[2 + 2 * BENCH_MAX_RECORDS][16];
        printf("# D=%d:", Ds[di]);
        for (int v = 0; v < nvar; v++) printf(" v%d %s%s", v, recs[v]->name, v + 1 < nvar ? "," : "");
        printf("\n");
        for (int i = 0; i < ncol; i++) {
            const int det = i == 0 || i >= 2 + nvar;
            col_cfg[i] = det ? "bwd-deterministic" : "bwd-atomic";
            col_rec[i] = i < 2 ? NULL : recs[(i - 2) % nvar]->name;
            if (i < 2) snprintf(col_name[i], sizeof col_name[i], "%s", det ? "det" : "atom");
            else snprintf(col_name[i], sizeof col_name[i], "%s_v%d", det ? "det" : "atom", (i - 2) % nvar);
        }
        printf("%4s %6s %3s %3s %8s", "D", "L", "B", "H", "fwd_ms");
        for (int i = 0; i < ncol; i++) printf(" %9s", col_name[i]);
        printf(" %9s %9s %9s\n", "TF/s_det", "TF/s_atom", "mat");
        for (int64_t L = minl; L <= maxl; L *= 2) {
            if (only_d && only_l != L) continue;
            fw_case c = fw_case_default();
            c.batch = 16384 / L; c.heads = c.kv_heads = 2048 / Ds[di]; c.seqlen_q = c.seqlen_k = L;
            c.head_dim = Ds[di]; c.dtype = bench_dt; c.device.kind = FW_DEVICE_CUDA; c.device.index = 0;
            c.want_lse = 1; c.params.causal = 1; c.seed = 7;
            fw_run r;
            char msg[512];
            if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) { printf("setup failed: %s\n", msg); failed++; continue; }
            fw_context *ctx = NULL;
            if (fw_context_create(&ctx) != FW_OK) exit(2);
            double fwd_ms = 0, bwd_ms[2 + 2 * BENCH_MAX_RECORDS] = {0};
            fw_status st = fw_run_forward(&r, ctx);
            if (st == FW_OK) st = fw_run_time(&r, ctx, 2, reps, &fwd_ms);
            if (st != FW_OK) { printf("forward failed: %s\n", fw_context_last_error(ctx)); failed++; }
            const size_t es = fw_dtype_size(c.dtype);
            void *d_do = dmalloc(r.o_elems * es), *d_dq = dmalloc(r.q_elems * es);
            void *d_dk = dmalloc(r.kv_elems * es), *d_dv = dmalloc(r.kv_elems * es);
            dcopy(d_do, r.host_q, r.o_elems * es, 1); /* random values, never zeros */
            fw_tensor tdo = r.o, tdq = r.q, tdk = r.k, tdv = r.v;
            tdo.data = d_do; tdq.data = d_dq; tdk.data = d_dk; tdv.data = d_dv;
            fw_problem p;
            char err[512] = "";
            if (st == FW_OK)
                st = fw_validate_backward(&r.q, &r.k, &r.v, &r.o, r.lse, &tdo, &tdq, &tdk, &tdv, &c.params, &p, err, sizeof err);
            double *t = (double *)malloc((size_t)reps * sizeof(double));
            for (int mode = 0; mode < ncol && st == FW_OK; mode++) {
                set_bwd_config(col_rec[mode]);
                st = time_backward(&p, col_cfg[mode], reps, t, &bwd_ms[mode], err, sizeof err);
                if (st != FW_OK) { printf("backward failed: %s\n", err); failed++; break; }
            }
            set_bwd_config(NULL);
            const double mat_ms = st == FW_OK ? bench_mat(&p, reps, t) : -1.0;
            const double f = fw_run_flops(&r);
            if (st == FW_OK) {
                printf("%4d %6lld %3lld %3lld %8.3f", Ds[di], (long long)L, (long long)c.batch, (long long)c.heads, fwd_ms);
                for (int i = 0; i < ncol; i++) printf(" %9.3f", bwd_ms[i]);
                printf(" %9.1f %9.1f", 3.5 * f / ((fwd_ms + bwd_ms[0]) * 1e-3) / 1e12,
                       3.5 * f / ((fwd_ms + bwd_ms[1]) * 1e-3) / 1e12);
            }
            if (st == FW_OK && mat_ms >= 0) printf(" %9.3f\n", mat_ms);
            else if (st == FW_OK) printf(" %9s\n", "-");
            fflush(stdout);
            free(t);
            dfree(d_do); dfree(d_dq); dfree(d_dk); dfree(d_dv);
            fw_context_destroy(ctx);
            fw_run_free(&r);
        }
    }
}

int main(int argc, char **argv)
{
    fw_knobs_read(&test_knobs);
    int quick = 0, bench_reps = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--cpu")) use_cpu = 1;
        else if (!strcmp(argv[i], "--list-variants")) {
            for (int r = 0; r < fw_bwd_nrecords; r++)
                printf("%d %s %s\n", fw_bwd_records[r].d, fw_bwd_records[r].arch == 90 ? "sm90a" : "sm80",
                       fw_bwd_records[r].name);
            return 0;
        }
        else if (!strcmp(argv[i], "--bench")) bench_reps = i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9' ? atoi(argv[++i]) : 5;
        else { fprintf(stderr, "usage: gpu_backward [--quick] [--cpu] [--bench REPS] [--list-variants]\n"); return 2; }
    }
    if (!use_cpu && fw_cuda_device_count() < 1) {
        printf("gpu_backward: skipped (no CUDA device)\n");
        return 77;
    }
    const char *skip_api = getenv("FW_BWD_SKIP_API");
    const int modes = (skip_api && !strcmp(skip_api, "1")) ? 1 | 2 | 8 | 16 : 63;
    const fw_dtype dts[3] = {FW_F32, FW_F16, FW_BF16};
    const int64_t U = FW_WINDOW_UNLIMITED;
    if (bench_reps > 0 || (argc > 1 && !strcmp(argv[argc - 1], "--bench"))) {
        if (bench_reps < 1) bench_reps = 5;
        if (use_cpu) { fprintf(stderr, "--bench needs the GPU\n"); return 2; }
        bench(bench_reps);
    } else if (quick) {
        const bcase q1 = {1, 4, 2, 70, 90, 64, 1, U, U, 0, 0};
        const bcase q2 = {1, 2, 1, 33, 47, 40, 0, 5, 9, 1, 8};
        run_case(&q1, FW_F16, modes, 1);
        run_case(&q2, FW_BF16, modes, 2);
        run_case(&q2, FW_F32, 3 | 16, 3);
    } else {
        const bcase cs[] = {
            /* B  H Hkv   Lq    Lk    D causal wl  wr bshd pad */
            {1, 2, 2, 113, 203, 40, 0, U, U, 0, 0},
            {1, 2, 2, 113, 203, 64, 1, U, U, 0, 0},
            {2, 8, 2, 128, 217, 128, 1, U, U, 0, 0},   /* GQA 4:1 */
            {1, 2, 2, 1023, 1024, 64, 1, U, U, 0, 0},
            {1, 2, 2, 1023, 1024, 128, 0, U, U, 0, 0},
            {1, 2, 2, 239, 1, 64, 0, U, U, 0, 0},
            {1, 2, 2, 1, 239, 64, 1, U, U, 0, 0},
            {1, 2, 2, 239, 1, 40, 1, U, U, 1, 0},      /* causal Lq > Lk: rows that see no key */
            {2, 4, 1, 200, 300, 64, 1, U, U, 0, 0},    /* MQA */
            {1, 4, 2, 300, 300, 64, 0, 32, 8, 0, 0},   /* sliding window */
            {1, 4, 4, 217, 128, 128, 1, U, U, 1, 8},   /* bshd, padded rows, Lq > Lk causal */
            {1, 2, 2, 128, 113, 40, 0, U, U, 1, 8},    /* bshd padded, D 40 */
            {1, 2, 1, 100, 150, 256, 1, U, U, 0, 0},   /* D 256 bucket */
            {1, 2, 2, 160, 160, 96, 0, U, U, 1, 0},    /* D 96 in the 128 bucket */
            {1, 1, 1, 40, 100, 64, 0, 3, 3, 0, 0},     /* keys nobody sees: zero dk/dv */
            {2, 4, 2, 513, 1000, 80, 1, U, U, 0, 0},   /* D 80 (128 bucket), GQA, causal Lq < Lk */
            {1, 2, 2, 257, 257, 32, 0, 64, 0, 1, 0},   /* left window only, D 32, bshd */
            {1, 2, 2, 64, 640, 8, 0, U, U, 0, 0},      /* D 8 */
            {1, 3, 3, 700, 500, 128, 1, 100, U, 1, 8}, /* causal + left window, Lq > Lk, padded bshd */
        };
        const size_t ncs = sizeof cs / sizeof cs[0];
        for (size_t i = 0; i < ncs; i++)
            for (int d = 0; d < 3; d++) run_case(&cs[i], dts[d], modes, 100 + 3 * i + (uint64_t)d);
        const char *sweep = getenv("FW_BWD_TC_SWEEP");
        for (int ri = 0; sweep && !strcmp(sweep, "1") && !use_cpu && ri < fw_bwd_nrecords; ri++) {
            /* every tensor-core record, defaults included (they differ per mode), on its head dim's cases */
            const fw_bwd_record *rec = &fw_bwd_records[ri];
            if (rec->kernel == FW_BWD_CORES) continue;
            set_bwd_config(rec->name);
            printf("-- tensor-core record %s (head dim %d)\n", rec->name, rec->d);
            for (size_t i = 0; i < ncs; i++)
                if (cs[i].D <= 128 && cs[i].D % 8 == 0 && fw_bwd_padded_dim(cs[i].D) == rec->d)
                    for (int d = 1; d < 3; d++) run_case(&cs[i], dts[d], 3, 500 + 3 * i + (uint64_t)d);
            set_bwd_config(NULL);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
#endif
