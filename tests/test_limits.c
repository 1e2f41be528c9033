/* The edges of what the API accepts, where a wrong answer would be silent or a crash:
 *  - window bounds near INT64_MAX (valid by the header: ">= 0") give the unlimited answer on every
 *    CPU backend, for the dense and the serving calls, not an overflowed mask;
 *  - sizes: every dimension and every serving length is at most 2^31 - 1 (the kernels index rows with
 *    32-bit ints): 2^31 is refused by name, 2^31 - 1 accepted;
 *  - data pointers must be aligned to their element (an f32 tensor at a 2-byte offset is refused, and
 *    so are an LSE and int32 arrays off 4 bytes);
 *  - the harness shared by the command and the tests checks a case's sizes before it sizes buffers
 *    (a batch x heads product that wraps was a crash); fw_tensor_bhsd/bshd's strides saturate where the
 *    product of the sizes leaves int64 (it overflowed: tests/fuzz found it);
 *  - cpu-naive's LSE over 2^25 keys (its row sum is accumulated in double: a float sum stops at 2^24). */
#include <math.h>
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"

static const fw_device CPU = {FW_DEVICE_CPU, 0};

/* The harness case whose buffers cannot be had asks malloc for 2^53 bytes and must see NULL (out of
 * memory): under AddressSanitizer that takes allocator_may_return_null (read when ASan is linked). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static float rnd(uint64_t *s) { return fw_rng_normal(s); }

/* ---- windows near INT64_MAX ------------------------------------------------------------------ */
static void huge_windows(void)
{
    enum { B = 1, H = 2, D = 16 };
    const int64_t lens[3][2] = {{37, 37}, {50, 20}, {20, 50}}; /* Lq = Lk, Lq > Lk, Lq < Lk */
    const int64_t W[4][2] = {{-1, INT64_MAX}, {INT64_MAX, -1}, {INT64_MAX, INT64_MAX}, {INT64_MAX - 1, ((int64_t)1 << 62)}};
    const char *names[3];
    const int nb = fwt_cpu_backends(names, 3);
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) { fwt_case(0, "context"); return; }
    uint64_t s = 99;
    for (int li = 0; li < 3; li++) {
        const int64_t Lq = lens[li][0], Lk = lens[li][1];
        float *q = malloc(sizeof(float) * B * H * Lq * D), *k = malloc(sizeof(float) * B * H * Lk * D);
        float *v = malloc(sizeof(float) * B * H * Lk * D);
        float *o0 = malloc(sizeof(float) * B * H * Lq * D), *o1 = malloc(sizeof(float) * B * H * Lq * D);
        float *l0 = malloc(sizeof(float) * B * H * Lq), *l1 = malloc(sizeof(float) * B * H * Lq);
        for (int64_t i = 0; i < B * H * Lq * D; i++) q[i] = rnd(&s);
        for (int64_t i = 0; i < B * H * Lk * D; i++) { k[i] = rnd(&s); v[i] = rnd(&s); }
        fw_tensor tq = fw_tensor_bhsd(q, FW_F32, CPU, B, H, Lq, D), tk = fw_tensor_bhsd(k, FW_F32, CPU, B, H, Lk, D);
        fw_tensor tv = fw_tensor_bhsd(v, FW_F32, CPU, B, H, Lk, D);
        fw_tensor t0 = fw_tensor_bhsd(o0, FW_F32, CPU, B, H, Lq, D), t1 = fw_tensor_bhsd(o1, FW_F32, CPU, B, H, Lq, D);
        for (int bi = 0; bi < nb; bi++)
            for (int causal = 0; causal < 2; causal++)
                for (int wi = 0; wi < 4; wi++) {
                    fw_attn_params unlimited = fw_attn_params_default(), huge = unlimited;
                    unlimited.causal = huge.causal = causal;
                    huge.window_left = W[wi][0];
                    huge.window_right = W[wi][1];
                    fw_context_set_backend(ctx, names[bi]);
                    fw_status a = fw_attention_forward(ctx, &tq, &tk, &tv, &t0, l0, &unlimited);
                    fw_status b = fw_attention_forward(ctx, &tq, &tk, &tv, &t1, l1, &huge);
                    double diff = 0;
                    for (int64_t i = 0; i < B * H * Lq * D; i++) diff = fmax(diff, fabs((double)o0[i] - o1[i]));
                    for (int64_t i = 0; i < B * H * Lq; i++)
                        diff = fmax(diff, l0[i] == l1[i] ? 0.0 : fabs((double)l0[i] - l1[i]));
                    fwt_case(a == FW_OK && b == FW_OK && diff <= 1e-6,
                             "%s Lq %lld Lk %lld causal %d window (%lld, %lld) = unlimited: %s, max diff %.3g",
                             names[bi], (long long)Lq, (long long)Lk, causal, (long long)W[wi][0],
                             (long long)W[wi][1], fw_status_string(b), diff);
                }
        free(q); free(k); free(v); free(o0); free(o1); free(l0); free(l1);
    }
    fw_context_destroy(ctx);

    /* the serving calls take the windows through the same normalisation */
    const int32_t sq[2] = {7, 30}, sk[2] = {40, 12};
    for (int kind = 0; kind < 2; kind++) {
        fw_case c = fw_case_serving(kind ? FW_CASE_KVCACHE : FW_CASE_VARLEN, 2, sq, sk, 2, 1, 16, FW_F32, 5);
        if (kind) c.page_size = 8;
        c.params.window_left = INT64_MAX;
        c.params.window_right = INT64_MAX - 7;
        fw_run r;
        char msg[512];
        fw_context *cx = NULL;
        fw_status st = fw_run_alloc(&r, &c, msg, sizeof msg);
        if (st != FW_OK || fw_context_create(&cx) != FW_OK) {
            fwt_case(0, "serving setup: %s", msg);
            continue;
        }
        /* the reference is cpu-ref with unlimited windows: r's own reference would share a bug */
        fw_case u = c;
        u.params = fw_attn_params_default();
        fw_run ru;
        st = fw_run_alloc(&ru, &u, msg, sizeof msg);
        for (int bi = 0; bi < nb && st == FW_OK; bi++) {
            fw_errors e;
            if (fw_run_supports(&r, names[bi], msg, sizeof msg) != FW_OK) continue;
            fw_context_set_backend(cx, names[bi]);
            fw_status a = fw_run_poison(&r);
            if (a == FW_OK) a = fw_run_forward(&r, cx);
            if (a == FW_OK) a = fw_run_compare(&ru, &e); /* computes ru's reference */
            double diff = 0;
            for (size_t i = 0; a == FW_OK && i < r.o_elems; i++)
                diff = fmax(diff, fabs((double)((float *)r.host_o)[i] - ru.ref_o[i]));
            fwt_case(a == FW_OK && diff <= 1e-5, "%s %s windows (INT64_MAX, INT64_MAX - 7) = unlimited: %s, max diff %.3g",
                     names[bi], kind ? "kvcache paged" : "varlen", fw_status_string(a), diff);
        }
        if (st == FW_OK) fw_run_free(&ru);
        fw_run_free(&r);
        fw_context_destroy(cx);
    }
}

