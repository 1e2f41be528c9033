/* The harness: cases, the random generator, inputs in any layout on any device, poison, the
 * forward reference and the comparison against the numerics contract (fw_harness.h). */
#include "fw_harness.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fw_harness_impl.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

fw_case fw_case_shape(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seqlen_q, int64_t seqlen_k,
                      int64_t head_dim, fw_dtype dtype, uint64_t seed)
{
    fw_case c = fw_case_default();
    c.batch = batch; c.heads = heads; c.kv_heads = kv_heads;
    c.seqlen_q = seqlen_q; c.seqlen_k = seqlen_k; c.head_dim = head_dim;
    c.dtype = dtype;
    c.want_lse = 1;
    c.seed = seed;
    return c;
}

const char *fw_case_label(const fw_case *c, char *buf, size_t len)
{
    if (c->kind != FW_CASE_DENSE) return fwh_serving_label(c, buf, len);
    const fw_attn_params *p = &c->params;
    snprintf(buf, len, "B%lld H%lld/%lld Lq%lld Lk%lld D%lld %s%s%s %s pad%d%s wl%lld wr%lld%s seed%llu",
             (long long)c->batch, (long long)c->heads, (long long)c->kv_heads, (long long)c->seqlen_q,
             (long long)c->seqlen_k, (long long)c->head_dim, fw_dtype_name(c->dtype),
             c->precision != FW_PRECISION_EXACT ? "/" : "",
             c->precision != FW_PRECISION_EXACT ? fw_precision_name(c->precision) : "",
             c->layout_bshd ? "bshd" : "bhsd", c->pad, p->causal ? " causal" : "",
             (long long)p->window_left, (long long)p->window_right, c->want_lse ? " lse" : "",
             (unsigned long long)c->seed);
    return buf;
}

int fw_device_parse(const char *s, fw_device *out)
{
    if (!strcmp(s, "cpu")) { out->kind = FW_DEVICE_CPU; out->index = 0; return 0; }
    if (!strcmp(s, "cuda") || !strcmp(s, "gpu")) { out->kind = FW_DEVICE_CUDA; out->index = 0; return 0; }
    if (!strncmp(s, "cuda:", 5) && s[5]) {
        char *end;
        errno = 0;
        long i = strtol(s + 5, &end, 10);
        if (errno || *end || i < 0 || i > 1023) return -1;
        out->kind = FW_DEVICE_CUDA;
        out->index = (int)i;
        return 0;
    }
    return -1;
}

fw_case fw_case_default(void)
{
    fw_case c;
    memset(&c, 0, sizeof c);
    c.batch = c.heads = c.kv_heads = 1;
    c.seqlen_q = c.seqlen_k = 128;
    c.head_dim = 64;
    c.dtype = FW_F32;
    c.device.kind = FW_DEVICE_CPU;
    c.params = fw_attn_params_default();
    c.seed = 1;
    return c;
}

