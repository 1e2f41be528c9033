/* GPU test of the serving calls (ragged batches, KV caches, decode) on cuda-flash (f16, bf16) and
 * cuda-flash-f32, through the public API, against cpu-ref run through the public API on host copies of
 * the same inputs.
 *
 *   gpu_serving           ragged batches (lengths 0, 1, primes, one long among short; ragged prefill on
 *                         the Hopper wgmma kernel by default and by name, with a neighbouring sequence's
 *                         keys and values Inf / NaN, which must not reach any output), decode Lq = 1
 *                         and chunked prefill, contiguous and paged caches (page sizes 1, 16, 256,
 *                         shuffled tables), append (the caches compared bit for bit), a cache grown over
 *                         many appends against one dense forward, GQA 1..16, head dims 40..256, causal
 *                         and windows, LSE in both layouts, f16/bf16/f32, split-KV forced on and off
 *                         (FW_CUDA_FLASH_CONFIG), dense decode shapes, a CUDA graph captured once and
 *                         replayed with new lengths and tables, and out-of-range device values (no
 *                         fault, nothing written outside the tensors, the Hopper ragged kernel too;
 *                         refused by name with fw_context_set_check_device_values); paged decode against a float64
 *                         reference here (gpu_serving_pages.h): page sizes 1, 3, 12, 16, 24, 48, 256 at
 *                         head dims 64, 128, 256, table entries outside the pool masked key by key, and
 *                         pages more than 4 GiB apart; ragged batches and dense decode shapes at head dims
 *                         that are not multiples of 8 (staged), and the refusals of a KV-cache call at such
 *                         a head dim and of a ragged one under a context workspace (gpu_serving_headdims.h).
 *   gpu_serving --quick   a few of each (for compute-sanitizer memcheck / racecheck).
 * Outputs are poisoned (NaN) before every call, so every element must be written. Exit 77 without a GPU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv */
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "flashwatt_internal.h"
#include "flashwatt.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define MAXB 80
enum { K_VARLEN, K_CACHE, K_DENSE };

typedef struct sv_case {
    fw_dtype dtype;
    int kind, B, H, Hkv, D;
    int lq[MAXB], lk[MAXB]; /* varlen: per sequence; cache: new queries and cache_seqlens; dense: [0] */
    int packed_q;           /* cache: ragged new queries (cu_seqlens_q) */
    int page_size;          /* cache: 0 = contiguous */
    int capacity;           /* cache: keys a sequence holds */
    int append, causal;
    int64_t wl, wr;
    float scale;
    const char *config;     /* FW_CUDA_FLASH_CONFIG for the GPU call, or NULL */
    int poison_seq;         /* varlen: 1 + a sequence without queries whose keys are +Inf and values NaN; 0: none */
    uint64_t seed;
} sv_case;

#ifdef FW_HAVE_CUDA
static uint64_t rng_state;
static float urand(void) /* [-1, 1) */
{
    rng_state += 0x9e3779b97f4a7c15ull;
    uint64_t z = rng_state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (float)((z ^ (z >> 31)) >> 40) / 8388608.0f - 1.0f;
}
static int irand(int n) { return (int)((urand() + 1.0f) * 0.5f * (float)n) % (n > 0 ? n : 1); }

static size_t esize(fw_dtype t) { return t == FW_F32 ? 4 : 2; }
static float get(const void *p, fw_dtype t, size_t i) { return fw_load_f32(p, t, (int64_t)i); }
static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}
static void *rand_buf(fw_dtype t, size_t n)
{
    void *p = xmalloc(n * esize(t));
    for (size_t i = 0; i < n; i++) {
        const float x = urand();
        if (t == FW_F32) ((float *)p)[i] = x;
        else ((uint16_t *)p)[i] = t == FW_F16 ? fw_f32_to_f16(x) : fw_f32_to_bf16(x);
    }
    return p;
}
static void *to_dev(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); exit(2); }
    if (h && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) { fprintf(stderr, "copy failed\n"); exit(2); }
    return d;
}
static void from_dev(void *h, const void *d, size_t bytes)
{
    if (cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) { fprintf(stderr, "copy back failed\n"); exit(2); }
}

