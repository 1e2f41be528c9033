/* Every environment variable the library reads, in one place: read once when a context is created
 * (fw_context_create) and handed to the backends through fw_exec, so that no call path reads the
 * environment. docs/DESIGN.md lists them with their meaning; most exist for tests and tuning. */
#ifndef FW_KNOBS_H
#define FW_KNOBS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fw_knobs {
    /* FLASHWATT_TUNING: the tuning table's path ("" = ~/.cache/flashwatt/tuning-<gpu>.txt) */
    char tuning_path[1024];
    /* FW_CUDA_FLASH_WG=0: no wgmma (sm_90a) kernels, the mma.sync ones everywhere (default 1) */
    int cuda_wgmma;
    /* FW_CUDA_FLASH_CONFIG: a cuda-flash forward configuration by name ("" = the heuristics') */
    char cuda_flash_config[48];
    /* FW_CUDA_BWD_DQ=deterministic|atomic: the backward's dQ reduction (0/1; -1 = unset) */
    int cuda_bwd_atomic;
    /* FW_CUDA_BWD_TC=0: the CUDA-core backward even for f16/bf16 (default 1) */
    int cuda_bwd_tensor_cores;
    /* FW_CUDA_BWD_CONFIG: the CUDA backward's kernels by record name, in whichever dQ mode runs ("" = the
     * heuristics'; `gpu_backward --list-variants` prints the names) */
    char cuda_bwd_config[48];
    /* FW_CUDA_WS_CACHE_MB: scratch kept per stream between calls, MB (default 256) */
    long long cuda_ws_cache_mb;
    /* FW_F32_KV_SPLITS=n: cuda-flash-f32's key ranges per query block (0 = the heuristics') */
    int f32_kv_splits;
    /* FW_F32_WG1_STAGE0=0|1: force the one-warpgroup kernel's staged first tile (-1 = heuristics) */
    int f32_wg1_stage0;
    /* FW_CUDA_PERSIST_BLOCKS=n: at most n blocks for the persistent f32 kernel (0 = no cap) */
    int f32_persist_blocks;
    /* FW_F32_DELAY=cycles: force the f32 kernels' staggered start (-1 = heuristics, 0 = off) */
    int f32_delay;
} fw_knobs;

/* The defaults, as if no variable were set. */
extern const fw_knobs fw_knobs_defaults;

/* Reads the environment into k (defaults where a variable is unset or unparsable). */
void fw_knobs_read(fw_knobs *k);

#ifdef __cplusplus
}
#endif
#endif
