/* Fuzz target: the public attention calls (dense forward and backward, ragged forward and backward, KV
 * cache, workspace size, backend support) with arguments decoded from the input: shapes, strides, layouts,
 * dtypes, devices, pointer alignment, aliasing, LSE, scale, causal, windows, backend, threads, precision,
 * and the serving calls' offsets, cache lengths, block tables and new tokens, each mostly sane and
 * sometimes an edge value. Every tensor the description spans is allocated to exactly its extent (ASan
 * sees any access beyond it); a description too large to allocate goes to the validators only. Properties
 * besides "no crash, no sanitizer report, no hang": a failed call returns a known status with a message
 * and leaves every output (and the KV cache) byte for byte as it was. */
#include <float.h>
#include <math.h>
#include "flashwatt.h"
#include "core/validate.h"
#include "fuzz_targets.h"

#define CAP_BYTES ((int64_t)1 << 22) /* a tensor spanning more is described, not allocated */
#define CAP_WORK ((int64_t)1 << 21)  /* batch*heads*Lq*Lk*D above this: validation only, keeps runs short */
#define MAX_SEQS 64

typedef struct fzbuf {
    unsigned char *base; /* the allocation */
    size_t bytes;        /* its size */
    int output;          /* the call may write it */
    unsigned char *snap; /* an output's bytes before the call */
} fzbuf;

typedef struct fzcall {
    fz in;
    int unsafe; /* some description is too large to allocate: validation only */
    fzbuf bufs[12];
    int nbufs;
} fzcall;

/* x - k without overflow (edge values include INT64_MIN) */
static int64_t minus(int64_t x, int64_t k) { return x < INT64_MIN + k ? INT64_MIN : x - k; }

static size_t elem_size(fw_dtype t) { return t == FW_F16 || t == FW_BF16 ? 2 : 4; }

/* Elements spanned by a description (sizes >= 1, strides >= 0), or -1 when unknown or beyond the cap. */
static int64_t extent(const fw_tensor *t)
{
    int64_t e = 1;
    for (int d = 0; d < 4; d++) {
        if (t->size[d] < 1 || t->stride[d] < 0) return -1;
        const double span = (double)(t->size[d] - 1) * (double)t->stride[d];
        if (span > (double)CAP_BYTES) return -1;
        e += (t->size[d] - 1) * t->stride[d];
        if (e > CAP_BYTES) return -1;
    }
    return e;
}

/* Memory for a description: exactly its span, at an offset of 0 (mostly) or 1..3 bytes, filled with
 * small finite values of its dtype (or raw bytes for an unknown dtype). */
static void *place(fzcall *c, int64_t elems, fw_dtype t, int output)
{
    static unsigned char dummy[64];
    const uint8_t ab = fz_u8(&c->in);
    const size_t off = ab < 240 ? 0 : 1 + ab % 3;
    if (elems < 0 || (size_t)elems * elem_size(t) > (size_t)CAP_BYTES || c->nbufs == 12) {
        c->unsafe = 1;
        return dummy + off;
    }
    const size_t bytes = (size_t)elems * elem_size(t);
    fzbuf *b = &c->bufs[c->nbufs++];
    b->bytes = bytes + off;
    b->base = (unsigned char *)malloc(b->bytes);
    if (!b->base) abort();
    b->output = output;
    unsigned char *data = b->base + off;
    uint64_t s = fz_u8(&c->in) + 1;
    for (size_t i = 0; i < bytes; i += elem_size(t)) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float x = (float)((int)(s >> 40) % 2001 - 1000) / 500.0f; /* [-2, 2] */
        if (t == FW_F32) memcpy(data + i, &x, 4);
        else if (t == FW_F16 || t == FW_BF16) { /* bf16: the high half of x; f16: a value in [-2, 2] */
            uint32_t u;
            memcpy(&u, &x, 4);
            const uint16_t h = t == FW_BF16 ? (uint16_t)(u >> 16) : (uint16_t)(((s >> 20) & 0x3fff) | ((s >> 34 & 1) << 15));
            memcpy(data + i, &h, 2);
        } else
            memcpy(data + i, &s, elem_size(t));
    }
    return data;
}

static fw_dtype pick_dtype(fz *f)
{
    const uint8_t b = fz_u8(f);
    return b < 248 ? (fw_dtype)(b % 3) : (fw_dtype)(int)(b - 250); /* -2 .. 5: some invalid */
}

