/* The serving calls on the CPU (issue 24): ragged batches and KV caches.
 *  - cpu-ref against the dense call of each sequence on its own (the independent check of the
 *    oracle's offsets, pages, append and LSE layouts), bit for bit;
 *  - every CPU backend against cpu-ref through the harness (outputs poisoned, every existing row
 *    checked, the cache checked element by element after the call): ragged lengths with 0, 1, primes
 *    and one long among short, chunked prefill (Lq > 1 new tokens), page sizes 1, 16, 256 with
 *    shuffled tables, GQA 1..16, head dims 64/128/256, causal and windows, both LSE layouts, f16/bf16,
 *    padded and BSHD tensors, split-KV on a long cache; cpu-naive refuses with its reason;
 *  - a cache grown over many append calls gives the output of one causal forward over the whole
 *    sequences, and ends holding every key.
 * Bad input is test_serving_errors.c. */
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "flashwatt_internal.h"

static fw_context *ctx;
static uint64_t next_seed = 24000;

static const int32_t MIXED[] = {0, 1, 2, 3, 5, 7, 11, 13, 301, 1}; /* empty, 1, primes, one long */

static fw_case serving(fw_case_kind kind, int n, const int32_t *q, const int32_t *k, int64_t H, int64_t Hkv, int64_t D,
                       fw_dtype t)
{
    return fw_case_serving(kind, n, q, k, H, Hkv, D, t, next_seed++);
}

/* Runs r with one backend and `threads` (cfg: through the backend table directly), compares. */
static void run_one(fw_run *r, const char *backend, int threads, const fw_config *cfg, const char *what)
{
    char label[512];
    fw_case_label(&r->c, label, sizeof label);
    fw_status st = fw_run_poison(r);
    if (st == FW_OK && !cfg) {
        fw_context_set_backend(ctx, backend);
        fw_context_set_threads(ctx, threads);
        st = fw_run_forward(r, ctx);
    } else if (st == FW_OK) {
        char err[256] = "";
        fw_exec ex = {threads, NULL, err, sizeof err, NULL};
        st = fw_registry_find(backend)->forward(&r->problem, cfg, &ex);
    }
    fw_errors e;
    memset(&e, 0, sizeof e);
    if (st == FW_OK) st = fw_run_compare(r, &e);
    if (st != FW_OK) {
        fwt_case(0, "%s %s t%d %s [%s]: %s: %s", what, backend, threads, cfg ? cfg->name : "", label,
                 fw_status_string(st), fw_context_last_error(ctx));
        return;
    }
    fwt_case(e.pass, "%s %s t%d %s [%s] max_abs %.3g tol %.3g lse %.3g unwritten %ld stray %ld nan %ld cache %ld", what,
             backend, threads, cfg ? cfg->name : "", label, e.max_abs, e.tol, e.lse_max_abs, e.unwritten, e.stray,
             e.nan_mismatch, e.cache_mismatch);
}

/* Every CPU backend on c: those that support serving calls against cpu-ref, cpu-naive refusing. */
static void check_case(fw_case c, const char *what)
{
    fw_run r;
    char msg[512];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "%s alloc: %s", what, msg);
        return;
    }
    const char *names[16];
    const int n = fwt_cpu_backends(names, 16);
    for (int i = 0; i < n; i++) {
        char why[512] = "";
        const fw_status st = fw_run_supports(&r, names[i], why, sizeof why);
        if (!strcmp(names[i], "cpu-naive")) {
            fwt_case(st == FW_ERR_UNSUPPORTED && fwt_contains(why, "dense"), "%s cpu-naive refuses: %s", what, why);
            continue;
        }
        if (st != FW_OK) {
            fwt_case(0, "%s %s does not support it: %s", what, names[i], why);
            continue;
        }
        if (!strcmp(names[i], "cpu-ref")) run_one(&r, names[i], 2, NULL, what);
        else {
            run_one(&r, names[i], 1, NULL, what);
            run_one(&r, names[i], 3, NULL, what); /* more threads than a long item's share: split-KV */
        }
    }
    fw_run_free(&r);
}

