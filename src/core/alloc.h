/* The library's host allocations, all through one place, and the fault injection the tests use to
 * fail the n-th of them (host here; device scratch in backends/cuda/common/workspace.cu; launch
 * checks in cuda_common.h). Every path that allocates must answer a failure with
 * FW_ERR_OUT_OF_MEMORY, free what it took and write nothing: tests/test_faults.c fails each
 * allocation of a call in turn and checks that. Without an armed fault the hook costs one relaxed
 * atomic load per allocation. */
#ifndef FW_CORE_ALLOC_H
#define FW_CORE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void *fw_malloc(size_t bytes);
void *fw_calloc(size_t count, size_t size);
void *fw_realloc(void *ptr, size_t bytes);
/* bytes is rounded up to a multiple of align (C11 aligned_alloc's rule); align a power of two. */
void *fw_aligned_alloc(size_t align, size_t bytes);
void fw_free(void *ptr);

/* Where a fault can be injected. */
typedef enum fw_fault_site {
    FW_FAULT_HOST = 0,   /* fw_malloc, fw_calloc, fw_realloc, fw_aligned_alloc */
    FW_FAULT_DEVICE = 1, /* the CUDA backends' device scratch (pool and per-stream cache) */
    FW_FAULT_LAUNCH = 2, /* the CUDA backends' check after a kernel launch reports a launch failure */
    FW_FAULT_SITES = 3
} fw_fault_site;

/* Counts the site's events from now on and fails the nth (1-based) of them; nth = 0 counts without
 * failing; nth < 0 turns the site off (the default). Process-wide: arm it only while no other
 * thread calls the library. */
void fw_fault_arm(fw_fault_site site, int64_t nth);
/* Events at the site since it was armed (0 while off). */
int64_t fw_fault_count(fw_fault_site site);
/* Counts one event at an armed site; 1 when it is the one to fail. */
int fw_fault_hit(fw_fault_site site);

#ifdef __cplusplus
}
#endif
#endif
