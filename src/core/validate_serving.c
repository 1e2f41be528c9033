/* Argument checks of the serving calls (ragged batches, KV caches). The structural checks never read
 * the int32 arrays (they may live on a device); fw_validate_serving_values checks their values from
 * host memory. Messages name the argument and the limit, as validate.c's do. */
#include <stdio.h>
#include <string.h>
#include "validate.h"

#define FAIL(st, ...)                                                                              \
    do {                                                                                           \
        snprintf(msg, msg_len, __VA_ARGS__);                                                       \
        return (st);                                                                               \
    } while (0)
#define TRY(call)                                                                                  \
    do {                                                                                           \
        fw_status st_ = (call);                                                                    \
        if (st_ != FW_OK) return st_;                                                              \
    } while (0)

#define MAX_COUNT (((int64_t)1 << 31) - 1) /* sequences, lengths, pages: indexed with int32 offsets */
#define MAX_PAGE_SIZE 256

static const char *dim_name[4] = {"batch", "heads", "seq", "head_dim"};

/* A 1-D host or device array as a tensor, for the overlap checks (int32 and f32 are both 4 bytes). */
static fw_tensor array_of(const void *data, int64_t n, fw_device dev)
{
    return fw_tensor_bhsd((void *)data, FW_F32, dev, 1, 1, 1, n > 0 ? n : 1);
}

/* A packed tensor has batch size 1: its sequences come from the offsets. */
static fw_status check_packed(const char *name, const fw_tensor *t, const char *offsets, char *msg, size_t msg_len)
{
    if (t->size[0] != 1)
        FAIL(FW_ERR_INVALID_SHAPE,
             "%s.size[0] (batch) is %lld; a packed tensor has batch size 1 and its sequences are given by %s", name,
             (long long)t->size[0], offsets);
    return FW_OK;
}

static fw_status check_shape(const char *name, const fw_tensor *t, const int64_t want[4], const char *why,
                             char *msg, size_t msg_len)
{
    for (int d = 0; d < 4; d++)
        if (t->size[d] != want[d])
            FAIL(FW_ERR_INVALID_SHAPE, "%s.size[%d] (%s) is %lld but must be %lld: %s (expected %lld x %lld x %lld x %lld)",
                 name, d, dim_name[d], (long long)t->size[d], (long long)want[d], why, (long long)want[0],
                 (long long)want[1], (long long)want[2], (long long)want[3]);
    return FW_OK;
}

/* q, o and the head geometry every serving call shares: heads, head_dim, GQA divisibility. */
static fw_status check_heads(const fw_tensor *q, const char *kname, const fw_tensor *k, const char *vname,
                             const fw_tensor *v, const fw_tensor *o, char *msg, size_t msg_len)
{
    const int64_t H = q->size[1], D = q->size[3], Hkv = k->size[1];
    if (D > FW_MAX_HEAD_DIM)
        FAIL(FW_ERR_INVALID_SHAPE, "head_dim %lld is above the supported %d", (long long)D, FW_MAX_HEAD_DIM);
    if (k->size[3] != D)
        FAIL(FW_ERR_INVALID_SHAPE, "%s head_dim %lld differs from q head_dim %lld", kname, (long long)k->size[3],
             (long long)D);
    for (int d = 0; d < 4; d++)
        if (v->size[d] != k->size[d])
            FAIL(FW_ERR_INVALID_SHAPE, "%s.size[%d] (%s) is %lld but %s's is %lld; they must have one shape", vname, d,
                 dim_name[d], (long long)v->size[d], kname, (long long)k->size[d]);
    if (H % Hkv != 0)
        FAIL(FW_ERR_INVALID_SHAPE, "q heads %lld is not divisible by %s heads %lld (GQA needs H %% H_kv == 0)",
             (long long)H, kname, (long long)Hkv);
    for (int d = 0; d < 4; d++)
        if (o->size[d] != q->size[d])
            FAIL(FW_ERR_INVALID_SHAPE, "o.size[%d] (%s) is %lld but q's is %lld; o must have q's shape", d, dim_name[d],
                 (long long)o->size[d], (long long)q->size[d]);
    return FW_OK;
}