/* ---- sizes: 2^31 - 1 is the limit ------------------------------------------------------------ */
static fw_status validate_dense(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, char *msg, size_t len)
{
    /* broadcast inputs (stride 0) and an output described at a far address: validation only, no run */
    static float in[256];
    fw_tensor q = fw_tensor_bhsd(in, FW_F32, CPU, B, H, Lq, D), k = fw_tensor_bhsd(in, FW_F32, CPU, B, H, Lk, D);
    for (int d = 0; d < 3; d++) q.stride[d] = k.stride[d] = 0;
    fw_tensor v = k;
    fw_tensor o = fw_tensor_bhsd((void *)((uintptr_t)1 << 46), FW_F32, CPU, B, H, Lq, D);
    fw_problem p;
    return fw_validate_forward(&q, &k, &v, &o, NULL, NULL, &p, msg, len);
}

static void size_limits(void)
{
    char msg[512];
    const int64_t big = (int64_t)1 << 31;
    fw_status st = validate_dense(1, 1, big, 4, 1, msg, sizeof msg);
    fwt_case(st == FW_ERR_INVALID_SHAPE && fwt_contains(msg, "seq"), "seqlen_q 2^31 refused: %s: %s",
             fw_status_string(st), msg);
    st = validate_dense(1, 1, 4, big, 1, msg, sizeof msg);
    fwt_case(st == FW_ERR_INVALID_SHAPE, "seqlen_k 2^31 refused: %s: %s", fw_status_string(st), msg);
    st = validate_dense(big, 1, 1, 1, 1, msg, sizeof msg);
    fwt_case(st == FW_ERR_INVALID_SHAPE && fwt_contains(msg, "batch"), "batch 2^31 refused: %s: %s", fw_status_string(st), msg);
    st = validate_dense(1, 1, big - 1, big - 1, 1, msg, sizeof msg);
    fwt_case(st == FW_OK, "seqlen 2^31 - 1 accepted: %s %s", fw_status_string(st), msg);

    /* serving lengths: max_seqlen and the cache's capacity */
    float buf[64];
    int32_t cu[2] = {0, 1};
    fw_tensor q = fw_tensor_bhsd(buf, FW_F32, CPU, 1, 1, 1, 4), o = fw_tensor_bhsd(buf + 16, FW_F32, CPU, 1, 1, 1, 4);
    fw_tensor k = fw_tensor_bhsd(buf + 32, FW_F32, CPU, 1, 1, 1, 4);
    fw_varlen seqs = {1, cu, cu, big, 1};
    fw_problem p;
    st = fw_validate_varlen(&q, &k, &k, &o, NULL, &seqs, NULL, &p, msg, sizeof msg);
    fwt_case(st == FW_ERR_INVALID_VALUE && fwt_contains(msg, "max_seqlen_q"), "varlen max_seqlen_q 2^31 refused: %s: %s",
             fw_status_string(st), msg);
    seqs.max_seqlen_q = big - 1;
    st = fw_validate_varlen(&q, &k, &k, &o, NULL, &seqs, NULL, &p, msg, sizeof msg);
    fwt_case(st == FW_OK, "varlen max_seqlen_q 2^31 - 1 accepted: %s %s", fw_status_string(st), msg);
    int32_t lens[1] = {0}, table[2] = {0, 0};
    fw_kv_cache cache;
    memset(&cache, 0, sizeof cache);
    cache.k = cache.v = fw_tensor_bhsd(buf + 32, FW_F32, CPU, 1, 1, 256, 4);
    cache.k.stride[0] = cache.k.stride[2] = cache.v.stride[0] = cache.v.stride[2] = 0;
    cache.seqlens = lens;
    cache.block_table = table;
    cache.max_pages_per_seq = big / 256; /* capacity 2^31 */
    st = fw_validate_kvcache(&q, &cache, NULL, NULL, &o, NULL, NULL, NULL, &p, msg, sizeof msg);
    fwt_case(st == FW_ERR_INVALID_VALUE && fwt_contains(msg, "capacity"), "cache capacity 2^31 refused: %s: %s",
             fw_status_string(st), msg);
}

