/* The harness's backward: gradient buffers, the float64 reference (cpu-ref's backward) and the
 * input-dtype emulation the contract measures f16/bf16 against, and the comparison; dense runs and
 * ragged (varlen) runs alike, through the per-sequence accessors. */
#include "fw_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fw_harness_impl.h"

static fw_tensor with_data(fw_tensor t, void *data)
{
    t.data = data;
    return t;
}

void fw_bwd_free(fw_run *r, fw_bwd *b)
{
    if (fwh_on_gpu(r)) {
        fwh_dev_free(r, b->dout.data); fwh_dev_free(r, b->dq.data); fwh_dev_free(r, b->dk.data); fwh_dev_free(r, b->dv.data);
    }
    free(b->host_dout); free(b->host_dq); free(b->host_dk); free(b->host_dv);
    for (int g = 0; g < 3; g++) { free(b->ref[g]); free(b->lowp[g]); }
    memset(b, 0, sizeof *b);
}

fw_status fw_bwd_alloc_grads(fw_run *r, fw_bwd *b, uint64_t seed, char *msg, size_t len)
{
    memset(b, 0, sizeof *b);
    if (len) msg[0] = 0;
    const fw_case *c = &r->c;
    if (!r->lse) {
        snprintf(msg, len, "the backward needs a run made with want_lse");
        return FW_ERR_INVALID_VALUE;
    }
    if (c->kind == FW_CASE_KVCACHE) {
        snprintf(msg, len, "a KV-cache call has no backward (dense and ragged calls do)");
        return FW_ERR_NOT_IMPLEMENTED;
    }
    const size_t es = fw_dtype_size(c->dtype);
    b->host_dout = malloc(r->o_elems * es);
    b->host_dq = malloc(r->q_elems * es);
    b->host_dk = malloc(r->kv_elems * es);
    b->host_dv = malloc(r->kv_elems * es);
    if (!b->host_dout || !b->host_dq || !b->host_dk || !b->host_dv) {
        snprintf(msg, len, "out of host memory for the gradients");
        fw_bwd_free(r, b);
        return FW_ERR_OUT_OF_MEMORY;
    }
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 91;
    fwh_fill_random(b->host_dout, c->dtype, r->o_elems, &s);
    fw_status st = FW_OK;
    void *ddo, *ddq, *ddk, *ddv;
    if (!fwh_on_gpu(r)) {
        ddo = b->host_dout; ddq = b->host_dq; ddk = b->host_dk; ddv = b->host_dv;
    } else {
        ddo = ddq = ddk = ddv = NULL;
        if ((st = fwh_dev_alloc(r, &ddo, r->o_elems * es)) || (st = fwh_dev_alloc(r, &ddq, r->q_elems * es)) ||
            (st = fwh_dev_alloc(r, &ddk, r->kv_elems * es)) || (st = fwh_dev_alloc(r, &ddv, r->kv_elems * es))) {
            snprintf(msg, len, "device allocation of the gradients failed (%s)", fw_status_string(st));
            b->dout.data = ddo; b->dq.data = ddq; b->dk.data = ddk; b->dv.data = ddv;
            fw_bwd_free(r, b);
            return st;
        }
    }
    b->dout = with_data(r->o, ddo);
    b->dq = with_data(r->q, ddq);
    b->dk = with_data(r->k, ddk);
    b->dv = with_data(r->v, ddv);
    st = fwh_copy(r, ddo, b->host_dout, r->o_elems * es, 1);
    if (st != FW_OK) {
        snprintf(msg, len, "copy of dO to the device failed");
        fw_bwd_free(r, b);
    }
    return st;
}

