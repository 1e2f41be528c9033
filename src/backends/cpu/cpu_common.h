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

/* ---- per-thread scratch ----------------------------------------------------------------------
 * Taken in the calling thread before the parallel region and before anything is written, so that an
 * allocation that fails makes the call return out-of-memory with nothing written (an allocation per
 * thread inside the region that fails on some threads only would leave the others waiting at the
 * work loop's barrier). One slice per thread; a thread carves its buffers out of its slice. */
typedef struct fw_cpu_scratch {
    char *base;
    size_t slice; /* bytes per thread, a multiple of 64 */
    int threads;
} fw_cpu_scratch;

/* Threads for work items that each take a thread's buffers: ex->threads, at most `items` (a thread
 * without an item would only take memory), at least 1. */
int fw_cpu_threads(const fw_exec *ex, int64_t items);
/* Bytes of n elements of size es as carved (rounded up to 64); SIZE_MAX when it does not fit. */
size_t fw_cpu_bytes(int64_t n, size_t es);
/* Saturating sum of such byte counts (SIZE_MAX stays SIZE_MAX). */
size_t fw_cpu_bytes_add(size_t a, size_t b);
/* `threads` slices of slice_bytes each; FW_ERR_OUT_OF_MEMORY with "<who>: ..." in ex->err. */
fw_status fw_cpu_scratch_alloc(fw_cpu_scratch *s, int threads, size_t slice_bytes, const fw_exec *ex,
                               const char *who);
void fw_cpu_scratch_free(fw_cpu_scratch *s);
/* The calling OpenMP thread's slice, as a cursor for fw_cpu_carve. */
char *fw_cpu_scratch_mine(const fw_cpu_scratch *s);
/* The next n elements of size es from a slice (what fw_cpu_bytes(n, es) counted). */
static inline void *fw_cpu_carve(char **cursor, int64_t n, size_t es)
{
    void *p = *cursor;
    *cursor += fw_cpu_bytes(n, es);
    return p;
}

/* A KV-cache call with new tokens: writes k_new / v_new into the cache at rows cache_seqlens[b] ..
 * cache_seqlens[b] + Lq_b - 1 of each sequence (paged or contiguous), before any key is read. Every
 * CPU backend calls it first, so they all append alike. */
void fw_cpu_kvcache_append(const fw_problem *p);

#endif
