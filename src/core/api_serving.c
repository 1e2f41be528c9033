/* The serving entry points: the ragged forward and backward, and the KV-cache forward. Each validates its
 * arguments (the int32 arrays' values too where the host may read them), then dispatches like the dense call. */
#include <stdio.h>
#include <stdlib.h>
#include "core/alloc.h"
#include "flashwatt.h"
#include "context.h"
#include "validate.h"

/* Host copies of a problem's device-resident int32 arrays (fw_context_set_check_device_values). */
static fw_status copy_values(const fw_context *ctx, const fw_problem *p, int32_t *host[4], char *msg, size_t len)
{
    int64_t n[4];
    fw_serving_value_counts(p, &n[0], &n[1], &n[2], &n[3]);
    const int32_t *src[4] = {p->cu_seqlens_q, p->cu_seqlens_k, p->cache_seqlens, p->block_table};
    static const char *names[4] = {"cu_seqlens_q", "cu_seqlens_k", "cache.seqlens", "cache.block_table"};
    for (int i = 0; i < 4; i++) {
        if (!n[i]) continue;
        host[i] = (int32_t *)fw_malloc((size_t)n[i] * sizeof(int32_t));
        if (!host[i]) {
            snprintf(msg, len, "no host memory to check %s (%lld values)", names[i], (long long)n[i]);
            return FW_ERR_OUT_OF_MEMORY;
        }
        char why[512] = "";
        fw_status st = fw_device_values_to_host(p->device, ctx->stream, host[i], src[i], (size_t)n[i] * sizeof(int32_t),
                                                why, sizeof why);
        if (st != FW_OK) {
            snprintf(msg, len, "checking device values (fw_context_set_check_device_values): %s: %s", names[i], why);
            return st;
        }
    }
    return FW_OK;
}

/* Values the host may read are checked before anything runs; device values only when asked. */
static fw_status check_values(const fw_context *ctx, const fw_problem *p, char *msg, size_t len)
{
    if (p->device.kind == FW_DEVICE_CPU)
        return fw_validate_serving_values(p, p->cu_seqlens_q, p->cu_seqlens_k, p->cache_seqlens, p->block_table, msg,
                                          len);
    if (!ctx->check_device_values) return FW_OK;
    int32_t *host[4] = {NULL, NULL, NULL, NULL};
    fw_status st = copy_values(ctx, p, host, msg, len);
    if (st == FW_OK) st = fw_validate_serving_values(p, host[0], host[1], host[2], host[3], msg, len);
    for (int i = 0; i < 4; i++) fw_free(host[i]);
    return st;
}

static fw_status run_serving(fw_context *ctx, fw_problem *p, fw_status st, char *msg, size_t len, fw_pass pass)
{
    if (st == FW_OK) st = check_values(ctx, p, msg, len);
    if (st != FW_OK) {
        fw_context_set_error(ctx, msg);
        return st;
    }
    p->workspace = ctx->workspace;
    p->workspace_bytes = ctx->workspace_bytes;
    return pass == FW_PASS_FORWARD ? fw_api_run_forward(ctx, p) : fw_api_run_backward(ctx, p);
}

static fw_status fw_attention_varlen_forward_held(fw_context *ctx, const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                                                  fw_tensor *o, float *lse, const fw_varlen *seqs, const fw_attn_params *params)
{
    char msg[1024];
    fw_problem p;
    fw_status st = fw_validate_varlen(q, k, v, o, lse, seqs, params, &p, msg, sizeof msg);
    return run_serving(ctx, &p, st, msg, sizeof msg, FW_PASS_FORWARD);
}
FW_CONTEXT_HELD(fw_attention_varlen_forward, (fw_context *ctx, const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, fw_tensor *o,
                                              float *lse, const fw_varlen *seqs, const fw_attn_params *params), (ctx, q, k, v, o, lse, seqs, params))

static fw_status fw_attention_varlen_backward_held(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                                                   const fw_tensor *v, const fw_tensor *o, const float *lse,
                                                   const fw_tensor *dout, fw_tensor *dq, fw_tensor *dk, fw_tensor *dv,
                                                   const fw_varlen *seqs, const fw_attn_params *params)
{
    char msg[1024];
    fw_problem p;
    fw_status st = fw_validate_varlen_backward(q, k, v, o, lse, dout, dq, dk, dv, seqs, params, &p, msg, sizeof msg);
    return run_serving(ctx, &p, st, msg, sizeof msg, FW_PASS_BACKWARD);
}
FW_CONTEXT_HELD(fw_attention_varlen_backward, (fw_context *ctx, const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                                               const fw_tensor *o, const float *lse, const fw_tensor *dout, fw_tensor *dq,
                                               fw_tensor *dk, fw_tensor *dv, const fw_varlen *seqs,
                                               const fw_attn_params *params),
                (ctx, q, k, v, o, lse, dout, dq, dk, dv, seqs, params))

static fw_status fw_attention_kvcache_forward_held(fw_context *ctx, const fw_tensor *q, const fw_kv_cache *cache,
                                                   const fw_tensor *k_new, const fw_tensor *v_new, fw_tensor *o, float *lse,
                                                   const fw_varlen *q_seqs, const fw_attn_params *params)
{
    char msg[1024];
    fw_problem p;
    fw_status st = fw_validate_kvcache(q, cache, k_new, v_new, o, lse, q_seqs, params, &p, msg, sizeof msg);
    return run_serving(ctx, &p, st, msg, sizeof msg, FW_PASS_FORWARD);
}
FW_CONTEXT_HELD(fw_attention_kvcache_forward, (fw_context *ctx, const fw_tensor *q, const fw_kv_cache *cache, const fw_tensor *k_new,
                                               const fw_tensor *v_new, fw_tensor *o, float *lse, const fw_varlen *q_seqs,
                                               const fw_attn_params *params), (ctx, q, cache, k_new, v_new, o, lse, q_seqs, params))