fw_status fw_bwd_alloc(fw_run *r, fw_bwd *b, uint64_t seed, char *msg, size_t len)
{
    fw_status st = fw_bwd_alloc_grads(r, b, seed, msg, len);
    if (st != FW_OK) return st;
    const fw_case *c = &r->c;
    const size_t es = fw_dtype_size(c->dtype);
    const size_t ln = c->kind == FW_CASE_DENSE ? (size_t)(c->batch * c->heads * c->seqlen_q) : r->lse_elems;
    /* O and LSE from cpu-ref on the host images, then onto the device */
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    fw_tensor hq = with_data(r->q, r->host_q), hk = with_data(r->k, r->host_k), hv = with_data(r->v, r->host_v);
    fw_tensor ho = with_data(r->o, r->host_o);
    hq.device = hk.device = hv.device = ho.device = cpu;
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) { fw_bwd_free(r, b); return FW_ERR_OUT_OF_MEMORY; }
    fw_context_set_backend(ctx, "cpu-ref");
    const fw_varlen seqs = fwh_host_seqs(r);
    st = c->kind == FW_CASE_DENSE ? fw_attention_forward(ctx, &hq, &hk, &hv, &ho, r->host_lse, &c->params)
                                  : fw_attention_varlen_forward(ctx, &hq, &hk, &hv, &ho, r->host_lse, &seqs, &c->params);
    if (st != FW_OK) snprintf(msg, len, "cpu-ref forward failed: %s", fw_context_last_error(ctx));
    fw_context_destroy(ctx);
    if (st == FW_OK) st = fwh_copy(r, r->o.data, r->host_o, r->o_elems * es, 1);
    if (st == FW_OK) st = fwh_copy(r, r->lse, r->host_lse, ln * sizeof(float), 1);
    if (st != FW_OK) {
        if (!msg[0]) snprintf(msg, len, "copy to the device failed");
        fw_bwd_free(r, b);
    }
    return st;
}

fw_status fw_bwd_poison(fw_run *r, fw_bwd *b)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    fwh_poison_host(b->host_dq, r->c.dtype, r->q_elems);
    fwh_poison_host(b->host_dk, r->c.dtype, r->kv_elems);
    fwh_poison_host(b->host_dv, r->c.dtype, r->kv_elems);
    fw_status st = fwh_copy(r, b->dq.data, b->host_dq, r->q_elems * es, 1);
    if (st == FW_OK) st = fwh_copy(r, b->dk.data, b->host_dk, r->kv_elems * es, 1);
    if (st == FW_OK) st = fwh_copy(r, b->dv.data, b->host_dv, r->kv_elems * es, 1);
    return st;
}

fw_status fwh_bwd_call(fw_run *r, fw_bwd *b, fw_context *ctx)
{
    if (r->c.kind == FW_CASE_VARLEN)
        return fw_attention_varlen_backward(ctx, &r->q, &r->k, &r->v, &r->o, r->lse, &b->dout, &b->dq, &b->dk, &b->dv,
                                            &r->seqs, &r->c.params);
    return fw_attention_backward(ctx, &r->q, &r->k, &r->v, &r->o, r->lse, &b->dout, &b->dq, &b->dk, &b->dv,
                                 &r->c.params);
}

fw_status fw_bwd_run(fw_run *r, fw_bwd *b, fw_context *ctx)
{
    fw_status st = fwh_bwd_call(r, b, ctx);
    if (st != FW_OK) return st;
    return fwh_sync(r);
}

/* The backward problem of r on the tensors described (f32 host copies for the reference, or the
 * run's own) with gradient descriptors dq, dk, dv and dout; host offsets either way. */
static fw_status validate_bwd(const fw_run *r, const fw_tensor t[8], const float *lse, fw_problem *p, char *msg,
                              size_t len)
{
    if (r->c.kind == FW_CASE_VARLEN) {
        const fw_varlen seqs = fwh_host_seqs(r);
        return fw_validate_varlen_backward(&t[0], &t[1], &t[2], &t[3], lse, &t[4], &t[5], &t[6], &t[7], &seqs,
                                           &r->c.params, p, msg, len);
    }
    return fw_validate_backward(&t[0], &t[1], &t[2], &t[3], lse, &t[4], &t[5], &t[6], &t[7], &r->c.params, p, msg,
                                len);
}

