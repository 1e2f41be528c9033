/* Every check a call's arguments go through before any backend sees them. Messages name the
 * argument and the limit, so a user can fix the call from the message alone. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "validate.h"
#include "dtype.h"

#define FAIL(st, ...)                                                                              \
    do {                                                                                           \
        snprintf(msg, msg_len, __VA_ARGS__);                                                       \
        return (st);                                                                               \
    } while (0)

static const char *dim_name[4] = {"batch", "heads", "seq", "head_dim"};
#define MAX_SIZE (((int64_t)1 << 31) - 1) /* per dimension; kernels index rows with 32-bit ints */
/* Window bounds beyond any sequence (sizes are below 2^31, so |i + Lk - Lq| < 2^32) see every key: they
 * are stored as unlimited, which keeps the key-range arithmetic of problem.h far from int64 overflow. */
#define WINDOW_BEYOND_ANY ((int64_t)1 << 32)

static const char *device_str(fw_device d, char *buf, size_t n)
{
    if (d.kind == FW_DEVICE_CPU) snprintf(buf, n, "cpu");
    else snprintf(buf, n, "cuda:%d", d.index);
    return buf;
}

/* Shape, stride, dtype and device sanity of one tensor on its own. */
static fw_status check_tensor(const char *name, const fw_tensor *t, int is_output, char *msg,
                              size_t msg_len)
{
    if (!t) FAIL(FW_ERR_NULL_ARGUMENT, "%s is NULL", name);
    if (!t->data) FAIL(FW_ERR_NULL_ARGUMENT, "%s.data is NULL", name);
    if (t->dtype != FW_F32 && t->dtype != FW_F16 && t->dtype != FW_BF16)
        FAIL(FW_ERR_INVALID_VALUE, "%s.dtype %d is not one of f32, f16, bf16", name, (int)t->dtype);
    if (t->device.kind != FW_DEVICE_CPU && t->device.kind != FW_DEVICE_CUDA)
        FAIL(FW_ERR_INVALID_VALUE, "%s.device.kind %d is neither cpu nor cuda", name,
             (int)t->device.kind);
    if (t->device.index < 0)
        FAIL(FW_ERR_INVALID_VALUE, "%s.device.index %d is negative", name, t->device.index);
    if ((uintptr_t)t->data % fw_dtype_size(t->dtype) != 0)
        FAIL(FW_ERR_INVALID_VALUE, "%s.data (%p) is not aligned to %zu bytes, the size of one %s element", name, t->data,
             fw_dtype_size(t->dtype), fw_dtype_name(t->dtype));
    for (int d = 0; d < 4; d++) {
        if (t->size[d] < 1)
            FAIL(FW_ERR_INVALID_SHAPE, "%s.size[%d] (%s) is %lld; sizes must be >= 1", name, d,
                 dim_name[d], (long long)t->size[d]);
        if (t->size[d] > MAX_SIZE)
            FAIL(FW_ERR_INVALID_SHAPE, "%s.size[%d] (%s) is %lld, above the limit %lld (2^31 - 1)", name, d,
                 dim_name[d], (long long)t->size[d], (long long)MAX_SIZE);
        if (t->stride[d] < 0)
            FAIL(FW_ERR_INVALID_STRIDE, "%s.stride[%d] (%s) is %lld; strides must be >= 0", name,
                 d, dim_name[d], (long long)t->stride[d]);
    }
    if (t->stride[3] != 1 && t->size[3] > 1)
        FAIL(FW_ERR_INVALID_STRIDE, "%s.stride[3] (head_dim) is %lld; head_dim must be contiguous (stride 1)",
             name, (long long)t->stride[3]);
    {   /* The span of the tensor must be addressable (< 2^62 bytes); this also keeps every offset
         * computed below and in the backends free of int64 overflow. */
        const int64_t limit = ((int64_t)1 << 62) / (int64_t)fw_dtype_size(t->dtype);
        int64_t last = 0;
        for (int d = 0; d < 4; d++) {
            if (t->size[d] == 1 || t->stride[d] == 0) continue;
            if (t->stride[d] > (limit - last) / (t->size[d] - 1))
                FAIL(FW_ERR_INVALID_STRIDE,
                     "%s.stride[%d] (%s) is %lld; with size %lld the tensor would span more than 2^62 bytes", name, d,
                     dim_name[d], (long long)t->stride[d], (long long)t->size[d]);
            last += t->stride[d] * (t->size[d] - 1);
        }
    }
    if (is_output) {
        /* No two elements of an output may share memory: sort dims by stride, each stride must
         * reach past everything spanned by the smaller ones. */
        int ord[4] = {0, 1, 2, 3};
        for (int i = 1; i < 4; i++)
            for (int j = i; j > 0 && t->stride[ord[j]] < t->stride[ord[j - 1]]; j--) {
                int tmp = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = tmp;
            }
        int64_t span = 1; /* elements covered by the inner dims so far */
        for (int i = 0; i < 4; i++) {
            int d = ord[i];
            if (t->size[d] == 1) continue;
            if (t->stride[d] < span)
                FAIL(FW_ERR_INVALID_STRIDE,
                     "%s.stride[%d] (%s) is %lld, so elements of the output %s overlap (needs >= %lld)",
                     name, d, dim_name[d], (long long)t->stride[d], name, (long long)span);
            span = t->stride[d] * (t->size[d] - 1) + span;
        }
    }
    return FW_OK;
}

