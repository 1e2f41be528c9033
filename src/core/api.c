/* The public API's entry points: every call validates, asks sched what to run, runs it, and
 * records the outcome on the context; and the backend queries. The context's setters are in
 * context.c, the names in strings.c, the descriptors and defaults in descriptors.c. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "flashwatt.h"
#include "context.h"
#include "validate.h"
#include "nvtx.h"
#include "backends/backend.h"
#include "sched/sched.h"

static void set_error(fw_context *ctx, const char *msg) { fw_context_set_error(ctx, msg); }

/* The CPU backends' thread count: the context's, else the online cores. Asked only for a CPU backend, since
 * sysconf reads /sys on every call (about 5 µs a call, as much as a CUDA call's own host work). */
static int resolve_threads(const fw_context *ctx, const fw_backend *b)
{
    if (ctx->threads > 0) return ctx->threads;
    if (b->device != FW_DEVICE_CPU) return 1;
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
    p->knobs = &ctx->knobs;
    p->workspace = ctx->workspace; /* every CUDA call, dense decode shapes too, takes its scratch from here */
    p->workspace_bytes = ctx->workspace_bytes;
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
    ex.threads = resolve_threads(ctx, b);
    ex.stream = ctx->stream;
    ex.err = msg;
    ex.err_len = sizeof msg;
    ex.knobs = &ctx->knobs;
    const int ranged = fw_nvtx_push(b->name, p, pass == FW_PASS_FORWARD ? FW_NVTX_FORWARD : FW_NVTX_BACKWARD, cfg.name);
    st = pass == FW_PASS_FORWARD ? b->forward(p, &cfg, &ex) : b->backward(p, &cfg, &ex);
    if (ranged) fw_nvtx_pop();
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

static fw_status fw_attention_forward_held(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                                           const fw_tensor *v, fw_tensor *o, float *lse,
                                           const fw_attn_params *params)
{
    char msg[1024];
    fw_problem p;
    fw_status st = fw_validate_forward(q, k, v, o, lse, params, &p, msg, sizeof msg);
    if (st != FW_OK) {
        set_error(ctx, msg);
        return st;
    }
    return run_pass(ctx, &p, FW_PASS_FORWARD);
}
FW_CONTEXT_HELD(fw_attention_forward, (fw_context *ctx, const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, fw_tensor *o, float *lse,
                                       const fw_attn_params *params), (ctx, q, k, v, o, lse, params))

static fw_status fw_attention_backward_held(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                                            const fw_tensor *v, const fw_tensor *o, const float *lse,
                                            const fw_tensor *dout, fw_tensor *dq, fw_tensor *dk, fw_tensor *dv,
                                            const fw_attn_params *params)
{
    char msg[1024];
    fw_problem p;
    fw_status st = fw_validate_backward(q, k, v, o, lse, dout, dq, dk, dv, params, &p, msg, sizeof msg);
    if (st != FW_OK) {
        set_error(ctx, msg);
        return st;
    }
    return run_pass(ctx, &p, FW_PASS_BACKWARD);
}
FW_CONTEXT_HELD(fw_attention_backward, (fw_context *ctx, const fw_tensor *q, const fw_tensor *k, const fw_tensor *v, const fw_tensor *o,
                                        const float *lse, const fw_tensor *dout, fw_tensor *dq, fw_tensor *dk, fw_tensor *dv,
                                        const fw_attn_params *params), (ctx, q, k, v, o, lse, dout, dq, dk, dv, params))

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

/* ---- for the serving entry points (api_serving.c) ------------------------------------------ */

fw_status fw_api_run_forward(fw_context *ctx, fw_problem *p) { return run_pass(ctx, p, FW_PASS_FORWARD); }

fw_status fw_api_run_backward(fw_context *ctx, fw_problem *p) { return run_pass(ctx, p, FW_PASS_BACKWARD); }

static fw_status fw_attention_workspace_size_held(fw_context *ctx, const fw_workspace_query *query, size_t *bytes)
{
    if (!query || !bytes) {
        set_error(ctx, !query ? "query is NULL" : "bytes is NULL");
        return FW_ERR_NULL_ARGUMENT;
    }
    *bytes = 0;
    char msg[256];
    const fw_workspace_query *w = query;
    const int64_t sizes[6] = {w->max_batch, w->heads, w->kv_heads, w->head_dim, w->max_seqlen_q, w->max_seqlen_k};
    static const char *names[6] = {"max_batch", "heads", "kv_heads", "head_dim", "max_seqlen_q", "max_seqlen_k"};
    for (int i = 0; i < 6; i++)
        if (sizes[i] < 1 || sizes[i] > ((int64_t)1 << 31) - 1) {
            snprintf(msg, sizeof msg, "query.%s is %lld; it must be in 1..2^31 - 1", names[i], (long long)sizes[i]);
            set_error(ctx, msg);
            return FW_ERR_INVALID_SHAPE;
        }
    if (w->head_dim > FW_MAX_HEAD_DIM || w->heads % w->kv_heads != 0) {
        snprintf(msg, sizeof msg, w->head_dim > FW_MAX_HEAD_DIM ? "query.head_dim %lld is above the supported 256"
                                                                 : "query.heads %lld is not a multiple of kv_heads",
                 (long long)(w->head_dim > FW_MAX_HEAD_DIM ? w->head_dim : w->heads));
        set_error(ctx, msg);
        return FW_ERR_INVALID_SHAPE;
    }
    if (w->dtype != FW_F32 && w->dtype != FW_F16 && w->dtype != FW_BF16) {
        set_error(ctx, "query.dtype is not one of f32, f16, bf16");
        return FW_ERR_INVALID_VALUE;
    }
    /* The largest bound of the backends that may run such a call on the device (the named one only). */
    fw_problem p;
    memset(&p, 0, sizeof p);
    p.kind = FW_CALL_KVCACHE;
    p.device = w->device;
    p.dtype = w->dtype;
    p.batch = w->max_batch;
    p.heads = w->heads;
    p.kv_heads = w->kv_heads;
    p.group = w->heads / w->kv_heads;
    p.head_dim = w->head_dim;
    p.seqlen_q = w->max_seqlen_q;
    p.seqlen_k = w->max_seqlen_k;
    p.capacity = w->max_seqlen_k;
    p.precision = ctx->precision;
    p.knobs = &ctx->knobs;
    const int named = strcmp(ctx->backend, "auto") != 0;
    for (int i = 0; i < fw_registry_count(); i++) {
        const fw_backend *b = fw_registry_get(i);
        if (b->device != w->device.kind || !b->workspace || (named && strcmp(b->name, ctx->backend) != 0)) continue;
        if (!b->available(msg, sizeof msg)) continue;
        const size_t n = b->workspace(&p);
        if (n > *bytes) *bytes = n;
    }
    ctx->last_error[0] = 0;
    return FW_OK;
}
FW_CONTEXT_HELD(fw_attention_workspace_size, (fw_context *ctx, const fw_workspace_query *query, size_t *bytes), (ctx, query, bytes))
