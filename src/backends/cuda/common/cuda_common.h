/* Shared host pieces of the CUDA backends: error checking that turns a failed CUDA call into an
 * FW_ERR_DEVICE with CUDA's own message, device presence and facts, the row-alignment checks, the
 * device guard, and the kernels' shared-memory limit. Device scratch memory is workspace.h's. */
#ifndef FW_CUDA_COMMON_H
#define FW_CUDA_COMMON_H

#include <cuda_runtime.h>
#include "backends/backend.h"
#include "core/alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if a CUDA device is present and the runtime works; else 0 with the reason. */
int fw_cuda_available(char *why, size_t why_len);
int fw_cuda_count_devices(void);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
extern "C" {
#endif
/* A failed CUDA call: its name, CUDA's message and the place into ex->err; returns the status it maps
 * to (FW_ERR_OUT_OF_MEMORY for an allocation failure, else FW_ERR_DEVICE). */
fw_status fw_cuda_failed(const fw_exec *ex, const char *call, cudaError_t e, const char *file, int line);
#ifdef __cplusplus
}
#endif

/* 16-byte rows for cp.async / ldmatrix / vector loads: the pointer is 16-byte aligned; the stride of every
 * dimension longer than 1 (batch, head, seq; a size-1 dimension's stride is never used) is a multiple of
 * `elems` elements (16 bytes: 8 16-bit or 4 32-bit ones); returns the index of the first stride that is
 * not, or -1. */
static inline int fw_cuda_aligned16(const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; }
static inline int fw_cuda_unaligned_stride(const int64_t *s, int64_t nb, int64_t nh, int64_t ns, int64_t elems)
{
    const int64_t n[3] = {nb, nh, ns};
    for (int i = 0; i < 3; i++)
        if (n[i] > 1 && s[i] % elems != 0) return i;
    return -1;
}

/* Inside a function returning fw_status with `ex` (const fw_exec *) in scope. */
#define FW_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return fw_cuda_failed(ex, #call, e_, __FILE__, __LINE__);          \
    } while (0)

/* The error of the launch just made (cudaGetLastError, not a synchronisation). The fault injection
 * (core/alloc.h, FW_FAULT_LAUNCH) turns a successful one into cudaErrorLaunchOutOfResources, the error
 * of a launch that did not start, so that tests can check that a failed launch leaves the context and
 * the workspace usable. */
static inline cudaError_t fw_cuda_launch_error(void)
{
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess && fw_fault_hit(FW_FAULT_LAUNCH) ? cudaErrorLaunchOutOfResources : e;
}

/* After every launch. */
#define FW_CUDA_CHECK_LAUNCH() FW_CUDA_CHECK(fw_cuda_launch_error())

#ifdef __cplusplus
extern "C" {
#endif
/* Facts of one device, read once per device (cudaDeviceGetAttribute is cheap, but not free, and the
 * launch paths ask on every call). Returns 0 if the device cannot be queried. */
typedef struct fw_cuda_device_info {
    int cc_major, cc_minor, smem_optin, sm_count;
} fw_cuda_device_info;
int fw_cuda_device_facts(int index, fw_cuda_device_info *out);
/* Compute capability 9.0: where the sm_90a machine code (wgmma, setmaxnreg) runs. */
static inline int fw_cuda_is_sm90a(const fw_cuda_device_info *d) { return d->cc_major == 9 && d->cc_minor == 0; }
/* The wgmma (sm_90a) kernels of cuda-flash and cuda-flash-f32 may run: compute capability 9.0, and the
 * knobs allow them (FW_CUDA_FLASH_WG is not "0"). */
int fw_cuda_wg_enabled(const fw_cuda_device_info *d, const fw_knobs *k);
#ifdef __cplusplus
}
#endif

/* Sets the problem's device current for the scope of a forward and puts the old one back. */
#ifdef __cplusplus
struct fw_cuda_device_guard {
    int old_ = -1, ok_ = 0; /* 0 failed, 1 already current, 2 switched (restore) */
    explicit fw_cuda_device_guard(int dev)
    {
        if (cudaGetDevice(&old_) != cudaSuccess) return; /* ok_ = 0: failed */
        if (old_ == dev) { ok_ = 1; return; }
        ok_ = cudaSetDevice(dev) == cudaSuccess ? 2 : 0;
    }
    ~fw_cuda_device_guard()
    {
        if (ok_ == 2) cudaSetDevice(old_);
    }
    bool failed() const { return ok_ == 0; }
};
#endif

#ifdef __CUDACC__
#include <atomic>
/* Raises kernel's dynamic shared-memory limit to `bytes` (a compile-time size of that kernel instantiation; 0:
 * all the device's opt-in size leaves beside the kernel's static shared memory) and, with
 * max_carveout, asks for the largest shared-memory carveout, once per device: cudaFuncSetAttribute is a
 * driver call, and launches repeat. */
template <auto kernel> static cudaError_t fw_cuda_smem_limit(size_t bytes, bool max_carveout = false)
{
    static std::atomic<unsigned long long> done{0}; /* one bit per device 0..63 */
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    const unsigned long long bit = dev < 64 ? 1ull << dev : 0;
    if (bit && (done.load(std::memory_order_relaxed) & bit)) return cudaSuccess;
    if (!bytes) { /* the opt-in size less the kernel's static shared memory (above that the driver refuses) */
        fw_cuda_device_info di;
        if (!fw_cuda_device_facts(dev, &di)) return cudaErrorInvalidDevice;
        cudaFuncAttributes fa;
        e = cudaFuncGetAttributes(&fa, kernel);
        if (e != cudaSuccess) return e;
        bytes = (size_t)di.smem_optin - fa.sharedSizeBytes;
    }
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess && max_carveout)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
    if (e == cudaSuccess) done.fetch_or(bit, std::memory_order_relaxed);
    return e;
}
#endif

#endif /* FW_CUDA_COMMON_H */
