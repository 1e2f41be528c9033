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
