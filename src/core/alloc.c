/* Host allocations and the fault-injection counters (alloc.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include "alloc.h"

static _Atomic int64_t fault_target[FW_FAULT_SITES] = {-1, -1, -1};
static _Atomic int64_t fault_count[FW_FAULT_SITES];

void fw_fault_arm(fw_fault_site site, int64_t nth)
{
    if ((unsigned)site >= FW_FAULT_SITES) return;
    atomic_store(&fault_count[site], 0);
    atomic_store(&fault_target[site], nth < 0 ? -1 : nth);
}

int64_t fw_fault_count(fw_fault_site site)
{
    return (unsigned)site < FW_FAULT_SITES ? atomic_load(&fault_count[site]) : 0;
}

int fw_fault_hit(fw_fault_site site)
{
    const int64_t target = atomic_load_explicit(&fault_target[site], memory_order_relaxed);
    if (target < 0) return 0;
    return atomic_fetch_add(&fault_count[site], 1) + 1 == target;
}

void *fw_malloc(size_t bytes) { return fw_fault_hit(FW_FAULT_HOST) ? NULL : malloc(bytes); }

void *fw_calloc(size_t count, size_t size) { return fw_fault_hit(FW_FAULT_HOST) ? NULL : calloc(count, size); }

void *fw_realloc(void *ptr, size_t bytes) { return fw_fault_hit(FW_FAULT_HOST) ? NULL : realloc(ptr, bytes); }

void *fw_aligned_alloc(size_t align, size_t bytes)
{
    if (fw_fault_hit(FW_FAULT_HOST)) return NULL;
    if (bytes > SIZE_MAX - align) return NULL;
    const size_t rounded = (bytes + align - 1) / align * align;
    return aligned_alloc(align, rounded ? rounded : align);
}

void fw_free(void *ptr) { free(ptr); }