/* ---- cpu-ref against the dense call, sequence by sequence ------------------------------------ */
static void ref_vs_dense(fw_case c, const char *what)
{
    fw_run r;
    char msg[512];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "%s alloc: %s", what, msg);
        return;
    }
    fw_context_set_backend(ctx, "cpu-ref");
    fw_context_set_threads(ctx, 2);
    fw_status st = fw_run_poison(&r);
    if (st == FW_OK) st = fw_run_forward(&r, ctx);
    if (st != FW_OK) {
        fwt_case(0, "%s cpu-ref: %s", what, fw_context_last_error(ctx));
        fw_run_free(&r);
        return;
    }
    const fw_problem *p = &r.problem;
    const int64_t H = p->heads, Hkv = p->kv_heads, D = p->head_dim;
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    double worst = 0;
    long bad = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        int64_t r0, lq;
        fw_seq_q(p, b, &r0, &lq);
        const int64_t lk = fw_seq_k_len(p, b), cached = c.kind == FW_CASE_KVCACHE ? c.seq_k[b] : lk;
        if (lq == 0) continue;
        float *q = (float *)malloc((size_t)(H * lq * D) * sizeof(float));
        float *k = (float *)malloc((size_t)(Hkv * (lk ? lk : 1) * D) * sizeof(float));
        float *v = (float *)malloc((size_t)(Hkv * (lk ? lk : 1) * D) * sizeof(float));
        float *o = (float *)malloc((size_t)(H * lq * D) * sizeof(float));
        float *lse = (float *)malloc((size_t)(H * lq) * sizeof(float));
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < lq; i++)
                for (int64_t d = 0; d < D; d++)
                    q[(h * lq + i) * D + d] = fw_load_f32(r.host_q, c.dtype, fw_row_offset(p, p->q_stride, b, h, i) + d);
        /* keys from the initial images: cached rows from the cache, the rest from k_new / v_new */
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t j = 0; j < lk; j++)
                for (int64_t d = 0; d < D; d++) {
                    const int from_new = j >= cached;
                    const int64_t at = from_new ? fw_row_offset(p, p->kn_stride, b, hk, j - cached) + d
                                                : fw_key_offset(p, p->k_stride, b, hk, j) + d;
                    k[(hk * lk + j) * D + d] = fw_load_f32(from_new ? r.host_kn : r.host_k, c.dtype, at);
                    v[(hk * lk + j) * D + d] = fw_load_f32(from_new ? r.host_vn : r.host_v, c.dtype, at);
                }
        if (lk > 0) {
            fw_tensor tq = fw_tensor_bhsd(q, FW_F32, cpu, 1, H, lq, D), to = fw_tensor_bhsd(o, FW_F32, cpu, 1, H, lq, D);
            fw_tensor tk = fw_tensor_bhsd(k, FW_F32, cpu, 1, Hkv, lk, D), tv = fw_tensor_bhsd(v, FW_F32, cpu, 1, Hkv, lk, D);
            st = fw_attention_forward(ctx, &tq, &tk, &tv, &to, lse, &c.params);
        } else { /* no key: the dense call cannot say it (sizes >= 1); the answer is 0 and -inf */
            for (int64_t x = 0; x < H * lq * D; x++) o[x] = 0.0f;
            for (int64_t x = 0; x < H * lq; x++) lse[x] = -INFINITY;
        }
        if (st != FW_OK) bad++;
        for (int64_t h = 0; h < H && st == FW_OK; h++)
            for (int64_t i = 0; i < lq; i++) {
                for (int64_t d = 0; d < D; d++) {
                    const float x = fw_load_f32(r.host_o, c.dtype, fw_row_offset(p, p->o_stride, b, h, i) + d);
                    const float y = o[(h * lq + i) * D + d];
                    if (x != y) bad++, worst = fmax(worst, fabs((double)x - y));
                }
                if (r.host_lse[fw_lse_index(p, b, h, i)] != lse[h * lq + i]) bad++;
            }
        free(q); free(k); free(v); free(o); free(lse);
    }
    char label[512];
    fwt_case(bad == 0, "%s cpu-ref equals the dense call per sequence [%s]: %ld differences (max %.3g)", what,
             fw_case_label(&c, label, sizeof label), bad, worst);
    fw_run_free(&r);
}