fw_status fw_bwd_supports(const fw_run *r, const fw_bwd *b, const char *name, char *why, size_t why_len)
{
    char dummy[1];
    if (!why || !why_len) { why = dummy; why_len = sizeof dummy; }
    why[0] = 0;
    const fw_backend *be = fw_registry_find(name);
    if (!be) {
        snprintf(why, why_len, "backend '%s' is not compiled into this build", name);
        return FW_ERR_NO_BACKEND;
    }
    if (be->device != r->c.device.kind) {
        snprintf(why, why_len, "backend '%s' runs on %s, the tensors are on %s", name,
                 be->device == FW_DEVICE_CUDA ? "cuda" : "cpu", r->c.device.kind == FW_DEVICE_CUDA ? "cuda" : "cpu");
        return FW_ERR_UNSUPPORTED;
    }
    const fw_tensor t[8] = {r->q, r->k, r->v, r->o, b->dout, b->dq, b->dk, b->dv};
    fw_problem p;
    fw_status st = validate_bwd(r, t, r->lse, &p, why, why_len);
    if (st != FW_OK) return st;
    if (!be->available(why, why_len) || !be->supports(&p, why, why_len)) return FW_ERR_UNSUPPORTED;
    if (!be->backward) {
        snprintf(why, why_len, "backend '%s' has no backward pass", name);
        return FW_ERR_NOT_IMPLEMENTED;
    }
    return FW_OK;
}

fw_status fw_bwd_fetch(fw_run *r, fw_bwd *b)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    fw_status st = fwh_copy(r, b->host_dq, b->dq.data, r->q_elems * es, 0);
    if (st == FW_OK) st = fwh_copy(r, b->host_dk, b->dk.data, r->kv_elems * es, 0);
    if (st == FW_OK) st = fwh_copy(r, b->host_dv, b->dv.data, r->kv_elems * es, 0);
    return st;
}


/* ---- reference -------------------------------------------------------------------------------- */

/* The backward in the input dtype (what PyTorch's autograd does on f16/bf16 tensors): qs = q·scale,
 * S = qs·Kᵀ, P = softmax(S), dP = dO·Vᵀ, dS = P∘(dP − rowsum(P∘dP)) each rounded to the dtype, f32
 * accumulation inside every product; dq = (dS·K)·scale, dk = dSᵀ·qs, dv = Pᵀ·dO rounded at the end.
 * p describes f32 host copies (exact images of the dtype values) and f32 gradients, any call kind
 * through the per-sequence accessors; kv_elems: the elements of dk's (and dv's) buffer. 0 when out
 * of memory. */
