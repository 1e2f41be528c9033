/* NVTX ranges around the backend call of every attention call (Nsight Systems shows them in the
 * "flashwatt" domain, named "<backend> <call> <configuration>", e.g. "cuda-flash fwd ws-bm128-bn128-s3").
 * Built where the NVTX3 header is found (FW_HAVE_NVTX); compiled out elsewhere. */
#ifndef FW_CORE_NVTX_H
#define FW_CORE_NVTX_H

#include "problem.h"

typedef enum fw_nvtx_pass { FW_NVTX_FORWARD, FW_NVTX_BACKWARD } fw_nvtx_pass;

#ifdef FW_HAVE_NVTX
/* Opens the range; returns whether one was opened (0 where no tool listens: nothing is formatted). */
int fw_nvtx_push(const char *backend, const fw_problem *p, fw_nvtx_pass pass, const char *config);
void fw_nvtx_pop(void);
#else
static inline int fw_nvtx_push(const char *backend, const fw_problem *p, fw_nvtx_pass pass, const char *config)
{
    (void)backend; (void)p; (void)pass; (void)config;
    return 0;
}
static inline void fw_nvtx_pop(void) {}
#endif

#endif
