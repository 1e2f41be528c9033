/* Scalar conversions between float and the 16-bit storage types (IEEE half, bfloat16),
 * round-to-nearest-even, NaN and infinities preserved. Hot loops use the SIMD versions in
 * src/backends/cpu/; these are the reference and the fallback. */
#ifndef FW_DTYPE_H
#define FW_DTYPE_H

#include <stdint.h>
#include <string.h>
#include "flashwatt.h"

static inline float fw_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t fw_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float fw_bf16_to_f32(uint16_t h) { return fw_bits_to_f32((uint32_t)h << 16); }

static inline uint16_t fw_f32_to_bf16(float f)
{
    uint32_t u = fw_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float fw_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return fw_bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return fw_bits_to_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    return fw_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t fw_f32_to_f16(float f)
{
    uint32_t u = fw_f32_to_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow (rounds to inf) */
    if (a < 0x38800000u) { /* result subnormal or zero: round a * 2^24 to an integer */
        float m = fw_bits_to_f32(a) * 16777216.0f;
        uint32_t r = (uint32_t)m;
        float frac = m - (float)r;
        if (frac > 0.5f || (frac == 0.5f && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return (uint16_t)(sign | (a >> 13));
}

static inline size_t fw_dtype_size(fw_dtype t) { return t == FW_F32 ? 4 : 2; }

/* Element at flat offset `off` of a tensor of dtype t, as float. */
static inline float fw_load_f32(const void *base, fw_dtype t, int64_t off)
{
    switch (t) {
    case FW_F16: return fw_f16_to_f32(((const uint16_t *)base)[off]);
    case FW_BF16: return fw_bf16_to_f32(((const uint16_t *)base)[off]);
    default: return ((const float *)base)[off];
    }
}

static inline void fw_store_f32(void *base, fw_dtype t, int64_t off, float x)
{
    switch (t) {
    case FW_F16: ((uint16_t *)base)[off] = fw_f32_to_f16(x); break;
    case FW_BF16: ((uint16_t *)base)[off] = fw_f32_to_bf16(x); break;
    default: ((float *)base)[off] = x; break;
    }
}

#endif
