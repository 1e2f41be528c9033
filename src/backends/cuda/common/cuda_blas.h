/* cuBLAS pieces shared by the backends that call it (cuda-naive, the stored-matrix backward). */
#ifndef FW_CUDA_BLAS_H
#define FW_CUDA_BLAS_H

#include <cublas_v2.h>
#include "backends/cuda/common/cuda_common.h"

/* The calling host thread's cuBLAS handle for device dev, created on first use. */
cublasStatus_t fw_cublas_handle(int dev, cublasHandle_t *h);
/* A failed cuBLAS call into ex->err; returns FW_ERR_OUT_OF_MEMORY for an allocation failure, else
 * FW_ERR_DEVICE. */
fw_status fw_cublas_failed(const fw_exec *ex, const char *call, cublasStatus_t s, const char *file, int line);

/* Inside a function returning fw_status with `ex` (const fw_exec *) in scope. */
#define FW_CUBLAS_CHECK(call)                                                                      \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) return fw_cublas_failed(ex, #call, s_, __FILE__, __LINE__); \
    } while (0)

#endif
