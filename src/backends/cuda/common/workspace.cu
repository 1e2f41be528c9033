/* Device workspace (workspace.h): a stream-ordered pool per device, and scratch kept per stream. */
#include <stdint.h>
#include <string.h>
#include <mutex>
#include "backends/cuda/common/workspace.h"
#include "core/alloc.h"


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
    if (fw_fault_hit(FW_FAULT_DEVICE)) return cudaErrorMemoryAllocation; /* tests/test_faults.c --device cuda */
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

static size_t fw_ws_cache_limit(const fw_knobs *k) { return (size_t)k->cuda_ws_cache_mb << 20; }

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
                                         cudaStream_t stream, const fw_knobs *knobs, unsigned *epoch)
{
    if (bytes == 0 || bytes > fw_ws_cache_limit(knobs) || flags_at > bytes) return cudaErrorNotSupported;
    if (fw_fault_hit(FW_FAULT_DEVICE)) return cudaErrorMemoryAllocation; /* the caller falls back to fw_cuda_ws_alloc */
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