/* Byte range [lo, hi) a tensor touches. */
static void byte_range(const fw_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    int64_t last = 0;
    for (int d = 0; d < 4; d++) last += (t->size[d] - 1) * t->stride[d];
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)((last + 1) * (int64_t)fw_dtype_size(t->dtype));
}

static int ranges_overlap(uintptr_t a0, uintptr_t a1, uintptr_t b0, uintptr_t b1)
{
    return a0 < b1 && b0 < a1;
}

static fw_status check_same(const char *an, const fw_tensor *a, const char *bn, const fw_tensor *b,
                            char *msg, size_t msg_len)
{
    char da[32], db[32];
    if (a->device.kind != b->device.kind || a->device.index != b->device.index)
        FAIL(FW_ERR_DEVICE_MISMATCH, "%s is on %s but %s is on %s", bn,
             device_str(b->device, db, sizeof db), an, device_str(a->device, da, sizeof da));
    if (a->dtype != b->dtype)
        FAIL(FW_ERR_DTYPE_MISMATCH, "%s is %s but %s is %s; all tensors of a call share one dtype", bn,
             fw_dtype_name(b->dtype), an, fw_dtype_name(a->dtype));
    return FW_OK;
}

static fw_status check_no_overlap(const char *on, const fw_tensor *o, const char *in,
                                  const fw_tensor *t, char *msg, size_t msg_len)
{
    uintptr_t a0, a1, b0, b1;
    byte_range(o, &a0, &a1);
    byte_range(t, &b0, &b1);
    if (ranges_overlap(a0, a1, b0, b1))
        FAIL(FW_ERR_OVERLAP, "output %s overlaps %s in memory; outputs must not alias any other tensor", on,
             in);
    return FW_OK;
}

static fw_status check_params(const fw_attn_params *p, int64_t head_dim, fw_problem *out, char *msg,
                              size_t msg_len)
{
    fw_attn_params d = fw_attn_params_default();
    if (!p) p = &d;
    if (!isfinite(p->scale))
        FAIL(FW_ERR_INVALID_VALUE, "params.scale is %g; it must be finite (0 = 1/sqrt(head_dim))",
             (double)p->scale);
    if (p->window_left < -1)
        FAIL(FW_ERR_INVALID_VALUE, "params.window_left is %lld; use -1 (unlimited) or a value >= 0",
             (long long)p->window_left);
    if (p->window_right < -1)
        FAIL(FW_ERR_INVALID_VALUE, "params.window_right is %lld; use -1 (unlimited) or a value >= 0",
             (long long)p->window_right);
    if (p->causal != 0 && p->causal != 1)
        FAIL(FW_ERR_INVALID_VALUE, "params.causal is %d; it must be 0 or 1", p->causal);
    out->scale = p->scale != 0.0f ? p->scale : (float)(1.0 / sqrt((double)head_dim));
    out->causal = p->causal;
    out->window_left = p->window_left < 0 || p->window_left >= WINDOW_BEYOND_ANY ? FW_UNBOUNDED : p->window_left;
    out->window_right = p->window_right < 0 || p->window_right >= WINDOW_BEYOND_ANY ? FW_UNBOUNDED : p->window_right;
    if (p->causal && out->window_right > 0) out->window_right = 0;
    out->has_window = out->window_left != FW_UNBOUNDED || out->window_right != FW_UNBOUNDED;
    return FW_OK;
}

static void copy_strides(int64_t dst[4], const fw_tensor *t) { memcpy(dst, t->stride, 4 * sizeof(int64_t)); }

