#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <atomic>
#include "cuda_common.h"

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

/* ---- device workspace ------------------------------------------------------------------------ */
#include <mutex>

#define FW_WS_MAX_DEVICES 64
static std::mutex fw_ws_mutex;
static cudaMemPool_t fw_ws_pools[FW_WS_MAX_DEVICES];
static int fw_ws_pool_ready[FW_WS_MAX_DEVICES];
static size_t fw_ws_in_use, fw_ws_peak;

static cudaError_t fw_ws_pool(int dev, cudaMemPool_t *pool)
{
    std::lock_guard<std::mutex> lock(fw_ws_mutex);
    if (dev < 0 || dev >= FW_WS_MAX_DEVICES) return cudaErrorInvalidDevice;
    if (!fw_ws_pool_ready[dev]) {
        cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        cudaError_t e = cudaMemPoolCreate(&fw_ws_pools[dev], &props);
        if (e != cudaSuccess) return e;
        uint64_t keep = UINT64_MAX; /* keep freed memory in the pool: no cudaMalloc per call */
        e = cudaMemPoolSetAttribute(fw_ws_pools[dev], cudaMemPoolAttrReleaseThreshold, &keep);
        if (e != cudaSuccess) return e;
        fw_ws_pool_ready[dev] = 1;
    }
    *pool = fw_ws_pools[dev];
    return cudaSuccess;
}

extern "C" cudaError_t fw_cuda_ws_alloc(void **ptr, size_t bytes, cudaStream_t stream)
{
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    cudaMemPool_t pool;
    e = fw_ws_pool(dev, &pool);
    if (e != cudaSuccess) return e;
    e = cudaMallocFromPoolAsync(ptr, bytes ? bytes : 1, pool, stream);
    if (e != cudaSuccess) return e;
    std::lock_guard<std::mutex> lock(fw_ws_mutex);
    fw_ws_in_use += bytes;
    if (fw_ws_in_use > fw_ws_peak) fw_ws_peak = fw_ws_in_use;
    return cudaSuccess;
}

extern "C" cudaError_t fw_cuda_ws_free(void *ptr, size_t bytes, cudaStream_t stream)
{
    if (!ptr) return cudaSuccess;
    cudaError_t e = cudaFreeAsync(ptr, stream);
    std::lock_guard<std::mutex> lock(fw_ws_mutex);
    fw_ws_in_use = fw_ws_in_use >= bytes ? fw_ws_in_use - bytes : 0;
    return e;
}

extern "C" size_t fw_cuda_workspace_peak(void)
{
    std::lock_guard<std::mutex> lock(fw_ws_mutex);
    return fw_ws_peak;
}

extern "C" size_t fw_cuda_workspace_in_use(void)
{
    std::lock_guard<std::mutex> lock(fw_ws_mutex);
    return fw_ws_in_use;
}

extern "C" void fw_cuda_workspace_reset_peak(void)
{
    std::lock_guard<std::mutex> lock(fw_ws_mutex);
    fw_ws_peak = fw_ws_in_use;
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

extern "C" int fw_cuda_wg_enabled(const fw_cuda_device_info *d)
{
    const char *env = getenv("FW_CUDA_FLASH_WG");
    return fw_cuda_is_sm90a(d) && !(env && !strcmp(env, "0"));
}