static fw_status check_varlen_desc(const char *name, const fw_varlen *s, int need_k, char *msg, size_t msg_len)
{
    char what[64];
    if (s->batch < 1 || s->batch > MAX_COUNT)
        FAIL(FW_ERR_INVALID_VALUE, "%s->batch is %lld; the number of sequences must be 1..%lld", name,
             (long long)s->batch, (long long)MAX_COUNT);
    if (!s->cu_seqlens_q)
        FAIL(FW_ERR_NULL_ARGUMENT, "%s->cu_seqlens_q is NULL; it must hold batch + 1 = %lld int32 offsets", name,
             (long long)s->batch + 1);
    snprintf(what, sizeof what, "%s->cu_seqlens_q", name);
    TRY(fw_check_aligned(what, s->cu_seqlens_q, sizeof(int32_t), msg, msg_len));
    if (s->max_seqlen_q < 1 || s->max_seqlen_q > MAX_COUNT)
        FAIL(FW_ERR_INVALID_VALUE, "%s->max_seqlen_q is %lld; it must be 1..%lld (>= every query length)", name,
             (long long)s->max_seqlen_q, (long long)MAX_COUNT);
    if (need_k) {
        if (!s->cu_seqlens_k)
            FAIL(FW_ERR_NULL_ARGUMENT, "%s->cu_seqlens_k is NULL; it must hold batch + 1 = %lld int32 offsets", name,
                 (long long)s->batch + 1);
        snprintf(what, sizeof what, "%s->cu_seqlens_k", name);
        TRY(fw_check_aligned(what, s->cu_seqlens_k, sizeof(int32_t), msg, msg_len));
        if (s->max_seqlen_k < 1 || s->max_seqlen_k > MAX_COUNT)
            FAIL(FW_ERR_INVALID_VALUE, "%s->max_seqlen_k is %lld; it must be 1..%lld (>= every key length)", name,
                 (long long)s->max_seqlen_k, (long long)MAX_COUNT);
    }
    return FW_OK;
}

/* The outputs (o, lse, and the cache when appending) against every input and the int32 arrays. */
typedef struct named { const char *name; fw_tensor t; } named;

static fw_status check_overlaps(const named *outs, int nout, const named *ins, int nin, char *msg, size_t msg_len)
{
    for (int i = 0; i < nout; i++) {
        for (int j = 0; j < nin; j++) TRY(fw_check_no_overlap(outs[i].name, &outs[i].t, ins[j].name, &ins[j].t, msg, msg_len));
        for (int j = i + 1; j < nout; j++)
            TRY(fw_check_no_overlap(outs[i].name, &outs[i].t, outs[j].name, &outs[j].t, msg, msg_len));
    }
    return FW_OK;
}

static void fill_common(fw_problem *p, const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, const fw_tensor *o,
                        float *lse)
{
    p->heads = q->size[1];
    p->kv_heads = k->size[1];
    p->group = p->heads / p->kv_heads;
    p->head_dim = q->size[3];
    p->dtype = q->dtype;
    p->device = q->device;
    p->q = q->data; p->k = k->data; p->v = v->data; p->o = o->data; p->lse = lse;
    memcpy(p->q_stride, q->stride, sizeof p->q_stride);
    memcpy(p->k_stride, k->stride, sizeof p->k_stride);
    memcpy(p->v_stride, v->stride, sizeof p->v_stride);
    memcpy(p->o_stride, o->stride, sizeof p->o_stride);
}