static int lowp_backward(const fw_problem *p, fw_dtype t, size_t kv_elems)
{
    const int64_t D = p->head_dim, Lk = p->seqlen_k; /* Lk bounds every sequence's keys */
    const float scale = fwh_round_to(t, p->scale);
    const float *q = (const float *)p->q, *k = (const float *)p->k, *v = (const float *)p->v;
    const float *dO = (const float *)p->dout;
    float *dq = (float *)p->dq, *dk = (float *)p->dk, *dv = (float *)p->dv;
    float *dkf = (float *)calloc(kv_elems, sizeof(float)), *dvf = (float *)calloc(kv_elems, sizeof(float));
    float *S = (float *)malloc((size_t)Lk * sizeof(float)), *dP = (float *)malloc((size_t)Lk * sizeof(float));
    float *qs = (float *)malloc((size_t)D * sizeof(float)), *acc = (float *)malloc((size_t)D * sizeof(float));
    const int ok = dkf && dvf && S && dP && qs && acc;
    for (int64_t b = 0; ok && b < p->batch; b++) {
        int64_t row0, lq;
        fw_seq_q(p, b, &row0, &lq);
        const int64_t lk = fw_seq_k_len(p, b);
        for (int64_t h = 0; h < p->heads; h++) {
            const int64_t hk = h / p->group;
            for (int64_t i = 0; i < lq; i++) {
                const float *qi = q + fw_row_offset(p, p->q_stride, b, h, i);
                const float *doi = dO + fw_row_offset(p, p->do_stride, b, h, i);
                float *dqi = dq + fw_row_offset(p, p->dq_stride, b, h, i);
                int64_t lo, hi;
                fw_seq_key_range(p, lq, lk, i, &lo, &hi);
                for (int64_t d = 0; d < D; d++) { qs[d] = fwh_round_to(t, qi[d] * scale); acc[d] = 0; }
                float m = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    const float *K = k + fw_key_offset(p, p->k_stride, b, hk, j);
                    const float *V = v + fw_key_offset(p, p->v_stride, b, hk, j);
                    float s = 0, dp = 0;
                    for (int64_t d = 0; d < D; d++) { s += qs[d] * K[d]; dp += doi[d] * V[d]; }
                    S[j] = fwh_round_to(t, s);
                    dP[j] = fwh_round_to(t, dp);
                    if (S[j] > m) m = S[j];
                }
                float l = 0;
                for (int64_t j = lo; j < hi; j++) { S[j] = expf(S[j] - m); l += S[j]; }
                float delta = 0;
                for (int64_t j = lo; j < hi; j++) { S[j] = fwh_round_to(t, S[j] / l); delta += S[j] * dP[j]; }
                for (int64_t j = lo; j < hi; j++) {
                    const float P = S[j], dS = fwh_round_to(t, P * (dP[j] - delta));
                    const float *K = k + fw_key_offset(p, p->k_stride, b, hk, j);
                    float *dK = dkf + fw_key_offset(p, p->dk_stride, b, hk, j);
                    float *dV = dvf + fw_key_offset(p, p->dv_stride, b, hk, j);
                    for (int64_t d = 0; d < D; d++) {
                        acc[d] += dS * K[d];
                        dK[d] += dS * qs[d];
                        dV[d] += P * doi[d];
                    }
                }
                for (int64_t d = 0; d < D; d++) dqi[d] = fwh_round_to(t, fwh_round_to(t, acc[d]) * scale);
            }
        }
        for (int64_t hk = 0; hk < p->kv_heads; hk++)
            for (int64_t j = 0; j < lk; j++) {
                const int64_t at_k = fw_key_offset(p, p->dk_stride, b, hk, j);
                const int64_t at_v = fw_key_offset(p, p->dv_stride, b, hk, j);
                for (int64_t d = 0; d < D; d++) {
                    dk[at_k + d] = fwh_round_to(t, dkf[at_k + d]);
                    dv[at_v + d] = fwh_round_to(t, dvf[at_v + d]);
                }
            }
    }
    free(S); free(dP); free(qs); free(acc); free(dkf); free(dvf);
    return ok;
}

/* cpu-ref's backward through the run's own public call (dense or ragged) on float32 copies of the
 * host images (elementwise, so every offset is the same), and for f16/bf16 the input-dtype emulation
 * on them; the references keep the tensors' layouts. */
static fw_status compute_bwd_reference(fw_run *r, fw_bwd *b)
{
    const fw_case *c = &r->c;
    const fw_dtype dt = c->dtype;
    fw_status st = FW_ERR_OUT_OF_MEMORY;
    float *in[5] = {fwh_to_f32(r->host_q, dt, r->q_elems), fwh_to_f32(r->host_k, dt, r->kv_elems),
                    fwh_to_f32(r->host_v, dt, r->kv_elems), fwh_to_f32(r->host_o, dt, r->o_elems),
                    fwh_to_f32(b->host_dout, dt, r->o_elems)};
    const size_t n[3] = {r->q_elems, r->kv_elems, r->kv_elems};
    int ok = in[0] && in[1] && in[2] && in[3] && in[4];
    for (int g = 0; g < 3; g++) {
        free(b->ref[g]); free(b->lowp[g]);
        b->ref[g] = (float *)malloc(n[g] * sizeof(float));
        b->lowp[g] = dt == FW_F32 ? NULL : (float *)malloc(n[g] * sizeof(float));
        ok = ok && b->ref[g] && (dt == FW_F32 || b->lowp[g]);
        if (ok) fwh_poison_host(b->ref[g], FW_F32, n[g]);
    }
    fw_context *ctx = NULL;
    if (ok && fw_context_create(&ctx) == FW_OK) {
        fw_tensor t[8] = {fwh_as_f32(r->q, in[0]), fwh_as_f32(r->k, in[1]), fwh_as_f32(r->v, in[2]),
                          fwh_as_f32(r->o, in[3]), fwh_as_f32(b->dout, in[4]), fwh_as_f32(b->dq, b->ref[0]),
                          fwh_as_f32(b->dk, b->ref[1]), fwh_as_f32(b->dv, b->ref[2])};
        const fw_varlen seqs = fwh_host_seqs(r);
        fw_context_set_backend(ctx, "cpu-ref"); /* float64 inside; recomputes the softmax (o, lse not trusted) */
        if (c->kind == FW_CASE_VARLEN)
            st = fw_attention_varlen_backward(ctx, &t[0], &t[1], &t[2], &t[3], r->host_lse, &t[4], &t[5], &t[6], &t[7],
                                              &seqs, &c->params);
        else
            st = fw_attention_backward(ctx, &t[0], &t[1], &t[2], &t[3], r->host_lse, &t[4], &t[5], &t[6], &t[7],
                                       &c->params);
        if (st != FW_OK) fprintf(stderr, "harness: reference backward failed: %s\n", fw_context_last_error(ctx));
        fw_context_destroy(ctx);
        if (st == FW_OK && dt != FW_F32) {
            char msg[256];
            fw_problem p;
            for (int g = 0; g < 3; g++) t[5 + g].data = b->lowp[g];
            st = validate_bwd(r, t, r->host_lse, &p, msg, sizeof msg);
            if (st == FW_OK && !lowp_backward(&p, dt, r->kv_elems)) st = FW_ERR_OUT_OF_MEMORY;
        }
    }
    for (int i = 0; i < 5; i++) free(in[i]);
    b->have_ref = st == FW_OK;
    return st;
}

