/* The forward sections: which cases each holds (test and perf modes), and the table of every section
 * of the program. A case runs on every usable backend of the device that supports it; the section
 * only says the shape, dtype, layout, mask, GQA and which precisions and configurations to try. */
#include <math.h>
#include <string.h>
#include "att.h"

#define U FW_WINDOW_UNLIMITED

static att_case threads3(att_case t, int a, int b, int c)
{
    t.threads[0] = (unsigned char)a;
    t.threads[1] = (unsigned char)b;
    t.threads[2] = (unsigned char)c;
    return t;
}

/* ---- edges: the awkward shapes -------------------------------------------------------------------
 * L = 1 and decode shapes, tile ± 1, Lq != Lk both ways, odd head dims in every dtype, causal with
 * Lq > Lk and Lq < Lk, GQA 8:1 and MQA with batch, windows (left, right, both, with causal, rows fully
 * masked), strided inputs (padded rows, BSHD, both) in every dtype, no LSE, an explicit scale, and
 * longer sequences (split-KV territory). */
static void add_edges(att_plan *p, const att_opts *o)
{
    const fw_dtype dts[3] = {FW_F32, FW_F16, FW_BF16};
    att_add(p, att_make(1, 1, 1, 1, 1, 64, FW_F32));
    att_add(p, att_make(1, 2, 1, 1, 128, 64, FW_F32));
    att_add(p, att_mask(att_make(1, 2, 2, 1, 129, 128, FW_F16), 1, U, U));
    att_add(p, att_make(1, 1, 1, 128, 1, 64, FW_F32));
    att_add(p, att_mask(att_make(1, 1, 1, 65, 1, 64, FW_BF16), 1, U, U));
    if (o->quick) {
        att_add(p, att_layout(att_mask(att_make(1, 4, 1, 77, 99, 80, FW_BF16), 1, U, U), 1, 5));
        att_add(p, att_mask(att_make(1, 2, 1, 100, 40, 64, FW_F32), 0, 2, 5));
        return;
    }
    const int64_t tiles[6] = {63, 64, 65, 127, 128, 129};
    for (int i = 0; i < 6; i++) {
        att_add(p, att_make(1, 2, 2, tiles[i], tiles[i], 64, FW_F32));
        att_add(p, att_mask(att_make(1, 1, 1, tiles[i], tiles[i], 64, i % 2 ? FW_F16 : FW_BF16), 1, U, U));
    }
    att_add(p, att_make(1, 2, 2, 65, 129, 64, FW_F32));
    att_add(p, att_make(1, 2, 2, 129, 65, 64, FW_F32));
    att_add(p, att_make(2, 1, 1, 200, 17, 32, FW_F16));
    att_add(p, att_make(1, 1, 1, 17, 200, 32, FW_BF16));
    const int64_t dims[8] = {1, 40, 64, 80, 96, 128, 256, 3};
    for (int i = 0; i < 8; i++)
        for (int t = 0; t < 3; t++) att_add(p, att_make(1, 1, 1, t == 0 ? 65 : 33, t == 0 ? 63 : 70, dims[i], dts[t]));
    att_add(p, att_mask(att_make(1, 2, 2, 129, 64, 64, FW_F32), 1, U, U));
    att_add(p, att_mask(att_make(1, 2, 2, 64, 129, 64, FW_F32), 1, U, U));
    att_add(p, att_mask(att_make(1, 1, 1, 100, 37, 80, FW_F16), 1, U, U));
    att_add(p, att_mask(att_make(1, 1, 1, 37, 100, 96, FW_BF16), 1, U, U));
    att_add(p, att_make(2, 16, 2, 65, 65, 64, FW_F32));
    att_add(p, att_mask(att_make(1, 8, 1, 64, 96, 64, FW_F32), 1, U, U));
    att_add(p, att_make(2, 4, 1, 33, 47, 128, FW_F16));
    att_add(p, att_mask(att_make(1, 8, 1, 70, 50, 40, FW_BF16), 1, U, U));
    att_add(p, att_make(3, 6, 3, 20, 30, 64, FW_F32));
    att_add(p, att_mask(att_make(1, 2, 2, 128, 128, 64, FW_F32), 0, 16, U));
    att_add(p, att_mask(att_make(1, 2, 2, 128, 128, 64, FW_F32), 0, U, 8));
    att_add(p, att_mask(att_make(1, 2, 2, 128, 128, 64, FW_F32), 0, 5, 7));
    att_add(p, att_mask(att_make(1, 2, 2, 128, 128, 64, FW_F32), 1, 20, U));
    att_add(p, att_mask(att_make(1, 2, 2, 128, 128, 64, FW_F32), 0, 0, 0));
    att_add(p, att_mask(att_make(1, 2, 1, 100, 40, 64, FW_F32), 0, 2, 5)); /* leading rows fully masked */
    att_add(p, att_mask(att_make(1, 2, 1, 40, 100, 64, FW_F16), 0, 3, 9));
    att_add(p, att_mask(att_make(1, 2, 1, 90, 60, 64, FW_BF16), 1, 11, U));
    att_add(p, att_mask(att_make(1, 1, 1, 64, 129, 96, FW_F32), 0, 0, U));
    att_add(p, att_mask(att_make(1, 1, 1, 129, 64, 80, FW_F32), 0, U, 0));
    for (int t = 0; t < 3; t++) {
        att_add(p, att_layout(att_make(2, 4, 2, 65, 63, 64, dts[t]), 0, 3));
        att_add(p, att_layout(att_make(2, 4, 2, 65, 63, 64, dts[t]), 1, 0));
        att_add(p, att_layout(att_mask(att_make(1, 4, 1, 77, 99, 80, dts[t]), 1, U, U), 1, 5));
    }
    att_case t = att_make(1, 2, 1, 64, 64, 64, FW_F32);
    t.c.want_lse = 0;
    att_add(p, t);
    t = att_mask(att_make(1, 2, 1, 64, 40, 64, FW_F16), 1, U, U);
    t.c.want_lse = 0;
    att_add(p, t);
    t = att_make(1, 2, 2, 64, 64, 64, FW_F32);
    t.c.params.scale = 0.37f;
    att_add(p, t);
    att_add(p, att_make(1, 4, 1, 1, 2048, 128, FW_F32));
    att_add(p, att_make(2, 8, 2, 1, 1500, 64, FW_F16));
    att_add(p, att_mask(att_make(1, 2, 2, 3, 1777, 80, FW_BF16), 1, U, U));
    att_add(p, att_mask(att_make(1, 2, 1, 512, 512, 128, FW_F32), 1, U, U));
    att_add(p, att_layout(att_make(1, 1, 1, 300, 700, 64, FW_BF16), 1, 1));
    att_add(p, att_mask(att_make(1, 2, 2, 1024, 1024, 64, FW_F32), 0, 100, 0));
    att_add(p, att_mask(att_make(1, 2, 2, 700, 1000, 256, FW_F16), 0, 31, 17));
}