/* fw_tensor_bhsd/bshd with sizes whose product leaves int64: the strides saturate (no signed overflow,
 * which UBSan reports in the ASan build) and the call refuses the tensor */
static void huge_descriptors(void)
{
    static float in[64];
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) { fwt_case(0, "context"); return; }
    const int64_t big = ((int64_t)1 << 31) - 1;
    for (int layout = 0; layout < 2; layout++) {
        fw_tensor t = (layout ? fw_tensor_bshd : fw_tensor_bhsd)(in, FW_F32, CPU, big, big, big, INT64_MAX);
        const fw_status st = fw_attention_forward(ctx, &t, &t, &t, &t, NULL, NULL);
        fwt_case(st != FW_OK && t.stride[0] == INT64_MAX && t.stride[3] == 1, "%s of sizes 2^31 - 1 and INT64_MAX: strides %lld..%lld, %s: %s",
                 layout ? "fw_tensor_bshd" : "fw_tensor_bhsd", (long long)t.stride[0], (long long)t.stride[3], fw_status_string(st),
                 fw_context_last_error(ctx));
    }
    fw_context_destroy(ctx);
}

/* ---- alignment -------------------------------------------------------------------------------- */
static void alignment(void)
{
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) { fwt_case(0, "context"); return; }
    enum { L = 8, D = 8, N = L * D };
    _Alignas(64) static unsigned char mem[8][4 * N + 64];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4 * N + 64; j++) mem[i][j] = (unsigned char)(j % 7 ? 0x3c : 0x00); /* small finite values */
    const fw_dtype dts[2] = {FW_F32, FW_F16};
    for (int ti = 0; ti < 2; ti++) {
        const fw_dtype dt = dts[ti];
        for (int which = 0; which < 4; which++) {
            const int off = dt == FW_F32 ? 2 : 1; /* half an element */
            fw_tensor t[4];
            for (int i = 0; i < 4; i++)
                t[i] = fw_tensor_bhsd(mem[i] + (i == which ? off : 0), dt, CPU, 1, 1, L, D);
            memset(mem[3], 0x5a, sizeof mem[3]);
            const fw_status st = fw_attention_forward(ctx, &t[0], &t[1], &t[2], &t[3], NULL, NULL);
            const char *nm[4] = {"q", "k", "v", "o"};
            int untouched = 1;
            for (size_t j = 0; j < sizeof mem[3]; j++) untouched &= mem[3][j] == 0x5a;
            fwt_case(st == FW_ERR_INVALID_VALUE && fwt_contains(fw_context_last_error(ctx), nm[which]) &&
                         fwt_contains(fw_context_last_error(ctx), "align") && untouched,
                     "%s %s at a %d-byte offset refused: %s: %s", fw_dtype_name(dt), nm[which], off, fw_status_string(st),
                     fw_context_last_error(ctx));
        }
    }
    /* lse off 4 bytes, and the serving calls' int32 arrays */
    fw_tensor q = fw_tensor_bhsd(mem[0], FW_F32, CPU, 1, 1, L, D), k = fw_tensor_bhsd(mem[1], FW_F32, CPU, 1, 1, L, D);
    fw_tensor o = fw_tensor_bhsd(mem[3], FW_F32, CPU, 1, 1, L, D);
    fw_status st = fw_attention_forward(ctx, &q, &k, &k, &o, (float *)(mem[4] + 2), NULL);
    fwt_case(st == FW_ERR_INVALID_VALUE && fwt_contains(fw_context_last_error(ctx), "lse") &&
                 fwt_contains(fw_context_last_error(ctx), "align"),
             "lse at a 2-byte offset refused: %s: %s", fw_status_string(st), fw_context_last_error(ctx));
    int32_t *cu = (int32_t *)(mem[5] + 2);
    memset(mem[5], 0, sizeof mem[5]);
    fw_varlen seqs = {1, cu, (const int32_t *)mem[6], L, L};
    ((int32_t *)mem[6])[1] = L;
    st = fw_attention_varlen_forward(ctx, &q, &k, &k, &o, NULL, &seqs, NULL);
    fwt_case(st == FW_ERR_INVALID_VALUE && fwt_contains(fw_context_last_error(ctx), "cu_seqlens_q") &&
                 fwt_contains(fw_context_last_error(ctx), "align"),
             "varlen cu_seqlens_q at a 2-byte offset refused: %s: %s", fw_status_string(st), fw_context_last_error(ctx));
    fw_kv_cache cache;
    memset(&cache, 0, sizeof cache);
    cache.k = cache.v = fw_tensor_bhsd(mem[1], FW_F32, CPU, 1, 1, L, D);
    cache.seqlens = (const int32_t *)(mem[7] + 1);
    st = fw_attention_kvcache_forward(ctx, &q, &cache, NULL, NULL, &o, NULL, NULL, NULL);
    fwt_case(st == FW_ERR_INVALID_VALUE && fwt_contains(fw_context_last_error(ctx), "seqlens") &&
                 fwt_contains(fw_context_last_error(ctx), "align"),
             "cache.seqlens at a 1-byte offset refused: %s: %s", fw_status_string(st), fw_context_last_error(ctx));
    fw_context_destroy(ctx);
}

