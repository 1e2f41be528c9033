/* The named workloads: the shapes of the anchor tables (PyTorch SDPA on the seed shapes "seed" and seed003,
 * FlashAttention's grid, ggml's CPU rows), so that flashwatt's numbers sit beside them row for row. */
#include <stdio.h>
#include <string.h>
#include "suites.h"
#include "args.h"

static fw_shape shape(int64_t b, int64_t h, int64_t l, int64_t d, fw_dtype t, int causal)
{
    fw_shape s;
    memset(&s, 0, sizeof s);
    s.batch = b; s.heads = h; s.kv_heads = h;
    s.seqlen_q = l; s.seqlen_k = l; s.head_dim = d;
    s.dtype = t; s.causal = causal;
    s.window_left = FW_WINDOW_UNLIMITED;
    s.window_right = FW_WINDOW_UNLIMITED;
    return s;
}

#define PUSH(x) do { if (n < max) out[n++] = (x); } while (0)

/* flashwatt bench with no options: B=1, H=8, D=64, L=512..2048, f32 on the cpu (under a minute on
 * two cores); on a GPU the seed000 shapes in f32 and f16. */
static int default_shapes(fw_device_kind dev, fw_shape *out, int max)
{
    int n = 0;
    static const int64_t L[] = {512, 1024, 2048};
    if (dev == FW_DEVICE_CPU) {
        for (int i = 0; i < 3; i++) PUSH(shape(1, 8, L[i], 64, FW_F32, 0));
    } else {
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < 3; i++) PUSH(shape(16, 8, L[i], 64, t ? FW_F16 : FW_F32, 0));
    }
    return n;
}

/* seed000: B=16, d_model=512, H=8 (D=64), L 128..2048, f32 and f16. */
static int seed_shapes(fw_device_kind dev, fw_shape *out, int max)
{
    (void)dev;
    int n = 0;
    static const int64_t L[] = {128, 256, 512, 1024, 2048};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 5; i++) PUSH(shape(16, 8, L[i], 64, t ? FW_F16 : FW_F32, 0));
    return n;
}

/* seed003: S = 128/512/1024, D=64, 8 heads, f32; batch 1 and 32 as in the anchors. */
static int seed003_shapes(fw_device_kind dev, fw_shape *out, int max)
{
    (void)dev;
    int n = 0;
    static const int64_t L[] = {128, 512, 1024};
    static const int64_t B[] = {1, 32};
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++) PUSH(shape(B[b], 8, L[i], 64, FW_F32, 0));
    return n;
}

/* FlashAttention's benchmark grid: 16k tokens per batch (B = 16384 / L), hidden 2048
 * (H = 2048 / D), D = 64 and 128, L = 512..16384, bf16, causal and not. */
static int fagrid_shapes(fw_device_kind dev, fw_shape *out, int max)
{
    (void)dev;
    int n = 0;
    static const int64_t D[] = {64, 128};
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 2; c++)
            for (int64_t l = 512; l <= 16384; l *= 2) PUSH(shape(16384 / l, 2048 / D[d], l, D[d], FW_BF16, c));
    return n;
}

/* The CPU set: B=1, H=8, L=2048, D=64 and 128, f32/f16/bf16, causal and not (the ggml anchors). */
static int cpu_shapes(fw_device_kind dev, fw_shape *out, int max)
{
    (void)dev;
    int n = 0;
    static const fw_dtype T[] = {FW_F32, FW_F16, FW_BF16};
    for (int d = 64; d <= 128; d *= 2)
        for (int t = 0; t < 3; t++)
            for (int c = 0; c < 2; c++) PUSH(shape(1, 8, 2048, d, T[t], c));
    return n;
}

/* ---- serving --------------------------------------------------------------------------------- */
void fw_shape_set_serving(fw_shape *s, const fw_serving_shape *sv)
{
    s->serving = sv;
    if (!sv) return;
    s->batch = sv->nseq;
    s->seqlen_q = s->seqlen_k = 0;
    for (int b = 0; b < sv->nseq; b++) {
        if (sv->seq_q[b] > s->seqlen_q) s->seqlen_q = sv->seq_q[b];
        if (sv->seq_k[b] > s->seqlen_k) s->seqlen_k = sv->seq_k[b];
    }
}