/* ---- random numbers: splitmix64 + Box-Muller, reproducible from the seed -------------------- */
uint64_t fw_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double fw_rng_uniform(uint64_t *s) { return ((double)(fw_rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

float fw_rng_normal(uint64_t *s)
{
    double u1 = fw_rng_uniform(s), u2 = fw_rng_uniform(s);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t fw_rng_below(uint64_t *s, uint64_t n) { return fw_rng_next(s) % n; }

/* ---- the numerics contract (fw_harness.h) --------------------------------------------------- */
double fw_contract_output_tol(fw_dtype dtype, fw_precision precision, double max_abs_v, double lowp_err)
{
    if (dtype != FW_F32) return 2.0 * lowp_err + 1e-5;
    const double v = max_abs_v > 0 ? max_abs_v : 1.0;
    switch (precision) {
    case FW_PRECISION_TF32: return 5e-3 * v;
    case FW_PRECISION_BF16: return 8e-3 * v;
    default: return 1e-5 * v; /* exact and 3xtf32 */
    }
}

double fw_contract_lse_tol(fw_dtype dtype, fw_precision precision)
{
    if (dtype != FW_F32) return 2e-2;
    return precision == FW_PRECISION_TF32 || precision == FW_PRECISION_BF16 ? 5e-2 : 1e-4;
}

double fw_contract_grad_tol(fw_dtype dtype, fw_precision precision, double ref_max, double M, double lowp_err)
{
    if (dtype != FW_F32) return 1e-4 * ref_max + 1e-5 * M + 1e-6 + 3.0 * lowp_err;
    if (precision == FW_PRECISION_TF32) /* dS = dP - delta with dP in tf32 and delta in f32: vanishing gradients
                                           * show noise of a tf32 rounding of |dP| */
        return 5e-3 * ref_max + 1e-3 * M + 1e-6;
    return 1e-4 * ref_max + 1e-5 * M + 1e-6;
}

/* ---- layout ------------------------------------------------------------------------------- */
fw_tensor fwh_describe(void *data, const fw_case *c, int64_t batch, int64_t heads, int64_t seq, size_t *elems)
{
    const int64_t row = c->head_dim + c->pad;
    fw_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data; t.dtype = c->dtype; t.device = c->device;
    t.size[0] = batch; t.size[1] = heads; t.size[2] = seq; t.size[3] = c->head_dim;
    t.stride[3] = 1;
    if (c->layout_bshd) {
        t.stride[1] = row; t.stride[2] = heads * row; t.stride[0] = seq * heads * row;
    } else {
        t.stride[2] = row; t.stride[1] = seq * row; t.stride[0] = heads * seq * row;
    }
    *elems = (size_t)(batch * heads * seq * row);
    return t;
}

int64_t fwh_offset(const fw_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d)
{
    return b * t->stride[0] + h * t->stride[1] + s * t->stride[2] + d;
}

void fwh_fill_random(void *buf, fw_dtype t, size_t n, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) fw_store_f32(buf, t, (int64_t)i, fw_rng_normal(state));
}

void fwh_poison_host(void *buf, fw_dtype t, size_t n)
{
    if (t == FW_F32) {
        uint32_t *p = (uint32_t *)buf;
        for (size_t i = 0; i < n; i++) p[i] = FWH_POISON_F32;
    } else {
        uint16_t *p = (uint16_t *)buf;
        const uint16_t v = t == FW_F16 ? FWH_POISON_16 : FWH_POISON_BF16;
        for (size_t i = 0; i < n; i++) p[i] = v;
    }
}

int fwh_is_poison(const void *buf, fw_dtype t, int64_t i)
{
    if (t == FW_F32) return ((const uint32_t *)buf)[i] == FWH_POISON_F32;
    return ((const uint16_t *)buf)[i] == (t == FW_F16 ? FWH_POISON_16 : FWH_POISON_BF16);
}

/* ---- device memory ------------------------------------------------------------------------ */
int fwh_on_gpu(const fw_run *r) { return r->c.device.kind == FW_DEVICE_CUDA; }

#ifdef FW_HAVE_CUDA
#define CUDA_OR_FAIL(call)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "harness: %s failed: %s\n", #call, cudaGetErrorString(e_));            \
            return FW_ERR_DEVICE;                                                                  \
        }                                                                                          \
    } while (0)
#endif

fw_status fwh_dev_alloc(const fw_run *r, void **p, size_t bytes)
{
    if (!fwh_on_gpu(r)) {
        *p = malloc(bytes);
        return *p ? FW_OK : FW_ERR_OUT_OF_MEMORY;
    }
#ifdef FW_HAVE_CUDA
    CUDA_OR_FAIL(cudaSetDevice(r->c.device.index));
    CUDA_OR_FAIL(cudaMalloc(p, bytes));
    return FW_OK;
#else
    *p = NULL;
    return FW_ERR_NOT_IMPLEMENTED;
#endif
}

void fwh_dev_free(const fw_run *r, void *p)
{
    if (!p) return;
    if (!fwh_on_gpu(r)) { free(p); return; }
#ifdef FW_HAVE_CUDA
    cudaFree(p);
#endif
}

fw_status fwh_copy(const fw_run *r, void *dst, const void *src, size_t bytes, int to_device)
{
    if (dst == src) return FW_OK;
    if (!fwh_on_gpu(r)) { memcpy(dst, src, bytes); return FW_OK; }
#ifdef FW_HAVE_CUDA
    CUDA_OR_FAIL(cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
    return FW_OK;
#else
    (void)to_device;
    return FW_ERR_NOT_IMPLEMENTED;
#endif
}

fw_status fwh_sync(const fw_run *r)
{
    if (!fwh_on_gpu(r)) return FW_OK;
#ifdef FW_HAVE_CUDA
    CUDA_OR_FAIL(cudaDeviceSynchronize());
    CUDA_OR_FAIL(cudaGetLastError());
#endif
    return FW_OK;
}

/* ---- allocation ---------------------------------------------------------------------------- */
fw_status fwh_check_elems(const char *name, int64_t n0, int64_t n1, int64_t n2, int64_t row, fw_dtype t, char *msg,
                          size_t len)
{
    const double bytes = (double)n0 * (double)n1 * (double)n2 * (double)row * (double)fw_dtype_size(t);
    if (bytes > 0x1p62) {
        snprintf(msg, len, "%s would be %lld x %lld x %lld x %lld elements (%.3g bytes), more than 2^62 bytes", name,
                 (long long)n0, (long long)n1, (long long)n2, (long long)row, bytes);
        return FW_ERR_INVALID_SHAPE;
    }
    return FW_OK;
}

/* A case's sizes, before any buffer is sized from them: each dimension within the library's 1..2^31 - 1,
 * padding 0..2^20 and each dense tensor below 2^62 bytes (a product that wrapped sized buffers smaller
 * than the loops that fill them). The serving geometry is checked where it is planned. */
static fw_status check_case_sizes(const fw_case *c, char *msg, size_t len)
{
    const int64_t dims[6] = {c->batch, c->heads, c->kv_heads, c->seqlen_q, c->seqlen_k, c->head_dim};
    static const char *names[6] = {"batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "head_dim"};
    for (int i = 0; i < 6; i++) {
        if (c->kind != FW_CASE_DENSE && (i == 0 || i == 3 || i == 4)) continue; /* from the sequences */
        if (dims[i] < 1 || dims[i] > ((int64_t)1 << 31) - 1) {
            snprintf(msg, len, "%s is %lld; it must be 1..2^31 - 1", names[i], (long long)dims[i]);
            return FW_ERR_INVALID_SHAPE;
        }
    }
    if (c->pad < 0 || c->pad > (1 << 20)) {
        snprintf(msg, len, "padding of %d elements per row is outside 0..2^20", c->pad);
        return FW_ERR_INVALID_SHAPE;
    }
    if (c->kind != FW_CASE_DENSE) return FW_OK;
    const int64_t row = c->head_dim + c->pad;
    fw_status st = fwh_check_elems("q", c->batch, c->heads, c->seqlen_q, row, c->dtype, msg, len);
    if (st == FW_OK) st = fwh_check_elems("k", c->batch, c->kv_heads, c->seqlen_k, row, c->dtype, msg, len);
    return st;
}

fw_status fw_run_alloc(fw_run *r, const fw_case *c, char *msg, size_t len)
{
    memset(r, 0, sizeof *r);
    r->c = *c;
    if (c->device.kind == FW_DEVICE_CUDA && fw_cuda_device_count() <= c->device.index) {
        snprintf(msg, len, "no CUDA device %d here (%d visible)", c->device.index, fw_cuda_device_count());
        return FW_ERR_DEVICE_MISMATCH;
    }
    fw_status st = check_case_sizes(c, msg, len);
    if (st != FW_OK) return st;
    if (c->kind != FW_CASE_DENSE) return fwh_serving_alloc(r, c, msg, len);
    const size_t es = fw_dtype_size(c->dtype);
    fw_tensor tq = fwh_describe(NULL, c, c->batch, c->heads, c->seqlen_q, &r->q_elems);
    fw_tensor tk = fwh_describe(NULL, c, c->batch, c->kv_heads, c->seqlen_k, &r->kv_elems);
    r->o_elems = r->q_elems;
    r->host_q = malloc(r->q_elems * es);
    r->host_k = malloc(r->kv_elems * es);
    r->host_v = malloc(r->kv_elems * es);
    r->host_o = malloc(r->o_elems * es);
    const size_t lse_n = (size_t)(c->batch * c->heads * c->seqlen_q);
    r->host_lse = (float *)malloc(lse_n * sizeof(float));
    if (!r->host_q || !r->host_k || !r->host_v || !r->host_o || !r->host_lse) {
        snprintf(msg, len, "out of host memory for the inputs");
        fw_run_free(r);
        return FW_ERR_OUT_OF_MEMORY;
    }
    uint64_t seed = c->seed * 0x2545f4914f6cdd1dull + 17;
    fwh_fill_random(r->host_q, c->dtype, r->q_elems, &seed);
    fwh_fill_random(r->host_k, c->dtype, r->kv_elems, &seed);
    fwh_fill_random(r->host_v, c->dtype, r->kv_elems, &seed);

    void *dq, *dk, *dv, *dout, *dlse = NULL;
    if (!fwh_on_gpu(r)) {
        dq = r->host_q; dk = r->host_k; dv = r->host_v; dout = r->host_o;
        if (c->want_lse) dlse = r->host_lse;
    } else {
        if ((st = fwh_dev_alloc(r, &dq, r->q_elems * es)) || (st = fwh_dev_alloc(r, &dk, r->kv_elems * es)) ||
            (st = fwh_dev_alloc(r, &dv, r->kv_elems * es)) || (st = fwh_dev_alloc(r, &dout, r->o_elems * es)) ||
            (c->want_lse && (st = fwh_dev_alloc(r, &dlse, lse_n * sizeof(float))))) {
            snprintf(msg, len, "device allocation failed (%s)", fw_status_string(st));
            r->q.data = NULL;
            fw_run_free(r);
            return st;
        }
    }
    r->q = fwh_describe(dq, c, c->batch, c->heads, c->seqlen_q, &r->q_elems);
    r->k = fwh_describe(dk, c, c->batch, c->kv_heads, c->seqlen_k, &r->kv_elems);
    r->v = fwh_describe(dv, c, c->batch, c->kv_heads, c->seqlen_k, &r->kv_elems);
    r->o = fwh_describe(dout, c, c->batch, c->heads, c->seqlen_q, &r->o_elems);
    r->lse = (float *)dlse;
    (void)tq; (void)tk;
    if ((st = fwh_copy(r, dq, r->host_q, r->q_elems * es, 1)) || (st = fwh_copy(r, dk, r->host_k, r->kv_elems * es, 1)) ||
        (st = fwh_copy(r, dv, r->host_v, r->kv_elems * es, 1))) {
        snprintf(msg, len, "copy of the inputs to the device failed");
        fw_run_free(r);
        return st;
    }
    st = fw_validate_forward(&r->q, &r->k, &r->v, &r->o, r->lse, &c->params, &r->problem, msg, len);
    if (st != FW_OK) fw_run_free(r);
    return st;
}

void fw_run_free(fw_run *r)
{
    if (r->c.kind != FW_CASE_DENSE) fwh_serving_free(r);
    if (fwh_on_gpu(r)) {
        fwh_dev_free(r, r->q.data); fwh_dev_free(r, r->k.data); fwh_dev_free(r, r->v.data);
        fwh_dev_free(r, r->o.data); fwh_dev_free(r, r->lse);
    }
    free(r->host_q); free(r->host_k); free(r->host_v); free(r->host_o); free(r->host_lse);
    free(r->ref_o); free(r->ref_lse); free(r->lowp_o);
    memset(r, 0, sizeof *r);
}

fw_status fw_run_set_input(fw_run *r, char which, int64_t b, int64_t h, int64_t s, int64_t d, float x)
{
    fw_tensor *t = which == 'q' ? &r->q : which == 'k' ? &r->k : &r->v;
    void *host = which == 'q' ? r->host_q : which == 'k' ? r->host_k : r->host_v;
    const int64_t off = fwh_offset(t, b, h, s, d);
    const size_t es = fw_dtype_size(r->c.dtype);
    fw_store_f32(host, r->c.dtype, off, x);
    r->have_ref = 0;
    return fwh_copy(r, (char *)t->data + off * (int64_t)es, (char *)host + off * (int64_t)es, es, 1);
}

fw_status fw_run_scale_inputs(fw_run *r, float q_factor, float k_factor)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    for (size_t i = 0; i < r->q_elems; i++)
        fw_store_f32(r->host_q, r->c.dtype, (int64_t)i, q_factor * fw_load_f32(r->host_q, r->c.dtype, (int64_t)i));
    for (size_t i = 0; i < r->kv_elems; i++)
        fw_store_f32(r->host_k, r->c.dtype, (int64_t)i, k_factor * fw_load_f32(r->host_k, r->c.dtype, (int64_t)i));
    r->have_ref = 0;
    fw_status st = fwh_copy(r, r->q.data, r->host_q, r->q_elems * es, 1);
    if (st == FW_OK) st = fwh_copy(r, r->k.data, r->host_k, r->kv_elems * es, 1);
    return st;
}

fw_status fw_run_poison(fw_run *r)
{
    if (r->c.kind != FW_CASE_DENSE) return fwh_serving_poison(r);
    const size_t es = fw_dtype_size(r->c.dtype);
    const size_t lse_n = (size_t)(r->c.batch * r->c.heads * r->c.seqlen_q);
    fwh_poison_host(r->host_o, r->c.dtype, r->o_elems);
    fwh_poison_host(r->host_lse, FW_F32, lse_n);
    fw_status st = fwh_copy(r, r->o.data, r->host_o, r->o_elems * es, 1);
    if (st == FW_OK && r->lse) st = fwh_copy(r, r->lse, r->host_lse, lse_n * sizeof(float), 1);
    return st;
}

fw_status fw_run_call(fw_run *r, fw_context *ctx)
{
    if (r->c.kind != FW_CASE_DENSE) return fwh_serving_call(r, ctx);
    return fw_attention_forward(ctx, &r->q, &r->k, &r->v, &r->o, r->lse, &r->c.params);
}

fw_status fw_run_forward(fw_run *r, fw_context *ctx)
{
    fw_status st = fw_run_call(r, ctx);
    if (st != FW_OK) return st;
    return fwh_sync(r);
}

fw_status fw_run_problem(const fw_run *r, fw_problem *p, char *msg, size_t len)
{
    if (r->c.kind != FW_CASE_DENSE) return fwh_serving_problem(r, p, msg, len);
    *p = r->problem;
    return FW_OK;
}

fw_status fw_run_supports(const fw_run *r, const char *name, char *why, size_t why_len)
{
    if (r->c.kind != FW_CASE_DENSE) return fwh_serving_supports(r, name, why, why_len);
    return fw_backend_supports(name, &r->q, &r->k, &r->v, &r->o, &r->c.params, why, why_len);
}

fw_status fw_run_sync(fw_run *r) { return fwh_sync(r); }

/* ---- reference ----------------------------------------------------------------------------- */

float *fwh_to_f32_bhsd(fw_dtype dt, const void *host, const fw_tensor *t)
{
    const int64_t B = t->size[0], H = t->size[1], S = t->size[2], D = t->size[3];
    float *out = (float *)malloc((size_t)(B * H * S * D) * sizeof(float));
    if (!out) return NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t s = 0; s < S; s++)
                for (int64_t d = 0; d < D; d++)
                    out[((b * H + h) * S + s) * D + d] = fw_load_f32(host, dt, fwh_offset(t, b, h, s, d));
    return out;
}

float fwh_round_to(fw_dtype t, float x)
{
    if (t == FW_F16) return fw_f16_to_f32(fw_f32_to_f16(x));
    if (t == FW_BF16) return fw_bf16_to_f32(fw_f32_to_bf16(x));
    return x;
}

/* The same attention done in the input dtype, as FlashAttention's tests do it with upcast=False:
 * S = Q·Kᵀ rounded to the dtype, scaled in the dtype, softmax in f32, P rounded to the dtype,
 * O = P·V accumulated in f32 and rounded to the dtype. p describes float32 host copies (any call kind,
 * through the per-sequence accessors); out has p's o strides. */
void fwh_lowp_attention(const fw_problem *p, fw_dtype t, float *out)
{
    const int64_t D = p->head_dim, Lk = p->seqlen_k > 0 ? p->seqlen_k : 1;
    const float *q = (const float *)p->q, *k = (const float *)p->k, *v = (const float *)p->v;
    const float scale = fwh_round_to(t, p->scale);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < p->batch * p->heads; bh++) {
        const int64_t b = bh / p->heads, h = bh % p->heads, hk = h / p->group;
        int64_t row0, lq;
        fw_seq_q(p, b, &row0, &lq);
        const int64_t lk = fw_seq_k_len(p, b);
        float *s = (float *)malloc((size_t)Lk * sizeof(float));
        for (int64_t i = 0; i < lq; i++) {
            const float *qi = q + fw_row_offset(p, p->q_stride, b, h, i);
            float *oi = out + fw_row_offset(p, p->o_stride, b, h, i);
            if (!s) { /* NaN rows make the tolerance NaN, so the comparison fails rather than guesses */
                for (int64_t d = 0; d < D; d++) oi[d] = NAN;
                continue;
            }
            int64_t lo, hi;
            fw_seq_key_range(p, lq, lk, i, &lo, &hi);
            float m = -INFINITY;
            for (int64_t j = lo; j < hi; j++) {
                const float *kj = k + fw_key_offset(p, p->k_stride, b, hk, j);
                float dot = 0;
                for (int64_t d = 0; d < D; d++) dot += qi[d] * kj[d];
                s[j] = fwh_round_to(t, fwh_round_to(t, dot) * scale);
                if (s[j] > m) m = s[j];
            }
            float l = 0;
            for (int64_t j = lo; j < hi; j++) { s[j] = expf(s[j] - m); l += s[j]; }
            for (int64_t d = 0; d < D; d++) oi[d] = 0;
            for (int64_t j = lo; j < hi; j++) {
                const float w = fwh_round_to(t, s[j] / l);
                const float *vj = v + fw_key_offset(p, p->v_stride, b, hk, j);
                for (int64_t d = 0; d < D; d++) oi[d] += w * vj[d];
            }
            for (int64_t d = 0; d < D; d++) oi[d] = fwh_round_to(t, oi[d]);
        }
        free(s);
    }
}

