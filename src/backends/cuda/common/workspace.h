/* Device workspace of the CUDA backends: stream-ordered scratch memory from a per-device pool that keeps its
 * memory between calls (no cudaMalloc per call). Every byte handed out is counted: fw_cuda_workspace_peak() is
 * the largest total in use at once since the last reset (what `flashwatt bench` reports as peak workspace). */
#ifndef FW_CUDA_WORKSPACE_H
#define FW_CUDA_WORKSPACE_H

#include <stddef.h>
#include <cuda_runtime.h>
#include "core/knobs.h"

#ifdef __cplusplus
extern "C" {
#endif
/* Allocates `bytes` on the current device, ordered on `stream`. */
cudaError_t fw_cuda_ws_alloc(void **ptr, size_t bytes, cudaStream_t stream);
/* Returns memory from fw_cuda_ws_alloc (same byte count), ordered on `stream`. */
cudaError_t fw_cuda_ws_free(void *ptr, size_t bytes, cudaStream_t stream);
/* Scratch that stays with a stream between calls, for kernels whose per-call pool allocation, flag memset and free
 * (~8 µs of host time on an H100, bench/launch_overhead.cu) would be a tenth of their run: `bytes` (at most
 * knobs->cuda_ws_cache_mb, FW_CUDA_WS_CACHE_MB, default 256, MB) on the current device whose bytes from `flags_at` on are flags, zeroed when
 * first handed out and whenever (bytes, flags_at, layout) differ from the last call's on the stream (`layout`: the
 * caller's exact description of where its flags lie), else left as that call's kernels left them; *epoch (1, 2, ...)
 * is new on every call with the same memory, so flags written as "== epoch" need no reset. Returns an error (then
 * the caller takes fw_cuda_ws_alloc, zeroes its flags and uses epoch 1) when the stream is being captured (a graph
 * replays one epoch), bytes is over the limit, or the memory cannot be had. On success the caller enqueues its
 * kernels and then calls fw_cuda_ws_cached_end(bytes, launched): in between, other calls wait (so that calls on one
 * stream from several host threads run in the order of their epochs); launched = 0 (no kernel enqueued) makes the
 * next call zero the flags. Held until fw_cuda_ws_cache_release() or process exit; counted in
 * fw_cuda_workspace_peak from here to fw_cuda_ws_cached_end, as a call's fw_cuda_ws_alloc is to its free. Keyed by
 * device and cudaStreamGetId; 16 kept, the least recently used given back after a device synchronisation. */
cudaError_t fw_cuda_ws_cached(void **ptr, size_t bytes, size_t flags_at, unsigned long long layout, cudaStream_t stream,
                              const fw_knobs *knobs, unsigned *epoch);
void fw_cuda_ws_cached_end(size_t bytes, int launched);
/* Frees every stream's cached scratch (after a device synchronisation). */
void fw_cuda_ws_cache_release(void);
/* Bytes handed out: the largest total in use at once since the last reset, and now. */
size_t fw_cuda_workspace_peak(void);
size_t fw_cuda_workspace_in_use(void);
void fw_cuda_workspace_reset_peak(void);
#ifdef __cplusplus
}
#endif

#endif
