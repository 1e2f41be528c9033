/* The CUDA backends' shared host helpers (cuda_common.h): errors, device presence and facts. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <atomic>
#include "backends/cuda/common/cuda_common.h"

extern "C" fw_status fw_cuda_failed(const fw_exec *ex, const char *call, cudaError_t e, const char *file, int line)
{
    fw_why(ex->err, ex->err_len, "%s failed: %s (%s:%d)", call, cudaGetErrorString(e), file, line);
    return e == cudaErrorMemoryAllocation ? FW_ERR_OUT_OF_MEMORY : FW_ERR_DEVICE;
}

extern "C" int fw_cuda_count_devices(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

extern "C" fw_status fw_cuda_copy_to_host(void *dst, const void *src, size_t bytes, void *stream)
{
    if (!bytes) return FW_OK;
    const cudaStream_t s = (cudaStream_t)stream;
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess) {
        cudaGetLastError();
        return FW_ERR_DEVICE;
    }
    return FW_OK;
}

extern "C" int fw_cuda_available(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return fw_why(why, why_len, "no usable CUDA device (%s)", cudaGetErrorString(e));
    }
    if (n == 0) return fw_why(why, why_len, "no CUDA device present");
    return 1;
}

#define FW_CUDA_MAX_FACT_DEVICES 64
extern "C" int fw_cuda_device_facts(int index, fw_cuda_device_info *out)
{
    /* written once per device; `known` is released after the facts so that readers see them whole */
    static fw_cuda_device_info facts[FW_CUDA_MAX_FACT_DEVICES];
    static std::atomic<int> known[FW_CUDA_MAX_FACT_DEVICES];
    if (index < 0 || index >= FW_CUDA_MAX_FACT_DEVICES) return 0;
    if (!known[index].load(std::memory_order_acquire)) {
        int maj = 0, min = 0, sm = 0, nsm = 0;
        if (cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
            cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess ||
            cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerBlockOptin, index) != cudaSuccess ||
            cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, index) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        facts[index].cc_major = maj; /* racing writers store the same values */
        facts[index].cc_minor = min;
        facts[index].smem_optin = sm;
        facts[index].sm_count = nsm;
        known[index].store(1, std::memory_order_release);
    }
    *out = facts[index];
    return 1;
}

extern "C" int fw_cuda_wg_enabled(const fw_cuda_device_info *d, const fw_knobs *k)
{
    return fw_cuda_is_sm90a(d) && k->cuda_wgmma;
}
