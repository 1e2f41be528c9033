/* The public API: contexts, descriptors, the forward/backward entry points and backend queries.
 * Every entry point validates, asks sched what to run, runs it, and records the outcome. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "flashwatt.h"
#include "context.h"
#include "validate.h"
#include "backends/backend.h"
#include "sched/sched.h"

#define STR2(x) #x
#define STR(x) STR2(x)

const char *fw_version(void)
{
    return STR(FW_VERSION_MAJOR) "." STR(FW_VERSION_MINOR) "." STR(FW_VERSION_PATCH);
}

const char *fw_status_string(fw_status s)
{
    switch (s) {
    case FW_OK: return "ok";
    case FW_ERR_NULL_ARGUMENT: return "a required argument is NULL";
    case FW_ERR_INVALID_SHAPE: return "invalid shape";
    case FW_ERR_INVALID_STRIDE: return "invalid stride";
    case FW_ERR_DTYPE_MISMATCH: return "dtype mismatch";
    case FW_ERR_DEVICE_MISMATCH: return "device mismatch";
    case FW_ERR_OVERLAP: return "output overlaps another tensor";
    case FW_ERR_INVALID_VALUE: return "invalid parameter value";
    case FW_ERR_UNSUPPORTED: return "the backend does not support this problem";
    case FW_ERR_NO_BACKEND: return "no backend can run this problem";
    case FW_ERR_DEVICE: return "CUDA error";
    case FW_ERR_OUT_OF_MEMORY: return "out of memory";
    case FW_ERR_NOT_IMPLEMENTED: return "not implemented";
    case FW_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *fw_dtype_name(fw_dtype t)
{
    switch (t) {
    case FW_F32: return "f32";
    case FW_F16: return "f16";
    case FW_BF16: return "bf16";
    }
    return "unknown";
}

static fw_tensor make_tensor(void *data, fw_dtype dtype, fw_device device, const int64_t size[4],
                             const int order[4])
{
    /* order lists dims from outermost to innermost in memory */
    fw_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data; t.dtype = dtype; t.device = device;
    memcpy(t.size, size, sizeof t.size);
    int64_t s = 1;
    for (int i = 3; i >= 0; i--) {
        t.stride[order[i]] = s;
        s *= size[order[i]];
    }
    return t;
}

fw_tensor fw_tensor_bhsd(void *data, fw_dtype dtype, fw_device device, int64_t batch, int64_t heads,
                         int64_t seq, int64_t head_dim)
{
    const int64_t size[4] = {batch, heads, seq, head_dim};
    const int order[4] = {0, 1, 2, 3};
    return make_tensor(data, dtype, device, size, order);
}

fw_tensor fw_tensor_bshd(void *data, fw_dtype dtype, fw_device device, int64_t batch, int64_t heads,
                         int64_t seq, int64_t head_dim)
{
    const int64_t size[4] = {batch, heads, seq, head_dim};
    const int order[4] = {0, 2, 1, 3};
    return make_tensor(data, dtype, device, size, order);
}

fw_attn_params fw_attn_params_default(void)
{
    fw_attn_params p;
    p.scale = 0.0f;
    p.causal = 0;
    p.window_left = FW_WINDOW_UNLIMITED;
    p.window_right = FW_WINDOW_UNLIMITED;
    return p;
}

fw_policy fw_policy_default(void)
{
    fw_policy p;
    memset(&p, 0, sizeof p);
    p.objective = FW_OBJECTIVE_FASTEST;
    return p;
}

/* ---- context ------------------------------------------------------------------------------ */

static void set_error(fw_context *ctx, const char *msg)
{
    if (!ctx) return;
    size_t n = strlen(msg);
    if (n >= sizeof ctx->last_error) n = sizeof ctx->last_error - 1; /* keep the head of a long message */
    memcpy(ctx->last_error, msg, n);
    ctx->last_error[n] = 0;
}

fw_status fw_context_create(fw_context **ctx)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    fw_context *c = (fw_context *)calloc(1, sizeof *c);
    if (!c) return FW_ERR_OUT_OF_MEMORY;
    snprintf(c->backend, sizeof c->backend, "auto");
    c->policy = fw_policy_default();
    c->precision = FW_PRECISION_EXACT;
    fw_knobs_read(&c->knobs);
    *ctx = c;
    return FW_OK;
}

void fw_context_destroy(fw_context *ctx)
{
    if (!ctx) return;
    fw_sched_state_free(ctx->sched);
    free(ctx);
}

fw_status fw_context_set_backend(fw_context *ctx, const char *backend)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    if (!backend) {
        set_error(ctx, "backend is NULL; pass \"auto\" or a backend name");
        return FW_ERR_NULL_ARGUMENT;
    }
    if (strcmp(backend, "auto") != 0 && !fw_registry_find(backend)) {
        char msg[1024];
        size_t n = (size_t)snprintf(msg, sizeof msg, "backend '%.64s' is not compiled into this build; known:", backend);
        for (int i = 0; i < fw_registry_count() && n < sizeof msg; i++)
            n += (size_t)snprintf(msg + n, sizeof msg - n, " %s", fw_registry_get(i)->name);
        set_error(ctx, msg);
        return FW_ERR_NO_BACKEND;
    }
    snprintf(ctx->backend, sizeof ctx->backend, "%s", backend);
    ctx->last_error[0] = 0;
    return FW_OK;
}

