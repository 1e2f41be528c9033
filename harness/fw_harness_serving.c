/* Serving cases of the harness: ragged batches (varlen) and KV caches (contiguous or paged with a
 * shuffled block table, with or without appended tokens, q dense or packed). Inputs and int32 arrays
 * on the run's device; the reference is cpu-ref through the same public call on float32 host copies;
 * the comparison covers exactly the rows that exist (through the per-sequence accessors), the LSE in
 * its layout, and every element of the cache after the call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fw_harness_impl.h"

fw_case fw_case_serving(fw_case_kind kind, int nseq, const int32_t *seq_q, const int32_t *seq_k, int64_t heads,
                        int64_t kv_heads, int64_t head_dim, fw_dtype dtype, uint64_t seed)
{
    fw_case c = fw_case_shape(nseq, heads, kv_heads, 1, 1, head_dim, dtype, seed);
    c.kind = kind;
    const int n = nseq < FW_CASE_MAX_SEQS ? nseq : FW_CASE_MAX_SEQS;
    int32_t mq = 0, mk = 0;
    for (int b = 0; b < n; b++) {
        c.seq_q[b] = seq_q[b];
        c.seq_k[b] = seq_k[b];
        if (seq_q[b] > mq) mq = seq_q[b];
        if (seq_k[b] > mk) mk = seq_k[b];
        if (seq_q[b] != seq_q[0]) c.q_packed = kind == FW_CASE_KVCACHE;
    }
    c.seqlen_q = mq;
    c.seqlen_k = mk;
    return c;
}

static size_t list_text(char *buf, size_t len, const char *name, const int32_t *v, int64_t n)
{
    size_t k = (size_t)snprintf(buf, len, " %s[", name);
    for (int64_t b = 0; b < n && k < len; b++) {
        if (b == 6 && n > 8) {
            k += (size_t)snprintf(buf + k, len - k, "..,%d", v[n - 1]);
            break;
        }
        k += (size_t)snprintf(buf + k, len - k, "%s%d", b ? "," : "", v[b]);
    }
    if (k < len) k += (size_t)snprintf(buf + k, len - k, "]");
    return k;
}

const char *fwh_serving_label(const fw_case *c, char *buf, size_t len)
{
    const fw_attn_params *p = &c->params;
    const int kv = c->kind == FW_CASE_KVCACHE;
    size_t k = (size_t)snprintf(buf, len, "%s", kv ? "kvcache" : "varlen");
    if (kv && c->page_size && k < len) k += (size_t)snprintf(buf + k, len - k, " paged%d", c->page_size);
    if (kv && !c->page_size && k < len) k += (size_t)snprintf(buf + k, len - k, " contiguous");
    if (kv && c->append && k < len) k += (size_t)snprintf(buf + k, len - k, " append");
    if (kv && c->q_packed && k < len) k += (size_t)snprintf(buf + k, len - k, " q-packed");
    if (k < len) k += (size_t)snprintf(buf + k, len - k, " B%lld", (long long)c->batch);
    if (k < len) k += list_text(buf + k, len - k, kv ? "new" : "q", c->seq_q, c->batch);
    if (k < len) k += list_text(buf + k, len - k, kv ? "cached" : "k", c->seq_k, c->batch);
    if (k < len)
        snprintf(buf + k, len - k, " H%lld/%lld D%lld %s %s pad%d%s wl%lld wr%lld%s seed%llu", (long long)c->heads,
                 (long long)c->kv_heads, (long long)c->head_dim, fw_dtype_name(c->dtype), c->layout_bshd ? "bshd" : "bhsd",
                 c->pad, p->causal ? " causal" : "", (long long)p->window_left, (long long)p->window_right,
                 c->want_lse ? " lse" : "", (unsigned long long)c->seed);
    return buf;
}

/* ---- geometry -------------------------------------------------------------------------------- */
typedef struct geometry {
    int64_t B, total_q, total_k, Lq, capacity, page_size, max_pages, num_pages;
    int q_packed, kv, paged;
    size_t off_cu_q, off_cu_k, off_seqlens, off_table;
} geometry;

