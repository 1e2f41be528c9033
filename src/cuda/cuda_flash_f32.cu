/* cuda-flash-f32: PLACEHOLDER until its kernel lands. */
#include "cuda_common.h"

static int supports_(const fw_problem *p, char *why, size_t why_len)
{
    (void)p;
    return fw_why(why, why_len, "cuda-flash-f32 is not built yet");
}

static fw_status forward_(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)p; (void)cfg; (void)ex;
    return FW_ERR_NOT_IMPLEMENTED;
}

extern "C" const fw_backend fw_backend_cuda_flash_f32 = {
    "cuda-flash-f32", "placeholder", FW_DEVICE_CUDA, fw_cuda_available, supports_, NULL, forward_, NULL,
};