fw_status fw_validate_varlen(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, const fw_tensor *o,
                             float *lse, const fw_varlen *seqs, const fw_attn_params *params, fw_problem *out,
                             char *msg, size_t msg_len)
{
    memset(out, 0, sizeof *out);
    TRY(fw_check_tensor("q", q, 0, msg, msg_len));
    TRY(fw_check_tensor("k", k, 0, msg, msg_len));
    TRY(fw_check_tensor("v", v, 0, msg, msg_len));
    TRY(fw_check_tensor("o", o, 1, msg, msg_len));
    TRY(fw_check_same("q", q, "k", k, msg, msg_len));
    TRY(fw_check_same("q", q, "v", v, msg, msg_len));
    TRY(fw_check_same("q", q, "o", o, msg, msg_len));
    if (!seqs) FAIL(FW_ERR_NULL_ARGUMENT, "seqs is NULL; a ragged call needs cu_seqlens_q/k and max_seqlen_q/k");
    TRY(check_varlen_desc("seqs", seqs, 1, msg, msg_len));
    TRY(check_packed("q", q, "seqs->cu_seqlens_q", msg, msg_len));
    TRY(check_packed("k", k, "seqs->cu_seqlens_k", msg, msg_len));
    TRY(check_packed("v", v, "seqs->cu_seqlens_k", msg, msg_len));
    TRY(check_packed("o", o, "seqs->cu_seqlens_q", msg, msg_len));
    TRY(check_heads(q, "k", k, "v", v, o, msg, msg_len));
    TRY(fw_check_aligned("lse", lse, sizeof(float), msg, msg_len));
    const int64_t B = seqs->batch, H = q->size[1];
    const fw_device dev = q->device;
    const named outs[] = {{"o", *o}, {"lse", array_of(lse, H * q->size[2], dev)}};
    const named ins[] = {{"q", *q},
                         {"k", *k},
                         {"v", *v},
                         {"seqs->cu_seqlens_q", array_of(seqs->cu_seqlens_q, B + 1, dev)},
                         {"seqs->cu_seqlens_k", array_of(seqs->cu_seqlens_k, B + 1, dev)}};
    TRY(check_overlaps(outs, lse ? 2 : 1, ins, 5, msg, msg_len));
    TRY(fw_check_params(params, q->size[3], out, msg, msg_len));

    fill_common(out, q, k, v, o, lse);
    out->kind = FW_CALL_VARLEN;
    out->batch = B;
    out->seqlen_q = seqs->max_seqlen_q;
    out->seqlen_k = seqs->max_seqlen_k;
    out->diag_offset = out->seqlen_k - out->seqlen_q;
    out->cu_seqlens_q = seqs->cu_seqlens_q;
    out->cu_seqlens_k = seqs->cu_seqlens_k;
    out->total_q = q->size[2];
    out->total_k = k->size[2];
    return FW_OK;
}

fw_status fw_validate_varlen_backward(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, const fw_tensor *o,
                                      const float *lse, const fw_tensor *dout, const fw_tensor *dq, const fw_tensor *dk,
                                      const fw_tensor *dv, const fw_varlen *seqs, const fw_attn_params *params,
                                      fw_problem *out, char *msg, size_t msg_len)
{
    if (!lse)
        FAIL(FW_ERR_NULL_ARGUMENT, "lse is NULL; the backward needs the forward's row log-sum-exp ((H, total_q) float32)");
    TRY(fw_check_aligned("lse", lse, sizeof(float), msg, msg_len));
    /* o is an input here: checked as the forward's output, then the gradients against the inputs */
    TRY(fw_validate_varlen(q, k, v, o, NULL, seqs, params, out, msg, msg_len));
    const fw_device dev = q->device;
    const fw_tensor lt = array_of(lse, q->size[1] * q->size[2], dev);
    static const char *const offset_names[2] = {"seqs->cu_seqlens_q", "seqs->cu_seqlens_k"};
    const fw_tensor offsets[2] = {array_of(seqs->cu_seqlens_q, seqs->batch + 1, dev),
                                  array_of(seqs->cu_seqlens_k, seqs->batch + 1, dev)};
    TRY(fw_check_gradients(q, k, v, o, &lt, dout, dq, dk, dv, offset_names, offsets, 2, out, msg, msg_len));
    out->lse = (float *)lse;
    return FW_OK;
}