/* All buffers of one case, on the host (h) and the device (d). */
typedef struct sv_bufs {
    int total_q, total_k, Lq, num_pages, pages_per_seq, bt_stride;
    size_t nq, nk, nkn, no, nlse; /* elements */
    void *q, *k, *v, *kn, *vn;    /* host inputs (k, v: also the cache the reference appends into) */
    int32_t cu_q[MAXB + 1], cu_k[MAXB + 1], seqlens[MAXB], *bt;
    void *dq, *dk, *dv, *dkn, *dvn, *do_, *dcu_q, *dcu_k, *dseq, *dbt;
    float *dlse;
} sv_bufs;

static int max_of(const int *x, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static void bufs_make(const sv_case *c, sv_bufs *b)
{
    memset(b, 0, sizeof *b);
    rng_state = c->seed;
    const int packed = c->kind == K_VARLEN || (c->kind == K_CACHE && c->packed_q);
    b->Lq = packed ? 0 : c->lq[0];
    b->cu_q[0] = b->cu_k[0] = 0;
    for (int i = 0; i < c->B; i++) {
        b->cu_q[i + 1] = b->cu_q[i] + (packed ? c->lq[i] : b->Lq);
        b->cu_k[i + 1] = b->cu_k[i] + c->lk[i];
        b->seqlens[i] = c->lk[i];
    }
    b->total_q = b->cu_q[c->B];
    b->nq = (size_t)b->total_q * c->H * c->D;
    b->no = b->nq;
    b->nlse = (size_t)b->total_q * c->H;
    b->nkn = (size_t)b->total_q * c->Hkv * c->D;
    if (c->kind == K_VARLEN) b->nk = (size_t)b->cu_k[c->B] * c->Hkv * c->D;
    else if (c->kind == K_DENSE) b->nk = (size_t)c->B * c->lk[0] * c->Hkv * c->D;
    else if (!c->page_size) b->nk = (size_t)c->B * c->capacity * c->Hkv * c->D;
    else {
        b->pages_per_seq = c->capacity / c->page_size;
        b->num_pages = c->B * b->pages_per_seq + 3; /* spare pages nobody uses */
        b->bt_stride = b->pages_per_seq + 2;
        b->nk = (size_t)b->num_pages * c->page_size * c->Hkv * c->D;
        int *perm = (int *)xmalloc(sizeof(int) * (size_t)b->num_pages);
        for (int i = 0; i < b->num_pages; i++) perm[i] = i;
        for (int i = b->num_pages - 1; i > 0; i--) { const int j = irand(i + 1), t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
        b->bt = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)c->B * b->bt_stride);
        for (int s = 0; s < c->B; s++)
            for (int j = 0; j < b->bt_stride; j++)
                b->bt[s * b->bt_stride + j] = j < b->pages_per_seq ? perm[s * b->pages_per_seq + j] : -1;
        free(perm);
    }
    b->q = rand_buf(c->dtype, b->nq);
    b->k = rand_buf(c->dtype, b->nk);
    b->v = rand_buf(c->dtype, b->nk);
    if (c->kind == K_VARLEN && c->poison_seq) { /* nobody attends to these keys: no output may see them */
        const size_t row = (size_t)c->Hkv * c->D;
        for (size_t i = (size_t)b->cu_k[c->poison_seq - 1] * row; i < (size_t)b->cu_k[c->poison_seq] * row; i++) {
            fw_store_f32(b->k, c->dtype, (int64_t)i, INFINITY);
            fw_store_f32(b->v, c->dtype, (int64_t)i, NAN);
        }
    }
    if (c->append) {
        b->kn = rand_buf(c->dtype, b->nkn);
        b->vn = rand_buf(c->dtype, b->nkn);
    }
}

