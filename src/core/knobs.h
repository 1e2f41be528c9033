/* Every environment variable the library reads, in one place. The per-context ones are read once
 * when a context is created (fw_context_create) and reach the backends through fw_exec
 * (fw_exec_knobs), so that no call path reads the environment.
 *
 * Variable                 Default          Meaning
 * ---- per context (fw_knobs, read by fw_context_create) ------------------------------------------
 * FLASHWATT_TUNING         (unset)          tuning table path; unset: $HOME/.cache/flashwatt/
 *                                           tuning-<gpu name or "cpu">.txt
 * HOME                     (unset)          only to form that default tuning table path
 * FW_CUDA_FLASH_WG         1                0: no wgmma (sm_90a) kernels, mma.sync ones everywhere
 * FW_CUDA_FLASH_CONFIG     (heuristics)     a cuda-flash forward configuration by name
 * FW_CUDA_BWD_DQ           (heuristics)     deterministic | atomic: the CUDA backward's dQ reduction
 * FW_CUDA_BWD_TC           1                0: CUDA-core backward even for f16/bf16
 * FW_CUDA_BWD_CONFIG       (heuristics)     the backward's kernels by record name (kernels.tsv)
 * FW_CUDA_WS_CACHE_MB      256              device scratch kept per stream between calls, MB
 * FW_F32_KV_SPLITS         (heuristics)     cuda-flash-f32: key ranges per query block (n > 0)
 * FW_F32_WG1_STAGE0        (heuristics)     0 | 1: the one-warpgroup f32 kernel's staged first tile
 * FW_CUDA_PERSIST_BLOCKS   0 (no cap)       at most n blocks for the persistent kernels (cuda-flash, -f32)
 * FW_F32_DELAY             (heuristics)     cycles of the f32 kernels' staggered start (0 = off)
 * ---- documented exceptions: wider scope, read where that scope begins ----------------------------
 * FLASHWATT_SIMD           (CPUID's best)   scalar | avx2 | avx512: lowers the CPU kernels' SIMD
 *                                           level; per process, read once (thread-safe) at the
 *                                           first CPU-backend call (fw_knobs_read_simd)
 * FLASHWATT_NVML_LIB       libnvidia-ml.so.1  the NVML library the telemetry dlopens; per
 *                                           fw_telemetry, read by fw_telemetry_open
 * FLASHWATT_POWERCAP_ROOT  /sys/class/powercap  where CPU package energy is read; per fw_telemetry,
 *                                           read by fw_telemetry_open
 * Most exist for tests, tuning and benchmarks; an unset, empty or unparsable value is the default. */
#ifndef FW_KNOBS_H
#define FW_KNOBS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fw_knobs {
    char tuning_path[1024];     /* FLASHWATT_TUNING; "" = the default path */
    char home[1024];            /* HOME; "" = unset */
    int cuda_wgmma;             /* FW_CUDA_FLASH_WG */
    char cuda_flash_config[48]; /* FW_CUDA_FLASH_CONFIG; "" = the heuristics' */
    int cuda_bwd_atomic;        /* FW_CUDA_BWD_DQ: 1 atomic, 0 deterministic, -1 unset */
    int cuda_bwd_tensor_cores;  /* FW_CUDA_BWD_TC */
    char cuda_bwd_config[48];   /* FW_CUDA_BWD_CONFIG; "" = the heuristics' */
    long long cuda_ws_cache_mb; /* FW_CUDA_WS_CACHE_MB */
    int f32_kv_splits;          /* FW_F32_KV_SPLITS; 0 = the heuristics' */
    int f32_wg1_stage0;         /* FW_F32_WG1_STAGE0; -1 = the heuristics' */
    int persist_blocks;     /* FW_CUDA_PERSIST_BLOCKS; 0 = no cap */
    int f32_delay;              /* FW_F32_DELAY; -1 = the heuristics', 0 = off */
} fw_knobs;

/* The defaults, as if no variable were set. */
extern const fw_knobs fw_knobs_defaults;

/* Reads the per-context variables into k (defaults where a variable is unset or unparsable). */
void fw_knobs_read(fw_knobs *k);

/* The exceptions above. FLASHWATT_SIMD into buf ("" when unset): cpu_features.c calls it once per
 * process. */
void fw_knobs_read_simd(char *buf, size_t len);
/* FLASHWATT_NVML_LIB and FLASHWATT_POWERCAP_ROOT ("" when unset), for one fw_telemetry_open. */
typedef struct fw_telemetry_knobs {
    char nvml_lib[512];
    char powercap_root[512];
} fw_telemetry_knobs;
void fw_knobs_read_telemetry(fw_telemetry_knobs *k);

#ifdef __cplusplus
}
#endif
#endif