/* ---- tiling: the edges of tiled kernels ------------------------------------------------------------
 * Head dims 1..256 (the fast paths and the generic one), lengths around 32/64/128/256, decode, Lq != Lk
 * with and without causal, GQA 8:1, MQA (a wide decode group), windows with and without causal, BSHD
 * and padded rows, 16-bit at odd lengths; each at 1, 2 and 7 CPU threads (more threads than items:
 * split-KV). --long adds L = 16384. */
static void add_tiling(att_plan *p, const att_opts *o)
{
    const int64_t dims[] = {1, 40, 64, 80, 96, 128, 256};
    const int64_t ls[] = {1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257};
    const int nd = o->quick ? 2 : 7, nl = o->quick ? 3 : 14;
    for (int i = 0; i < nd; i++) {
        att_add(p, threads3(att_make(1, 2, 2, 77, 130, dims[o->quick ? 2 * i + 2 : i], FW_F32), 1, 2, 7));
        att_add(p, threads3(att_mask(att_make(1, 2, 1, 130, 77, dims[o->quick ? 2 * i + 3 : i], FW_F32), 1, U, U), 1, 2, 7));
    }
    for (int i = 0; i < nl; i++) {
        const int64_t L = ls[o->quick ? 4 * i + 2 : i];
        att_add(p, threads3(att_make(1, 1, 1, L, L, 64, FW_F32), 1, 2, 7));
        att_add(p, threads3(att_mask(att_make(1, 1, 1, L, L, 128, FW_F32), 1, U, U), 1, 2, 7));
        att_add(p, threads3(att_make(1, 2, 2, 1, L * 3 + 1, 64, FW_F32), 1, 2, 7));
    }
    if (o->quick) return;
    att_add(p, threads3(att_make(2, 2, 2, 100, 300, 64, FW_F32), 1, 2, 7));
    att_add(p, threads3(att_make(2, 2, 2, 300, 100, 64, FW_F32), 1, 2, 7));
    for (int lowp = 0; lowp < 2; lowp++) {
        att_add(p, threads3(att_mask(att_make(1, 2, 2, 300, 77, 64, lowp ? FW_F16 : FW_F32), 1, U, U), 1, 2, 7));
        att_add(p, threads3(att_mask(att_make(1, 2, 2, 77, 300, 64, lowp ? FW_BF16 : FW_F32), 1, U, U), 1, 2, 7));
    }
    att_add(p, threads3(att_make(2, 16, 2, 150, 150, 64, FW_F32), 1, 2, 7));
    att_add(p, threads3(att_mask(att_make(1, 16, 2, 150, 90, 128, FW_BF16), 1, U, U), 1, 2, 7));
    att_add(p, threads3(att_make(1, 4, 1, 200, 200, 96, FW_F32), 1, 2, 7));
    att_add(p, threads3(att_make(1, 64, 1, 3, 500, 64, FW_F32), 1, 2, 7));
    const int64_t windows[][2] = {{30, 10}, {0, 0}, {5, -1}, {-1, 7}, {100, 100}};
    for (int i = 0; i < 5; i++)
        for (int causal = 0; causal < 2; causal++)
            att_add(p, threads3(att_mask(att_make(1, 2, 2, 300, 280, 64, FW_F32), causal, windows[i][0], windows[i][1]),
                                1, 2, 7));
    for (int t = 0; t < 3; t++) {
        const att_case c = threads3(att_make(2, 4, 2, 70, 90, t == 2 ? 80 : 64, (fw_dtype)t), 1, 2, 7);
        att_add(p, att_layout(c, 1, 0));
        att_add(p, att_layout(c, 0, 3));
        att_add(p, att_layout(att_mask(c, 1, U, U), 1, 3));
    }
    att_add(p, threads3(att_make(1, 8, 8, 257, 257, 64, FW_F16), 1, 2, 7));
    att_add(p, threads3(att_make(1, 8, 8, 257, 257, 128, FW_BF16), 1, 2, 7));
    if (o->long_cases) {
        att_add(p, threads3(att_make(1, 1, 1, 256, 16384, 64, FW_F32), 1, 2, 7));
        att_add(p, threads3(att_mask(att_make(1, 1, 1, 16384, 16384, 64, FW_F32), 1, U, U), 1, 2, 7));
    }
}