static fw_status compute_reference(fw_run *r)
{
    const fw_case *c = &r->c;
    fw_status st = FW_ERR_OUT_OF_MEMORY;
    float *q = fwh_to_f32_bhsd(c->dtype, r->host_q, &r->q);
    float *k = fwh_to_f32_bhsd(c->dtype, r->host_k, &r->k);
    float *v = fwh_to_f32_bhsd(c->dtype, r->host_v, &r->v);
    const size_t on = (size_t)(c->batch * c->heads * c->seqlen_q * c->head_dim);
    const size_t ln = (size_t)(c->batch * c->heads * c->seqlen_q);
    free(r->ref_o); free(r->ref_lse); free(r->lowp_o);
    r->ref_o = (float *)malloc(on * sizeof(float));
    r->ref_lse = (float *)malloc(ln * sizeof(float));
    r->lowp_o = NULL;
    fw_context *ctx = NULL;
    if (q && k && v && r->ref_o && r->ref_lse && fw_context_create(&ctx) == FW_OK) {
        const fw_device cpu = {FW_DEVICE_CPU, 0};
        fw_tensor tq = fw_tensor_bhsd(q, FW_F32, cpu, c->batch, c->heads, c->seqlen_q, c->head_dim);
        fw_tensor tk = fw_tensor_bhsd(k, FW_F32, cpu, c->batch, c->kv_heads, c->seqlen_k, c->head_dim);
        fw_tensor tv = fw_tensor_bhsd(v, FW_F32, cpu, c->batch, c->kv_heads, c->seqlen_k, c->head_dim);
        fw_tensor to = fw_tensor_bhsd(r->ref_o, FW_F32, cpu, c->batch, c->heads, c->seqlen_q, c->head_dim);
        fw_context_set_backend(ctx, "cpu-ref");
        st = fw_attention_forward(ctx, &tq, &tk, &tv, &to, r->ref_lse, &c->params);
        if (st != FW_OK) fprintf(stderr, "harness: reference failed: %s\n", fw_context_last_error(ctx));
        if (st == FW_OK && c->dtype != FW_F32) {
            r->lowp_o = (float *)malloc(on * sizeof(float));
            if (r->lowp_o) {
                fw_problem hp = r->problem; /* the f32 (B, H, S, D) copies */
                hp.q = q; hp.k = k; hp.v = v;
                memcpy(hp.q_stride, tq.stride, sizeof hp.q_stride);
                memcpy(hp.k_stride, tk.stride, sizeof hp.k_stride);
                memcpy(hp.v_stride, tv.stride, sizeof hp.v_stride);
                memcpy(hp.o_stride, to.stride, sizeof hp.o_stride);
                fwh_lowp_attention(&hp, c->dtype, r->lowp_o);
            } else {
                st = FW_ERR_OUT_OF_MEMORY;
            }
        }
        fw_context_destroy(ctx);
    }
    free(q); free(k); free(v);
    r->have_ref = st == FW_OK;
    return st;
}