static fw_device pick_device(fz *f)
{
    const uint8_t b = fz_u8(f);
    fw_device d = {FW_DEVICE_CPU, 0};
    /* a device description the library must refuse; never a real GPU (the data is on the host) */
    if (b >= 248 && fw_cuda_device_count() == 0) {
        d.kind = FW_DEVICE_CUDA;
        d.index = b % 3;
    }
    if (b == 255) d.kind = (fw_device_kind)7;
    return d;
}

/* A tensor (B, H, S, D) in one of the layouts, sometimes with a stride replaced by an edge value. */
static fw_tensor tensor(fzcall *c, fw_dtype t, fw_device dev, int64_t B, int64_t H, int64_t S, int64_t D, int output)
{
    fz *f = &c->in;
    fw_tensor x = fw_tensor_bhsd(NULL, t, dev, B, H, S, D);
    const uint8_t lb = fz_u8(f);
    if (lb % 4 == 2) x = fw_tensor_bshd(NULL, t, dev, B, H, S, D);
    if (lb % 4 == 3) { /* padded rows */
        if (__builtin_add_overflow(D, lb % 7, &x.stride[2]) || __builtin_mul_overflow(S, x.stride[2], &x.stride[1]) ||
            __builtin_mul_overflow(H, x.stride[1], &x.stride[0]))
            x.stride[0] = x.stride[1] = x.stride[2] = INT64_MAX;
    }
    if (lb >= 240) x.stride[lb % 4] = minus(fz_size(f, 300), 1);
    x.data = place(c, extent(&x), t, output);
    return x;
}

/* a * b * c for LSE counts, or -1 when a factor is outside 1 .. 2^20 (the product stays far from overflow) */
static int64_t count3(int64_t a, int64_t b, int64_t c)
{
    const int64_t lim = (int64_t)1 << 20;
    return a >= 1 && a <= lim && b >= 1 && b <= lim && c >= 1 && c <= lim && a * b <= lim ? a * b * c : -1;
}

static float *lse_buffer(fzcall *c, int64_t n, void *o_data, int required)
{
    const uint8_t b = fz_u8(&c->in) % 8;
    if (b == 5 && !required) return NULL;
    if (b == 6) return (float *)((char *)place(c, n > 0 ? n + 1 : -1, FW_F32, 1) + 2); /* misaligned */
    if (b == 7) return (float *)o_data; /* aliases o */
    return (float *)place(c, n, FW_F32, 1);
}

static fw_attn_params *params(fz *f, fw_attn_params *p)
{
    static const float scales[] = {NAN, INFINITY, -INFINITY, 1e-45f, FLT_MIN, 3e38f, -1.0f, 1e-30f, 0.125f, 1e30f, -0.0f, 4.0f};
    *p = fw_attn_params_default();
    const uint8_t b = fz_u8(f);
    if (b % 8 == 7) return NULL;
    p->causal = b % 16 == 14 ? (int)fz_u64(f) : b & 1;
    const uint8_t sb = fz_u8(f);
    if (sb >= 200) p->scale = scales[sb % (sizeof scales / sizeof scales[0])];
    if (fz_u8(f) >= 160) {
        p->window_left = minus(fz_size(f, 50), 2);
        p->window_right = minus(fz_size(f, 50), 2);
    }
    return p;
}

static fw_context *context(fz *f)
{
    static const char *names[] = {"auto", "cpu-ref", "cpu-flash", "cpu-naive", "cpu-flash", "no-such-backend", ""};
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) abort();
    const uint8_t b = fz_u8(f);
    fw_context_set_backend(ctx, names[b % 7]);
    fw_context_set_threads(ctx, 1 + (b >> 7));
    const uint8_t p = fz_u8(f);
    if (p >= 240) fw_context_set_precision(ctx, (fw_precision)(p % 6));
    return ctx;
}

static int64_t heads_of(fz *f, int64_t *hkv)
{
    *hkv = fz_size(f, 3);
    const int64_t g = fz_size(f, 3);
    int64_t h;
    if (__builtin_mul_overflow(*hkv, g, &h)) h = *hkv;
    return h;
}

static int too_much_work(double B, double H, double Lq, double Lk, double D)
{
    const double w = B * H * Lq * Lk * D;
    return !(w <= (double)CAP_WORK && B * H <= 4096.0); /* a (batch, head) costs a backend ~1 us on its own */
}

static void snapshot(fzcall *c)
{
    for (int i = 0; i < c->nbufs; i++)
        if (c->bufs[i].output) {
            c->bufs[i].snap = (unsigned char *)malloc(c->bufs[i].bytes);
            if (!c->bufs[i].snap) abort();
            memcpy(c->bufs[i].snap, c->bufs[i].base, c->bufs[i].bytes);
        }
}

