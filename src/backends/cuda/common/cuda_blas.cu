/* cuBLAS handles and error messages for the backends that call cuBLAS. See cuda_blas.h. */
#include "backends/cuda/common/cuda_blas.h"

#define FW_CUBLAS_MAX_DEVICES 64
static thread_local cublasHandle_t fw_cublas_handles[FW_CUBLAS_MAX_DEVICES];

cublasStatus_t fw_cublas_handle(int dev, cublasHandle_t *h)
{
    if (dev < 0 || dev >= FW_CUBLAS_MAX_DEVICES) return CUBLAS_STATUS_INVALID_VALUE;
    if (!fw_cublas_handles[dev]) {
        cublasStatus_t s = cublasCreate(&fw_cublas_handles[dev]);
        if (s != CUBLAS_STATUS_SUCCESS) {
            fw_cublas_handles[dev] = NULL;
            return s;
        }
    }
    *h = fw_cublas_handles[dev];
    return CUBLAS_STATUS_SUCCESS;
}

fw_status fw_cublas_failed(const fw_exec *ex, const char *call, cublasStatus_t s, const char *file, int line)
{
    fw_why(ex->err, ex->err_len, "%s failed: %s (%s:%d)", call, cublasGetStatusString(s), file, line);
    return s == CUBLAS_STATUS_ALLOC_FAILED ? FW_ERR_OUT_OF_MEMORY : FW_ERR_DEVICE;
}