float fw_run_output(const fw_run *r, int64_t b, int64_t h, int64_t s, int64_t d)
{
    return fw_load_f32(r->host_o, r->c.dtype, fwh_offset(&r->o, b, h, s, d));
}

/* One output element at host[at] against the reference y (and the input-dtype emulation lowp, may be
 * NULL): unwritten, NaN mismatch or the error, summed into acc = {Σ diff², Σ y²}. */
void fwh_compare_elem(fw_errors *e, const void *host, fw_dtype t, int64_t at, double y, const float *lowp,
                      double acc[2])
{
    if (fwh_is_poison(host, t, at)) {
        e->unwritten++;
        return;
    }
    const double x = fw_load_f32(host, t, at);
    if (isnan(x) != isnan(y)) {
        e->nan_mismatch++;
        return;
    }
    if (isnan(x)) return;
    const double diff = fabs(x - y);
    if (diff > e->max_abs) e->max_abs = diff;
    acc[0] += diff * diff;
    acc[1] += y * y;
    if (lowp) {
        const double lp = fabs((double)*lowp - y);
        if (lp > e->lowp_err) e->lowp_err = lp;
    }
}

/* One row's log-sum-exp x against the reference y; 0 when it is over the tolerance. LSE is f32 in
 * every dtype; its error follows the scores' input rounding. Plus a few f32 ulps of the value itself
 * (1e-6·|LSE|, ~8 ulp): an LSE of 1e4 (large logits) has an ulp of 1e-3, beyond any absolute 1e-4. */