/* A decode batch: B sequences of one new token against `keys` cached ones, the cache in FlashAttention's
 * layout ((B, L, H_kv, D), pages (num_pages, page_size, H_kv, D)), as engines and the Python call pass it. */
static fw_shape decode(fw_serving_shape *sv, int B, int64_t heads, int64_t kv_heads, int keys, fw_dtype t, int page_size)
{
    fw_shape s = shape(B, heads, 1, 128, t, 0);
    s.kv_heads = kv_heads;
    s.layout_bshd = 1;
    memset(sv, 0, sizeof *sv);
    sv->kind = FW_CASE_KVCACHE;
    sv->nseq = B;
    sv->page_size = page_size;
    for (int b = 0; b < B; b++) {
        sv->seq_q[b] = 1;
        sv->seq_k[b] = keys;
    }
    fw_shape_set_serving(&s, sv);
    return s;
}

/* Issue 24's decode table (bf16, D=128, Lq=1, contiguous caches; the first shape paged too, page
 * sizes 16 and 1); on the cpu its decode shape: B=4, 32/8 heads, 8192 keys, f32 (and paged 16). */
static int decode_shapes(fw_device_kind dev, fw_shape *out, int max)
{
    static fw_serving_shape sv[8];
    int n = 0;
    if (dev == FW_DEVICE_CPU) {
        PUSH(decode(&sv[0], 4, 32, 8, 8192, FW_F32, 0));
        PUSH(decode(&sv[1], 4, 32, 8, 8192, FW_F32, 16));
        return n;
    }
    PUSH(decode(&sv[0], 8, 64, 8, 8192, FW_BF16, 0));
    PUSH(decode(&sv[1], 64, 32, 8, 2048, FW_BF16, 0));
    PUSH(decode(&sv[2], 1, 32, 8, 131072, FW_BF16, 0));
    PUSH(decode(&sv[3], 16, 32, 32, 4096, FW_BF16, 0));
    PUSH(decode(&sv[4], 128, 32, 8, 1024, FW_BF16, 0));
    PUSH(decode(&sv[5], 8, 64, 8, 8192, FW_BF16, 16));
    PUSH(decode(&sv[6], 8, 64, 8, 8192, FW_BF16, 1));
    return n;
}

/* Ragged prefill: causal, bf16, 32/8 heads, D=128, 16 sequences of 128..4096 tokens (evenly spread,
 * shuffled; 33792 tokens), and the dense batch of the same tokens at the mean length beside it. */
static int serve_prefill_shapes(fw_device_kind dev, fw_shape *out, int max)
{
    (void)dev;
    static fw_serving_shape sv;
    memset(&sv, 0, sizeof sv);
    sv.kind = FW_CASE_VARLEN;
    sv.nseq = 16;
    for (int i = 0; i < 16; i++) sv.seq_q[i] = sv.seq_k[i] = 128 + (i * 7 % 16) * (4096 - 128) / 15;
    int n = 0;
    fw_shape s = shape(16, 32, 1, 128, FW_BF16, 1);
    s.kv_heads = 8;
    fw_shape_set_serving(&s, &sv);
    PUSH(s);
    fw_shape dense = shape(16, 32, (128 + 4096) / 2, 128, FW_BF16, 1);
    dense.kv_heads = 8;
    PUSH(dense);
    return n;
}

static const fw_suite suites[] = {
    {"default", "what `flashwatt bench` runs with no options: cpu B=1 H=8 D=64 L=512,1024,2048 f32 "
                "(cpu-flash, cpu-naive); on a GPU B=16 H=8 D=64 L=512..2048 f32,f16",
     0, "cpu-flash,cpu-naive", NULL, default_shapes},
    {"seed", "seed000: B=16 H=8 D=64 L=128,256,512,1024,2048, f32 and f16", 0, NULL, NULL, seed_shapes},
    {"seed003", "seed003: B=1 and 32, H=8 D=64 S=128,512,1024, f32", 0, NULL, NULL, seed003_shapes},
    {"fa-grid", "FlashAttention grid: 16k tokens, hidden 2048, D=64,128, L=512..16384, bf16, causal 0/1 (GPU)",
     1, NULL, NULL, fagrid_shapes},
    {"cpu", "CPU set: B=1 H=8 L=2048 D=64,128, f32/f16/bf16, causal 0/1", 0, NULL, NULL, cpu_shapes},
    {"decode", "KV-cache decode (issue 24): GPU bf16 D=128 Lq=1 B=8 64/8 8192 keys, B=64 32/8 2048, B=1 32/8 "
               "131072, B=16 32/32 4096, B=128 32/8 1024 (+ paged 16, 1); cpu B=4 32/8 8192 f32; against a copy",
     0, "cpu-flash", NULL, decode_shapes},
    {"serve-prefill", "ragged causal prefill: bf16 32/8 heads D=128, 16 sequences of 128..4096 tokens, and the "
                      "dense batch at the mean length",
     1, "cpu-flash", NULL, serve_prefill_shapes},
};

