/* Bad input to the serving calls (issue 24, item 5): each is refused with the status and a message
 * naming the argument (and the limit), and writes nothing where the host can see it: o and lse keep
 * their poison, the cache its contents. Offsets not non-decreasing, not starting at 0, not ending at
 * the packed length, beyond max_seqlen; cache lengths negative or with the new tokens above the
 * capacity; block-table entries outside the pool; page sizes 0 and 257; k_new without v_new and of
 * the wrong shape; dtype, batch and head mismatches; outputs overlapping inputs, the offsets or the
 * cache; and the valid neighbours of these (unused table entries, empty sequences) accepted. */
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"

static fw_context *ctx;
static const fw_device cpu = {FW_DEVICE_CPU, 0};
#define POISON 0x7fbadbadu

enum { B = 2, H = 4, HKV = 2, D = 16, LQ = 2, PS = 4, MP = 3, POOL = 6 };

/* A valid paged KV-cache call with append (q dense (B, LQ)) and a valid ragged call. */
typedef struct setup {
    float q[B * LQ * H * D], o[B * LQ * H * D], lse[B * H * LQ + 8];
    float kn[B * LQ * HKV * D], vn[B * LQ * HKV * D];
    float pool_k[POOL * PS * HKV * D], pool_v[POOL * PS * HKV * D], saved_k[POOL * PS * HKV * D];
    int32_t seqlens[B], table[B * MP];
    fw_tensor tq, to, tkn, tvn;
    fw_kv_cache cache;
    /* ragged: q lengths {2, 0, 3}, k lengths {4, 1, 2} */
    float vq[5 * H * D], vk[7 * HKV * D], vv[7 * HKV * D], vo[5 * H * D], vlse[H * 5];
    int32_t cu_q[4], cu_k[4];
    fw_tensor vtq, vtk, vtv, vto;
    fw_varlen seqs;
    fw_attn_params params;
} setup;

static setup S;

static void reset(void)
{
    uint32_t x = 1;
    for (size_t i = 0; i < sizeof S.q / 4; i++) S.q[i] = (float)((x = x * 1664525u + 1013904223u) >> 24) / 256.0f;
    for (size_t i = 0; i < sizeof S.kn / 4; i++) S.kn[i] = S.vn[i] = (float)i / 100.0f;
    for (size_t i = 0; i < sizeof S.pool_k / 4; i++) S.pool_k[i] = S.pool_v[i] = (float)(i % 7);
    memcpy(S.saved_k, S.pool_k, sizeof S.pool_k);
    for (size_t i = 0; i < sizeof S.vq / 4; i++) S.vq[i] = (float)(i % 5);
    for (size_t i = 0; i < sizeof S.vk / 4; i++) S.vk[i] = S.vv[i] = (float)(i % 3);
    uint32_t *o = (uint32_t *)S.o, *l = (uint32_t *)S.lse, *vo = (uint32_t *)S.vo, *vl = (uint32_t *)S.vlse;
    for (size_t i = 0; i < sizeof S.o / 4; i++) o[i] = POISON;
    for (size_t i = 0; i < sizeof S.lse / 4; i++) l[i] = POISON;
    for (size_t i = 0; i < sizeof S.vo / 4; i++) vo[i] = POISON;
    for (size_t i = 0; i < sizeof S.vlse / 4; i++) vl[i] = POISON;
    S.seqlens[0] = 3; /* + 2 new = 5 keys: pages 0, 1 */
    S.seqlens[1] = 9; /* + 2 new = 11 keys: pages 0, 1, 2 */
    const int32_t table[B * MP] = {4, 1, -1, 2, 5, 3};
    memcpy(S.table, table, sizeof table);
    S.tq = fw_tensor_bshd(S.q, FW_F32, cpu, B, H, LQ, D);
    S.to = fw_tensor_bshd(S.o, FW_F32, cpu, B, H, LQ, D);
    S.tkn = fw_tensor_bshd(S.kn, FW_F32, cpu, B, HKV, LQ, D);
    S.tvn = fw_tensor_bshd(S.vn, FW_F32, cpu, B, HKV, LQ, D);
    memset(&S.cache, 0, sizeof S.cache);
    S.cache.k = fw_tensor_bshd(S.pool_k, FW_F32, cpu, POOL, HKV, PS, D);
    S.cache.v = fw_tensor_bshd(S.pool_v, FW_F32, cpu, POOL, HKV, PS, D);
    S.cache.seqlens = S.seqlens;
    S.cache.block_table = S.table;
    S.cache.max_pages_per_seq = MP;
    const int32_t cq[4] = {0, 2, 2, 5}, ck[4] = {0, 4, 5, 7};
    memcpy(S.cu_q, cq, sizeof cq);
    memcpy(S.cu_k, ck, sizeof ck);
    S.vtq = fw_tensor_bshd(S.vq, FW_F32, cpu, 1, H, 5, D);
    S.vto = fw_tensor_bshd(S.vo, FW_F32, cpu, 1, H, 5, D);
    S.vtk = fw_tensor_bshd(S.vk, FW_F32, cpu, 1, HKV, 7, D);
    S.vtv = fw_tensor_bshd(S.vv, FW_F32, cpu, 1, HKV, 7, D);
    S.seqs = (fw_varlen){3, S.cu_q, S.cu_k, 3, 4};
    S.params = fw_attn_params_default();
    S.params.causal = 1;
}