fw_status fw_validate_kvcache(const fw_tensor *q, const fw_kv_cache *cache, const fw_tensor *k_new,
                              const fw_tensor *v_new, const fw_tensor *o, float *lse, const fw_varlen *q_seqs,
                              const fw_attn_params *params, fw_problem *out, char *msg, size_t msg_len)
{
    memset(out, 0, sizeof *out);
    if (!cache) FAIL(FW_ERR_NULL_ARGUMENT, "cache is NULL; pass the KV cache's tensors, lengths and block table");
    const int paged = cache->block_table != NULL, append = k_new != NULL || v_new != NULL;
    if ((k_new == NULL) != (v_new == NULL))
        FAIL(FW_ERR_NULL_ARGUMENT, "%s is given but %s is NULL; pass both new keys and new values, or neither",
             k_new ? "k_new" : "v_new", k_new ? "v_new" : "k_new");
    TRY(fw_check_tensor("q", q, 0, msg, msg_len));
    TRY(fw_check_tensor("o", o, 1, msg, msg_len));
    if (paged) /* the page size is the pool's seq dimension: name it before the generic size check does */
        for (int i = 0; i < 2; i++) {
            const fw_tensor *t = i ? &cache->v : &cache->k;
            if (t->size[2] < 1 || t->size[2] > MAX_PAGE_SIZE)
                FAIL(FW_ERR_INVALID_SHAPE,
                     "cache.%c.size[2] (page_size) is %lld; a paged cache's page_size must be 1..%d", i ? 'v' : 'k',
                     (long long)t->size[2], MAX_PAGE_SIZE);
        }
    /* appending writes into the cache: then no two of its elements may share memory */
    TRY(fw_check_tensor("cache.k", &cache->k, append, msg, msg_len));
    TRY(fw_check_tensor("cache.v", &cache->v, append, msg, msg_len));
    TRY(fw_check_same("q", q, "cache.k", &cache->k, msg, msg_len));
    TRY(fw_check_same("q", q, "cache.v", &cache->v, msg, msg_len));
    TRY(fw_check_same("q", q, "o", o, msg, msg_len));
    if (append) {
        TRY(fw_check_tensor("k_new", k_new, 0, msg, msg_len));
        TRY(fw_check_tensor("v_new", v_new, 0, msg, msg_len));
        TRY(fw_check_same("q", q, "k_new", k_new, msg, msg_len));
        TRY(fw_check_same("q", q, "v_new", v_new, msg, msg_len));
    }
    int64_t B;
    if (q_seqs) {
        TRY(check_varlen_desc("q_seqs", q_seqs, 0, msg, msg_len));
        TRY(check_packed("q", q, "q_seqs->cu_seqlens_q", msg, msg_len));
        TRY(check_packed("o", o, "q_seqs->cu_seqlens_q", msg, msg_len));
        B = q_seqs->batch;
    } else {
        B = q->size[0];
    }
    TRY(check_heads(q, "cache.k", &cache->k, "cache.v", &cache->v, o, msg, msg_len));
    TRY(fw_check_aligned("lse", lse, sizeof(float), msg, msg_len));
    const int64_t H = q->size[1], Hkv = cache->k.size[1], D = q->size[3];
    int64_t capacity, stride = 0;
    if (!paged) {
        if (cache->k.size[0] != B)
            FAIL(FW_ERR_INVALID_SHAPE, "cache.k.size[0] (batch) is %lld but q has %lld sequences; a contiguous cache "
                                       "holds one row of capacity keys per sequence",
                 (long long)cache->k.size[0], (long long)B);
        capacity = cache->k.size[2];
    } else {
        if (cache->max_pages_per_seq < 1 || cache->max_pages_per_seq > MAX_COUNT)
            FAIL(FW_ERR_INVALID_VALUE, "cache.max_pages_per_seq is %lld; a paged cache's block table needs 1..%lld "
                                       "pages per sequence",
                 (long long)cache->max_pages_per_seq, (long long)MAX_COUNT);
        stride = cache->block_table_stride ? cache->block_table_stride : cache->max_pages_per_seq;
        if (stride < cache->max_pages_per_seq || stride > MAX_COUNT)
            FAIL(FW_ERR_INVALID_VALUE, "cache.block_table_stride is %lld; it must be 0 or max_pages_per_seq (%lld) .. %lld",
                 (long long)cache->block_table_stride, (long long)cache->max_pages_per_seq, (long long)MAX_COUNT);
        capacity = cache->max_pages_per_seq * cache->k.size[2];
        if (capacity > MAX_COUNT)
            FAIL(FW_ERR_INVALID_VALUE, "cache capacity max_pages_per_seq x page_size = %lld x %lld is above %lld keys",
                 (long long)cache->max_pages_per_seq, (long long)cache->k.size[2], (long long)MAX_COUNT);
        if ((B - 1) * stride + cache->max_pages_per_seq > ((int64_t)1 << 40))
            FAIL(FW_ERR_INVALID_VALUE, "the block table (%lld rows of stride %lld) is too large", (long long)B,
                 (long long)stride);
    }
    if (!cache->seqlens)
        FAIL(FW_ERR_NULL_ARGUMENT, "cache.seqlens is NULL; it must hold the %lld sequences' cached lengths (int32)",
             (long long)B);
    TRY(fw_check_aligned("cache.seqlens", cache->seqlens, sizeof(int32_t), msg, msg_len));
    TRY(fw_check_aligned("cache.block_table", cache->block_table, sizeof(int32_t), msg, msg_len));
    if (append) {
        const int64_t want[4] = {q->size[0], Hkv, q->size[2], D};
        const char *why = q_seqs ? "new keys and values are packed like q, with the cache's heads"
                                 : "new keys and values have q's batch and length, with the cache's heads";
        TRY(check_shape("k_new", k_new, want, why, msg, msg_len));
        TRY(check_shape("v_new", v_new, want, why, msg, msg_len));
    }
    const fw_device dev = q->device;
    const int64_t lse_n = q_seqs ? H * q->size[2] : B * H * q->size[2];
    const int64_t table_n = paged ? (B - 1) * stride + cache->max_pages_per_seq : 0;
    named outs[4] = {{"o", *o}, {"lse", array_of(lse, lse_n, dev)}, {"cache.k", cache->k}, {"cache.v", cache->v}};
    named ins[6];
    int nin = 0;
    ins[nin++] = (named){"q", *q};
    if (append) {
        ins[nin++] = (named){"k_new", *k_new};
        ins[nin++] = (named){"v_new", *v_new};
    }
    ins[nin++] = (named){"cache.seqlens", array_of(cache->seqlens, B, dev)};
    if (paged) ins[nin++] = (named){"cache.block_table", array_of(cache->block_table, table_n, dev)};
    if (q_seqs) ins[nin++] = (named){"q_seqs->cu_seqlens_q", array_of(q_seqs->cu_seqlens_q, B + 1, dev)};
    if (append) {
        /* the cache is written: it joins o (and lse) among the outputs */
        if (!lse) outs[1] = (named){"cache.k", cache->k}, outs[2] = (named){"cache.v", cache->v};
        TRY(check_overlaps(outs, lse ? 4 : 3, ins, nin, msg, msg_len));
    } else {
        ins[nin++] = (named){"cache.k", cache->k};
        ins[nin++] = (named){"cache.v", cache->v};
        TRY(check_overlaps(outs, lse ? 2 : 1, ins, nin, msg, msg_len));
    }
    TRY(fw_check_params(params, D, out, msg, msg_len));

    fill_common(out, q, &cache->k, &cache->v, o, lse);
    out->kind = FW_CALL_KVCACHE;
    out->batch = B;
    out->seqlen_q = q_seqs ? q_seqs->max_seqlen_q : q->size[2];
    out->seqlen_k = capacity;
    out->capacity = capacity;
    out->diag_offset = out->seqlen_k - out->seqlen_q;
    if (q_seqs) {
        out->cu_seqlens_q = q_seqs->cu_seqlens_q;
        out->total_q = q->size[2];
    }
    out->cache_seqlens = cache->seqlens;
    if (paged) {
        out->block_table = cache->block_table;
        out->block_table_stride = stride;
        out->max_pages_per_seq = cache->max_pages_per_seq;
        out->page_size = cache->k.size[2];
        out->num_pages = cache->k.size[0];
    }
    if (append) {
        out->k_new = k_new->data;
        out->v_new = v_new->data;
        memcpy(out->kn_stride, k_new->stride, sizeof out->kn_stride);
        memcpy(out->vn_stride, v_new->stride, sizeof out->vn_stride);
    }
    return FW_OK;
}