/* After a call: a failure has a known status and a message and changed no output. */
static void check_and_free(fzcall *c, fw_context *ctx, fw_status st, const char *what)
{
    FZ_REQUIRE(st >= FW_OK && st <= FW_ERR_CONTEXT_BUSY, "%s returned %d", what, (int)st);
    FZ_REQUIRE(st == FW_OK || fw_context_last_error(ctx)[0], "%s failed (%s) without a message", what, fw_status_string(st));
    for (int i = 0; i < c->nbufs; i++) {
        fzbuf *b = &c->bufs[i];
        if (b->snap) {
            FZ_REQUIRE(st == FW_OK || !memcmp(b->snap, b->base, b->bytes), "%s failed (%s: %s) but wrote an output", what,
                       fw_status_string(st), fw_context_last_error(ctx));
            free(b->snap);
        }
        free(b->base);
    }
    fw_context_destroy(ctx);
}

static void dense(fzcall *c, int backward)
{
    fz *f = &c->in;
    fw_context *ctx = context(f);
    const fw_dtype t = pick_dtype(f);
    const fw_device dev = pick_device(f);
    int64_t Hkv;
    const int64_t B = fz_size(f, 3), H = heads_of(f, &Hkv), Lq = fz_size(f, 40), Lk = fz_size(f, 40), D = fz_size(f, 72);
    fw_tensor q = tensor(c, t, dev, B, H, Lq, D, 0), k = tensor(c, t, dev, B, Hkv, Lk, D, 0);
    fw_tensor v = tensor(c, t, dev, B, Hkv, fz_u8(f) == 255 && Lk < INT64_MAX ? Lk + 1 : Lk, D, 0);
    fw_attn_params prm, *pp = params(f, &prm);
    const int64_t rows = count3(B, H, Lq);
    if (!backward) {
        fw_tensor o = tensor(c, t, dev, B, H, Lq, D, 1);
        if (fz_u8(f) == 1) o.data = q.data; /* an output aliasing an input */
        float *lse = lse_buffer(c, rows, o.data, 0);
        fw_status st;
        if (c->unsafe || too_much_work(B, H, Lq, Lk, D)) {
            char why[512];
            fw_problem p;
            st = fw_validate_forward(&q, &k, &v, &o, lse, pp, &p, why, sizeof why);
            fw_backend_supports("cpu-flash", &q, &k, &v, &o, pp, why, sizeof why);
            st = FW_OK; /* nothing ran */
        } else {
            snapshot(c);
            st = fw_attention_forward(ctx, &q, &k, &v, &o, lse, pp);
        }
        check_and_free(c, ctx, st, "fw_attention_forward");
        return;
    }
    fw_tensor o = tensor(c, t, dev, B, H, Lq, D, 0), dout = tensor(c, t, dev, B, H, Lq, D, 0);
    float *lse = lse_buffer(c, rows, NULL, 1);
    if (lse && !c->unsafe && ((uintptr_t)lse & 3) == 0) /* LSEs of the size a forward gives */
        for (int64_t i = 0; i < rows; i++) lse[i] = 1.0f + (float)(i % 5);
    fw_tensor dq = tensor(c, t, dev, B, H, Lq, D, 1), dk = tensor(c, t, dev, B, Hkv, Lk, D, 1);
    fw_tensor dv = tensor(c, t, dev, B, Hkv, Lk, D, 1);
    fw_status st;
    if (c->unsafe || too_much_work(B, H, Lq, Lk, D)) {
        char why[512];
        fw_problem p;
        fw_validate_backward(&q, &k, &v, &o, lse, &dout, &dq, &dk, &dv, pp, &p, why, sizeof why);
        st = FW_OK;
    } else {
        snapshot(c);
        st = fw_attention_backward(ctx, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv, pp);
    }
    check_and_free(c, ctx, st, "fw_attention_backward");
}

/* B + 1 offsets of lengths len[] (prefix sums), sometimes one replaced by an edge value. */
static int32_t *offsets(fzcall *c, int64_t B, const int32_t *len)
{
    if (B < 1 || B > MAX_SEQS) return NULL;
    int32_t *cu = (int32_t *)place(c, B + 1, FW_F32, 0);
    if (c->unsafe || ((uintptr_t)cu & 3)) return cu;
    cu[0] = 0;
    for (int64_t b = 0; b < B; b++) cu[b + 1] = cu[b] + len[b];
    if (fz_u8(&c->in) < 32) cu[fz_u8(&c->in) % (B + 1)] = (int32_t)fz_size(&c->in, 30);
    return cu;
}