/* ---- grid: FlashAttention's (Lq, Lk) pairs x head dims x causal --------------------------------
 * Each cell rotates dtype (per causal value), layout and MHA/GQA/MQA so that every combination shows
 * up across the grid; then windows and padded rows. */
static void add_grid(att_plan *p, const att_opts *o)
{
    static const int pairs[][2] = {{113, 203}, {128, 217}, {1023, 1024}, {1024, 1023},
                                   {239, 1},   {1, 239},   {799, 3},     {4224, 4224}};
    static const int dims[] = {40, 64, 80, 96, 128, 256};
    if (o->quick) {
        static const int qd[] = {40, 64, 128};
        for (int i = 0; i < 3; i++)
            for (int causal = 0; causal < 2; causal++)
                att_add(p, att_layout(att_mask(att_make(1, 2, 1, 113, 203, qd[i], causal ? FW_BF16 : FW_F16), causal, U, U),
                                      i & 1, 0));
        return;
    }
    int k = 0;
    for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int causal = 0; causal < 2; causal++, k++) {
                const int big = pairs[pi][0] > 2000, cell = k >> 1, gqa = (cell >> 2) % 3; /* MHA, GQA, MQA */
                const int64_t H = big ? (gqa ? 2 : 1) : (gqa ? 4 : 2);
                const int64_t Hkv = gqa == 0 ? H : gqa == 1 ? H / 2 : 1;
                const fw_dtype dt = ((cell & 1) ^ causal) ? FW_BF16 : FW_F16;
                att_add(p, att_layout(att_mask(att_make(big ? 1 : 2, H, Hkv, pairs[pi][0], pairs[pi][1], dims[di], dt),
                                               causal, U, U),
                                      (cell >> 1) & 1, 0));
            }
    att_add(p, att_mask(att_make(2, 2, 2, 1023, 1024, 64, FW_BF16), 1, 128, U));
    att_add(p, att_layout(att_mask(att_make(1, 4, 1, 500, 700, 128, FW_F16), 0, 50, 70), 1, 0));
    att_add(p, att_mask(att_make(1, 2, 2, 1, 239, 96, FW_BF16), 0, 10, 0));
    att_add(p, att_mask(att_make(1, 2, 2, 700, 300, 64, FW_F16), 0, 33, 5)); /* Lq > Lk: many rows see nothing */
    att_add(p, att_layout(att_make(2, 3, 3, 239, 300, 64, FW_BF16), 1, 8));  /* padded rows, 16-byte aligned */
    att_add(p, att_layout(att_mask(att_make(1, 2, 1, 300, 239, 128, FW_F16), 1, U, U), 0, 16));
}