void fw_serving_value_counts(const fw_problem *p, int64_t *n_cu_q, int64_t *n_cu_k, int64_t *n_seqlens,
                             int64_t *n_table)
{
    *n_cu_q = p->cu_seqlens_q ? p->batch + 1 : 0;
    *n_cu_k = p->cu_seqlens_k ? p->batch + 1 : 0;
    *n_seqlens = p->cache_seqlens ? p->batch : 0;
    *n_table = p->block_table ? (p->batch - 1) * p->block_table_stride + p->max_pages_per_seq : 0;
}

static fw_status check_offsets(const char *name, const int32_t *cu, int64_t B, int64_t total, const char *tensor,
                               int64_t max_len, const char *max_name, char *msg, size_t msg_len)
{
    if (cu[0] != 0) FAIL(FW_ERR_INVALID_VALUE, "%s[0] is %d; offsets start at 0", name, cu[0]);
    for (int64_t b = 0; b < B; b++) {
        if (cu[b + 1] < cu[b])
            FAIL(FW_ERR_INVALID_VALUE, "%s is not non-decreasing: %s[%lld] = %d < %s[%lld] = %d", name, name,
                 (long long)b + 1, cu[b + 1], name, (long long)b, cu[b]);
        const int64_t len = (int64_t)cu[b + 1] - cu[b];
        if (len > max_len)
            FAIL(FW_ERR_INVALID_VALUE, "sequence %lld has %lld rows (%s[%lld] - %s[%lld]), above %s = %lld", (long long)b,
                 (long long)len, name, (long long)b + 1, name, (long long)b, max_name, (long long)max_len);
    }
    if (cu[B] != total)
        FAIL(FW_ERR_INVALID_VALUE, "%s[%lld] (the last offset) is %d but %s's packed length (size[2]) is %lld; they must "
                                   "be equal",
             name, (long long)B, cu[B], tensor, (long long)total);
    return FW_OK;
}