/* The ragged forward, or (backward) the ragged backward on the same kind of batch. */
static void varlen(fzcall *c, int backward)
{
    fz *f = &c->in;
    fw_context *ctx = context(f);
    const fw_dtype t = pick_dtype(f);
    const fw_device dev = pick_device(f);
    int64_t Hkv;
    const int64_t B = fz_size(f, 5), H = heads_of(f, &Hkv), D = fz_size(f, 72);
    int32_t lq[MAX_SEQS] = {0}, lk[MAX_SEQS] = {0};
    int64_t tq = 0, tk = 0, mq = 1, mk = 1;
    for (int64_t b = 0; b < B && b < MAX_SEQS; b++) {
        lq[b] = fz_u8(f) % 12;
        lk[b] = fz_u8(f) % 12;
        tq += lq[b], tk += lk[b];
        mq = lq[b] > mq ? lq[b] : mq;
        mk = lk[b] > mk ? lk[b] : mk;
    }
    fw_varlen seqs = {B, offsets(c, B, lq), offsets(c, B, lk), mq, mk};
    if (fz_u8(f) < 24) seqs.max_seqlen_q = fz_size(f, 12);
    if (fz_u8(f) < 24) tq = fz_size(f, 40);
    fw_tensor q = tensor(c, t, dev, 1, H, tq, D, 0), k = tensor(c, t, dev, 1, Hkv, tk, D, 0);
    fw_tensor v = tensor(c, t, dev, 1, Hkv, tk, D, 0), o = tensor(c, t, dev, 1, H, tq, D, !backward);
    fw_attn_params prm, *pp = params(f, &prm);
    const int64_t rows = count3(1, H, tq);
    float *lse = lse_buffer(c, rows, backward ? NULL : o.data, backward);
    fw_status st = FW_OK;
    if (!backward) {
        if (c->unsafe || too_much_work(1, H, mq, mk, (double)D * (double)B)) {
            char why[512];
            fw_problem p;
            fw_validate_varlen(&q, &k, &v, &o, lse, &seqs, pp, &p, why, sizeof why);
        } else {
            snapshot(c);
            st = fw_attention_varlen_forward(ctx, &q, &k, &v, &o, lse, &seqs, pp);
        }
        check_and_free(c, ctx, st, "fw_attention_varlen_forward");
        return;
    }
    if (lse && !c->unsafe && ((uintptr_t)lse & 3) == 0) /* LSEs of the size a forward gives */
        for (int64_t i = 0; i < rows; i++) lse[i] = 1.0f + (float)(i % 5);
    fw_tensor dout = tensor(c, t, dev, 1, H, tq, D, 0), dq = tensor(c, t, dev, 1, H, tq, D, 1);
    fw_tensor dk = tensor(c, t, dev, 1, Hkv, tk, D, 1), dv = tensor(c, t, dev, 1, Hkv, tk, D, 1);
    if (c->unsafe || too_much_work(1, H, mq, mk, (double)D * (double)B)) {
        char why[512];
        fw_problem p;
        fw_validate_varlen_backward(&q, &k, &v, &o, lse, &dout, &dq, &dk, &dv, &seqs, pp, &p, why, sizeof why);
    } else {
        snapshot(c);
        st = fw_attention_varlen_backward(ctx, &q, &k, &v, &o, lse, &dout, &dq, &dk, &dv, &seqs, pp);
    }
    check_and_free(c, ctx, st, "fw_attention_varlen_backward");
}

