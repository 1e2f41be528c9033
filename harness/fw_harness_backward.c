/* The backward of a run: gradient buffers, poison, the call, timing of forward + backward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"
#include "fw_harness_internal.h"

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
    memset(b, 0, sizeof *b);
}

fw_status fw_bwd_alloc(fw_run *r, fw_bwd *b, uint64_t seed, char *msg, size_t len)
{
    memset(b, 0, sizeof *b);
    if (len) msg[0] = 0;
    const fw_case *c = &r->c;
    if (!r->lse) {
        snprintf(msg, len, "the backward needs a run made with want_lse");
        return FW_ERR_INVALID_VALUE;
    }
    const size_t es = fw_dtype_size(c->dtype);
    const size_t ln = (size_t)(c->batch * c->heads * c->seqlen_q);
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
    /* O and LSE from cpu-ref on the host images, then onto the device */
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    fw_tensor hq = with_data(r->q, r->host_q), hk = with_data(r->k, r->host_k), hv = with_data(r->v, r->host_v);
    fw_tensor ho = with_data(r->o, r->host_o);
    hq.device = hk.device = hv.device = ho.device = cpu;
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) { fw_bwd_free(r, b); return FW_ERR_OUT_OF_MEMORY; }
    fw_context_set_backend(ctx, "cpu-ref");
    st = fw_attention_forward(ctx, &hq, &hk, &hv, &ho, r->host_lse, &c->params);
    if (st != FW_OK) snprintf(msg, len, "cpu-ref forward failed: %s", fw_context_last_error(ctx));
    fw_context_destroy(ctx);
    if (st == FW_OK) st = fwh_copy(r, r->o.data, r->host_o, r->o_elems * es, 1);
    if (st == FW_OK) st = fwh_copy(r, r->lse, r->host_lse, ln * sizeof(float), 1);
    if (st == FW_OK) st = fwh_copy(r, ddo, b->host_dout, r->o_elems * es, 1);
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

fw_status fw_bwd_run(fw_run *r, fw_bwd *b, fw_context *ctx)
{
    fw_status st = fw_attention_backward(ctx, &r->q, &r->k, &r->v, &r->o, r->lse, &b->dout, &b->dq, &b->dk, &b->dv,
                                         &r->c.params);
    if (st != FW_OK) return st;
    return fwh_sync_device(r);
}

fw_status fw_bwd_fetch(fw_run *r, fw_bwd *b)
{
    const size_t es = fw_dtype_size(r->c.dtype);
    fw_status st = fwh_copy(r, b->host_dq, b->dq.data, r->q_elems * es, 0);
    if (st == FW_OK) st = fwh_copy(r, b->host_dk, b->dk.data, r->kv_elems * es, 0);
    if (st == FW_OK) st = fwh_copy(r, b->host_dv, b->dv.data, r->kv_elems * es, 0);
    return st;
}

static fw_status fwd_bwd_call(fw_run *r, fw_context *ctx, void *arg)
{
    fw_bwd *b = (fw_bwd *)arg;
    fw_status st = fw_attention_forward(ctx, &r->q, &r->k, &r->v, &r->o, r->lse, &r->c.params);
    if (st == FW_OK)
        st = fw_attention_backward(ctx, &r->q, &r->k, &r->v, &r->o, r->lse, &b->dout, &b->dq, &b->dk, &b->dv,
                                   &r->c.params);
    return st;
}

fw_status fw_bwd_time(fw_run *r, fw_bwd *b, fw_context *ctx, int warmup, int reps, double *median_ms)
{
    return fwh_time_median(r, ctx, fwd_bwd_call, b, warmup, reps, median_ms);
}