fw_status fw_validate_serving_values(const fw_problem *p, const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                     const int32_t *cache_seqlens, const int32_t *block_table, char *msg,
                                     size_t msg_len)
{
    const int64_t B = p->batch;
    const char *qname = p->kind == FW_CALL_VARLEN ? "seqs->cu_seqlens_q" : "q_seqs->cu_seqlens_q";
    const char *qmax = p->kind == FW_CALL_VARLEN ? "seqs->max_seqlen_q" : "q_seqs->max_seqlen_q";
    if (p->cu_seqlens_q) TRY(check_offsets(qname, cu_seqlens_q, B, p->total_q, "q", p->seqlen_q, qmax, msg, msg_len));
    if (p->cu_seqlens_k)
        TRY(check_offsets("seqs->cu_seqlens_k", cu_seqlens_k, B, p->total_k, "k", p->seqlen_k, "seqs->max_seqlen_k", msg,
                          msg_len));
    if (p->kind != FW_CALL_KVCACHE) return FW_OK;
    for (int64_t b = 0; b < B; b++) {
        const int64_t cached = cache_seqlens[b];
        if (cached < 0)
            FAIL(FW_ERR_INVALID_VALUE, "cache.seqlens[%lld] is %lld; cached lengths must be >= 0", (long long)b,
                 (long long)cached);
        const int64_t lq = cu_seqlens_q ? (int64_t)cu_seqlens_q[b + 1] - cu_seqlens_q[b] : p->seqlen_q;
        const int64_t keys = cached + (p->k_new ? lq : 0);
        if (keys > p->capacity) {
            if (p->k_new)
                FAIL(FW_ERR_INVALID_VALUE, "cache.seqlens[%lld] + new tokens = %lld + %lld = %lld is above the cache's "
                                           "capacity %lld keys%s",
                     (long long)b, (long long)cached, (long long)lq, (long long)keys, (long long)p->capacity,
                     p->block_table ? " (max_pages_per_seq x page_size)" : " (cache.k.size[2])");
            FAIL(FW_ERR_INVALID_VALUE, "cache.seqlens[%lld] is %lld, above the cache's capacity %lld keys%s", (long long)b,
                 (long long)cached, (long long)p->capacity,
                 p->block_table ? " (max_pages_per_seq x page_size)" : " (cache.k.size[2])");
        }
        if (!p->block_table) continue;
        /* only the pages a sequence uses are read: engines leave the rest of a row unset */
        const int64_t pages = (keys + p->page_size - 1) / p->page_size;
        for (int64_t j = 0; j < pages; j++) {
            const int32_t e = block_table[b * p->block_table_stride + j];
            if (e < 0 || e >= p->num_pages)
                FAIL(FW_ERR_INVALID_VALUE, "cache.block_table[%lld][%lld] is %d, outside the page pool [0, %lld) "
                                           "(num_pages = cache.k.size[0]); sequence %lld uses its first %lld pages",
                     (long long)b, (long long)j, e, (long long)p->num_pages, (long long)b, (long long)pages);
        }
    }
    return FW_OK;
}

/* ---- work of a serving problem ------------------------------------------------------------------ */

/* Visible (query, key) pairs of one sequence with lq queries and lk keys under p's mask. */
static double seq_pairs(const fw_problem *p, int64_t lq, int64_t lk)
{
    if (!p->has_window) return (double)lq * (double)lk;
    double pairs = 0;
    for (int64_t i = 0; i < lq; i++) {
        int64_t lo, hi;
        fw_seq_key_range(p, lq, lk, i, &lo, &hi);
        if (hi > lo) pairs += (double)(hi - lo);
    }
    return pairs;
}

double fw_serving_pairs(const fw_problem *p)
{
    /* device-resident lengths are not read: the bounds (max_seqlen_q, max_seqlen_k or capacity) */
    if (p->device.kind != FW_DEVICE_CPU) return (double)p->batch * seq_pairs(p, p->seqlen_q, p->seqlen_k);
    double pairs = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t r0, lq;
        fw_seq_q(p, b, &r0, &lq);
        pairs += seq_pairs(p, lq, fw_seq_k_len(p, b));
    }
    return pairs;
}
