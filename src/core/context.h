/* The context object behind the opaque fw_context: the top layer (the public API) owns it. */
#ifndef FW_CONTEXT_H
#define FW_CONTEXT_H

#include <stdatomic.h>
#include "flashwatt.h"
#include "knobs.h"
#include "sched/sched.h"

struct fw_context {
    char backend[64]; /* "auto" or a backend name */
    int threads;      /* 0 = all online cores */
    void *stream;
    fw_precision precision;
    int deterministic; /* backward without atomics (bit-identical run to run) */
    size_t memory_budget; /* device workspace budget in bytes; 0 = default */
    fw_policy policy;
    fw_knobs knobs;   /* the environment, read at fw_context_create */
    void *workspace;  /* device scratch reserved by the caller (fw_context_set_workspace) */
    size_t workspace_bytes;
    int check_device_values; /* fw_context_set_check_device_values */
    char last_error[1024];
    const char *last_backend;
    fw_sched *sched;  /* tuning table, telemetry, controllers, pacing event */
    atomic_int busy;  /* a call or setter is running (fw_context_enter) */
};

/* One call at a time per context (the rule of flashwatt.h): the public functions that use a context
 * hold it from start to end. A second thread's attempt fails at once (FW_ERR_CONTEXT_BUSY) without
 * touching it, instead of racing on its lazy state (the scheduler's tuning table and slots). The
 * acquire/release pair also orders one thread's use of the context before the next thread's. */
static inline int fw_context_enter(fw_context *ctx)
{
    return atomic_exchange_explicit(&ctx->busy, 1, memory_order_acquire) == 0;
}
static inline void fw_context_leave(fw_context *ctx) { atomic_store_explicit(&ctx->busy, 0, memory_order_release); }

/* Defines `ret name params` as name##_held args run with ctx held: FW_ERR_NULL_ARGUMENT for a NULL
 * ctx, FW_ERR_CONTEXT_BUSY while another thread holds it. */
#define FW_CONTEXT_HELD(name, params, args)                                                        \
    fw_status name params                                                                          \
    {                                                                                              \
        if (!ctx) return FW_ERR_NULL_ARGUMENT;                                                     \
        if (!fw_context_enter(ctx)) return FW_ERR_CONTEXT_BUSY;                                    \
        const fw_status st_ = name##_held args;                                                    \
        fw_context_leave(ctx);                                                                     \
        return st_;                                                                                \
    }

/* Keeps msg (its head, when long) as the context's last error; NULL ctx is ignored. */
void fw_context_set_error(fw_context *ctx, const char *msg);
struct fw_problem;
/* api.c's forward dispatch, for the serving entry points (api_serving.c). */
fw_status fw_api_run_forward(fw_context *ctx, struct fw_problem *p);
/* ... and its backward dispatch (the ragged backward). */
fw_status fw_api_run_backward(fw_context *ctx, struct fw_problem *p);

#endif