/* ---- the cases -------------------------------------------------------------------------------- */
static void ragged(void)
{
    const int n = (int)(sizeof MIXED / sizeof MIXED[0]);
    fw_case c = serving(FW_CASE_VARLEN, n, MIXED, MIXED, 4, 2, 64, FW_F32);
    ref_vs_dense(c, "ragged");
    check_case(c, "ragged");
    c.params.causal = 1;
    ref_vs_dense(c, "ragged-causal");
    check_case(c, "ragged-causal");
    /* queries and keys of different lengths both ways, sequences without keys */
    const int32_t q[] = {1, 7, 0, 13, 2, 64}, k[] = {5, 3, 4, 0, 97, 64};
    c = serving(FW_CASE_VARLEN, 6, q, k, 6, 3, 64, FW_F32);
    c.params.causal = 1;
    ref_vs_dense(c, "ragged-lq!=lk");
    check_case(c, "ragged-lq!=lk");
    c.params.causal = 0;
    c.params.window_left = 4;
    c.params.window_right = 2;
    ref_vs_dense(c, "ragged-window");
    check_case(c, "ragged-window");
    c = serving(FW_CASE_VARLEN, n, MIXED, MIXED, 2, 1, 64, FW_BF16);
    c.params.causal = 1;
    c.layout_bshd = 1;
    check_case(c, "ragged-bf16-bshd");
    /* few query rows a sequence over 4 kv heads in the packed (total, H_kv, D) layout: cpu-flash's items over
     * every kv head, empty sequences and one without keys among them */
    const int32_t fq[] = {1, 2, 0, 1, 3}, fk[] = {300, 41, 7, 0, 129};
    c = serving(FW_CASE_VARLEN, 5, fq, fk, 8, 4, 64, FW_F32);
    c.params.causal = 1;
    c.layout_bshd = 1;
    check_case(c, "ragged-few-rows-bshd");
    c = serving(FW_CASE_VARLEN, n, MIXED, MIXED, 2, 2, 40, FW_F16);
    c.pad = 3;
    check_case(c, "ragged-f16-pad");
}

static void gqa_and_dims(void)
{
    const int32_t q[] = {3, 1, 17}, k[] = {40, 9, 17};
    for (int ratio = 1; ratio <= 16; ratio *= 2) {
        fw_case c = serving(FW_CASE_VARLEN, 3, q, k, 16, 16 / ratio, 64, FW_F32);
        c.params.causal = 1;
        check_case(c, "gqa-varlen");
        const int32_t one[] = {1, 1, 1}, cached[] = {200, 1, 33};
        c = serving(FW_CASE_KVCACHE, 3, one, cached, 16, 16 / ratio, 64, FW_F32);
        c.page_size = 16;
        check_case(c, "gqa-decode");
        /* FlashAttention's cache layout, where cpu-flash's decode items take every kv head of a key's row */
        c.layout_bshd = 1;
        check_case(c, "gqa-decode-bshd");
        c.page_size = 0;
        check_case(c, "gqa-decode-bshd-contiguous");
    }
    const int64_t dims[] = {64, 128, 256};
    for (int i = 0; i < 3; i++) {
        fw_case c = serving(FW_CASE_VARLEN, 3, q, k, 4, 2, dims[i], FW_F32);
        c.params.causal = 1;
        ref_vs_dense(c, "dim-varlen");
        check_case(c, "dim-varlen");
        const int32_t nq[] = {2, 0, 5}, cached[] = {70, 4, 0};
        c = serving(FW_CASE_KVCACHE, 3, nq, cached, 8, 2, dims[i], FW_F32);
        c.page_size = 16;
        c.append = 1;
        c.params.causal = 1;
        ref_vs_dense(c, "dim-kvcache");
        check_case(c, "dim-kvcache");
    }
}

