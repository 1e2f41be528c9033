/* Shared pieces of the CPU backends: element addressing, row loads in f32, thread helpers. */
#ifndef FW_CPU_COMMON_H
#define FW_CPU_COMMON_H

#include <stdint.h>
#include "core/alloc.h"
#include "core/dtype.h"
#include "core/problem.h"
#include "backends/backend.h"

/* Flat element offset of (b, h, s, 0). */
static inline int64_t fw_off(const int64_t st[4], int64_t b, int64_t h, int64_t s)
{
    return b * st[0] + h * st[1] + s * st[2];
}

/* Copies n contiguous elements at base[off..] of dtype t into dst as float. */
void fw_cpu_load_row(float *dst, const void *base, fw_dtype t, int64_t off, int64_t n);
/* Stores n floats into base[off..] of dtype t (rounding to nearest even). */
void fw_cpu_store_row(void *base, fw_dtype t, int64_t off, const float *src, int64_t n);

int fw_cpu_available(char *why, size_t why_len); /* always 1 */

/* A KV-cache call with new tokens: writes k_new / v_new into the cache at rows cache_seqlens[b] ..
 * cache_seqlens[b] + Lq_b - 1 of each sequence (paged or contiguous), before any key is read. Every
 * CPU backend calls it first, so they all append alike. */
void fw_cpu_kvcache_append(const fw_problem *p);

#endif