/* Nothing written: o and lse still poison, the cache as it was. */
static int untouched(void)
{
    const uint32_t *o = (const uint32_t *)S.o, *l = (const uint32_t *)S.lse;
    const uint32_t *vo = (const uint32_t *)S.vo, *vl = (const uint32_t *)S.vlse;
    for (size_t i = 0; i < sizeof S.o / 4; i++) if (o[i] != POISON) return 0;
    for (size_t i = 0; i < sizeof S.lse / 4; i++) if (l[i] != POISON) return 0;
    for (size_t i = 0; i < sizeof S.vo / 4; i++) if (vo[i] != POISON) return 0;
    for (size_t i = 0; i < sizeof S.vlse / 4; i++) if (vl[i] != POISON) return 0;
    return memcmp(S.pool_k, S.saved_k, sizeof S.pool_k) == 0 && memcmp(S.pool_v, S.saved_k, sizeof S.pool_v) == 0;
}

static fw_status kv_call(const fw_tensor *kn, const fw_tensor *vn, const fw_varlen *q_seqs)
{
    return fw_attention_kvcache_forward(ctx, &S.tq, &S.cache, kn, vn, &S.to, S.lse, q_seqs, &S.params);
}

static fw_status kv(void) { return kv_call(&S.tkn, &S.tvn, NULL); }

static fw_status varlen(void)
{
    return fw_attention_varlen_forward(ctx, &S.vtq, &S.vtk, &S.vtv, &S.vto, S.vlse, &S.seqs, &S.params);
}

/* The call st was refused with want, its message holds both needles, and nothing was written. */
static void expect(const char *what, fw_status st, fw_status want, const char *n1, const char *n2)
{
    const char *m = fw_context_last_error(ctx);
    const int ok = st == want && fwt_contains(m, n1) && (!n2 || fwt_contains(m, n2)) && untouched();
    fwt_case(ok, "%s: %s (want %s) \"%s\"%s", what, fw_status_string(st), fw_status_string(want), m,
             untouched() ? "" : " [OUTPUT OR CACHE WRITTEN]");
}

