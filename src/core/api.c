/* The public API's entry points: every call validates, asks sched what to run, runs it, and
 * records the outcome on the context; and the backend queries. The context's setters are in
 * context.c, the names in strings.c, the descriptors and defaults in descriptors.c. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "flashwatt.h"
#include "context.h"
#include "validate.h"
#include "backends/backend.h"
#include "sched/sched.h"

static void set_error(fw_context *ctx, const char *msg) { fw_context_set_error(ctx, msg); }

static int resolve_threads(const fw_context *ctx)
{
    if (ctx->threads > 0) return ctx->threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static fw_status run_pass(fw_context *ctx, fw_problem *p, fw_pass pass)
{
    char msg[1024];
    fw_status st = FW_OK;
    fw_config cfg;
    p->precision = ctx->precision;
    p->deterministic = ctx->deterministic;
    p->memory_budget = ctx->memory_budget;
    if (p->precision != FW_PRECISION_EXACT && p->dtype != FW_F32) {
        set_error(ctx, "a reduced precision mode applies to f32 inputs only; these are f16/bf16");
        return FW_ERR_INVALID_VALUE;
    }
    const fw_sched_request rq = {ctx->backend, &ctx->policy, ctx->stream};
    const fw_backend *b = fw_sched_choose(ctx->sched, &rq, p, pass, &cfg, &st, msg, sizeof msg);
    if (!b) {
        set_error(ctx, msg);
        return st;
    }
    p->precision = cfg.precision; /* the table may run an f32 call in a reduced mode the policy allows */
    fw_exec ex;
    msg[0] = 0;
    ex.threads = resolve_threads(ctx);
    ex.stream = ctx->stream;
    ex.err = msg;
    ex.err_len = sizeof msg;
    ex.knobs = &ctx->knobs;
    st = pass == FW_PASS_FORWARD ? b->forward(p, &cfg, &ex) : b->backward(p, &cfg, &ex);
    if (st != FW_OK) {
        char full[1024 + 96];
        snprintf(full, sizeof full, "%s: %s", b->name, msg[0] ? msg : fw_status_string(st));
        set_error(ctx, full);
        return st;
    }
    if (pass == FW_PASS_FORWARD) fw_sched_after_launch(ctx->sched, &rq, p);
    ctx->last_backend = b->name;
    ctx->last_error[0] = 0;
    return FW_OK;
}

fw_status fw_attention_forward(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                               const fw_tensor *v, fw_tensor *o, float *lse,
                               const fw_attn_params *params)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    char msg[1024];
    fw_problem p;
    fw_status st = fw_validate_forward(q, k, v, o, lse, params, &p, msg, sizeof msg);
    if (st != FW_OK) {
        set_error(ctx, msg);
        return st;
    }
    return run_pass(ctx, &p, FW_PASS_FORWARD);
}

fw_status fw_attention_backward(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                                const fw_tensor *v, const fw_tensor *o, const float *lse,
                                const fw_tensor *dout, fw_tensor *dq, fw_tensor *dk, fw_tensor *dv,
                                const fw_attn_params *params)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    char msg[1024];
    fw_problem p;
    fw_status st = fw_validate_backward(q, k, v, o, lse, dout, dq, dk, dv, params, &p, msg, sizeof msg);
    if (st != FW_OK) {
        set_error(ctx, msg);
        return st;
    }
    return run_pass(ctx, &p, FW_PASS_BACKWARD);
}

/* ---- backend queries ----------------------------------------------------------------------- */

int fw_backend_count(void) { return fw_registry_count(); }

fw_status fw_backend_get_info(int index, fw_backend_info *info)
{
    if (!info) return FW_ERR_NULL_ARGUMENT;
    const fw_backend *b = fw_registry_get(index);
    if (!b) return FW_ERR_INVALID_VALUE;
    memset(info, 0, sizeof *info);
    info->name = b->name;
    info->description = b->description;
    info->device = b->device;
    info->usable = b->available(info->why_not, sizeof info->why_not);
    if (info->usable) info->why_not[0] = 0;
    return FW_OK;
}

fw_status fw_backend_supports(const char *name, const fw_tensor *q, const fw_tensor *k,
                              const fw_tensor *v, const fw_tensor *o, const fw_attn_params *params,
                              char *why, size_t why_len)
{
    char msg[1024];
    char dummy[1];
    if (!why || why_len == 0) { why = dummy; why_len = sizeof dummy; }
    why[0] = 0;
    if (!name) {
        snprintf(why, why_len, "name is NULL");
        return FW_ERR_NULL_ARGUMENT;
    }
    const fw_backend *b = fw_registry_find(name);
    if (!b) {
        snprintf(why, why_len, "backend '%s' is not compiled into this build", name);
        return FW_ERR_NO_BACKEND;
    }
    fw_problem p;
    fw_status st = fw_validate_forward(q, k, v, o, NULL, params, &p, msg, sizeof msg);
    if (st != FW_OK) {
        snprintf(why, why_len, "%s", msg);
        return st;
    }
    if (b->device != p.device.kind) {
        snprintf(why, why_len, "backend '%s' runs on %s, the tensors are on %s", name,
                 b->device == FW_DEVICE_CUDA ? "cuda" : "cpu", p.device.kind == FW_DEVICE_CUDA ? "cuda" : "cpu");
        return FW_ERR_UNSUPPORTED;
    }
    if (!b->available(msg, sizeof msg) || !b->supports(&p, msg, sizeof msg)) {
        snprintf(why, why_len, "%s", msg);
        return FW_ERR_UNSUPPORTED;
    }
    return FW_OK;
}

/* ---- serving calls (implemented with their validation in a later change) ---------------------- */

fw_status fw_attention_varlen_forward(fw_context *ctx, const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                                      fw_tensor *o, float *lse, const fw_varlen *seqs, const fw_attn_params *params)
{
    (void)q; (void)k; (void)v; (void)o; (void)lse; (void)seqs; (void)params;
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    set_error(ctx, "fw_attention_varlen_forward is not implemented yet");
    return FW_ERR_NOT_IMPLEMENTED;
}

fw_status fw_attention_kvcache_forward(fw_context *ctx, const fw_tensor *q, const fw_kv_cache *cache,
                                       const fw_tensor *k_new, const fw_tensor *v_new, fw_tensor *o, float *lse,
                                       const fw_varlen *q_seqs, const fw_attn_params *params)
{
    (void)q; (void)cache; (void)k_new; (void)v_new; (void)o; (void)lse; (void)q_seqs; (void)params;
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    set_error(ctx, "fw_attention_kvcache_forward is not implemented yet");
    return FW_ERR_NOT_IMPLEMENTED;
}

fw_status fw_attention_workspace_size(fw_context *ctx, const fw_workspace_query *query, size_t *bytes)
{
    if (!ctx || !query || !bytes) return FW_ERR_NULL_ARGUMENT;
    *bytes = 0;
    return FW_OK;
}
