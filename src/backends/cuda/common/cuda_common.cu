/* The CUDA backends' shared host helpers (cuda_common.h): errors, device presence and facts. */
#include <dlfcn.h>
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

/* fw_context_set_check_device_values: offsets, cache lengths and block tables copied to the host in
 * stream order for core's checks (src/core/devices.c). Refuses memory the GPU cannot read (a host
 * pointer passed for a CUDA call would fault in the kernel) and fails while the stream is captured. */
extern "C" fw_status fw_cuda_values_to_host(int device, void *stream, void *dst, const void *src, size_t bytes,
                                            char *msg, size_t msg_len)
{
    fw_cuda_device_guard guard(device);
    if (guard.failed()) {
        fw_why(msg, msg_len, "cannot make CUDA device %d current", device);
        return FW_ERR_DEVICE;
    }
    cudaPointerAttributes attr;
    cudaError_t e = cudaPointerGetAttributes(&attr, src);
    if (e == cudaSuccess && attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
        fw_why(msg, msg_len, "%p is not device memory (the array of a CUDA call must live on the GPU)", src);
        return FW_ERR_DEVICE_MISMATCH;
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        fw_why(msg, msg_len, "copy to the host failed: %s (not possible while the stream is being captured)",
               cudaGetErrorString(e));
        return FW_ERR_DEVICE;
    }
    return FW_OK;
}

/* Whether the NVIDIA driver's library is installed: the CUDA runtime reports a missing driver as
 * "CUDA driver version is insufficient", which reads as an old driver where there is none at all. */
static int driver_installed(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return 0;
    dlclose(h);
    return 1;
}

extern "C" int fw_cuda_available(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if ((e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) && !driver_installed())
            return fw_why(why, why_len, "no CUDA device: no NVIDIA driver on this machine (libcuda.so.1 not found)");
        if (e == cudaErrorNoDevice) return fw_why(why, why_len, "no CUDA device: the NVIDIA driver sees no GPU");
        if (e == cudaErrorInsufficientDriver) {
            int runtime = 0, driver = 0;
            cudaRuntimeGetVersion(&runtime);
            cudaDriverGetVersion(&driver);
            return fw_why(why, why_len, "no usable CUDA device: the NVIDIA driver (CUDA %d.%d) is older than this build's CUDA runtime (%d.%d)",
                          driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        }
        return fw_why(why, why_len, "no usable CUDA device (%s)", cudaGetErrorString(e));
    }
    if (n == 0) return fw_why(why, why_len, "no CUDA device: the NVIDIA driver sees no GPU");
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
