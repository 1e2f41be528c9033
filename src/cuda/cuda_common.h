/* Shared pieces of the CUDA backends: error checking that turns a failed CUDA call into an
 * FW_ERR_DEVICE with CUDA's own message, device presence, and the backend-table helpers. */
#ifndef FW_CUDA_COMMON_H
#define FW_CUDA_COMMON_H

#include <cuda_runtime.h>
#include "../backends/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if a CUDA device is present and the runtime works; else 0 with the reason. */
int fw_cuda_available(char *why, size_t why_len);
int fw_cuda_count_devices(void);

#ifdef __cplusplus
}
#endif

/* Inside a function returning fw_status with `ex` (const fw_exec *) in scope. */
#define FW_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fw_why(ex->err, ex->err_len, "%s failed: %s (%s:%d)", #call, cudaGetErrorString(e_),   \
                   __FILE__, __LINE__);                                                            \
            return e_ == cudaErrorMemoryAllocation ? FW_ERR_OUT_OF_MEMORY : FW_ERR_DEVICE;         \
        }                                                                                          \
    } while (0)

/* After every launch: the launch error, not a synchronisation. */
#define FW_CUDA_CHECK_LAUNCH() FW_CUDA_CHECK(cudaGetLastError())

#endif