static fw_status plan_geometry(const fw_case *c, geometry *g, char *msg, size_t len)
{
    memset(g, 0, sizeof *g);
    g->B = c->batch;
    g->kv = c->kind == FW_CASE_KVCACHE;
    g->q_packed = !g->kv || c->q_packed;
    g->paged = g->kv && c->page_size > 0;
    g->page_size = c->page_size;
    if (g->B < 1 || g->B > FW_CASE_MAX_SEQS) {
        snprintf(msg, len, "a serving case has 1..%d sequences, not %lld", FW_CASE_MAX_SEQS, (long long)g->B);
        return FW_ERR_INVALID_SHAPE;
    }
    int64_t max_need = 0;
    for (int64_t b = 0; b < g->B; b++) {
        if (c->seq_q[b] < 0 || c->seq_k[b] < 0) {
            snprintf(msg, len, "sequence %lld has a negative length (%d queries, %d keys)", (long long)b, c->seq_q[b],
                     c->seq_k[b]);
            return FW_ERR_INVALID_SHAPE;
        }
        if (!g->q_packed && c->seq_q[b] != c->seq_q[0]) {
            snprintf(msg, len, "new queries of a KV-cache case differ per sequence (%d, %d): q must be packed",
                     c->seq_q[0], c->seq_q[b]);
            return FW_ERR_INVALID_SHAPE;
        }
        g->total_q += c->seq_q[b];
        g->total_k += c->seq_k[b];
        const int64_t need = (int64_t)c->seq_k[b] + (c->append ? c->seq_q[b] : 0);
        if (need > max_need) max_need = need;
    }
    g->Lq = c->seq_q[0];
    if (g->paged) {
        const int64_t ps = g->page_size;
        const int64_t cap = c->capacity > 0 ? c->capacity : (max_need > 0 ? max_need : 1);
        g->max_pages = (cap + ps - 1) / ps;
        g->capacity = g->max_pages * ps;
        for (int64_t b = 0; b < g->B; b++)
            g->num_pages += ((int64_t)c->seq_k[b] + (c->append ? c->seq_q[b] : 0) + ps - 1) / ps;
        g->num_pages += 2; /* pages no sequence uses (NaN): a wrong table entry reads them */
    } else if (g->kv) {
        g->capacity = c->capacity > 0 ? c->capacity : max_need + 3;
    }
    const int64_t row = c->head_dim + c->pad, qs = g->q_packed ? g->total_q : g->Lq, qb = g->q_packed ? 1 : g->B;
    const int64_t kb = !g->kv ? 1 : g->paged ? g->num_pages : g->B;
    const int64_t ks = !g->kv ? g->total_k : g->paged ? g->page_size : g->capacity;
    fw_status st = fwh_check_elems("q", qb, c->heads, qs > 0 ? qs : 1, row, c->dtype, msg, len);
    if (st == FW_OK) st = fwh_check_elems("the keys", kb, c->kv_heads, ks > 0 ? ks : 1, row, c->dtype, msg, len);
    if (st != FW_OK) return st;
    g->off_cu_q = 0;
    g->off_cu_k = (size_t)g->B + 1;
    g->off_seqlens = 2 * ((size_t)g->B + 1);
    g->off_table = g->off_seqlens + (size_t)g->B;
    return FW_OK;
}

