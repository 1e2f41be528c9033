/* cpu-flash: PLACEHOLDER until the tiled kernel lands — delegates nothing, supports nothing. */
#include "cpu_common.h"

static int flash_supports(const fw_problem *p, char *why, size_t why_len)
{
    (void)p;
    return fw_why(why, why_len, "cpu-flash is not built yet");
}

static fw_status flash_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)p; (void)cfg; (void)ex;
    return FW_ERR_NOT_IMPLEMENTED;
}

const fw_backend fw_backend_cpu_flash = {
    .name = "cpu-flash",
    .description = "tiled online-softmax attention, AVX-512/AVX2, threads and split-KV",
    .device = FW_DEVICE_CPU,
    .available = fw_cpu_available,
    .supports = flash_supports,
    .configs = NULL,
    .forward = flash_forward,
    .backward = NULL,
};