/* ---- headdims: cuda-flash at head dims its kernels do not read in place ------------------------------
 * Head dims off the multiples of 8 and between the compiled ones (1, 3, 17, 59, 72, 111, 200, 255) run staged
 * (zero-padded to a multiple of 8, the output copied back): each in f16 and bf16, causal and not, MHA/GQA/MQA,
 * Lq < Lk, Lq > Lk, decode (the serving kernel on the staged problem), BSHD and padded rows; 59 and 255 with every
 * configuration. Then rows that break the 16-byte rule at head dims the kernels take (odd row strides, 8-byte
 * rows): those tensors staged alone. cuda-flash by name, and it must take every case. */
static void add_headdims(att_plan *p, const att_opts *o)
{
    static const int64_t dims[] = {1, 3, 17, 59, 72, 111, 200, 255};
    static const int64_t lens[][2] = {{113, 203}, {203, 113}, {1, 300}, {128, 217}};
    const int nd = o->quick ? 2 : 8;
    for (int i = 0; i < nd; i++) {
        const int64_t D = dims[o->quick ? 3 + 4 * i : i];
        for (int k = 0; k < 4; k++) { /* (dtype, causal) */
            const int64_t *l = lens[(k + i) % 4], Hkv = (k + i) % 3 == 0 ? 4 : (k + i) % 3 == 1 ? 2 : 1;
            att_case *t = att_add(p, att_layout(att_mask(att_make(1 + (k & 1), 4, Hkv, l[0], l[1], D, k < 2 ? FW_F16 : FW_BF16),
                                                         k & 1, U, U),
                                                (k + i) & 1, (k + i) % 3 == 2 ? 3 : 0));
            t->backend = "cuda-flash";
            t->flags |= ATT_MUST_SUPPORT | (D == 59 || D == 255 ? ATT_EVERY_CONFIG : 0);
        }
    }
    static const struct { int64_t Hkv, Lq, Lk, D; int causal, bshd, pad; fw_dtype dt; } rows[] = {
        {2, 150, 170, 64, 1, 0, 3, FW_F16},  /* row stride 67: every tensor staged, head dim kept */
        {4, 130, 90, 128, 0, 1, 1, FW_BF16}, /* BSHD, head stride 129 */
        {1, 1, 333, 72, 0, 0, 5, FW_F16},    /* decode, padded rows */
        {2, 77, 77, 256, 1, 0, 4, FW_BF16},  /* 8-byte aligned rows */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0] && !(o->quick && i > 0); i++) {
        att_case *t = att_add(p, att_layout(att_mask(att_make(2, 4, rows[i].Hkv, rows[i].Lq, rows[i].Lk, rows[i].D, rows[i].dt),
                                                     rows[i].causal, U, U),
                                            rows[i].bshd, rows[i].pad));
        t->backend = "cuda-flash";
        t->flags |= ATT_MUST_SUPPORT | (i == 0 ? ATT_EVERY_CONFIG : 0);
    }
}

/* ---- f32: the f32 suite, every configuration of every backend, each precision ------------------ */
typedef struct f32_case {
    int B, H, Hkv, Lq, Lk, D, bshd, pad, causal;
    long wl, wr;
    fw_dtype dt;
} f32_case;