static void fill_ints(const fw_case *c, const geometry *g, int32_t *ints)
{
    int32_t *cu_q = ints + g->off_cu_q, *cu_k = ints + g->off_cu_k, *sl = ints + g->off_seqlens;
    cu_q[0] = cu_k[0] = 0;
    for (int64_t b = 0; b < g->B; b++) {
        cu_q[b + 1] = cu_q[b] + c->seq_q[b];
        cu_k[b + 1] = cu_k[b] + c->seq_k[b];
        sl[b] = c->seq_k[b];
    }
    if (!g->paged) return;
    /* pages handed out from a shuffled pool; entries past a sequence's last page are -1 (never read) */
    int32_t *perm = (int32_t *)malloc((size_t)g->num_pages * sizeof(int32_t));
    if (!perm) return;
    uint64_t seed = c->seed * 0x9e3779b97f4a7c15ull + 5;
    for (int64_t i = 0; i < g->num_pages; i++) perm[i] = (int32_t)i;
    for (int64_t i = g->num_pages - 1; i > 0; i--) {
        const int64_t j = (int64_t)(fw_rng_next(&seed) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t next = 0;
    int32_t *table = ints + g->off_table;
    for (int64_t b = 0; b < g->B; b++) {
        const int64_t need = (int64_t)c->seq_k[b] + (c->append ? c->seq_q[b] : 0);
        const int64_t used = (need + g->page_size - 1) / g->page_size;
        for (int64_t j = 0; j < g->max_pages; j++) table[b * g->max_pages + j] = j < used ? perm[next++] : -1;
    }
    free(perm);
}

/* Descriptors of the call's tensors over the given buffers (NULL: only the element counts). */
static void describe_all(fw_run *r, const geometry *g, void *q, void *k, void *v, void *o, void *kn, void *vn)
{
    const fw_case *c = &r->c;
    const int64_t qb = g->q_packed ? 1 : g->B, qs = g->q_packed ? g->total_q : g->Lq;
    size_t scratch;
    r->q = fwh_describe(q, c, qb, c->heads, qs, &r->q_elems);
    r->o = fwh_describe(o, c, qb, c->heads, qs, &r->o_elems);
    if (!g->kv) {
        r->k = fwh_describe(k, c, 1, c->kv_heads, g->total_k, &r->kv_elems);
        r->v = fwh_describe(v, c, 1, c->kv_heads, g->total_k, &scratch);
    } else if (g->paged) {
        r->k = fwh_describe(k, c, g->num_pages, c->kv_heads, g->page_size, &r->kv_elems);
        r->v = fwh_describe(v, c, g->num_pages, c->kv_heads, g->page_size, &scratch);
    } else {
        r->k = fwh_describe(k, c, g->B, c->kv_heads, g->capacity, &r->kv_elems);
        r->v = fwh_describe(v, c, g->B, c->kv_heads, g->capacity, &scratch);
    }
    r->kn_elems = 0;
    if (g->kv && c->append) {
        r->k_new = fwh_describe(kn, c, qb, c->kv_heads, qs, &r->kn_elems);
        r->v_new = fwh_describe(vn, c, qb, c->kv_heads, qs, &scratch);
    }
    r->lse_elems = (size_t)(c->heads * g->total_q);
}

/* The varlen / cache descriptions over int32 arrays at ints. */
static void describe_ints(fw_run *r, const geometry *g, int32_t *ints)
{
    memset(&r->seqs, 0, sizeof r->seqs);
    r->seqs.batch = g->B;
    r->seqs.cu_seqlens_q = ints + g->off_cu_q;
    r->seqs.cu_seqlens_k = g->kv ? NULL : ints + g->off_cu_k;
    r->seqs.max_seqlen_q = r->c.seqlen_q > 0 ? r->c.seqlen_q : 1;
    r->seqs.max_seqlen_k = r->c.seqlen_k > 0 ? r->c.seqlen_k : 1;
    memset(&r->cache, 0, sizeof r->cache);
    if (!g->kv) return;
    r->cache.k = r->k;
    r->cache.v = r->v;
    r->cache.seqlens = ints + g->off_seqlens;
    r->cache.block_table = g->paged ? ints + g->off_table : NULL;
    r->cache.max_pages_per_seq = g->paged ? g->max_pages : 0;
}

static fw_status validate_call(const fw_run *r, fw_problem *p, char *msg, size_t len)
{
    const int append = r->c.kind == FW_CASE_KVCACHE && r->c.append;
    if (r->c.kind == FW_CASE_VARLEN)
        return fw_validate_varlen(&r->q, &r->k, &r->v, &r->o, r->lse, &r->seqs, &r->c.params, p, msg, len);
    return fw_validate_kvcache(&r->q, &r->cache, append ? &r->k_new : NULL, append ? &r->v_new : NULL, &r->o, r->lse,
                               r->c.q_packed ? &r->seqs : NULL, &r->c.params, p, msg, len);
}

/* The call's problem with host pointers throughout (host images, host int32 arrays), for the FLOP
 * count, the accessors of the comparison, and the cache's initial contents. */
static fw_status host_problem(fw_run *r, const geometry *g, fw_problem *p, char *msg, size_t len)
{
    fw_run h = *r;
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    h.c.device = cpu;
    describe_all(&h, g, r->host_q, r->host_k, r->host_v, r->host_o, r->host_kn, r->host_vn);
    h.lse = r->c.want_lse ? r->host_lse : NULL;
    describe_ints(&h, g, r->host_ints);
    fw_status st = validate_call(&h, p, msg, len);
    if (st == FW_OK)
        st = fw_validate_serving_values(p, p->cu_seqlens_q, p->cu_seqlens_k, p->cache_seqlens, p->block_table, msg, len);
    return st;
}

/* ---- allocation ---------------------------------------------------------------------------- */

/* The cache's initial image: NaN everywhere, random rows for the keys already cached. */
static void fill_cache(const fw_run *r, const fw_problem *hp, void *host, uint64_t *seed)
{
    const fw_case *c = &r->c;
    const size_t es = fw_dtype_size(c->dtype);
    fwh_poison_host(host, c->dtype, r->kv_elems);
    for (int64_t b = 0; b < hp->batch; b++)
        for (int64_t hk = 0; hk < hp->kv_heads; hk++)
            for (int64_t j = 0; j < c->seq_k[b]; j++)
                fwh_fill_random((char *)host + (size_t)fw_key_offset(hp, hp->k_stride, b, hk, j) * es, c->dtype,
                                (size_t)c->head_dim, seed);
}

fw_status fwh_serving_alloc(fw_run *r, const fw_case *c, char *msg, size_t len)
{
    geometry g;
    fw_status st = plan_geometry(c, &g, msg, len);
    if (st != FW_OK) return st;
    const size_t es = fw_dtype_size(c->dtype);
    describe_all(r, &g, NULL, NULL, NULL, NULL, NULL, NULL);
    r->n_ints = g.off_table + (size_t)(g.paged ? g.B * g.max_pages : 0);
    r->host_q = malloc(r->q_elems * es);
    r->host_k = malloc(r->kv_elems * es);
    r->host_v = malloc(r->kv_elems * es);
    r->host_o = malloc(r->o_elems * es);
    r->host_lse = (float *)malloc((r->lse_elems ? r->lse_elems : 1) * sizeof(float));
    r->host_ints = (int32_t *)calloc(r->n_ints, sizeof(int32_t));
    if (r->kn_elems) {
        r->host_kn = malloc(r->kn_elems * es);
        r->host_vn = malloc(r->kn_elems * es);
    }
    if (!r->host_q || !r->host_k || !r->host_v || !r->host_o || !r->host_lse || !r->host_ints ||
        (r->kn_elems && (!r->host_kn || !r->host_vn))) {
        snprintf(msg, len, "out of host memory for the inputs");
        fw_run_free(r);
        return FW_ERR_OUT_OF_MEMORY;
    }
    fill_ints(c, &g, r->host_ints);
    fw_problem hp;
    if ((st = host_problem(r, &g, &hp, msg, len)) != FW_OK) {
        fw_run_free(r);
        return st;
    }
    uint64_t seed = c->seed * 0x2545f4914f6cdd1dull + 17;
    fwh_fill_random(r->host_q, c->dtype, r->q_elems, &seed);
    if (g.kv) {
        fill_cache(r, &hp, r->host_k, &seed);
        fill_cache(r, &hp, r->host_v, &seed);
    } else {
        fwh_fill_random(r->host_k, c->dtype, r->kv_elems, &seed);
        fwh_fill_random(r->host_v, c->dtype, r->kv_elems, &seed);
    }
    if (r->kn_elems) {
        fwh_fill_random(r->host_kn, c->dtype, r->kn_elems, &seed);
        fwh_fill_random(r->host_vn, c->dtype, r->kn_elems, &seed);
    }

    /* the call's buffers: on the cpu the read-only ones are the host images; the cache is its own
     * buffer there too, so that fw_run_poison can put the initial image back */
    void *dq = r->host_q, *dk = r->host_k, *dv = r->host_v, *dout = r->host_o, *dlse = r->host_lse;
    void *dkn = r->host_kn, *dvn = r->host_vn, *dints = r->host_ints;
    const int gpu = fwh_on_gpu(r);
    if (gpu) {
        dq = dk = dv = dout = dlse = dkn = dvn = dints = NULL;
        if ((st = fwh_dev_alloc(r, &dq, r->q_elems * es)) || (st = fwh_dev_alloc(r, &dout, r->o_elems * es)) ||
            (st = fwh_dev_alloc(r, &dlse, r->lse_elems * sizeof(float))) ||
            (st = fwh_dev_alloc(r, &dints, r->n_ints * sizeof(int32_t))) ||
            (r->kn_elems && ((st = fwh_dev_alloc(r, &dkn, r->kn_elems * es)) ||
                             (st = fwh_dev_alloc(r, &dvn, r->kn_elems * es)))))
            goto fail;
    }
    if (gpu || g.kv) {
        dk = dv = NULL;
        if ((st = fwh_dev_alloc(r, &dk, r->kv_elems * es)) || (st = fwh_dev_alloc(r, &dv, r->kv_elems * es))) goto fail;
    }
    describe_all(r, &g, dq, dk, dv, dout, dkn, dvn);
    r->lse = c->want_lse ? (float *)dlse : NULL;
    if (gpu) {
        r->dev_ints = dints;
        if (!c->want_lse) fwh_dev_free(r, dlse);
    }
    describe_ints(r, &g, (int32_t *)dints);
    if ((st = fwh_copy(r, dq, r->host_q, r->q_elems * es, 1)) || (st = fwh_copy(r, dk, r->host_k, r->kv_elems * es, 1)) ||
        (st = fwh_copy(r, dv, r->host_v, r->kv_elems * es, 1)) ||
        (st = fwh_copy(r, dints, r->host_ints, r->n_ints * sizeof(int32_t), 1)) ||
        (r->kn_elems && ((st = fwh_copy(r, dkn, r->host_kn, r->kn_elems * es, 1)) ||
                         (st = fwh_copy(r, dvn, r->host_vn, r->kn_elems * es, 1))))) {
        snprintf(msg, len, "copy of the inputs to the device failed");
        fw_run_free(r);
        return st;
    }
    if (gpu) r->problem = hp; /* host values: the FLOP count and the comparison read them */
    else if ((st = validate_call(r, &r->problem, msg, len)) != FW_OK) {
        fw_run_free(r);
        return st;
    }
    return FW_OK;
fail:
    snprintf(msg, len, "device allocation failed (%s)", fw_status_string(st));
    if (gpu) {
        fwh_dev_free(r, dq); fwh_dev_free(r, dout); fwh_dev_free(r, dlse); fwh_dev_free(r, dints);
        fwh_dev_free(r, dkn); fwh_dev_free(r, dvn);
    }
    fwh_dev_free(r, dk == r->host_k ? NULL : dk);
    fwh_dev_free(r, dv == r->host_v ? NULL : dv);
    r->q.data = r->k.data = r->v.data = r->o.data = NULL;
    r->lse = NULL;
    r->k_new.data = r->v_new.data = NULL;
    fw_run_free(r);
    return st;
}

void fwh_serving_free(fw_run *r)
{
    if (fwh_on_gpu(r)) {
        fwh_dev_free(r, r->k_new.data);
        fwh_dev_free(r, r->v_new.data);
        fwh_dev_free(r, r->dev_ints);
        free(r->host_kc);
        free(r->host_vc);
    } else if (r->c.kind == FW_CASE_KVCACHE) {
        if (r->k.data != r->host_k) free(r->k.data);
        if (r->v.data != r->host_v) free(r->v.data);
    }
    free(r->host_kn); free(r->host_vn); free(r->host_ints); free(r->ref_k); free(r->ref_v);
}

/* ---- calls ------------------------------------------------------------------------------------ */
fw_status fwh_serving_poison(fw_run *r)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    fwh_poison_host(r->host_o, r->c.dtype, r->o_elems);
    fwh_poison_host(r->host_lse, FW_F32, r->lse_elems);
    fw_status st = fwh_copy(r, r->o.data, r->host_o, r->o_elems * es, 1);
    if (st == FW_OK && r->lse) st = fwh_copy(r, r->lse, r->host_lse, r->lse_elems * sizeof(float), 1);
    if (st == FW_OK && r->c.kind == FW_CASE_KVCACHE) {
        st = fwh_copy(r, r->k.data, r->host_k, r->kv_elems * es, 1);
        if (st == FW_OK) st = fwh_copy(r, r->v.data, r->host_v, r->kv_elems * es, 1);
    }
    return st;
}

fw_status fwh_serving_call(fw_run *r, fw_context *ctx)
{
    if (r->c.kind == FW_CASE_VARLEN)
        return fw_attention_varlen_forward(ctx, &r->q, &r->k, &r->v, &r->o, r->lse, &r->seqs, &r->c.params);
    const int append = r->c.append;
    return fw_attention_kvcache_forward(ctx, &r->q, &r->cache, append ? &r->k_new : NULL, append ? &r->v_new : NULL,
                                        &r->o, r->lse, r->c.q_packed ? &r->seqs : NULL, &r->c.params);
}

fw_status fwh_serving_problem(const fw_run *r, fw_problem *p, char *msg, size_t len)
{
    return validate_call(r, p, msg, len);
}

fw_status fwh_serving_supports(const fw_run *r, const char *name, char *why, size_t why_len)
{
    char dummy[1];
    if (!why || !why_len) { why = dummy; why_len = sizeof dummy; }
    why[0] = 0;
    const fw_backend *b = fw_registry_find(name);
    if (!b) {
        snprintf(why, why_len, "backend '%s' is not compiled into this build", name);
        return FW_ERR_NO_BACKEND;
    }
    if (b->device != r->c.device.kind) {
        snprintf(why, why_len, "backend '%s' runs on %s, the tensors are on %s", name,
                 b->device == FW_DEVICE_CUDA ? "cuda" : "cpu", r->c.device.kind == FW_DEVICE_CUDA ? "cuda" : "cpu");
        return FW_ERR_UNSUPPORTED;
    }
    fw_problem p;
    fw_status st = validate_call(r, &p, why, why_len);
    if (st != FW_OK) return st;
    if (!b->available(why, why_len) || !b->supports(&p, why, why_len)) return FW_ERR_UNSUPPORTED;
    return FW_OK;
}

double fwh_serving_bytes(const fw_run *r, int kv_only)
{
    const fw_problem *p = &r->problem;
    const double es = (double)fw_dtype_size(p->dtype), D = (double)p->head_dim;
    double keys = 0, rows = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t r0, lq;
        fw_seq_q(p, b, &r0, &lq);
        keys += (double)fw_seq_k_len(p, b);
        rows += (double)lq;
    }
    const double kv = 2.0 * keys * (double)p->kv_heads * D * es;
    if (kv_only) return kv;
    double bytes = kv + 2.0 * rows * (double)p->heads * D * es; /* q read, o written */
    if (r->lse) bytes += 4.0 * rows * (double)p->heads;
    if (p->k_new) bytes += 4.0 * rows * (double)p->kv_heads * D * es; /* new k, v read and written */
    return bytes;
}

