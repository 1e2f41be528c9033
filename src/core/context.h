/* The context object behind the opaque fw_context: the top layer (the public API) owns it. */
#ifndef FW_CONTEXT_H
#define FW_CONTEXT_H

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
};

/* Keeps msg (its head, when long) as the context's last error; NULL ctx is ignored. */
void fw_context_set_error(fw_context *ctx, const char *msg);
struct fw_problem;
/* api.c's forward dispatch, for the serving entry points (api_serving.c). */
fw_status fw_api_run_forward(fw_context *ctx, struct fw_problem *p);
/* ... and its backward dispatch (the ragged backward). */
fw_status fw_api_run_backward(fw_context *ctx, struct fw_problem *p);

#endif