static const f32_case f32_cases[] = {
    {1, 2, 1, 130, 130, 64, 1, 0, 1, U, U, FW_F32},    /* small causal gqa */
    {2, 4, 4, 256, 256, 64, 0, 0, 0, U, U, FW_F32},    /* plain */
    {2, 4, 2, 200, 333, 64, 1, 0, 1, U, U, FW_F32},    /* gqa causal Lq<Lk bshd */
    {1, 2, 2, 257, 257, 128, 0, 3, 0, 32, 0, FW_F32},  /* d128 unaligned window */
    {1, 3, 3, 100, 100, 32, 1, 0, 1, 16, U, FW_F32},   /* d32 causal+window */
    {1, 2, 1, 130, 150, 256, 0, 0, 0, U, U, FW_F32},   /* d256 gqa */
    {1, 2, 2, 150, 150, 80, 1, 0, 1, U, U, FW_F32},    /* d80 (bucket 128) causal */
    {1, 2, 2, 300, 100, 64, 0, 0, 1, U, U, FW_F32},    /* Lq>Lk causal: masked rows */
    {2, 2, 2, 64, 1, 8, 0, 0, 0, U, U, FW_F32},        /* Lk=1 d8 */
    {1, 2, 2, 300, 300, 64, 0, 1, 0, 10, 5, FW_F32},   /* two-sided window pad1 */
    {2, 8, 1, 128, 128, 64, 1, 0, 0, U, U, FW_F32},    /* mqa bshd */
    {1, 1, 1, 1, 700, 64, 0, 0, 0, U, U, FW_F32},      /* decode Lq=1 */
    {1, 2, 2, 1031, 1031, 64, 0, 0, 1, U, U, FW_F32},  /* causal 1031 */
    {3, 8, 2, 700, 700, 64, 0, 0, 1, U, U, FW_F32},    /* more query blocks than SMs, causal gqa */
    {4, 8, 8, 640, 640, 64, 1, 0, 0, U, U, FW_F32},    /* 160 blocks bshd */
    {2, 4, 2, 200, 333, 64, 1, 0, 1, U, U, FW_F16},    /* f16 gqa causal */
    {2, 4, 2, 200, 333, 64, 0, 2, 0, U, U, FW_BF16},   /* bf16 gqa padded */
};

static void add_f32_with(att_plan *p, const att_opts *o, const char *env)
{
    const int n = o->quick ? 1 : (int)(sizeof f32_cases / sizeof f32_cases[0]);
    for (int i = 0; i < n; i++) {
        const f32_case *c = &f32_cases[i];
        att_case *t = att_add(p, att_layout(att_mask(att_make(c->B, c->H, c->Hkv, c->Lq, c->Lk, c->D, c->dt), c->causal,
                                                     c->wl, c->wr),
                                            c->bshd, c->pad));
        t->flags |= ATT_EVERY_CONFIG;
        t->env = env;
    }
}

static void add_f32(att_plan *p, const att_opts *o) { add_f32_with(p, o, NULL); }

/* The f32 suite again with the split, persistence, staging and start-delay choices forced (knobs.h):
 * paths the heuristics take only on some shapes, run on all of them. */
static void add_forced(att_plan *p, const att_opts *o)
{
    add_f32_with(p, o, "FW_CUDA_PERSIST_BLOCKS=3 FW_F32_KV_SPLITS=3 FW_F32_WG1_STAGE0=1 FW_F32_DELAY=500");
}

/* The grid without the wgmma (sm_90a) kernels: the mma.sync defaults where Hopper would not take them. */
static void add_no_wgmma(att_plan *p, const att_opts *o)
{
    const int first = p->n;
    add_grid(p, o);
    for (int i = first; i < p->n; i++) p->v[i].env = "FW_CUDA_FLASH_WG=0";
}

/* The grid's 16-bit cases at head dims 64 and 128 with the Hopper forward's persistent form forced and held to
 * 3 blocks: several query blocks a block, so the stage ring and Q's barrier run across them and causal grids
 * take the snake's rounds (the default takes that form only from 132 query blocks, beyond the grid's shapes).
 * The head dim 64 cases run again on the three-consumer tile (192 rows, 96 keys: partial tiles at all the grid's
 * lengths but 4224). Elsewhere than compute capability 9.0 the names are not there and the default runs. */
static void add_persistent(att_plan *p, const att_opts *o)
{
    const int first = p->n;
    add_grid(p, o);
    const int last = p->n;
    int keep = first;
    for (int i = first; i < last; i++) {
        const fw_case *c = &p->v[i].c;
        if (c->dtype != FW_F32 && (c->head_dim == 64 || c->head_dim == 128)) {
            p->v[keep] = p->v[i];
            p->v[keep++].env = "FW_CUDA_FLASH_CONFIG=wsp-bm128-bn128-s3 FW_CUDA_PERSIST_BLOCKS=3";
        }
    }
    p->n = keep;
    for (int i = first; i < keep; i++)
        if (p->v[i].c.head_dim == 64)
            att_add(p, p->v[i])->env = "FW_CUDA_FLASH_CONFIG=wsp-bm192-bn96-s4 FW_CUDA_PERSIST_BLOCKS=3";
}