/* ---- reference and comparison ------------------------------------------------------------------ */
float *fwh_to_f32(const void *host, fw_dtype t, size_t n)
{
    float *out = (float *)malloc((n ? n : 1) * sizeof(float));
    if (out)
        for (size_t i = 0; i < n; i++) out[i] = fw_load_f32(host, t, (int64_t)i);
    return out;
}

fw_tensor fwh_as_f32(fw_tensor t, void *data)
{
    t.data = data;
    t.dtype = FW_F32;
    t.device.kind = FW_DEVICE_CPU;
    t.device.index = 0;
    return t;
}

fw_varlen fwh_host_seqs(const fw_run *r)
{
    fw_varlen seqs = r->seqs;
    const int32_t *ints = r->host_ints, *dev = fwh_on_gpu(r) ? (const int32_t *)r->dev_ints : ints;
    seqs.cu_seqlens_q = seqs.cu_seqlens_q ? ints + (seqs.cu_seqlens_q - dev) : NULL;
    seqs.cu_seqlens_k = seqs.cu_seqlens_k ? ints + (seqs.cu_seqlens_k - dev) : NULL;
    return seqs;
}

/* cpu-ref through the same public call on float32 copies of the host images (elementwise, so every
 * offset is the same), and the input-dtype emulation on them for f16/bf16. */