static void kvcache_errors(void)
{
    reset();
    fwt_case(kv() == FW_OK, "the valid paged call with append runs (%s)", fw_context_last_error(ctx));
    reset();
    S.table[2] = 99; /* sequence 0 uses two pages: its third entry is never read */
    fwt_case(kv() == FW_OK, "an unused block-table entry outside the pool is ignored (%s)", fw_context_last_error(ctx));

    reset(); S.cache.k.size[2] = S.cache.v.size[2] = 0;
    expect("page size 0", kv(), FW_ERR_INVALID_SHAPE, "page_size", "1..256");
    reset(); S.cache.k.size[2] = S.cache.v.size[2] = 257;
    expect("page size 257", kv(), FW_ERR_INVALID_SHAPE, "page_size", "1..256");
    reset(); S.seqlens[1] = 11;
    expect("cache_seqlens + new tokens above the capacity", kv(), FW_ERR_INVALID_VALUE, "cache.seqlens[1]", "capacity 12");
    reset(); S.seqlens[1] = 13;
    expect("cache_seqlens above the capacity", kv_call(NULL, NULL, NULL), FW_ERR_INVALID_VALUE, "cache.seqlens[1]",
           "capacity 12");
    reset(); S.seqlens[0] = -1;
    expect("negative cache_seqlens", kv(), FW_ERR_INVALID_VALUE, "cache.seqlens[0]", ">= 0");
    reset(); S.table[5] = POOL;
    expect("block-table entry past the pool", kv(), FW_ERR_INVALID_VALUE, "block_table[1][2]", "num_pages");
    reset(); S.table[0] = -1;
    expect("negative block-table entry", kv(), FW_ERR_INVALID_VALUE, "block_table[0][0]", "[0, 6)");
    reset();
    expect("k_new without v_new", kv_call(&S.tkn, NULL, NULL), FW_ERR_NULL_ARGUMENT, "v_new", "neither");
    reset(); S.tkn.size[1] = 1;
    expect("k_new with the wrong heads", kv(), FW_ERR_INVALID_SHAPE, "k_new.size[1]", NULL);
    reset(); S.tvn.size[2] = 1;
    expect("v_new with the wrong length", kv(), FW_ERR_INVALID_SHAPE, "v_new.size[2]", NULL);
    reset(); S.cache.v.dtype = FW_F16;
    expect("cache dtype", kv(), FW_ERR_DTYPE_MISMATCH, "cache.v", "f16");
    reset(); /* 3 query heads over the cache's 2 */
    S.tq = fw_tensor_bshd(S.q, FW_F32, cpu, B, 3, LQ, D);
    S.to = fw_tensor_bshd(S.o, FW_F32, cpu, B, 3, LQ, D);
    expect("heads not divisible", kv(), FW_ERR_INVALID_SHAPE, "divisible", "heads 2");
    reset(); S.cache.max_pages_per_seq = 0;
    expect("no pages per sequence", kv(), FW_ERR_INVALID_VALUE, "max_pages_per_seq", NULL);
    reset(); S.cache.block_table_stride = 2;
    expect("block-table stride below its row", kv(), FW_ERR_INVALID_VALUE, "block_table_stride", NULL);
    reset(); S.cache.seqlens = NULL;
    expect("no cache lengths", kv(), FW_ERR_NULL_ARGUMENT, "cache.seqlens", NULL);
    reset(); S.cache.block_table = NULL; /* contiguous: one row per sequence, the pool's 6 rows are not 2 */
    expect("contiguous cache of the wrong batch", kv(), FW_ERR_INVALID_SHAPE, "cache.k.size[0]", "2 sequences");
    reset(); S.to.data = S.pool_k;
    expect("o overlapping the cache", kv(), FW_ERR_OVERLAP, "output o", "cache.k");
    reset(); S.tq.data = S.pool_v + 8; /* the cache is written by the append: it must not alias q */
    expect("cache overlapping q while appending", kv(), FW_ERR_OVERLAP, "cache.v", "q");
    reset(); S.cache.v.data = S.pool_k;
    expect("cache.k and cache.v in one memory while appending", kv(), FW_ERR_OVERLAP, "cache.k", "cache.v");
    reset(); S.cache.seqlens = (const int32_t *)(const void *)(S.o + 4);
    expect("o overlapping the cache lengths", kv(), FW_ERR_OVERLAP, "output o", "cache.seqlens");
    reset();
    expect("lse overlapping o", fw_attention_kvcache_forward(ctx, &S.tq, &S.cache, &S.tkn, &S.tvn, &S.to, S.o, NULL,
                                                             &S.params),
           FW_ERR_OVERLAP, "lse", "o");
    reset();
    fw_varlen qs = {B, S.cu_q, NULL, LQ, 0};
    expect("q_seqs with a q of batch 2", kv_call(&S.tkn, &S.tvn, &qs), FW_ERR_INVALID_SHAPE, "batch size 1", NULL);
    reset(); S.params.window_left = -2;
    expect("window_left", kv(), FW_ERR_INVALID_VALUE, "window_left", NULL);
    reset();
    expect("no cache", fw_attention_kvcache_forward(ctx, &S.tq, NULL, NULL, NULL, &S.to, S.lse, NULL, &S.params),
           FW_ERR_NULL_ARGUMENT, "cache", NULL);
}