static void bufs_upload(const sv_case *c, sv_bufs *b)
{
    const size_t es = esize(c->dtype);
    b->dq = to_dev(b->q, b->nq * es);
    b->dk = to_dev(b->k, b->nk * es);
    b->dv = to_dev(b->v, b->nk * es);
    b->do_ = to_dev(NULL, b->no * es);
    b->dlse = (float *)to_dev(NULL, b->nlse * 4);
    b->dcu_q = to_dev(b->cu_q, sizeof(int32_t) * (size_t)(c->B + 1));
    b->dcu_k = to_dev(b->cu_k, sizeof(int32_t) * (size_t)(c->B + 1));
    b->dseq = to_dev(b->seqlens, sizeof(int32_t) * (size_t)c->B);
    if (b->bt) b->dbt = to_dev(b->bt, sizeof(int32_t) * (size_t)c->B * b->bt_stride);
    if (c->append) {
        b->dkn = to_dev(b->kn, b->nkn * es);
        b->dvn = to_dev(b->vn, b->nkn * es);
    }
}

static void bufs_free(sv_bufs *b)
{
    free(b->q); free(b->k); free(b->v); free(b->kn); free(b->vn); free(b->bt);
    void *d[] = {b->dq, b->dk, b->dv, b->dkn, b->dvn, b->do_, b->dcu_q, b->dcu_k, b->dseq, b->dbt, b->dlse};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) cudaFree(d[i]);
}

/* One call of the case's kind on the host (gpu = 0: host pointers, CPU) or the device copies. */
static fw_status sv_call(fw_context *ctx, const sv_case *c, sv_bufs *b, int gpu, void *o, float *lse)
{
    const fw_device dev = {gpu ? FW_DEVICE_CUDA : FW_DEVICE_CPU, 0};
    const fw_dtype t = c->dtype;
    const int packed = c->kind == K_VARLEN || (c->kind == K_CACHE && c->packed_q);
    const int64_t qB = packed ? 1 : c->B, qS = packed ? b->total_q : b->Lq;
    fw_tensor q = fw_tensor_bshd(gpu ? b->dq : b->q, t, dev, qB, c->H, qS, c->D);
    fw_tensor out = fw_tensor_bshd(o, t, dev, qB, c->H, qS, c->D);
    fw_attn_params prm = fw_attn_params_default();
    prm.causal = c->causal;
    prm.window_left = c->wl;
    prm.window_right = c->wr;
    prm.scale = c->scale;
    void *k = gpu ? b->dk : b->k, *v = gpu ? b->dv : b->v;
    if (c->kind == K_DENSE) {
        fw_tensor kt = fw_tensor_bshd(k, t, dev, c->B, c->Hkv, c->lk[0], c->D);
        fw_tensor vt = fw_tensor_bshd(v, t, dev, c->B, c->Hkv, c->lk[0], c->D);
        return fw_attention_forward(ctx, &q, &kt, &vt, &out, lse, &prm);
    }
    fw_varlen seqs;
    memset(&seqs, 0, sizeof seqs);
    seqs.batch = c->B;
    seqs.cu_seqlens_q = (const int32_t *)(gpu ? b->dcu_q : (void *)b->cu_q);
    seqs.max_seqlen_q = max_of(c->lq, c->B);
    if (c->kind == K_VARLEN) {
        seqs.cu_seqlens_k = (const int32_t *)(gpu ? b->dcu_k : (void *)b->cu_k);
        seqs.max_seqlen_k = max_of(c->lk, c->B);
        fw_tensor kt = fw_tensor_bshd(k, t, dev, 1, c->Hkv, b->cu_k[c->B], c->D);
        fw_tensor vt = fw_tensor_bshd(v, t, dev, 1, c->Hkv, b->cu_k[c->B], c->D);
        return fw_attention_varlen_forward(ctx, &q, &kt, &vt, &out, lse, &seqs, &prm);
    }
    fw_kv_cache cache;
    memset(&cache, 0, sizeof cache);
    cache.seqlens = (const int32_t *)(gpu ? b->dseq : (void *)b->seqlens);
    if (c->page_size) {
        cache.k = fw_tensor_bshd(k, t, dev, b->num_pages, c->Hkv, c->page_size, c->D);
        cache.v = fw_tensor_bshd(v, t, dev, b->num_pages, c->Hkv, c->page_size, c->D);
        cache.block_table = (const int32_t *)(gpu ? b->dbt : (void *)b->bt);
        cache.max_pages_per_seq = b->pages_per_seq;
        cache.block_table_stride = b->bt_stride;
    } else {
        cache.k = fw_tensor_bshd(k, t, dev, c->B, c->Hkv, c->capacity, c->D);
        cache.v = fw_tensor_bshd(v, t, dev, c->B, c->Hkv, c->capacity, c->D);
    }
    fw_tensor kn, vn;
    if (c->append) {
        kn = fw_tensor_bshd(gpu ? b->dkn : b->kn, t, dev, qB, c->Hkv, qS, c->D);
        vn = fw_tensor_bshd(gpu ? b->dvn : b->vn, t, dev, qB, c->Hkv, qS, c->D);
    }
    return fw_attention_kvcache_forward(ctx, &q, &cache, c->append ? &kn : NULL, c->append ? &vn : NULL, &out, lse,
                                        packed ? &seqs : NULL, &prm);
}