int fwh_compare_lse(fw_errors *e, float x, float y, const fw_case *c)
{
    if (fw_f32_to_bits(x) == FWH_POISON_F32) {
        e->unwritten++;
        return 1; /* counted as unwritten, which fails the run */
    }
    if (isnan(x) != isnan(y) || (isinf(x) || isinf(y) ? x != y : 0)) {
        e->lse_max_abs = INFINITY;
        return 0;
    }
    if (isnan(x) || isinf(x)) return 1;
    const double diff = fabs((double)x - (double)y);
    if (diff > e->lse_max_abs) e->lse_max_abs = diff;
    return diff <= fw_contract_lse_tol(c->dtype, c->precision) + 1e-6 * fabs((double)y);
}

/* The tolerance of the contract and the verdict. */
void fwh_errors_finish(fw_errors *e, const fw_case *c, const double acc[2], int lse_ok)
{
    e->rel_l2 = acc[1] > 0 ? sqrt(acc[0] / acc[1]) : sqrt(acc[0]);
    e->tol = c->tol_override > 0 ? c->tol_override
                                  : fw_contract_output_tol(c->dtype, c->precision, e->max_abs_v, e->lowp_err);
    e->pass = e->max_abs <= e->tol && e->unwritten == 0 && e->stray == 0 && e->nan_mismatch == 0 &&
              e->cache_mismatch == 0 && lse_ok;
}