static void kvcache(fzcall *c)
{
    fz *f = &c->in;
    fw_context *ctx = context(f);
    const fw_dtype t = pick_dtype(f);
    const fw_device dev = pick_device(f);
    int64_t Hkv;
    const int64_t B = fz_size(f, 4), H = heads_of(f, &Hkv), D = fz_size(f, 72), Lq = fz_size(f, 4);
    const int paged = fz_u8(f) & 1, append = fz_u8(f) & 1, packed = fz_u8(f) < 64;
    fw_kv_cache cache;
    memset(&cache, 0, sizeof cache);
    int64_t capacity;
    const int64_t rows_b = B >= 1 && B <= MAX_SEQS ? B : 0;
    if (paged) {
        const int64_t page = fz_size(f, 16), pages = fz_size(f, 12);
        cache.max_pages_per_seq = fz_size(f, 4);
        cache.block_table_stride = fz_u8(f) < 200 ? 0 : minus(fz_size(f, 6), 1);
        const int64_t stride = cache.block_table_stride ? cache.block_table_stride : cache.max_pages_per_seq;
        cache.k = tensor(c, t, dev, pages, Hkv, page, D, append);
        cache.v = tensor(c, t, dev, pages, Hkv, page, D, append);
        const int64_t n = rows_b && stride >= 0 && stride < 64 && cache.max_pages_per_seq < 64
                              ? (rows_b - 1) * stride + cache.max_pages_per_seq
                              : -1;
        int32_t *table = (int32_t *)place(c, n, FW_F32, 0);
        for (int64_t i = 0; i < n && !c->unsafe && ((uintptr_t)table & 3) == 0; i++)
            table[i] = fz_u8(f) < 16 ? (int32_t)minus(fz_size(f, 12), 1) : (int32_t)(fz_u8(f) % (pages > 0 && pages < 256 ? pages : 1));
        cache.block_table = table;
        if (__builtin_mul_overflow(page, cache.max_pages_per_seq, &capacity)) capacity = INT64_MAX;
    } else {
        capacity = fz_size(f, 30);
        cache.k = tensor(c, t, dev, B, Hkv, capacity, D, append);
        cache.v = tensor(c, t, dev, B, Hkv, capacity, D, append);
    }
    int32_t *lens = (int32_t *)place(c, rows_b ? rows_b : -1, FW_F32, 0);
    for (int64_t b = 0; b < rows_b && !c->unsafe && ((uintptr_t)lens & 3) == 0; b++)
        lens[b] = fz_u8(f) < 16 ? (int32_t)minus(fz_size(f, 40), 1) : (int32_t)(fz_u8(f) % (capacity > 0 && capacity < 256 ? capacity + 1 : 1));
    cache.seqlens = lens;
    int32_t lq[MAX_SEQS] = {0};
    int64_t total = 0;
    for (int64_t b = 0; b < rows_b; b++) total += lq[b] = fz_u8(f) % 4;
    fw_varlen qs = {B, packed ? offsets(c, B, lq) : NULL, NULL, 4, 0};
    const int64_t qB = packed ? 1 : B, qS = packed ? (total ? total : 1) : Lq;
    fw_tensor q = tensor(c, t, dev, qB, H, qS, D, 0), o = tensor(c, t, dev, qB, H, qS, D, 1);
    fw_tensor kn = tensor(c, t, dev, qB, Hkv, qS, D, 0), vn = tensor(c, t, dev, qB, Hkv, qS, D, 0);
    fw_attn_params prm, *pp = params(f, &prm);
    float *lse = lse_buffer(c, count3(qB, H, qS), o.data, 0);
    fw_status st = FW_OK;
    if (c->unsafe || too_much_work(B, H, packed ? 4 : Lq, (double)capacity + (double)Lq, D)) {
        char why[512];
        fw_problem p;
        fw_validate_kvcache(&q, &cache, append ? &kn : NULL, append ? &vn : NULL, &o, lse, packed ? &qs : NULL, pp, &p, why,
                            sizeof why);
    } else {
        snapshot(c);
        st = fw_attention_kvcache_forward(ctx, &q, &cache, append ? &kn : NULL, append ? &vn : NULL, &o, lse,
                                          packed ? &qs : NULL, pp);
    }
    check_and_free(c, ctx, st, "fw_attention_kvcache_forward");
}

static void workspace_size(fzcall *c)
{
    fz *f = &c->in;
    fw_context *ctx = context(f);
    fw_workspace_query w;
    w.device = pick_device(f);
    w.dtype = pick_dtype(f);
    w.max_batch = fz_size(f, 8);
    w.heads = fz_size(f, 8);
    w.kv_heads = fz_size(f, 8);
    w.head_dim = fz_size(f, 256);
    w.max_seqlen_q = fz_size(f, 8);
    w.max_seqlen_k = fz_size(f, 4096);
    size_t bytes = 0;
    const fw_status st = fw_attention_workspace_size(ctx, fz_u8(f) == 255 ? NULL : &w, &bytes);
    check_and_free(c, ctx, st, "fw_attention_workspace_size");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fzcall c;
    memset(&c, 0, sizeof c);
    c.in = (fz){data, size};
    switch (fz_u8(&c.in) % 6) {
    case 0: dense(&c, 0); break;
    case 1: dense(&c, 1); break;
    case 2: varlen(&c, 0); break;
    case 3: kvcache(&c); break;
    case 5: varlen(&c, 1); break;
    default: workspace_size(&c); break;
    }
    return 0;
}