fw_status fw_context_set_threads(fw_context *ctx, int threads)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    if (threads < 0 || threads > 4096) {
        char msg[128];
        snprintf(msg, sizeof msg, "threads is %d; use 0 (all cores) or 1..4096", threads);
        set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    ctx->threads = threads;
    return FW_OK;
}

fw_status fw_context_set_stream(fw_context *ctx, void *cuda_stream)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    ctx->stream = cuda_stream;
    return FW_OK;
}

fw_status fw_context_set_precision(fw_context *ctx, fw_precision precision)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    if (precision < FW_PRECISION_EXACT || precision > FW_PRECISION_BF16) {
        char msg[128];
        snprintf(msg, sizeof msg, "precision %d is not one of exact, tf32, 3xtf32, bf16", (int)precision);
        set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    ctx->precision = precision;
    fw_sched_policy_changed(ctx);
    return FW_OK;
}

fw_status fw_context_set_policy(fw_context *ctx, const fw_policy *policy)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    if (!policy) {
        set_error(ctx, "policy is NULL");
        return FW_ERR_NULL_ARGUMENT;
    }
    char msg[160];
    if (policy->objective < FW_OBJECTIVE_FASTEST || policy->objective > FW_OBJECTIVE_POWER_CAP) {
        snprintf(msg, sizeof msg, "policy.objective %d is not fastest, min-energy or power-cap", (int)policy->objective);
        set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    if (!(policy->power_cap_w >= 0) || !(policy->temperature_limit_c >= 0) || !(policy->error_budget >= 0)) {
        snprintf(msg, sizeof msg, "policy.power_cap_w, temperature_limit_c and error_budget must be >= 0 (0 = none)");
        set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    if (policy->objective == FW_OBJECTIVE_POWER_CAP && policy->power_cap_w <= 0) {
        snprintf(msg, sizeof msg, "policy.power_cap_w is %g; the power-cap objective needs a cap > 0 W", policy->power_cap_w);
        set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    ctx->policy = *policy;
    fw_sched_policy_changed(ctx);
    return FW_OK;
}

fw_status fw_context_set_deterministic(fw_context *ctx, int deterministic)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    ctx->deterministic = deterministic != 0;
    return FW_OK;
}

fw_status fw_context_set_memory_budget(fw_context *ctx, size_t bytes)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    ctx->memory_budget = bytes;
    return FW_OK;
}

fw_status fw_context_set_workspace(fw_context *ctx, void *device_ptr, size_t bytes)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    if ((device_ptr == NULL) != (bytes == 0)) {
        set_error(ctx, device_ptr ? "workspace bytes is 0 with a non-NULL pointer; pass NULL, 0 to unset it"
                                  : "workspace pointer is NULL with bytes > 0; pass NULL, 0 to unset it");
        return FW_ERR_INVALID_VALUE;
    }
    ctx->workspace = device_ptr;
    ctx->workspace_bytes = bytes;
    return FW_OK;
}

fw_status fw_context_set_check_device_values(fw_context *ctx, int check)
{
    if (!ctx) return FW_ERR_NULL_ARGUMENT;
    ctx->check_device_values = check != 0;
    return FW_OK;
}

const char *fw_context_last_error(const fw_context *ctx) { return ctx ? ctx->last_error : "ctx is NULL"; }

const char *fw_context_last_backend(const fw_context *ctx)
{
    return ctx && ctx->last_backend ? ctx->last_backend : "";
}

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
    const fw_backend *b = fw_sched_choose(ctx, p, pass, &cfg, &st, msg, sizeof msg);
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
    if (pass == FW_PASS_FORWARD) fw_sched_after_launch(ctx, p);
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

/* ---- problem arithmetic -------------------------------------------------------------------- */

double fw_problem_pairs(const fw_problem *p)
{
    if (p->kind != FW_CALL_DENSE) return fw_serving_pairs(p) / (double)p->batch;
    if (!p->has_window) return (double)p->seqlen_q * (double)p->seqlen_k;
    double pairs = 0;
    for (int64_t i = 0; i < p->seqlen_q; i++) {
        int64_t lo, hi;
        fw_key_range(p, i, &lo, &hi);
        if (hi > lo) pairs += (double)(hi - lo);
    }
    return pairs;
}

double fw_problem_flops(const fw_problem *p)
{
    if (p->kind != FW_CALL_DENSE) return 4.0 * (double)p->head_dim * fw_serving_pairs(p) * (double)p->heads;
    return 4.0 * (double)p->head_dim * fw_problem_pairs(p) * (double)p->batch * (double)p->heads;
}

/* ---- for the serving entry points (api_serving.c) ------------------------------------------ */

void fw_api_set_error(fw_context *ctx, const char *msg) { set_error(ctx, msg); }

fw_status fw_api_run_forward(fw_context *ctx, fw_problem *p) { return run_pass(ctx, p, FW_PASS_FORWARD); }

fw_status fw_attention_workspace_size(fw_context *ctx, const fw_workspace_query *query, size_t *bytes)
{
    if (!ctx || !query || !bytes) return FW_ERR_NULL_ARGUMENT;
    *bytes = 0;
    return FW_OK;
}