/* ---- the harness checks sizes before it allocates ------------------------------------------ */
static void harness_sizes(void)
{
    const int64_t big = ((int64_t)1 << 31) - 1;
    const int64_t shapes[4][4] = {{big, big, 1, 1}, {1, big, big, 1}, {big, 1, 1, big}, {(int64_t)1 << 31, 2, 1, 1}};
    for (int i = 0; i < 4; i++) {
        fw_case c = fw_case_shape(shapes[i][0], shapes[i][1], shapes[i][1], shapes[i][2], shapes[i][2], shapes[i][3] > 256 ? 64 : 1,
                                  FW_F32, 1);
        if (shapes[i][3] > 1) c.pad = (int)(shapes[i][3] > (1 << 20) ? 1 << 20 : shapes[i][3]);
        fw_run r;
        char msg[512] = "";
        const fw_status st = fw_run_alloc(&r, &c, msg, sizeof msg);
        if (st == FW_OK) fw_run_free(&r);
        fwt_case(st == FW_ERR_INVALID_SHAPE || st == FW_ERR_OUT_OF_MEMORY,
                 "harness case B %lld H %lld L %lld pad %d: %s: %s", (long long)c.batch, (long long)c.heads,
                 (long long)c.seqlen_q, c.pad, fw_status_string(st), msg);
    }
}