/* ---- nan: non-finite inputs and large logits --------------------------------------------------
 * A NaN and an inf in V and a NaN in K behind a causal mask: exactly the rows that see one of those
 * keys go non-finite (checked element by element besides the reference); a NaN in K of head 1 with
 * GQA off; logits of about ±36 · |q||k| (q and k scaled by 6). */
static void add_nan(att_plan *p, const att_opts *o)
{
    /* Non-finite keys and values behind a causal mask: on the CPU only the rows that see them go
     * non-finite. The GPU kernels multiply a masked key's zero weight into the tile it lies in, so a NaN
     * there also reaches the other rows of that tile (FlashAttention behaves the same); docs/DESIGN.md
     * states both, and these cases hold the CPU's exact form. */
    for (int t = 0; o->device.kind == FW_DEVICE_CPU && t < 3; t++) {
        att_case *c = att_add(p, att_mask(att_make(1, 2, 1, 160, 160, 64, (fw_dtype)t), 1, U, U));
        c->flags |= ATT_NAN_ROWS;
        c->plant[0] = (att_plant){'v', 0, 70, 5, NAN};
        c->plant[1] = (att_plant){'v', 0, 100, 9, INFINITY};
        c->plant[2] = (att_plant){'k', 0, 130, 3, NAN};
        if (o->quick) break;
    }
    att_case *c = att_add(p, att_mask(att_make(1, 2, 2, 200, 300, 64, FW_BF16), 1, U, U));
    c->flags |= ATT_NAN_ROWS;
    c->plant[0] = (att_plant){'k', 1, 17, 3, NAN};
    c = att_add(p, att_make(1, 2, 2, 256, 256, 128, FW_F16));
    c->input_scale = 6.0f;
    c = att_add(p, att_make(1, 2, 2, 200, 200, 64, FW_F32));
    c->input_scale = 6.0f;
    c->precisions = 1u; /* large logits: the contract's tolerance is the exact modes' (tf32 errors grow with them) */
}

/* ---- configs: every configuration of every backend, on boundary-heavy shapes -------------------- */
static void add_configs(att_plan *p, const att_opts *o)
{
    if (o->device.kind == FW_DEVICE_CPU) { /* tails everywhere, GQA, causal */
        att_case *t = att_add(p, att_mask(att_make(1, 4, 2, 203, 333, 72, FW_F32), 1, U, U));
        t->flags |= ATT_EVERY_CONFIG;
        t->precisions = 1u;
        t->threads[0] = 2;
        return;
    }
    static const int pd[] = {32, 64, 96, 128, 256}; /* the padded head dims of the 16-bit kernels */
    for (int i = 0; i < 5; i++)
        for (int causal = 0; causal < 2; causal++)
            for (int dt = 0; dt < 2; dt++) {
                att_case *t = att_add(p, att_layout(att_mask(att_make(1, 2, 1, 333, 517, pd[i], dt ? FW_BF16 : FW_F16),
                                                             causal, U, U),
                                                    dt, 0));
                t->flags |= ATT_EVERY_CONFIG;
                if (o->quick) return;
            }
}

/* ---- random: seeded shapes, every axis drawn ----------------------------------------------------- */
static void add_random(att_plan *p, const att_opts *o)
{
    uint64_t s = o->seed;
    const int64_t dims[] = {1, 8, 16, 24, 32, 40, 48, 64, 80, 96, 100, 128, 160, 256};
    const int n = o->quick ? 4 : 96;
    for (int i = 0; i < n; i++) {
        const int64_t hkv = 1 + (int64_t)fw_rng_below(&s, 3), group = 1 + (int64_t)fw_rng_below(&s, 8);
        const int64_t lmax = i % 4 == 3 ? 400 : 200;
        att_case t = att_make(1 + (int64_t)fw_rng_below(&s, 2), hkv * group, hkv, 1 + (int64_t)fw_rng_below(&s, (uint64_t)lmax),
                              1 + (int64_t)fw_rng_below(&s, (uint64_t)lmax), dims[fw_rng_below(&s, 14)],
                              (fw_dtype)fw_rng_below(&s, 3));
        t.c.params.causal = fw_rng_below(&s, 3) == 0;
        t.c.params.window_left = fw_rng_below(&s, 3) == 0 ? (int64_t)fw_rng_below(&s, 90) : U;
        t.c.params.window_right = fw_rng_below(&s, 4) == 0 ? (int64_t)fw_rng_below(&s, 40) : U;
        t.c.layout_bshd = (int)fw_rng_below(&s, 2);
        t.c.pad = fw_rng_below(&s, 3) == 0 ? 1 + (int)fw_rng_below(&s, 8) : 0;
        t.c.want_lse = fw_rng_below(&s, 4) != 0;
        att_add(p, threads3(t, 1, 2, i % 2 ? 7 : 3)); /* odd counts too: uneven splits of rows and keys */
    }
}