fw_status fw_validate_forward(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                              const fw_tensor *o, float *lse, const fw_attn_params *params,
                              fw_problem *out, char *msg, size_t msg_len)
{
    fw_status st;
    memset(out, 0, sizeof *out);
    if ((st = check_tensor("q", q, 0, msg, msg_len))) return st;
    if ((st = check_tensor("k", k, 0, msg, msg_len))) return st;
    if ((st = check_tensor("v", v, 0, msg, msg_len))) return st;
    if ((st = check_tensor("o", o, 1, msg, msg_len))) return st;
    if ((st = check_same("q", q, "k", k, msg, msg_len))) return st;
    if ((st = check_same("q", q, "v", v, msg, msg_len))) return st;
    if ((st = check_same("q", q, "o", o, msg, msg_len))) return st;

    const int64_t B = q->size[0], H = q->size[1], Lq = q->size[2], D = q->size[3];
    const int64_t Hkv = k->size[1], Lk = k->size[2];
    if (D > FW_MAX_HEAD_DIM)
        FAIL(FW_ERR_INVALID_SHAPE, "head_dim %lld is above the supported %d", (long long)D,
             FW_MAX_HEAD_DIM);
    if (k->size[0] != B || v->size[0] != B || o->size[0] != B)
        FAIL(FW_ERR_INVALID_SHAPE, "batch sizes differ: q %lld, k %lld, v %lld, o %lld",
             (long long)B, (long long)k->size[0], (long long)v->size[0], (long long)o->size[0]);
    if (k->size[3] != D)
        FAIL(FW_ERR_INVALID_SHAPE, "k head_dim %lld differs from q head_dim %lld",
             (long long)k->size[3], (long long)D);
    if (v->size[3] != D)
        FAIL(FW_ERR_INVALID_SHAPE, "v head_dim %lld differs from q head_dim %lld (must be equal)",
             (long long)v->size[3], (long long)D);
    if (v->size[1] != Hkv || v->size[2] != Lk)
        FAIL(FW_ERR_INVALID_SHAPE, "v is (heads %lld, seq %lld) but k is (heads %lld, seq %lld); they must match",
             (long long)v->size[1], (long long)v->size[2], (long long)Hkv, (long long)Lk);
    if (H % Hkv != 0)
        FAIL(FW_ERR_INVALID_SHAPE, "q heads %lld is not divisible by k/v heads %lld (GQA needs H %% H_kv == 0)",
             (long long)H, (long long)Hkv);
    for (int d = 0; d < 4; d++)
        if (o->size[d] != q->size[d])
            FAIL(FW_ERR_INVALID_SHAPE, "o.size[%d] (%s) is %lld but q's is %lld; o must have q's shape",
                 d, dim_name[d], (long long)o->size[d], (long long)q->size[d]);
    if ((st = check_no_overlap("o", o, "q", q, msg, msg_len))) return st;
    if ((st = check_no_overlap("o", o, "k", k, msg, msg_len))) return st;
    if ((st = check_no_overlap("o", o, "v", v, msg, msg_len))) return st;
    if ((st = fw_check_aligned("lse", lse, sizeof(float), msg, msg_len))) return st;
    if (lse) {
        fw_tensor lt = fw_tensor_bhsd(lse, FW_F32, o->device, B, H, Lq, 1);
        if ((st = check_no_overlap("lse", &lt, "q", q, msg, msg_len))) return st;
        if ((st = check_no_overlap("lse", &lt, "k", k, msg, msg_len))) return st;
        if ((st = check_no_overlap("lse", &lt, "v", v, msg, msg_len))) return st;
        if ((st = check_no_overlap("lse", &lt, "o", o, msg, msg_len))) return st;
    }
    if ((st = check_params(params, D, out, msg, msg_len))) return st;

    out->batch = B; out->heads = H; out->kv_heads = Hkv; out->group = H / Hkv;
    out->seqlen_q = Lq; out->seqlen_k = Lk; out->head_dim = D;
    out->dtype = q->dtype; out->device = q->device;
    out->diag_offset = Lk - Lq;
    out->q = q->data; out->k = k->data; out->v = v->data; out->o = o->data; out->lse = lse;
    copy_strides(out->q_stride, q); copy_strides(out->k_stride, k);
    copy_strides(out->v_stride, v); copy_strides(out->o_stride, o);
    return FW_OK;
}

fw_status fw_validate_backward(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                               const fw_tensor *o, const float *lse, const fw_tensor *dout,
                               const fw_tensor *dq, const fw_tensor *dk, const fw_tensor *dv,
                               const fw_attn_params *params, fw_problem *out, char *msg,
                               size_t msg_len)
{
    fw_status st;
    if (!lse) FAIL(FW_ERR_NULL_ARGUMENT, "lse is NULL; the backward needs the forward's row log-sum-exp");
    if ((st = fw_check_aligned("lse", lse, sizeof(float), msg, msg_len))) return st;
    /* o is an input here: check it as the forward's output shape, then the gradients. */
    if ((st = fw_validate_forward(q, k, v, o, NULL, params, out, msg, msg_len))) return st;
    fw_tensor lt = fw_tensor_bhsd((void *)lse, FW_F32, o->device, q->size[0], q->size[1], q->size[2], 1);
    if ((st = fw_check_gradients(q, k, v, o, &lt, dout, dq, dk, dv, NULL, NULL, 0, out, msg, msg_len))) return st;
    out->lse = (float *)lse;
    return FW_OK;
}