static void kv_caches(void)
{
    const int page_sizes[] = {0, 1, 16, 256};
    const int32_t one[] = {1, 1, 1, 1}, cached[] = {300, 0, 17, 64};
    const int32_t chunk[] = {4, 4, 4, 4}, nq[] = {3, 0, 9, 1}, cached2[] = {20, 0, 7, 300};
    for (int pi = 0; pi < 4; pi++)
        for (int append = 0; append < 2; append++) {
            /* decode: q (B, 1) dense, LSE (B, H, 1) */
            fw_case c = serving(FW_CASE_KVCACHE, 4, one, cached, 8, 2, 64, FW_F32);
            c.page_size = page_sizes[pi];
            c.append = append;
            ref_vs_dense(c, "decode");
            check_case(c, "decode");
            /* chunked prefill: Lq = 4 for every sequence, causal to the end of each cache */
            c = serving(FW_CASE_KVCACHE, 4, chunk, cached, 4, 1, 64, FW_F32);
            c.page_size = page_sizes[pi];
            c.append = append;
            c.params.causal = 1;
            ref_vs_dense(c, "chunked");
            check_case(c, "chunked");
            /* ragged new queries (q packed, LSE (H, total_q)), a window */
            c = serving(FW_CASE_KVCACHE, 4, nq, cached2, 4, 2, 64, FW_F32);
            c.page_size = page_sizes[pi];
            c.append = append;
            c.params.causal = 1;
            c.params.window_left = 11;
            ref_vs_dense(c, "ragged-new");
            check_case(c, "ragged-new");
        }
    /* f16 / bf16 paged with append, BSHD pool */
    fw_case c = serving(FW_CASE_KVCACHE, 4, nq, cached2, 4, 2, 128, FW_BF16);
    c.page_size = 16;
    c.append = 1;
    c.layout_bshd = 1;
    c.params.causal = 1;
    check_case(c, "kvcache-bf16");
    c.dtype = FW_F16;
    c.pad = 8;
    check_case(c, "kvcache-f16-pad");
    /* one long cache among short ones: split-KV of the long item, merged */
    const int32_t lcached[] = {4000, 3, 17, 1};
    c = serving(FW_CASE_KVCACHE, 4, one, lcached, 4, 1, 128, FW_F32);
    check_case(c, "decode-long");
    c.page_size = 256;
    check_case(c, "decode-long-paged");
    /* the same over 4 kv heads in FlashAttention's layout: the long sequence's item (every kv head) split and
     * merged; pages of 1 (tiles across pages, copied) and 8 (tiles inside pages) and a window */
    c = serving(FW_CASE_KVCACHE, 4, one, lcached, 8, 4, 128, FW_F32);
    c.layout_bshd = 1;
    check_case(c, "decode-long-bshd");
    const int32_t pss[] = {1, 8};
    for (int i = 0; i < 2; i++) {
        c.page_size = pss[i];
        c.params.causal = 1;
        c.params.window_left = 1500;
        check_case(c, "decode-long-bshd-paged-window");
    }
    c = serving(FW_CASE_KVCACHE, 4, one, lcached, 8, 4, 40, FW_BF16);
    c.layout_bshd = 1;
    c.pad = 8;
    check_case(c, "decode-long-bshd-bf16-pad");
}

/* cpu-flash's configurations (block sizes, forced splits) on a paged ragged case with append. */
static void flash_configs(void)
{
    const fw_backend *b = fw_registry_find("cpu-flash");
    const int32_t nq[] = {5, 0, 33, 1}, cached[] = {90, 2, 7, 500};
    fw_case c = serving(FW_CASE_KVCACHE, 4, nq, cached, 4, 2, 64, FW_F32);
    c.page_size = 16;
    c.append = 1;
    c.params.causal = 1;
    fw_run r;
    char msg[512];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "configs alloc: %s", msg);
        return;
    }
    fw_config cfgs[FW_MAX_CONFIGS];
    const int n = b->configs(&r.problem, cfgs, FW_MAX_CONFIGS);
    for (int i = 0; i < n; i++) run_one(&r, "cpu-flash", 2, &cfgs[i], "config");
    fw_run_free(&r);
}

/* Visible pairs counted here against fw_run_flops on a causal, windowed ragged case. */
static void flops(void)
{
    const int32_t q[] = {0, 1, 7, 30}, k[] = {3, 1, 20, 30};
    fw_case c = serving(FW_CASE_VARLEN, 4, q, k, 6, 2, 32, FW_F32);
    c.params.causal = 1;
    c.params.window_left = 5;
    fw_run r;
    char msg[512];
    if (fw_run_alloc(&r, &c, msg, sizeof msg) != FW_OK) {
        fwt_case(0, "flops alloc: %s", msg);
        return;
    }
    double pairs = 0;
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < q[b]; i++)
            for (int j = 0; j < k[b]; j++) {
                const int diag = i + k[b] - q[b];
                pairs += j <= diag && j >= diag - 5;
            }
    const double want = 4.0 * 32 * 6 * pairs;
    fwt_case(fw_run_flops(&r) == want, "flops of a ragged causal windowed batch: %.0f (counted %.0f)", fw_run_flops(&r),
             want);
    fw_run_free(&r);
}

