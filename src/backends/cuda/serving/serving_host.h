/* Host side shared by the serving paths of cuda-flash (serving.cu) and cuda-flash-f32 (serving_f32.cu):
 * configuration names, the split-KV plan, the workspace layout, the translation of an fw_problem into
 * kernel arguments, and the launch sequence (append, attention, merge). C++ (nvcc), host only. */
#ifndef FW_CUDA_SERVING_HOST_H
#define FW_CUDA_SERVING_HOST_H

#include <cuda_runtime.h>
#include "serving.h"

/* One serving configuration. split: 0 = the heuristic's count, 1 = no split, N >= 2 = N chunks (fewer
 * where the keys are short). occupancy: at most this many blocks per SM (0 = as many as fit), by padding
 * the block's shared memory: fewer blocks in flight, each with its stages of K/V in flight. */
typedef struct srv_choice {
    int bm, bn, stages; /* cuda-flash's tile; 0 for cuda-flash-f32 (one tile) */
    int split;
    int occupancy;
} srv_choice;

/* "srv-m16-bn64-s3" (cuda-flash) or "srv-f32" (tile 0), then "-occN", then "-nosplit" or "-splitN". */
void srv_choice_name(const srv_choice *c, char *buf, size_t len);
/* Parses a name made by srv_choice_name; 0 when it is not one. */
int srv_choice_parse(const char *name, srv_choice *c);
int srv_is_serving_name(const char *name);
void srv_choice_to_config(const srv_choice *c, fw_precision precision, fw_config *out);

/* Shared memory a block of `need` bytes takes to leave at most `cap` blocks on an SM of the device
 * (need itself when cap is 0 or cannot bind), within the device's opt-in limit. */
size_t srv_launch_smem(int device, size_t need, int cap);

/* Split plan from host-known sizes only: base = blocks without splitting (B · H_kv · row blocks),
 * slots = SMs × blocks per SM. Writes the chunk (keys, a multiple of bn) and returns the split count. */
int srv_plan_splits(int policy, int64_t base, int64_t max_k, int bn, int64_t slots, int *chunk);
/* Workspace bytes of `entries` partial rows (split × B × H × max_q) of head dim d, 256 bytes of
 * alignment slack included; 0 for no entries. */
size_t srv_ws_bytes(int64_t entries, int64_t d);
/* The most entries' partials that `bytes` hold. */
int64_t srv_ws_entries(size_t bytes, int64_t d);
/* Upper bound of the workspace the heuristic's split plan takes for calls up to p's sizes, with bm rows a
 * block, key tiles of bn and at most `slots2` split blocks (2 · SMs · blocks per SM). A configuration
 * with a fixed split count takes fewer splits where its partials would not fit (srv_run). */
size_t srv_ws_bound(const fw_problem *p, int bm, int bn, int64_t slots2);
/* Partials taken from the stream-ordered pool (no workspace set) stay within this: fewer splits beyond. */
#define SRV_POOL_LIMIT ((size_t)256 << 20)

/* Bytes between consecutive keys of k and v (within a sequence, or a page) and between pages; 0 where
 * there is only one key (page) to step over. srv_key_strides_fit: whether they fit the kernels' 32-bit
 * byte strides (fw_srv_params), else a reason naming the stride. */
void srv_key_stride_bytes(const fw_problem *p, int64_t *k_row, int64_t *v_row, int64_t *k_page, int64_t *v_page);
int srv_key_strides_fit(const fw_problem *p, char *why, size_t len);

/* Kernel arguments of p (everything but the launch geometry). */
void srv_fill_params(const fw_problem *p, fw_srv_params *a);

typedef struct srv_kernels {
    cudaError_t (*attend)(const fw_srv_params *p, size_t smem, cudaStream_t stream);
    cudaError_t (*merge)(const fw_srv_params *p, cudaStream_t stream);
    cudaError_t (*append)(const fw_srv_params *p, cudaStream_t stream);
    const char *name; /* the configuration, for messages */
} srv_kernels;

/* Plans the splits (policy c->split, within p->workspace when set, else from the stream-ordered pool),
 * then appends k_new/v_new (when given), attends and merges on ex's stream. a: srv_fill_params's, with
 * block_rows and m_blocks set. No host synchronisation, no allocation with a workspace. */
fw_status srv_run(const fw_problem *p, const fw_exec *ex, fw_srv_params *a, const srv_choice *c, int bn,
                  int64_t slots, size_t smem, const srv_kernels *k);

#endif