fw_status fw_check_gradients(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, const fw_tensor *o,
                             const fw_tensor *lse, const fw_tensor *dout, const fw_tensor *dq, const fw_tensor *dk,
                             const fw_tensor *dv, const char *const *extra_names, const fw_tensor *extra, int n_extra,
                             fw_problem *out, char *msg, size_t msg_len)
{
    fw_status st;
    if ((st = check_tensor("dout", dout, 0, msg, msg_len))) return st;
    if ((st = check_tensor("dq", dq, 1, msg, msg_len))) return st;
    if ((st = check_tensor("dk", dk, 1, msg, msg_len))) return st;
    if ((st = check_tensor("dv", dv, 1, msg, msg_len))) return st;
    if ((st = check_same("q", q, "dout", dout, msg, msg_len))) return st;
    if ((st = check_same("q", q, "dq", dq, msg, msg_len))) return st;
    if ((st = check_same("q", q, "dk", dk, msg, msg_len))) return st;
    if ((st = check_same("q", q, "dv", dv, msg, msg_len))) return st;
    for (int d = 0; d < 4; d++) {
        if (dout->size[d] != o->size[d])
            FAIL(FW_ERR_INVALID_SHAPE, "dout.size[%d] (%s) is %lld but o's is %lld", d, dim_name[d],
                 (long long)dout->size[d], (long long)o->size[d]);
        if (dq->size[d] != q->size[d])
            FAIL(FW_ERR_INVALID_SHAPE, "dq.size[%d] (%s) is %lld but q's is %lld", d, dim_name[d],
                 (long long)dq->size[d], (long long)q->size[d]);
        if (dk->size[d] != k->size[d])
            FAIL(FW_ERR_INVALID_SHAPE, "dk.size[%d] (%s) is %lld but k's is %lld", d, dim_name[d],
                 (long long)dk->size[d], (long long)k->size[d]);
        if (dv->size[d] != v->size[d])
            FAIL(FW_ERR_INVALID_SHAPE, "dv.size[%d] (%s) is %lld but v's is %lld", d, dim_name[d],
                 (long long)dv->size[d], (long long)v->size[d]);
    }
    const fw_tensor *ins[] = {q, k, v, o, dout, lse};
    const char *in_names[] = {"q", "k", "v", "o", "dout", "lse"};
    const fw_tensor *outs[] = {dq, dk, dv};
    const char *out_names[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 6; j++)
            if ((st = check_no_overlap(out_names[i], outs[i], in_names[j], ins[j], msg, msg_len))) return st;
        for (int j = 0; j < n_extra; j++)
            if ((st = check_no_overlap(out_names[i], outs[i], extra_names[j], &extra[j], msg, msg_len))) return st;
        for (int j = i + 1; j < 3; j++)
            if ((st = check_no_overlap(out_names[i], outs[i], out_names[j], outs[j], msg, msg_len))) return st;
    }
    out->dout = dout->data; out->dq = dq->data; out->dk = dk->data; out->dv = dv->data;
    copy_strides(out->do_stride, dout); copy_strides(out->dq_stride, dq);
    copy_strides(out->dk_stride, dk); copy_strides(out->dv_stride, dv);
    return FW_OK;
}

/* ---- the checks above, for the serving calls' validation (validate_serving.c) ------------------ */
fw_status fw_check_aligned(const char *name, const void *ptr, size_t align, char *msg, size_t msg_len)
{
    if ((uintptr_t)ptr % align != 0)
        FAIL(FW_ERR_INVALID_VALUE, "%s (%p) is not aligned to %zu bytes, the size of its elements", name, ptr, align);
    return FW_OK;
}

fw_status fw_check_tensor(const char *name, const fw_tensor *t, int is_output, char *msg, size_t msg_len)
{
    return check_tensor(name, t, is_output, msg, msg_len);
}

fw_status fw_check_same(const char *an, const fw_tensor *a, const char *bn, const fw_tensor *b, char *msg,
                        size_t msg_len)
{
    return check_same(an, a, bn, b, msg, msg_len);
}

fw_status fw_check_no_overlap(const char *on, const fw_tensor *o, const char *in, const fw_tensor *t, char *msg,
                              size_t msg_len)
{
    return check_no_overlap(on, o, in, t, msg, msg_len);
}

fw_status fw_check_params(const fw_attn_params *p, int64_t head_dim, fw_problem *out, char *msg, size_t msg_len)
{
    return check_params(p, head_dim, out, msg, msg_len);
}