/* ---- a cache grown over many appends ------------------------------------------------------------ */
static uint64_t rng = 77;
static float rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 4.0 - 2.0);
}

/* Three sequences fed in chunks of 0..16 tokens per call (ragged new queries, appended keys) into a
 * contiguous or paged cache; every call's rows against one causal varlen forward (cpu-ref) over the
 * whole sequences, and the cache at the end against every key. */
static void growth(int page_size, const char *backend)
{
    enum { B = 3, H = 4, HKV = 2, D = 64, CAP = 96 };
    static const int32_t T[B] = {37, 1, 90};
    static const int32_t pattern[6] = {1, 5, 3, 16, 1, 7};
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    int32_t cu[B + 1] = {0};
    for (int b = 0; b < B; b++) cu[b + 1] = cu[b] + T[b];
    const int total = cu[B];
    float *qa = (float *)malloc(sizeof(float) * total * H * D), *ka = (float *)malloc(sizeof(float) * total * HKV * D);
    float *va = (float *)malloc(sizeof(float) * total * HKV * D), *of = (float *)malloc(sizeof(float) * total * H * D);
    float *lf = (float *)malloc(sizeof(float) * total * H);
    for (int i = 0; i < total * H * D; i++) qa[i] = rnd();
    for (int i = 0; i < total * HKV * D; i++) ka[i] = rnd(), va[i] = rnd();
    fw_attn_params params = fw_attn_params_default();
    params.causal = 1;
    fw_tensor tq = fw_tensor_bshd(qa, FW_F32, cpu, 1, H, total, D), to = fw_tensor_bshd(of, FW_F32, cpu, 1, H, total, D);
    fw_tensor tk = fw_tensor_bshd(ka, FW_F32, cpu, 1, HKV, total, D), tv = fw_tensor_bshd(va, FW_F32, cpu, 1, HKV, total, D);
    fw_varlen full = {B, cu, cu, 90, 90};
    fw_context_set_backend(ctx, "cpu-ref");
    fw_status st = fw_attention_varlen_forward(ctx, &tq, &tk, &tv, &to, lf, &full, &params);
    /* the cache: (B, CAP, HKV, D), or a pool of pages handed out in a shuffled order */
    const int ps = page_size ? page_size : CAP, mp = (CAP + ps - 1) / ps, pages = page_size ? B * mp + 1 : B;
    float *kc = (float *)malloc(sizeof(float) * pages * ps * HKV * D), *vc = (float *)malloc(sizeof(float) * pages * ps * HKV * D);
    for (int i = 0; i < pages * ps * HKV * D; i++) kc[i] = vc[i] = NAN;
    int32_t table[B * 96], seqlens[B] = {0, 0, 0};
    for (int i = 0; i < B * mp; i++) table[i] = (i * 7 + 3) % (B * mp + 1); /* a permutation: 7 is prime to it */
    fw_kv_cache cache;
    memset(&cache, 0, sizeof cache);
    cache.k = fw_tensor_bshd(kc, FW_F32, cpu, pages, HKV, ps, D);
    cache.v = fw_tensor_bshd(vc, FW_F32, cpu, pages, HKV, ps, D);
    cache.seqlens = seqlens;
    cache.block_table = page_size ? table : NULL;
    cache.max_pages_per_seq = page_size ? mp : 0;
    float *qs = (float *)malloc(sizeof(float) * B * 16 * H * D), *os = (float *)malloc(sizeof(float) * B * 16 * H * D);
    float *kn = (float *)malloc(sizeof(float) * B * 16 * HKV * D), *vn = (float *)malloc(sizeof(float) * B * 16 * HKV * D);
    float *ls = (float *)malloc(sizeof(float) * B * 16 * H);
    const double tol = strcmp(backend, "cpu-ref") ? 1e-5 * 4.0 : 0.0; /* |V| < 2 */
    double worst = 0;
    int calls = 0;
    long bad = st != FW_OK;
    fw_context_set_backend(ctx, backend);
    fw_context_set_threads(ctx, 2);
    for (int step = 0; st == FW_OK; step++) {
        int32_t cq[B + 1] = {0}, lq[B];
        int32_t mx = 0;
        for (int b = 0; b < B; b++) {
            const int32_t left = T[b] - seqlens[b], want = pattern[(step + b) % 6];
            lq[b] = left < want ? left : want;
            cq[b + 1] = cq[b] + lq[b];
            if (lq[b] > mx) mx = lq[b];
        }
        const int n = cq[B];
        if (n == 0) break;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < lq[b]; i++) {
                const int src = cu[b] + seqlens[b] + i, dst = cq[b] + i;
                memcpy(qs + (size_t)dst * H * D, qa + (size_t)src * H * D, sizeof(float) * H * D);
                memcpy(kn + (size_t)dst * HKV * D, ka + (size_t)src * HKV * D, sizeof(float) * HKV * D);
                memcpy(vn + (size_t)dst * HKV * D, va + (size_t)src * HKV * D, sizeof(float) * HKV * D);
            }
        fw_tensor sq = fw_tensor_bshd(qs, FW_F32, cpu, 1, H, n, D), so = fw_tensor_bshd(os, FW_F32, cpu, 1, H, n, D);
        fw_tensor skn = fw_tensor_bshd(kn, FW_F32, cpu, 1, HKV, n, D), svn = fw_tensor_bshd(vn, FW_F32, cpu, 1, HKV, n, D);
        fw_varlen qv = {B, cq, NULL, mx, 0};
        st = fw_attention_kvcache_forward(ctx, &sq, &cache, &skn, &svn, &so, ls, &qv, &params);
        if (st != FW_OK) {
            fwt_case(0, "growth %s ps%d step %d: %s", backend, page_size, step, fw_context_last_error(ctx));
            break;
        }
        calls++;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < lq[b]; i++) {
                const int src = cu[b] + seqlens[b] + i, dst = cq[b] + i;
                for (int h = 0; h < H; h++) {
                    for (int d = 0; d < D; d++) {
                        const double diff = fabs((double)os[((size_t)dst * H + h) * D + d] - of[((size_t)src * H + h) * D + d]);
                        if (!(diff <= tol)) bad++;
                        if (diff > worst) worst = diff;
                    }
                    const double dl = fabs((double)ls[(size_t)h * n + dst] - lf[(size_t)h * total + src]);
                    if (!(dl <= (tol > 0 ? 1e-4 : 0.0))) bad++;
                }
            }
        for (int b = 0; b < B; b++) seqlens[b] += lq[b];
    }
    long cache_bad = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T[b]; j++) {
            const int page = page_size ? table[b * mp + j / ps] : b, row = page_size ? j % ps : j;
            const size_t at = (((size_t)page * ps + row) * HKV) * D, src = (size_t)(cu[b] + j) * HKV * D;
            cache_bad += memcmp(kc + at, ka + src, sizeof(float) * HKV * D) != 0;
            cache_bad += memcmp(vc + at, va + src, sizeof(float) * HKV * D) != 0;
        }
    fwt_case(bad == 0 && cache_bad == 0 && calls > 10,
             "cache grown over %d append calls (%s, page size %d) equals one causal forward: %ld rows over tol %.1g "
             "(max %.3g), %ld cache rows wrong",
             calls, backend, page_size, bad, tol, worst, cache_bad);
    free(qa); free(ka); free(va); free(of); free(lf); free(kc); free(vc); free(qs); free(os); free(kn); free(vn);
    free(ls);
}

int main(void)
{
    const double t0 = fw_now_seconds();
    if (fw_context_create(&ctx) != FW_OK) return 1;
    ragged();
    gqa_and_dims();
    kv_caches();
    flash_configs();
    flops();
    const int growth_pages[] = {0, 1, 16};
    for (int i = 0; i < 3; i++) {
        growth(growth_pages[i], "cpu-ref");
        growth(growth_pages[i], "cpu-flash");
    }
    fw_context_destroy(ctx);
    return fwt_finish("test_serving", fw_now_seconds() - t0);
}