/* ---- cpu-naive's LSE over 2^25 keys ---------------------------------------------------------- */
static void naive_long_lse(void)
{
    const int64_t Lk = (int64_t)1 << 25;
    static float q[1] = {0.5f}, k[1] = {1.0f}, v[1] = {2.0f}, o[1], lse[1];
    fw_tensor tq = fw_tensor_bhsd(q, FW_F32, CPU, 1, 1, 1, 1), to = fw_tensor_bhsd(o, FW_F32, CPU, 1, 1, 1, 1);
    fw_tensor tk = fw_tensor_bhsd(k, FW_F32, CPU, 1, 1, Lk, 1), tv = fw_tensor_bhsd(v, FW_F32, CPU, 1, 1, Lk, 1);
    tk.stride[2] = tv.stride[2] = 0; /* every key the same: LSE = 0.5 + ln(2^25) */
    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) { fwt_case(0, "context"); return; }
    fw_context_set_backend(ctx, "cpu-naive");
    fw_attn_params prm = fw_attn_params_default();
    prm.scale = 1.0f;
    const fw_status st = fw_attention_forward(ctx, &tq, &tk, &tv, &to, lse, &prm);
    const double want = 0.5 + 25.0 * log(2.0);
    fwt_case(st == FW_OK && fabs(lse[0] - want) < 1e-5 * want && fabs(o[0] - 2.0f) < 1e-6,
             "cpu-naive Lk = 2^25: lse %.7g (want %.7g), o %.7g (want 2): %s %s", (double)lse[0], want, (double)o[0],
             fw_status_string(st), fw_context_last_error(ctx));
    fw_context_destroy(ctx);
}

int main(void)
{
    const double t0 = fw_now_seconds();
    huge_windows();
    size_limits();
    huge_descriptors();
    alignment();
    harness_sizes();
    naive_long_lse();
    return fwt_finish("test_limits", fw_now_seconds() - t0);
}
