/* The context: creation, the setters of what steers a call, and the last call's outcome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "context.h"
#include "flashwatt_internal.h" /* fw_context_sched */

void fw_context_set_error(fw_context *ctx, const char *msg)
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
    fw_context *c = (fw_context *)fw_calloc(1, sizeof *c);
    if (!c) return FW_ERR_OUT_OF_MEMORY;
    snprintf(c->backend, sizeof c->backend, "auto");
    c->policy = fw_policy_default();
    c->precision = FW_PRECISION_EXACT;
    fw_knobs_read(&c->knobs);
    c->sched = fw_sched_create(&c->knobs);
    if (!c->sched) {
        fw_free(c);
        return FW_ERR_OUT_OF_MEMORY;
    }
    *ctx = c;
    return FW_OK;
}

void fw_context_destroy(fw_context *ctx)
{
    if (!ctx) return;
    fw_sched_destroy(ctx->sched);
    fw_free(ctx);
}

static fw_status fw_context_set_backend_held(fw_context *ctx, const char *backend)
{
    if (!backend) {
        fw_context_set_error(ctx, "backend is NULL; pass \"auto\" or a backend name");
        return FW_ERR_NULL_ARGUMENT;
    }
    if (strcmp(backend, "auto") != 0 && !fw_registry_find(backend)) {
        char msg[1024];
        size_t n = (size_t)snprintf(msg, sizeof msg, "backend '%.64s' is not compiled into this build; known:", backend);
        for (int i = 0; i < fw_registry_count() && n < sizeof msg; i++)
            n += (size_t)snprintf(msg + n, sizeof msg - n, " %s", fw_registry_get(i)->name);
        fw_context_set_error(ctx, msg);
        return FW_ERR_NO_BACKEND;
    }
    snprintf(ctx->backend, sizeof ctx->backend, "%s", backend);
    ctx->last_error[0] = 0;
    return FW_OK;
}
FW_CONTEXT_HELD(fw_context_set_backend, (fw_context *ctx, const char *backend), (ctx, backend))

static fw_status fw_context_set_threads_held(fw_context *ctx, int threads)
{
    if (threads < 0 || threads > 4096) {
        char msg[128];
        snprintf(msg, sizeof msg, "threads is %d; use 0 (all cores) or 1..4096", threads);
        fw_context_set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    ctx->threads = threads;
    return FW_OK;
}
FW_CONTEXT_HELD(fw_context_set_threads, (fw_context *ctx, int threads), (ctx, threads))

static fw_status fw_context_set_stream_held(fw_context *ctx, void *cuda_stream)
{
    ctx->stream = cuda_stream;
    return FW_OK;
}
FW_CONTEXT_HELD(fw_context_set_stream, (fw_context *ctx, void *cuda_stream), (ctx, cuda_stream))

static fw_status fw_context_set_precision_held(fw_context *ctx, fw_precision precision)
{
    if (precision < FW_PRECISION_EXACT || precision > FW_PRECISION_BF16) {
        char msg[128];
        snprintf(msg, sizeof msg, "precision %d is not one of exact, tf32, 3xtf32, bf16", (int)precision);
        fw_context_set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    ctx->precision = precision;
    fw_sched_policy_changed(ctx->sched);
    return FW_OK;
}
FW_CONTEXT_HELD(fw_context_set_precision, (fw_context *ctx, fw_precision precision), (ctx, precision))

static fw_status fw_context_set_policy_held(fw_context *ctx, const fw_policy *policy)
{
    if (!policy) {
        fw_context_set_error(ctx, "policy is NULL");
        return FW_ERR_NULL_ARGUMENT;
    }
    char msg[160];
    if (policy->objective < FW_OBJECTIVE_FASTEST || policy->objective > FW_OBJECTIVE_POWER_CAP) {
        snprintf(msg, sizeof msg, "policy.objective %d is not fastest, min-energy or power-cap", (int)policy->objective);
        fw_context_set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    if (!(policy->power_cap_w >= 0) || !(policy->temperature_limit_c >= 0) || !(policy->error_budget >= 0)) {
        snprintf(msg, sizeof msg, "policy.power_cap_w, temperature_limit_c and error_budget must be >= 0 (0 = none)");
        fw_context_set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    if (policy->objective == FW_OBJECTIVE_POWER_CAP && policy->power_cap_w <= 0) {
        snprintf(msg, sizeof msg, "policy.power_cap_w is %g; the power-cap objective needs a cap > 0 W", policy->power_cap_w);
        fw_context_set_error(ctx, msg);
        return FW_ERR_INVALID_VALUE;
    }
    ctx->policy = *policy;
    fw_sched_policy_changed(ctx->sched);
    return FW_OK;
}
FW_CONTEXT_HELD(fw_context_set_policy, (fw_context *ctx, const fw_policy *policy), (ctx, policy))

static fw_status fw_context_set_deterministic_held(fw_context *ctx, int deterministic)
{
    ctx->deterministic = deterministic != 0;
    return FW_OK;
}
FW_CONTEXT_HELD(fw_context_set_deterministic, (fw_context *ctx, int deterministic), (ctx, deterministic))

static fw_status fw_context_set_memory_budget_held(fw_context *ctx, size_t bytes)
{
    ctx->memory_budget = bytes;
    return FW_OK;
}
FW_CONTEXT_HELD(fw_context_set_memory_budget, (fw_context *ctx, size_t bytes), (ctx, bytes))

static fw_status fw_context_set_workspace_held(fw_context *ctx, void *device_ptr, size_t bytes)
{
    if ((device_ptr == NULL) != (bytes == 0)) {
        fw_context_set_error(ctx, device_ptr ? "workspace bytes is 0 with a non-NULL pointer; pass NULL, 0 to unset it"
                                  : "workspace pointer is NULL with bytes > 0; pass NULL, 0 to unset it");
        return FW_ERR_INVALID_VALUE;
    }
    ctx->workspace = device_ptr;
    ctx->workspace_bytes = bytes;
    return FW_OK;
}
FW_CONTEXT_HELD(fw_context_set_workspace, (fw_context *ctx, void *device_ptr, size_t bytes), (ctx, device_ptr, bytes))

static fw_status fw_context_set_check_device_values_held(fw_context *ctx, int check)
{
    ctx->check_device_values = check != 0;
    return FW_OK;
}
FW_CONTEXT_HELD(fw_context_set_check_device_values, (fw_context *ctx, int check), (ctx, check))

const char *fw_context_last_error(const fw_context *ctx) { return ctx ? ctx->last_error : "ctx is NULL"; }

const char *fw_context_last_backend(const fw_context *ctx)
{
    return ctx && ctx->last_backend ? ctx->last_backend : "";
}

fw_sched *fw_context_sched(fw_context *ctx) { return ctx ? ctx->sched : NULL; }