/* ---- refusals: a backend asked for what it does not run says so ------------------------------- */
static void add_refusals(att_plan *p, const att_opts *o)
{
    if (o->device.kind == FW_DEVICE_CPU) {
        att_case t = att_make(1, 1, 1, 64, 64, 64, FW_F32);
        t.flags |= ATT_REFUSED;
        t.backend = "cpu-flash";
        t.precisions = 1u << FW_PRECISION_TF32;
        att_add(p, t);
        return;
    }
    att_case t = att_make(1, 1, 1, 128, 128, 64, FW_F32); /* f32 belongs to cuda-flash-f32 */
    t.flags |= ATT_REFUSED;
    t.backend = "cuda-flash";
    att_add(p, t);
}

/* ---- perf ------------------------------------------------------------------------------------- */
/* FlashAttention's benchmark grid: 16k tokens (batch = 16384 / L), hidden 2048 (heads = 2048 / D). */
static void add_fa_grid(att_plan *p, const att_opts *o, int backward, int64_t min_l)
{
    static const int dims[] = {64, 128};
    for (int di = 0; di < 2; di++)
        for (int64_t L = o->quick ? 1024 : min_l; L <= (o->quick ? 1024 : 16384); L *= 2)
            for (int causal = backward; causal < 2; causal++) {
                att_case *t = att_add(p, att_mask(att_make(16384 / L, 2048 / dims[di], 2048 / dims[di], L, L, dims[di],
                                                           FW_BF16),
                                                  causal, U, U));
                t->c.seed = 7;
                t->flags |= backward ? ATT_TIME_BACKWARD : ATT_EVERY_CONFIG;
                t->tag = backward ? "fwdbwd" : "fa";
            }
}

static void add_perf_fa(att_plan *p, const att_opts *o) { add_fa_grid(p, o, 0, 512); }
static void add_perf_fwdbwd(att_plan *p, const att_opts *o) { add_fa_grid(p, o, 1, 256); }

/* The f32 seed suite (B = 16, H = 8, D = 64, L = 128..2048), the anchors' seed003 (L = 128/512/1024,
 * 8 heads, D = 64) at batch 1 and 32, and the other f32 head dims. */
static void add_perf_seed(att_plan *p, const att_opts *o)
{
    static const struct { int B, L, D, causal; const char *tag; } s[] = {
        {16, 128, 64, 0, "seed"},         {16, 256, 64, 0, "seed"},        {16, 512, 64, 0, "seed"},
        {16, 1024, 64, 0, "seed"},        {16, 2048, 64, 0, "seed"},       {16, 2048, 64, 1, "seed-causal"},
        {1, 128, 64, 0, "seed003-b1"},    {1, 512, 64, 0, "seed003-b1"},   {1, 1024, 64, 0, "seed003-b1"},
        {32, 128, 64, 0, "seed003-b32"},  {32, 512, 64, 0, "seed003-b32"}, {32, 1024, 64, 0, "seed003-b32"},
        {8, 1024, 128, 0, "d128"},        {4, 1024, 32, 0, "d32"},         {2, 512, 256, 0, "d256"},
    };
    const int n = o->quick ? 1 : (int)(sizeof s / sizeof s[0]);
    for (int i = 0; i < n; i++) {
        att_case *t = att_add(p, att_mask(att_make(s[i].B, 8, 8, s[i].L, s[i].L, s[i].D, FW_F32), s[i].causal, U, U));
        t->flags |= ATT_EVERY_CONFIG;
        t->tag = s[i].tag;
    }
}

/* The CPU: a few f32 shapes (B = 1, H = 8, D = 64; --quick: 2 heads, L = 128), forward and forward
 * + backward. */
static void add_perf_cpu(att_plan *p, const att_opts *o)
{
    const int64_t H = o->quick ? 2 : 8;
    for (int64_t L = o->quick ? 128 : 256; L <= (o->quick ? 128 : 2048); L *= 2)
        for (int causal = 0; causal < 2; causal++) {
            att_case *t = att_add(p, att_mask(att_make(1, H, H, L, L, 64, FW_F32), causal, U, U));
            t->precisions = 1u;
            t->tag = "cpu";
        }
    att_case *t = att_add(p, att_mask(att_make(1, H, H, o->quick ? 128 : 1024, o->quick ? 128 : 1024, 64, FW_F32), 1, U, U));
    t->flags |= ATT_TIME_BACKWARD;
    t->tag = "cpu-fwdbwd";
}