fw_status fw_run_compare(fw_run *r, fw_errors *e)
{
    if (r->c.kind != FW_CASE_DENSE) return fwh_serving_compare(r, e);
    const fw_case *c = &r->c;
    const size_t es = fw_dtype_size(c->dtype);
    const size_t ln = (size_t)(c->batch * c->heads * c->seqlen_q);
    fw_status st;
    memset(e, 0, sizeof *e);
    if (!r->have_ref && (st = compute_reference(r)) != FW_OK) return st;
    if ((st = fwh_copy(r, r->host_o, r->o.data, r->o_elems * es, 0))) return st;
    if (r->lse && (st = fwh_copy(r, r->host_lse, r->lse, ln * sizeof(float), 0))) return st;

    for (size_t i = 0; i < r->kv_elems; i++) {
        const double a = fabs((double)fw_load_f32(r->host_v, c->dtype, (int64_t)i));
        if (isfinite(a) && a > e->max_abs_v) e->max_abs_v = a; /* a planted inf must not make the tolerance inf */
    }
    double acc[2] = {0, 0};
    /* every element of the padded buffer: inside the view must be written, outside must not */
    const int64_t D = c->head_dim, row = D + c->pad;
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t s = 0; s < c->seqlen_q; s++) {
                const int64_t base = fwh_offset(&r->o, b, h, s, 0);
                for (int64_t d = D; d < row; d++)
                    if (!fwh_is_poison(r->host_o, c->dtype, base + d)) e->stray++;
                for (int64_t d = 0; d < D; d++) {
                    const size_t ri = (size_t)(((b * c->heads + h) * c->seqlen_q + s) * D + d);
                    fwh_compare_elem(e, r->host_o, c->dtype, base + d, r->ref_o[ri], r->lowp_o ? &r->lowp_o[ri] : NULL,
                                     acc);
                }
            }
    int lse_ok = 1;
    if (r->lse)
        for (size_t i = 0; i < ln; i++) lse_ok &= fwh_compare_lse(e, r->host_lse[i], r->ref_lse[i], c);
    fwh_errors_finish(e, c, acc, lse_ok);
    return FW_OK;
}

double fw_run_flops(const fw_run *r) { return fw_problem_flops(&r->problem); }

double fw_run_bytes(const fw_run *r)
{
    if (r->c.kind != FW_CASE_DENSE) return fwh_serving_bytes(r, 0);
    const fw_case *c = &r->c;
    const double es = (double)fw_dtype_size(c->dtype);
    double bytes = es * (double)c->batch * (double)c->head_dim *
                   (2.0 * (double)c->heads * (double)c->seqlen_q + 2.0 * (double)c->kv_heads * (double)c->seqlen_k);
    if (r->lse) bytes += 4.0 * (double)(c->batch * c->heads * c->seqlen_q);
    return bytes;
}


double fw_run_kv_bytes(const fw_run *r)
{
    if (r->c.kind != FW_CASE_DENSE) return fwh_serving_bytes(r, 1);
    const fw_case *c = &r->c;
    return (double)fw_dtype_size(c->dtype) * 2.0 * (double)c->batch * (double)c->kv_heads * (double)c->seqlen_k *
           (double)c->head_dim;
}