static fw_status serving_reference(fw_run *r)
{
    const fw_case *c = &r->c;
    const size_t n_q = r->q_elems, n_kv = r->kv_elems, n_kn = r->kn_elems;
    float *q = fwh_to_f32(r->host_q, c->dtype, n_q), *k = fwh_to_f32(r->host_k, c->dtype, n_kv);
    float *v = fwh_to_f32(r->host_v, c->dtype, n_kv);
    float *kn = n_kn ? fwh_to_f32(r->host_kn, c->dtype, n_kn) : NULL;
    float *vn = n_kn ? fwh_to_f32(r->host_vn, c->dtype, n_kn) : NULL;
    free(r->ref_o); free(r->ref_lse); free(r->lowp_o); free(r->ref_k); free(r->ref_v);
    r->ref_o = (float *)malloc(r->o_elems * sizeof(float));
    r->ref_lse = (float *)malloc((r->lse_elems ? r->lse_elems : 1) * sizeof(float));
    r->lowp_o = NULL;
    r->ref_k = r->ref_v = NULL;
    fw_status st = FW_ERR_OUT_OF_MEMORY;
    fw_context *ctx = NULL;
    if (q && k && v && (!n_kn || (kn && vn)) && r->ref_o && r->ref_lse && fw_context_create(&ctx) == FW_OK) {
        fwh_poison_host(r->ref_o, FW_F32, r->o_elems);
        fw_tensor tq = fwh_as_f32(r->q, q), tk = fwh_as_f32(r->k, k), tv = fwh_as_f32(r->v, v);
        fw_tensor to = fwh_as_f32(r->o, r->ref_o);
        fw_tensor tkn = fwh_as_f32(r->k_new, kn), tvn = fwh_as_f32(r->v_new, vn);
        fw_varlen seqs = fwh_host_seqs(r);
        int32_t *ints = r->host_ints;
        fw_context_set_backend(ctx, "cpu-ref");
        /* the host copies of the int32 arrays, at the same offsets as on the device */
        const int32_t *dev = fwh_on_gpu(r) ? (const int32_t *)r->dev_ints : ints;
        if (c->kind == FW_CASE_VARLEN) {
            st = fw_attention_varlen_forward(ctx, &tq, &tk, &tv, &to, r->ref_lse, &seqs, &c->params);
        } else {
            fw_kv_cache cache = r->cache;
            cache.k = tk;
            cache.v = tv;
            cache.seqlens = ints + (cache.seqlens - dev);
            cache.block_table = cache.block_table ? ints + (cache.block_table - dev) : NULL;
            st = fw_attention_kvcache_forward(ctx, &tq, &cache, n_kn ? &tkn : NULL, n_kn ? &tvn : NULL, &to, r->ref_lse,
                                              c->q_packed ? &seqs : NULL, &c->params);
        }
        if (st != FW_OK) fprintf(stderr, "harness: reference failed: %s\n", fw_context_last_error(ctx));
        fw_context_destroy(ctx);
    }
    if (st == FW_OK && c->dtype != FW_F32) {
        r->lowp_o = (float *)malloc(r->o_elems * sizeof(float));
        if (!r->lowp_o) st = FW_ERR_OUT_OF_MEMORY;
        else {
            fw_problem hp = r->problem; /* the same offsets over the f32 copies (the cache after the append) */
            hp.q = q; hp.k = k; hp.v = v; hp.dtype = FW_F32;
            if (fwh_on_gpu(r)) hp.device.kind = FW_DEVICE_CPU;
            fwh_lowp_attention(&hp, c->dtype, r->lowp_o);
        }
    }
    if (st == FW_OK && c->kind == FW_CASE_KVCACHE) {
        r->ref_k = k; /* the cache as it must be after the call */
        r->ref_v = v;
        k = v = NULL;
    }
    free(q); free(k); free(v); free(kn); free(vn);
    r->have_ref = st == FW_OK;
    return st;
}

