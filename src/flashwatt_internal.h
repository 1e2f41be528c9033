/* The library's internals that the command (tools/), the tests, the harness and the benchmarks may
 * use. They link the static flashwatt_internal (the same objects as libflashwatt.so, which exports
 * only include/flashwatt.h); this is the one header they include for it. What it offers:
 *   alloc      the host allocation wrapper and the fault injection of tests/test_faults.c
 *   problem    fw_problem, the validated and normalised call a backend sees; key ranges, FLOPs
 *   validate   fw_validate_forward / _backward: fw_tensors to an fw_problem, with the message
 *   dtype      scalar f16/bf16 <-> f32 conversions, fw_load_f32 / fw_store_f32, fw_dtype_size
 *   knobs      fw_knobs, the environment variables the library reads (the documented list)
 *   registry   fw_backend, fw_config, fw_exec: every backend, called directly (configurations)
 *   sched      the scheduler: tuning table path and keys, the pure selection, last choice
 *   tuning     the tuning table file (load, put, save)
 *   controller the power/temperature controller and the policy's pick on a frontier
 *   telemetry  telemetry sources and the fake source for tests
 *   cuda       (CUDA builds) device facts, workspace peak and cache, the materialised backward's
 *              plan: test hooks of the CUDA backends */
#ifndef FLASHWATT_INTERNAL_H
#define FLASHWATT_INTERNAL_H

#include "flashwatt.h"
#include "core/alloc.h"
#include "core/problem.h"
#include "core/validate.h"
#include "core/dtype.h"
#include "core/knobs.h"
#include "backends/backend.h"
#include "sched/sched.h"
#include "sched/tuning_table.h"
#include "sched/controller.h"
#include "telemetry/telemetry_internal.h"
#ifdef FW_HAVE_CUDA
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/common/workspace.h"
#include "backends/cuda/bwd/heuristics.h"
#include "backends/cuda/bwd/materialize.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The scheduler of a context (fw_sched_last_choice, fw_sched_table_status). */
fw_sched *fw_context_sched(fw_context *ctx);

#ifdef __cplusplus
}
#endif
#endif
