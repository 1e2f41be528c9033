#include "cpu_common.h"

void fw_cpu_load_row(float *dst, const void *base, fw_dtype t, int64_t off, int64_t n)
{
    switch (t) {
    case FW_F32: memcpy(dst, (const float *)base + off, (size_t)n * sizeof(float)); break;
    case FW_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = fw_f16_to_f32(((const uint16_t *)base)[off + i]);
        break;
    case FW_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = fw_bf16_to_f32(((const uint16_t *)base)[off + i]);
        break;
    }
}

void fw_cpu_store_row(void *base, fw_dtype t, int64_t off, const float *src, int64_t n)
{
    switch (t) {
    case FW_F32: memcpy((float *)base + off, src, (size_t)n * sizeof(float)); break;
    case FW_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)base)[off + i] = fw_f32_to_f16(src[i]);
        break;
    case FW_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)base)[off + i] = fw_f32_to_bf16(src[i]);
        break;
    }
}

int fw_cpu_available(char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    return 1;
}