fw_status fwh_serving_compare(fw_run *r, fw_errors *e)
{
    const fw_case *c = &r->c;
    const fw_problem *p = &r->problem;
    const size_t es = fw_dtype_size(c->dtype);
    fw_status st;
    memset(e, 0, sizeof *e);
    if (!r->have_ref && (st = serving_reference(r)) != FW_OK) return st;
    if ((st = fwh_copy(r, r->host_o, r->o.data, r->o_elems * es, 0))) return st;
    if (r->lse && (st = fwh_copy(r, r->host_lse, r->lse, r->lse_elems * sizeof(float), 0))) return st;
    const void *kc = r->k.data, *vc = r->v.data;
    if (c->kind == FW_CASE_KVCACHE && fwh_on_gpu(r)) {
        if (!r->host_kc) r->host_kc = malloc(r->kv_elems * es);
        if (!r->host_vc) r->host_vc = malloc(r->kv_elems * es);
        if (!r->host_kc || !r->host_vc) return FW_ERR_OUT_OF_MEMORY;
        if ((st = fwh_copy(r, r->host_kc, r->k.data, r->kv_elems * es, 0)) ||
            (st = fwh_copy(r, r->host_vc, r->v.data, r->kv_elems * es, 0)))
            return st;
        kc = r->host_kc;
        vc = r->host_vc;
    }
    /* max |V| over the values a call may read (the cache's NaN rows excluded) */
    const float *vref = r->ref_v;
    for (size_t i = 0; i < r->kv_elems; i++) {
        const double a = fabs(vref ? (double)vref[i] : (double)fw_load_f32(r->host_v, c->dtype, (int64_t)i));
        if (isfinite(a) && a > e->max_abs_v) e->max_abs_v = a;
    }
    for (size_t i = 0; i < r->kn_elems; i++) {
        const double a = fabs((double)fw_load_f32(r->host_vn, c->dtype, (int64_t)i));
        if (a > e->max_abs_v) e->max_abs_v = a;
    }
    double acc[2] = {0, 0};
    int lse_ok = 1;
    const int64_t D = c->head_dim, row = D + c->pad;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t r0, lq;
        fw_seq_q(p, b, &r0, &lq);
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t i = 0; i < lq; i++) {
                const int64_t base = fw_row_offset(p, p->o_stride, b, h, i);
                for (int64_t d = D; d < row; d++)
                    if (!fwh_is_poison(r->host_o, c->dtype, base + d)) e->stray++;
                for (int64_t d = 0; d < D; d++)
                    fwh_compare_elem(e, r->host_o, c->dtype, base + d, r->ref_o[base + d],
                                     r->lowp_o ? &r->lowp_o[base + d] : NULL, acc);
                if (r->lse) {
                    const int64_t li = fw_lse_index(p, b, h, i);
                    lse_ok &= fwh_compare_lse(e, r->host_lse[li], r->ref_lse[li], c);
                }
            }
    }
    /* every element of the cache: the appended rows hold the new tokens, nothing else changed */
    if (c->kind == FW_CASE_KVCACHE)
        for (size_t i = 0; i < r->kv_elems; i++) {
            const float xk = fw_load_f32(kc, c->dtype, (int64_t)i), xv = fw_load_f32(vc, c->dtype, (int64_t)i);
            const float yk = r->ref_k[i], yv = r->ref_v[i];
            e->cache_mismatch += (isnan(xk) ? !isnan(yk) : xk != yk) || (isnan(xv) ? !isnan(yv) : xv != yv);
        }
    fwh_errors_finish(e, c, acc, lse_ok);
    return FW_OK;
}