/* One gradient's host image (layout of t, padded rows of row_elems) against its reference (the same
 * layout): every element of every row of t (a packed tensor's rows all belong to some sequence). */
static void compare_grad(fw_grad_errors *e, const void *host, fw_dtype dt, const fw_tensor *t, int64_t row_elems,
                         const float *ref, const float *lowp)
{
    const int64_t B = t->size[0], H = t->size[1], S = t->size[2], D = t->size[3];
    double num = 0, den = 0;
    memset(e, 0, sizeof *e);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t s = 0; s < S; s++) {
                const int64_t base = fwh_offset(t, b, h, s, 0);
                for (int64_t d = D; d < row_elems; d++)
                    if (!fwh_is_poison(host, dt, base + d)) e->stray++;
                for (int64_t d = 0; d < D; d++) {
                    const double y = ref[base + d];
                    if (fabs(y) > e->ref_max) e->ref_max = fabs(y);
                    if (lowp && fabs(lowp[base + d] - y) > e->lowp) e->lowp = fabs(lowp[base + d] - y);
                    if (fwh_is_poison(host, dt, base + d)) { e->unwritten++; continue; }
                    const double x = fw_load_f32(host, dt, base + d);
                    if (isnan(x)) { e->nans++; continue; }
                    if (fabs(x - y) > e->max_abs) e->max_abs = fabs(x - y);
                    num += (x - y) * (x - y);
                    den += y * y;
                }
            }
    e->rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
}

fw_status fw_bwd_compare(fw_run *r, fw_bwd *b, fw_bwd_errors *e)
{
    fw_status st;
    memset(e, 0, sizeof *e);
    if (!b->have_ref && (st = compute_bwd_reference(r, b)) != FW_OK) return st;
    if ((st = fw_bwd_fetch(r, b)) != FW_OK) return st;
    const fw_dtype dt = r->c.dtype;
    const int64_t row = r->c.head_dim + r->c.pad;
    compare_grad(&e->g[0], b->host_dq, dt, &b->dq, row, b->ref[0], b->lowp[0]);
    compare_grad(&e->g[1], b->host_dk, dt, &b->dk, row, b->ref[1], b->lowp[1]);
    compare_grad(&e->g[2], b->host_dv, dt, &b->dv, row, b->ref[2], b->lowp[2]);
    double M = 0;
    for (int g = 0; g < 3; g++)
        if (e->g[g].ref_max > M) M = e->g[g].ref_max;
    e->pass = 1;
    for (int g = 0; g < 3; g++) {
        fw_grad_errors *x = &e->g[g];
        x->tol = fw_contract_grad_tol(dt, r->c.precision, x->ref_max, M, x->lowp);
        e->pass = e->pass && x->max_abs <= x->tol && !x->unwritten && !x->stray && !x->nans;
    }
    return FW_OK;
}