static fw_context *make_ctx(const char *backend, const char *config)
{
    if (config) setenv("FW_CUDA_FLASH_CONFIG", config, 1);
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) { fprintf(stderr, "fw_context_create failed\n"); exit(2); }
    if (config) unsetenv("FW_CUDA_FLASH_CONFIG");
    if (fw_context_set_backend(ctx, backend) != FW_OK) { fprintf(stderr, "no backend %s\n", backend); exit(2); }
    return ctx;
}

static double tol_of(fw_dtype t) { return t == FW_F32 ? 2e-5 : t == FW_F16 ? 3e-3 : 1.6e-2; }

/* Compares the device result (o, lse host images) with the reference's, every row of every sequence. */
static int compare(const sv_case *c, const sv_bufs *b, const void *o, const float *lse, const void *o_ref,
                   const float *lse_ref, char *why, size_t len)
{
    const int packed = c->kind == K_VARLEN || (c->kind == K_CACHE && c->packed_q);
    const double tol = tol_of(c->dtype), lse_tol = c->dtype == FW_F32 ? 1e-4 : 2e-3;
    double worst = 0, worst_lse = 0;
    for (int s = 0; s < c->B; s++)
        for (int i = 0; i < b->cu_q[s + 1] - b->cu_q[s]; i++)
            for (int h = 0; h < c->H; h++) {
                const size_t row = (size_t)(b->cu_q[s] + i) * c->H + h;
                for (int d = 0; d < c->D; d++) {
                    const float x = get(o, c->dtype, row * c->D + d), y = get(o_ref, c->dtype, row * c->D + d);
                    const double e = fabs((double)x - y);
                    if (!(e <= tol)) {
                        snprintf(why, len, "o[seq %d, row %d, head %d, %d] = %g, reference %g", s, i, h, d, x, y);
                        return 0;
                    }
                    worst = e > worst ? e : worst;
                }
                const size_t li = packed ? (size_t)h * b->total_q + b->cu_q[s] + i
                                         : ((size_t)s * c->H + h) * b->Lq + i;
                const float x = lse[li], y = lse_ref[li];
                const int same_inf = isinf(x) && isinf(y) && (x < 0) == (y < 0);
                if (!same_inf && !(fabs((double)x - y) <= lse_tol)) {
                    snprintf(why, len, "lse[seq %d, row %d, head %d] = %g, reference %g", s, i, h, x, y);
                    return 0;
                }
                if (!same_inf && fabs((double)x - y) > worst_lse) worst_lse = fabs((double)x - y);
            }
    snprintf(why, len, "max |err| %.2e (tol %.1e), lse %.2e", worst, tol, worst_lse);
    return 1;
}

static void label(const sv_case *c, char *buf, size_t len)
{
    static const char *kinds[] = {"varlen", "cache", "dense"};
    int n = snprintf(buf, len, "%s %s B%d H%d/%d D%d lq", kinds[c->kind], fw_dtype_name(c->dtype), c->B, c->H, c->Hkv, c->D);
    for (int i = 0; i < c->B && i < 6 && n < (int)len; i++) n += snprintf(buf + n, len - n, "%s%d", i ? "," : "=", c->lq[i]);
    if (n < (int)len) n += snprintf(buf + n, len - n, "%s lk", c->B > 6 ? ",..." : "");
    for (int i = 0; i < c->B && i < 6 && n < (int)len; i++) n += snprintf(buf + n, len - n, "%s%d", i ? "," : "=", c->lk[i]);
    if (n < (int)len)
        snprintf(buf + n, len - n, "%s%s%s%s%s wl%lld wr%lld%s%s%s", c->B > 6 ? ",..." : "",
                 c->kind == K_CACHE ? (c->page_size ? " paged" : " contiguous") : "", c->packed_q ? " ragged-q" : "",
                 c->append ? " append" : "", c->causal ? " causal" : "", (long long)c->wl, (long long)c->wr,
                 c->config ? " cfg=" : "", c->config ? c->config : "", c->poison_seq ? " Inf/NaN neighbour" : "");
    if (c->page_size) { size_t m = strlen(buf); snprintf(buf + m, len - m, " ps%d cap%d", c->page_size, c->capacity); }
}