int fw_suite_count(void) { return (int)(sizeof suites / sizeof suites[0]); }

const fw_suite *fw_suite_get(int i) { return i >= 0 && i < fw_suite_count() ? &suites[i] : NULL; }

const fw_suite *fw_suite_find(const char *name)
{
    for (int i = 0; i < fw_suite_count(); i++)
        if (!strcmp(suites[i].name, name)) return &suites[i];
    return NULL;
}

const fw_suite *fw_suite_default(void) { return &suites[0]; }

fw_case fw_shape_case(const fw_shape *s, fw_device device, uint64_t seed, int want_lse)
{
    fw_case c = fw_case_default();
    if (s->serving) {
        const fw_serving_shape *sv = s->serving;
        c = fw_case_serving(sv->kind, sv->nseq, sv->seq_q, sv->seq_k, s->heads, s->kv_heads, s->head_dim, s->dtype,
                            seed);
        c.page_size = sv->page_size;
        c.append = sv->append;
    }
    if (!s->serving) {
        c.batch = s->batch;
        c.seqlen_q = s->seqlen_q;
        c.seqlen_k = s->seqlen_k;
    }
    c.heads = s->heads; c.kv_heads = s->kv_heads; c.head_dim = s->head_dim;
    c.dtype = s->dtype;
    c.device = device;
    c.layout_bshd = s->layout_bshd;
    c.pad = 0;
    c.params = fw_attn_params_default();
    c.params.causal = s->causal;
    c.params.window_left = s->window_left;
    c.params.window_right = s->window_right;
    c.seed = seed;
    c.want_lse = want_lse;
    c.tol_override = 0;
    return c;
}

/* " Lq=[3,1,..]" or " Lq=1" when every sequence has the same length. */
static size_t lens_text(char *buf, size_t len, const char *name, const int32_t *v, int n)
{
    int same = 1;
    int64_t sum = 0;
    for (int b = 0; b < n; b++) same &= v[b] == v[0], sum += v[b];
    if (same) return (size_t)snprintf(buf, len, " %s=%d", name, v[0]);
    size_t k = (size_t)snprintf(buf, len, " %s=[", name);
    for (int b = 0; b < n && k < len; b++) {
        if (b == 8 && n > 10) {
            k += (size_t)snprintf(buf + k, len - k, "..,%d", v[n - 1]);
            break;
        }
        k += (size_t)snprintf(buf + k, len - k, "%s%d", b ? "," : "", v[b]);
    }
    if (k < len) k += (size_t)snprintf(buf + k, len - k, "](%lld)", (long long)sum);
    return k;
}