static void varlen_errors(void)
{
    reset();
    fwt_case(varlen() == FW_OK, "the valid ragged call with an empty sequence runs (%s)", fw_context_last_error(ctx));
    reset(); S.cu_k[2] = 3;
    expect("cu_seqlens_k decreasing", varlen(), FW_ERR_INVALID_VALUE, "cu_seqlens_k", "non-decreasing");
    reset(); S.cu_q[3] = 4;
    expect("last offset not the packed length", varlen(), FW_ERR_INVALID_VALUE, "cu_seqlens_q[3]", "packed length");
    reset(); S.cu_k[0] = 1;
    expect("first offset not 0", varlen(), FW_ERR_INVALID_VALUE, "cu_seqlens_k[0]", "start at 0");
    reset(); S.seqs.max_seqlen_q = 2;
    expect("a sequence longer than max_seqlen_q", varlen(), FW_ERR_INVALID_VALUE, "sequence 2", "max_seqlen_q = 2");
    reset(); S.seqs.max_seqlen_k = 0;
    expect("max_seqlen_k 0", varlen(), FW_ERR_INVALID_VALUE, "max_seqlen_k", NULL);
    reset(); S.seqs.cu_seqlens_q = NULL;
    expect("no cu_seqlens_q", varlen(), FW_ERR_NULL_ARGUMENT, "cu_seqlens_q", NULL);
    reset(); S.seqs.batch = 0;
    expect("no sequences", varlen(), FW_ERR_INVALID_VALUE, "seqs->batch", NULL);
    reset();
    expect("no seqs", fw_attention_varlen_forward(ctx, &S.vtq, &S.vtk, &S.vtv, &S.vto, S.vlse, NULL, &S.params),
           FW_ERR_NULL_ARGUMENT, "seqs", NULL);
    reset(); S.vtk.size[0] = 2;
    expect("a packed k of batch 2", varlen(), FW_ERR_INVALID_SHAPE, "k.size[0]", "batch size 1");
    reset(); S.seqs.cu_seqlens_k = (const int32_t *)(const void *)S.vo;
    expect("o overlapping the offsets", varlen(), FW_ERR_OVERLAP, "output o", "cu_seqlens_k");
    reset(); S.vto.data = S.vk;
    expect("o overlapping k", varlen(), FW_ERR_OVERLAP, "output o", "k");
    reset(); S.vtv.size[2] = 6;
    expect("v shorter than k", varlen(), FW_ERR_INVALID_SHAPE, "v.size[2]", NULL);
}

/* Values on a CUDA device are not read unless asked; asked, they need the CUDA backend's copy. */
static void device_values(void)
{
#ifndef FW_HAVE_CUDA
    reset();
    const fw_device gpu = {FW_DEVICE_CUDA, 0};
    S.vtq.device = S.vtk.device = S.vtv.device = S.vto.device = gpu;
    fw_status st = varlen();
    fwt_case(st == FW_ERR_NO_BACKEND && untouched(), "device values unchecked by default: %s (%s)", fw_status_string(st),
             fw_context_last_error(ctx));
    fw_context_set_check_device_values(ctx, 1);
    st = varlen();
    fwt_case(st == FW_ERR_NOT_IMPLEMENTED && fwt_contains(fw_context_last_error(ctx), "no CUDA") && untouched(),
             "device values checked on request need CUDA: %s (%s)", fw_status_string(st), fw_context_last_error(ctx));
    fw_context_set_check_device_values(ctx, 0);
#else
    fwt_skip("device values: a build with CUDA reads them through the CUDA backend (tests/gpu_*)");
#endif
}

int main(void)
{
    const double t0 = fw_now_seconds();
    if (fw_context_create(&ctx) != FW_OK) return 1;
    const char *backends[] = {"cpu-ref", "cpu-flash"};
    for (int i = 0; i < 2; i++) {
        fw_context_set_backend(ctx, backends[i]);
        printf("-- %s\n", backends[i]);
        kvcache_errors();
        varlen_errors();
    }
    fw_context_set_backend(ctx, "auto");
    device_values();
    fw_context_destroy(ctx);
    return fwt_finish("test_serving_errors", fw_now_seconds() - t0);
}
