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

/* fw_cuda_ws_cached's table: a slot per (device, stream id) that asked, the least recently used given up when full */
#define FW_WS_CACHE_SLOTS 16
static struct fw_ws_slot {
    int dev;
    unsigned long long stream_id;
    void *ptr;
    size_t bytes;
    size_t last_bytes, last_flags_at; /* the last call's layout: its flags are valid for a call with the same */
    unsigned long long last_layout;
    unsigned epoch;
    unsigned long long used; /* fw_ws_clock at the last use */
} fw_ws_slots[FW_WS_CACHE_SLOTS];
static unsigned long long fw_ws_clock;
/* Held from a successful fw_cuda_ws_cached to its fw_cuda_ws_cached_end (taken before fw_ws_mutex): calls enqueue
 * their kernels in the order of their epochs, also from several host threads on one stream. */
static std::mutex fw_ws_launch_mutex;
static fw_ws_slot *fw_ws_current; /* the slot handed out, while fw_ws_launch_mutex is held */

static size_t fw_ws_cache_limit(void)
{
    static const size_t limit = [] {
        const char *e = getenv("FW_CUDA_WS_CACHE_MB");
        return (size_t)(e ? atoll(e) : 256) << 20;
    }();
    return limit;
}

/* a slot's memory back, once its device is idle: any stream (live or destroyed) is done with it */
static void fw_ws_slot_drop(fw_ws_slot *sl)
{
    if (sl->ptr) {
        int cur = 0;
        if (cudaGetDevice(&cur) == cudaSuccess && cudaSetDevice(sl->dev) == cudaSuccess) {
            cudaDeviceSynchronize();
            cudaFree(sl->ptr);
            cudaSetDevice(cur);
        }
        cudaGetLastError();
    }
    memset(sl, 0, sizeof *sl);
}

extern "C" cudaError_t fw_cuda_ws_cached(void **ptr, size_t bytes, size_t flags_at, unsigned long long layout,
                                         cudaStream_t stream, unsigned *epoch)
{
    if (bytes == 0 || bytes > fw_ws_cache_limit() || flags_at > bytes) return cudaErrorNotSupported;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    unsigned long long sid = 0;
    int dev = 0;
    if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone ||
        cudaStreamGetId(stream, &sid) != cudaSuccess || cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return cudaErrorNotSupported;
    }
    cudaMemPool_t pool;
    cudaError_t e = fw_ws_pool(dev, &pool);
    if (e != cudaSuccess) return e;
    std::unique_lock<std::mutex> launch(fw_ws_launch_mutex);
    std::lock_guard<std::mutex> lock(fw_ws_mutex);
    fw_ws_slot *sl = NULL, *lru = &fw_ws_slots[0];
    for (int i = 0; i < FW_WS_CACHE_SLOTS && !sl; i++) {
        fw_ws_slot *c = &fw_ws_slots[i];
        if (c->ptr && c->dev == dev && c->stream_id == sid) sl = c;
        else if (c->used < lru->used) lru = c; /* an empty slot's is 0: taken first */
    }
    if (!sl) {
        sl = lru;
        fw_ws_slot_drop(sl);
    }
    if (!sl->ptr || sl->bytes < bytes || sl->epoch >= 0x7fffffffu) {
        if (sl->ptr) { /* earlier work on this stream is ordered before the free */
            e = cudaFreeAsync(sl->ptr, stream);
            sl->ptr = NULL;
            if (e != cudaSuccess) {
                memset(sl, 0, sizeof *sl);
                cudaGetLastError(); /* the caller falls back to fw_cuda_ws_alloc */
                return e;
            }
        }
        const size_t want = bytes > sl->bytes ? bytes : sl->bytes;
        e = cudaMallocFromPoolAsync(&sl->ptr, want, pool, stream);
        if (e == cudaSuccess) e = cudaMemsetAsync(sl->ptr, 0, want, stream);
        if (e != cudaSuccess) {
            if (sl->ptr) cudaFreeAsync(sl->ptr, stream);
            memset(sl, 0, sizeof *sl);
            cudaGetLastError(); /* the caller falls back to fw_cuda_ws_alloc */
            return e;
        }
        sl->dev = dev;
        sl->stream_id = sid;
        sl->bytes = want;
        sl->epoch = 0;
    } else if (bytes != sl->last_bytes || flags_at != sl->last_flags_at || layout != sl->last_layout) {
        /* another layout: words that were tiles (or other flags) become flags; zero them, epochs go on */
        e = cudaMemsetAsync((unsigned char *)sl->ptr + flags_at, 0, bytes - flags_at, stream);
        if (e != cudaSuccess) {
            cudaGetLastError();
            return e;
        }
    }
    sl->last_bytes = bytes;
    sl->last_flags_at = flags_at;
    sl->last_layout = layout;
    fw_ws_in_use += bytes; /* as fw_cuda_ws_alloc's until fw_cuda_ws_cached_end: the call's workspace */
    if (fw_ws_in_use > fw_ws_peak) fw_ws_peak = fw_ws_in_use;
    sl->used = ++fw_ws_clock;
    *epoch = ++sl->epoch;
    *ptr = sl->ptr;
    fw_ws_current = sl;
    launch.release(); /* still locked: fw_cuda_ws_cached_end unlocks it */
    return cudaSuccess;
}

extern "C" void fw_cuda_ws_cached_end(size_t bytes, int launched)
{
    {
        std::lock_guard<std::mutex> lock(fw_ws_mutex);
        fw_ws_in_use = fw_ws_in_use >= bytes ? fw_ws_in_use - bytes : 0;
        /* no kernel ran with this epoch: the flags (a kernel's own resets) are not as the layout promises; the next
         * call zeroes them */
        if (!launched && fw_ws_current) fw_ws_current->last_bytes = 0;
        fw_ws_current = NULL;
    }
    fw_ws_launch_mutex.unlock();
}

extern "C" void fw_cuda_ws_cache_release(void)
{
    std::lock_guard<std::mutex> launch(fw_ws_launch_mutex);
    std::lock_guard<std::mutex> lock(fw_ws_mutex);
    for (int i = 0; i < FW_WS_CACHE_SLOTS; i++) fw_ws_slot_drop(&fw_ws_slots[i]);
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
