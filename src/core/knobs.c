/* The environment, read once per context (and the documented exceptions): the list is in knobs.h.
 * This is the one file of the library outside the CUDA backend that calls getenv. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "knobs.h"

const fw_knobs fw_knobs_defaults = {
    .tuning_path = "",
    .home = "",
    .cuda_wgmma = 1,
    .cuda_flash_config = "",
    .cuda_bwd_atomic = -1,
    .cuda_bwd_tensor_cores = 1,
    .cuda_bwd_config = "",
    .cuda_ws_cache_mb = 256,
    .f32_kv_splits = 0,
    .f32_wg1_stage0 = -1,
    .persist_blocks = 0,
    .f32_delay = -1,
};

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static void copy_env(const char *name, char *buf, size_t len)
{
    const char *v = env(name);
    snprintf(buf, len, "%s", v ? v : "");
}

void fw_knobs_read(fw_knobs *k)
{
    const char *v;
    *k = fw_knobs_defaults;
    copy_env("FLASHWATT_TUNING", k->tuning_path, sizeof k->tuning_path);
    copy_env("HOME", k->home, sizeof k->home);
    if ((v = env("FW_CUDA_FLASH_WG"))) k->cuda_wgmma = strcmp(v, "0") != 0;
    copy_env("FW_CUDA_FLASH_CONFIG", k->cuda_flash_config, sizeof k->cuda_flash_config);
    if ((v = env("FW_CUDA_BWD_DQ"))) k->cuda_bwd_atomic = !strcmp(v, "atomic") ? 1 : !strcmp(v, "deterministic") ? 0 : -1;
    if ((v = env("FW_CUDA_BWD_TC"))) k->cuda_bwd_tensor_cores = strcmp(v, "0") != 0;
    if ((v = env("FW_CUDA_BWD_CONFIG"))) snprintf(k->cuda_bwd_config, sizeof k->cuda_bwd_config, "%s", v);
    if ((v = env("FW_CUDA_WS_CACHE_MB"))) k->cuda_ws_cache_mb = atoll(v);
    if ((v = env("FW_F32_KV_SPLITS")) && atoi(v) > 0) k->f32_kv_splits = atoi(v);
    if ((v = env("FW_F32_WG1_STAGE0"))) k->f32_wg1_stage0 = atoi(v) != 0;
    if ((v = env("FW_CUDA_PERSIST_BLOCKS")) && atoi(v) > 0) k->persist_blocks = atoi(v);
    if ((v = env("FW_F32_DELAY"))) k->f32_delay = atoi(v) > 0 ? atoi(v) : 0;
}

void fw_knobs_read_simd(char *buf, size_t len) { copy_env("FLASHWATT_SIMD", buf, len); }

void fw_knobs_read_telemetry(fw_telemetry_knobs *k)
{
    copy_env("FLASHWATT_NVML_LIB", k->nvml_lib, sizeof k->nvml_lib);
    copy_env("FLASHWATT_POWERCAP_ROOT", k->powercap_root, sizeof k->powercap_root);
}