const char *fw_shape_text(const fw_shape *s, char *buf, size_t len)
{
    const fw_serving_shape *sv = s->serving;
    if (sv) {
        size_t n = (size_t)snprintf(buf, len, "%s", sv->kind == FW_CASE_VARLEN ? "varlen" : "kvcache");
        if (sv->kind == FW_CASE_KVCACHE && n < len)
            n += sv->page_size ? (size_t)snprintf(buf + n, len - n, " paged%d", sv->page_size)
                               : (size_t)snprintf(buf + n, len - n, " contiguous");
        if (sv->append && n < len) n += (size_t)snprintf(buf + n, len - n, " append");
        if (n < len) n += (size_t)snprintf(buf + n, len - n, " B=%d H=%lld", sv->nseq, (long long)s->heads);
        if (n < len && s->kv_heads != s->heads) n += (size_t)snprintf(buf + n, len - n, " Hkv=%lld", (long long)s->kv_heads);
        if (n < len) n += lens_text(buf + n, len - n, sv->kind == FW_CASE_VARLEN ? "Lq" : "new", sv->seq_q, sv->nseq);
        if (n < len) n += lens_text(buf + n, len - n, sv->kind == FW_CASE_VARLEN ? "Lk" : "cached", sv->seq_k, sv->nseq);
        if (n < len) n += (size_t)snprintf(buf + n, len - n, " D=%lld %s", (long long)s->head_dim, fw_dtype_name(s->dtype));
        if (n < len && s->causal) n += (size_t)snprintf(buf + n, len - n, " causal");
        if (n < len && (s->window_left != FW_WINDOW_UNLIMITED || s->window_right != FW_WINDOW_UNLIMITED))
            n += (size_t)snprintf(buf + n, len - n, " window=%lld,%lld", (long long)s->window_left,
                                  (long long)s->window_right);
        if (n < len && s->layout_bshd) n += (size_t)snprintf(buf + n, len - n, " bshd");
        if (n < len && s->threads) snprintf(buf + n, len - n, " threads=%d", s->threads);
        return buf;
    }
    size_t n = (size_t)snprintf(buf, len, "B=%lld H=%lld", (long long)s->batch, (long long)s->heads);
    if (n < len && s->kv_heads != s->heads) n += (size_t)snprintf(buf + n, len - n, " Hkv=%lld", (long long)s->kv_heads);
    if (n < len) n += (size_t)snprintf(buf + n, len - n, " L=%lld", (long long)s->seqlen_q);
    if (n < len && s->seqlen_k != s->seqlen_q) n += (size_t)snprintf(buf + n, len - n, " Lk=%lld", (long long)s->seqlen_k);
    if (n < len) n += (size_t)snprintf(buf + n, len - n, " D=%lld %s", (long long)s->head_dim, fw_dtype_name(s->dtype));
    if (n < len && s->causal) n += (size_t)snprintf(buf + n, len - n, " causal");
    if (n < len && (s->window_left != FW_WINDOW_UNLIMITED || s->window_right != FW_WINDOW_UNLIMITED))
        n += (size_t)snprintf(buf + n, len - n, " window=%lld,%lld", (long long)s->window_left, (long long)s->window_right);
    if (n < len && s->layout_bshd) n += (size_t)snprintf(buf + n, len - n, " bshd");
    if (n < len && s->threads) snprintf(buf + n, len - n, " threads=%d", s->threads);
    return buf;
}

/* ---- the shapes of the command line ---------------------------------------------------------- */
int fw_args_shapes(const fw_cli *cli, fw_shape *out, int max)
{
#define VAL(l, i, d) ((l).n ? (l).v[i] : (d))
#define CNT(l) ((l).n ? (l).n : 1)
    int n = 0;
    for (int a = 0; a < CNT(cli->batch); a++)
    for (int b = 0; b < CNT(cli->heads); b++)
    for (int c = 0; c < CNT(cli->kv_heads); c++)
    for (int d = 0; d < CNT(cli->seqlen); d++)
    for (int e = 0; e < CNT(cli->seqlen_k); e++)
    for (int f = 0; f < CNT(cli->head_dim); f++)
    for (int g = 0; g < CNT(cli->dtype); g++)
    for (int h = 0; h < CNT(cli->causal); h++)
    for (int i = 0; i < CNT(cli->layout); i++) {
        if (n >= max) return -1;
        fw_shape s;
        memset(&s, 0, sizeof s);
        s.batch = VAL(cli->batch, a, FW_DEFAULT_BATCH);
        s.heads = VAL(cli->heads, b, FW_DEFAULT_HEADS);
        s.kv_heads = VAL(cli->kv_heads, c, s.heads);
        s.seqlen_q = VAL(cli->seqlen, d, FW_DEFAULT_SEQLEN);
        s.seqlen_k = VAL(cli->seqlen_k, e, s.seqlen_q);
        s.head_dim = VAL(cli->head_dim, f, FW_DEFAULT_HEAD_DIM);
        s.dtype = (fw_dtype)VAL(cli->dtype, g, FW_F32);
        s.causal = (int)VAL(cli->causal, h, 0);
        s.layout_bshd = (int)VAL(cli->layout, i, 0);
        s.window_left = cli->have_window ? cli->window_left : FW_WINDOW_UNLIMITED;
        s.window_right = cli->have_window ? cli->window_right : FW_WINDOW_UNLIMITED;
        if (cli->serving.nseq) fw_shape_set_serving(&s, &cli->serving); /* one ragged batch, its own lengths */
        out[n++] = s;
    }
    return n;
#undef VAL
#undef CNT
}