/* Runs one case: the reference on the host, the backend on the GPU, compares outputs, LSE and (append)
 * the whole cache bit for bit. */
static void run_case(const sv_case *c)
{
    char name[320], why[256];
    label(c, name, sizeof name);
    const char *backend = c->dtype == FW_F32 ? "cuda-flash-f32" : "cuda-flash";
    sv_bufs b;
    bufs_make(c, &b);
    bufs_upload(c, &b); /* before the reference appends into the host cache */
    const size_t es = esize(c->dtype);
    void *o_ref = xmalloc(b.no * es), *o = xmalloc(b.no * es);
    float *lse_ref = (float *)xmalloc(b.nlse * 4), *lse = (float *)xmalloc(b.nlse * 4);
    fw_context *ref = make_ctx("cpu-ref", NULL), *gpu = make_ctx(backend, c->config);
    fw_status st = sv_call(ref, c, &b, 0, o_ref, lse_ref);
    if (st != FW_OK) {
        fwt_case(0, "%s: cpu-ref failed: %s", name, fw_context_last_error(ref));
        goto done;
    }
    cudaMemset(b.do_, 0xff, b.no * es); /* NaN in every dtype */
    cudaMemset(b.dlse, 0xff, b.nlse * 4);
    st = sv_call(gpu, c, &b, 1, b.do_, b.dlse);
    const cudaError_t ce = cudaDeviceSynchronize();
    if (st != FW_OK || ce != cudaSuccess) {
        fwt_case(0, "%s: %s: %s %s", name, backend, fw_context_last_error(gpu), cudaGetErrorString(ce));
        if (ce != cudaSuccess) exit(1); /* the context is lost */
        goto done;
    }
    if (strcmp(fw_context_last_backend(gpu), backend) != 0) {
        fwt_case(0, "%s: ran on %s, not %s", name, fw_context_last_backend(gpu), backend);
        goto done;
    }
    from_dev(o, b.do_, b.no * es);
    from_dev(lse, b.dlse, b.nlse * 4);
    int ok = compare(c, &b, o, lse, o_ref, lse_ref, why, sizeof why);
    if (ok && c->append) { /* the device cache after the append equals the reference's, bit for bit */
        void *kc = xmalloc(b.nk * es), *vc = xmalloc(b.nk * es);
        from_dev(kc, b.dk, b.nk * es);
        from_dev(vc, b.dv, b.nk * es);
        if (memcmp(kc, b.k, b.nk * es) || memcmp(vc, b.v, b.nk * es)) {
            ok = 0;
            snprintf(why, sizeof why, "the cache after the append differs from the reference's");
        }
        free(kc);
        free(vc);
    }
    fwt_case(ok, "%s: %s", name, why);
done:
    fw_context_destroy(ref);
    fw_context_destroy(gpu);
    free(o_ref); free(o); free(lse_ref); free(lse);
    bufs_free(&b);
}

#include "gpu_serving_pages.h"
#include "gpu_serving_cases.h"
#include "gpu_serving_headdims.h"

int main(int argc, char **argv)
{
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    if (fw_cuda_device_count() < 1) {
        printf("gpu_serving: no CUDA device, skipped\n");
        return 77;
    }
    const double t0 = fw_now_seconds();
    run_suite(quick);
    staged_head_dims(quick);
    return fwt_finish("gpu_serving", fw_now_seconds() - t0);
}
#else
int main(void)
{
    printf("gpu_serving: built without CUDA, skipped\n");
    return 77;
}
#endif
