#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void fw_cpu_kvcache_append(const fw_problem *p)
{
    if (p->kind != FW_CALL_KVCACHE || !p->k_new) return;
    const size_t es = fw_dtype_size(p->dtype), row = (size_t)p->head_dim * es;
    char *k = (char *)(uintptr_t)p->k, *v = (char *)(uintptr_t)p->v; /* the cache is written here only */
    const char *kn = (const char *)p->k_new, *vn = (const char *)p->v_new;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t r0, lq;
        fw_seq_q(p, b, &r0, &lq);
        const int64_t at = p->cache_seqlens[b];
        for (int64_t hk = 0; hk < p->kv_heads; hk++)
            for (int64_t i = 0; i < lq; i++) {
                memcpy(k + (size_t)fw_key_offset(p, p->k_stride, b, hk, at + i) * es,
                       kn + (size_t)fw_row_offset(p, p->kn_stride, b, hk, i) * es, row);
                memcpy(v + (size_t)fw_key_offset(p, p->v_stride, b, hk, at + i) * es,
                       vn + (size_t)fw_row_offset(p, p->vn_stride, b, hk, i) * es, row);
            }
    }
}

int fw_cpu_threads(const fw_exec *ex, int64_t items)
{
    int64_t t = ex && ex->threads > 0 ? ex->threads : 1;
    if (t > items) t = items;
    return t < 1 ? 1 : (int)t;
}

size_t fw_cpu_bytes(int64_t n, size_t es)
{
    if (n < 0 || (uint64_t)n > (SIZE_MAX - 64) / (es ? es : 1)) return SIZE_MAX;
    return ((size_t)n * es + 63) / 64 * 64;
}

size_t fw_cpu_bytes_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

fw_status fw_cpu_scratch_alloc(fw_cpu_scratch *s, int threads, size_t slice_bytes, const fw_exec *ex, const char *who)
{
    memset(s, 0, sizeof *s);
    const size_t slice = slice_bytes ? slice_bytes : 64;
    if (threads < 1 || slice == SIZE_MAX || slice > SIZE_MAX / (size_t)threads ||
        !(s->base = (char *)fw_aligned_alloc(64, slice * (size_t)threads))) {
        if (ex) fw_why(ex->err, ex->err_len, "%s: no memory for %d thread%s' buffers (%.3g MB each)", who, threads,
                       threads == 1 ? "" : "s", (double)slice / 1e6);
        return FW_ERR_OUT_OF_MEMORY;
    }
    s->slice = slice;
    s->threads = threads;
    return FW_OK;
}

void fw_cpu_scratch_free(fw_cpu_scratch *s)
{
    fw_free(s->base);
    memset(s, 0, sizeof *s);
}

char *fw_cpu_scratch_mine(const fw_cpu_scratch *s)
{
    const int t = omp_get_thread_num();
    return s->base + (size_t)(t < s->threads ? t : 0) * s->slice;
}