/* ---- the table --------------------------------------------------------------------------------- */
void att_add_backward_grid(att_plan *p, const att_opts *o);
void att_add_backward_variants(att_plan *p, const att_opts *o);
void att_finite_differences(const att_opts *o, att_out *out);
void att_add_backward_headdims(att_plan *p, const att_opts *o);
static void run_reuse(const att_opts *o, att_out *out) { att_cuda_workspace_reuse(o, out); }
static void run_stage(const att_opts *o, att_out *out) { att_cuda_stage_forward_checks(o, out); }
static void run_stage_bwd(const att_opts *o, att_out *out) { att_cuda_stage_backward_checks(o, out); }

#define TEST (1u << ATT_TEST)
#define PERF (1u << ATT_PERF)
#define BWD (1u << ATT_BACKWARD)
#define CPU (1u << FW_DEVICE_CPU)
#define CUDA (1u << FW_DEVICE_CUDA)

const att_section att_sections[] = {
    {"edges", TEST, CPU | CUDA, 1, "awkward shapes: L = 1, tile ± 1, odd dims, GQA/MQA, windows, strides", add_edges, NULL},
    {"tiling", TEST, CPU | CUDA, 1, "tile edges, dims 1..256, split-KV (1/2/7 threads); --long: L = 16384", add_tiling, NULL},
    {"grid", TEST, CUDA, 1, "FlashAttention's (Lq, Lk) pairs x dims x causal, rotating dtype/layout/GQA", add_grid, NULL},
    {"headdims", TEST, CUDA, 1, "cuda-flash staged: head dims 1..255 off its kernels', unaligned rows and pointers",
     add_headdims, run_stage},
    {"f32", TEST, CUDA, 1, "the f32 suite: every configuration, exact/tf32/3xtf32", add_f32, NULL},
    {"forced", TEST, CUDA, 1, "the f32 suite with split/persistence/staging/delay forced", add_forced, NULL},
    {"nowgmma", TEST, CUDA, 0, "the grid with FW_CUDA_FLASH_WG=0 (no sm_90a kernels)", add_no_wgmma, NULL},
    {"persistent", TEST, CUDA, 1, "the grid at D 64/128 with the persistent Hopper forward (192-row too) on 3 blocks",
     add_persistent, NULL},
    {"nan", TEST, CPU | CUDA, 1, "NaN/inf in K and V behind masks, large logits", add_nan, NULL},
    {"configs", TEST, CPU | CUDA, 1, "every configuration of every backend on boundary-heavy shapes", add_configs, NULL},
    {"random", TEST, CPU | CUDA, 1, "seeded random shapes (every axis drawn)", add_random, NULL},
    {"refusals", TEST, CPU | CUDA, 1, "a named backend refuses what it does not run, with a reason", add_refusals, NULL},
    {"reuse", TEST, CUDA, 1, "split-KV workspace reuse across calls, streams and CUDA graphs", NULL, run_reuse},
    {"fd", BWD, CPU, 1, "cpu-ref's gradients against central finite differences", NULL, att_finite_differences},
    {"grid", BWD, CPU | CUDA, 1, "gradients of every backend, every way it runs, vs cpu-ref", att_add_backward_grid, NULL},
    {"headdims", BWD, CUDA, 1, "cuda-flash staged: head dims 1..255 off its kernels', unaligned rows and pointers",
     att_add_backward_headdims, run_stage_bwd},
    {"variants", BWD, CUDA, 0, "each tensor-core backward variant forced (16-bit; tf32 records in f32)", att_add_backward_variants,
     NULL},
    {"fa", PERF, CUDA, 1, "FlashAttention's grid (16k tokens, hidden 2048, bf16), every configuration", add_perf_fa, NULL},
    {"seed", PERF, CUDA, 1, "the f32 seed suite, every configuration and precision", add_perf_seed, NULL},
    {"fwdbwd", PERF, CUDA, 1, "forward + backward on FlashAttention's grid (bf16, causal, L from 256)", add_perf_fwdbwd, NULL},
    {"cpu", PERF, CPU, 1, "f32 shapes on the CPU backends, forward and forward + backward", add_perf_cpu, NULL},
};
const int att_n_sections = (int)(sizeof att_sections / sizeof att_sections[0]);
