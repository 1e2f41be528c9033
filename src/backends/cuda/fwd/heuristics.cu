/* The f16/bf16 forward's heuristics (heuristics.h): every choice among the generated records is made here. */
#include <stdio.h>
#include <string.h>
#include "backends/cuda/fwd/heuristics.h"
#include "backends/cuda/parts/mask.cuh"
#include "backends/cuda/serving/serving.h"

extern "C" int fw_fwd_padded_dim(int64_t d)
{
    if (d <= 0 || d % 8 != 0) return 0;
    if (d <= 32) return 32;
    if (d <= 64) return 64;
    if (d <= 96) return 96;
    if (d <= 128) return 128;
    if (d <= 256) return 256;
    return 0;
}

/* The records of padded head dim dpad in a table of nt records (head dims ascending). */
static const fw_fwd_record *records_in(const fw_fwd_record *table, int nt, int dpad, int *n)
{
    int first = -1, count = 0;
    for (int i = 0; i < nt; i++)
        if (table[i].d == dpad) {
            if (first < 0) first = i;
            count++;
        }
    *n = count;
    return first < 0 ? NULL : &table[first];
}

extern "C" const fw_fwd_record *fw_fwd_records_of(int dpad, int *n)
{
    return records_in(fw_fwd_records, fw_fwd_nrecords, dpad, n);
}

extern "C" int fw_fwd_record_runs(const fw_fwd_record *r, const fw_cuda_device_info *di, const fw_knobs *k)
{
    if (r->arch == 90 && !fw_cuda_wg_enabled(di, k)) return 0;
    return r->smem <= (size_t)di->smem_optin;
}

/* The record of p's head dim called `name` that runs here, or NULL. */
static const fw_fwd_record *record_named(const fw_problem *p, const char *name, const fw_cuda_device_info *di,
                                         const fw_knobs *k)
{
    int n = 0;
    const fw_fwd_record *rs = fw_fwd_records_of(fw_fwd_padded_dim(p->head_dim), &n);
    for (int i = 0; i < n; i++)
        if (strcmp(rs[i].name, name) == 0 && fw_fwd_record_runs(&rs[i], di, k)) return &rs[i];
    return NULL;
}

extern "C" void fw_fwd_band(const fw_problem *p, fw_fwd_params *a)
{
    const int64_t lim = p->seqlen_q + p->seqlen_k + 1;
    a->Lq = (int)p->seqlen_q;
    a->Lk = (int)p->seqlen_k;
    a->wl = (int)(p->window_left > lim ? lim : p->window_left);
    a->wr = (int)(p->window_right > lim ? lim : p->window_right);
    a->off = (int)p->diag_offset;
    a->has_window = p->has_window;
    /* Causal-like masks give later query blocks more keys: schedule them first. */
    a->reverse_m = p->window_right < lim && p->window_left >= lim;
}

extern "C" int fw_fwd_persist_blocks(const fw_cuda_device_info *di, const fw_knobs *k)
{
    return k->persist_blocks > 0 && k->persist_blocks < di->sm_count ? k->persist_blocks : di->sm_count;
}

/* The work of the busiest block of the persistent forward (kernel_ws.cuh) on `blocks` blocks with tiles of BM x BN,
 * in row x key products (a tile's padding rows and keys counted): the tiles in scheduler.cuh's persistent order,
 * a head's query blocks longest first, or heads first in a snake under causal-like masks. -1 where the tiles or
 * blocks are too many to follow (the caller's bound keeps them few). */
template <int BM, int BN>
static double persistent_busiest(const fw_problem *p, const fw_fwd_params &band, int64_t blocks)
{
    enum { MAX_BLOCKS = 1024, MAX_QUERY_BLOCKS = 2048 };
    const int64_t nb = (p->seqlen_q + BM - 1) / BM, hb = p->heads * p->batch;
    const int64_t count = nb * hb, g = count < blocks ? count : blocks, rounds = (count + g - 1) / g;
    int n_begin, n_tiles;
    if (!p->has_window) { /* every tile alike */
        fwparts::key_tile_range<BM, BN>(band, 0, n_begin, n_tiles);
        return (double)rounds * n_tiles * BN * BM;
    }
    if (g > MAX_BLOCKS || nb > MAX_QUERY_BLOCKS) return -1;
    double work[MAX_QUERY_BLOCKS], load[MAX_BLOCKS] = {0}, busiest = 0;
    for (int64_t m = 0; m < nb; m++) {
        fwparts::key_tile_range<BM, BN>(band, (int)(m * BM), n_begin, n_tiles);
        work[m] = (double)n_tiles * BN * BM;
    }
    for (int64_t r = 0; r < rounds; r++) {
        const int snake = band.reverse_m && (r & 1) && (r + 1) * g <= count;
        for (int64_t b = 0; b < g && r * g + b < count; b++) {
            const int64_t j = snake ? r * g + g - 1 - b : r * g + b;
            load[b] += work[band.reverse_m ? nb - 1 - j / hb : nb - 1 - j % nb];
        }
    }
    for (int64_t b = 0; b < g; b++)
        if (load[b] > busiest) busiest = load[b];
    return busiest;
}

/* At head dim 64 above 1024 queries and keys: three consumer warpgroups (192-row tiles) rather than two? A 192 x 96
 * tile runs a row x key product 1.15x as fast as a 128 x 128 one where both make many rounds of the grid (H200);
 * where they make few, the rounds' rounding and the longer tile's padding can outweigh that, so the busiest block's
 * work under each tiling decides (over an H200 sweep of B 1-4, H 8-32, L 1536-8192, causal and not, it chose
 * the faster tiling, or one within 3%, at each of 108 shapes; the 192 rows everywhere lost up to 1.31x). From four
 * rounds of 192-row tiles on, the 192 rows. The last answer is kept (a thread's calls repeat their shapes, and
 * following a causal grid's tiles takes microseconds). */
static int d64_192_rows_pay(const fw_problem *p, const fw_fwd_params &band, const fw_cuda_device_info *di,
                            const fw_knobs *k)
{
    const int64_t blocks = fw_fwd_persist_blocks(di, k);
    if ((p->seqlen_q + 191) / 192 * p->heads * p->batch > 4 * blocks) return 1;
    static thread_local struct {
        int64_t key[8];
        int pays;
    } last = {{-1}, 0};
    const int64_t key[8] = {p->batch,       p->heads,        p->seqlen_q,   p->seqlen_k,
                            p->window_left, p->window_right, p->diag_offset, blocks * 2 + p->has_window};
    if (memcmp(key, last.key, sizeof key) == 0) return last.pays;
    const double w192 = persistent_busiest<192, 96>(p, band, blocks),
                 w128 = persistent_busiest<128, 128>(p, band, blocks);
    memcpy(last.key, key, sizeof key);
    last.pays = w192 < 0 || w128 < 0 || w192 < 1.15 * w128;
    return last.pays;
}

extern "C" const fw_fwd_record *fw_fwd_default(const fw_problem *p, const fw_cuda_device_info *di, const fw_knobs *k)
{
    int n = 0;
    const fw_fwd_record *rs = fw_fwd_records_of(fw_fwd_padded_dim(p->head_dim), &n);
    if (!rs) return NULL;
    /* An explicit choice for benchmarking and tuning: FW_CUDA_FLASH_CONFIG=bm128-bn64-w4-s2 */
    if (k->cuda_flash_config[0]) {
        const fw_fwd_record *r = record_named(p, k->cuda_flash_config, di, k);
        if (r) return r;
    }
    const int dpad = rs[0].d;
    /* Preferred shapes from sweeps of the FA grid on an H200 (docs/PERF-gpu-tc.md). At L >= 1024,
     * bm128-bn64-w4-s3-qr was the best D=64 shape (min 1.12x FlashAttention-2) and bm128-bn32-w4-s2 the
     * best D=128 shape (min 1.00x), where bm128-bn64-w4-s2 gave min 0.99x and 0.93x (docs/PERF.md). */
    int want_bm = 128, want_bn = 64, want_w = 4, want_st = 2;
    if (dpad <= 32) want_bn = 128;
    if (dpad == 64) want_st = 3;
    if (dpad == 128) want_bn = 32;
    if (dpad == 256) want_bm = 64;
    /* Few query blocks: smaller blocks fill the machine better. */
    const int64_t blocks128 = ((p->seqlen_q + 127) / 128) * p->heads * p->batch;
    if (blocks128 < 132 && dpad <= 128) {
        want_bm = 64;
        want_bn = 64;
    }
    /* Hopper (compute capability 9.0): the warp-specialised wgmma + TMA kernel. On an H100 (docs/PERF.md),
     * bm128-bn128-s3 at D=128 1.17-1.46x the mma.sync default (0.78-1.09x cuDNN) at every FA-grid shape; at D=64
     * 1.08-1.32x, except causal L=512 (0.94x). At D=64 its persistent form (wsp-: one block an SM, the next query
     * block's loads under this one's epilogue) where launch and epilogue weigh most: over four H200 runs
     * 1.04-1.18x the one-block-a-tile grid up to L=1024 (causal L=1024 1.02-1.06x; 0.94x in an H100 run of the
     * grid before its rescale moved), and from L=2048 (both lengths) three consumer warpgroups of 64 rows,
     * wsp-bm192-bn96-s4, FlashAttention-3's tile at D=64: 1.05-1.13x the 128-row records in two H200 runs
     * (L=1024: 0.95x, its tiles a ninth padding), unless their few rounds of the grid say otherwise
     * (d64_192_rows_pay). At D=128 (staging in Q, whose next load then waits) the persistent form was no faster.
     * At D=128 up to L=1024 the consumers in ping-pong (ws-…-pp) ran 2-3% faster at L=512 and -0.2 to +1.5% at
     * L=1024 in two H200 runs; above, ±1% or slower. */
    /* Fewer 128-row tiles than multiprocessors: from 1024 queries the wgmma kernels still, over an H200 sweep of B=1,
     * H 1-8, L 1024-8192 (8-128 tiles): at D=128 1.26-2.54x the mma.sync record, at D=64 1.00-1.68x from L=2048
     * and 1.07-1.10x at L=1024 on 64 tiles (0.91-1.05x on 8-32). There, from L=2048, the persistent form against
     * the one-block-a-tile grid: without a causal-like mask 1.13-1.26x (D=128) and 1.07-1.19x (D=64), with one
     * 0.91-0.95x and 0.92-0.98x (1.05x at D=64 on 128 tiles; one run): each takes the faster. */
    fw_fwd_params band;
    fw_fwd_band(p, &band);
    const int few_tiles = blocks128 < di->sm_count, causal_like = band.reverse_m;
    const int long_d64 = dpad == 64 && p->seqlen_q > 1024 && p->seqlen_k > 1024 && d64_192_rows_pay(p, band, di, k);
    const int pingpong = dpad == 128 && p->seqlen_q <= 1024;
    const int persistent = few_tiles && p->seqlen_q > 1024 ? !causal_like && !pingpong : dpad == 64;
    const int ws_bm = long_d64 ? 192 : 128, ws_bn = long_d64 ? 96 : 128;
    const int ws_ok = (!few_tiles || p->seqlen_q >= 1024) && (dpad == 128 || dpad == 64);
    for (int i = 0; ws_ok && i < n; i++)
        if (rs[i].kernel == FW_FWD_WS && rs[i].pingpong == pingpong && rs[i].bm == ws_bm && rs[i].bn == ws_bn &&
            rs[i].persistent == persistent && fw_fwd_record_runs(&rs[i], di, k))
            return &rs[i];
    /* Otherwise the mma.sync record closest to the preferred shape (the first of equal scores). */
    int best = -1, best_score = -1;
    for (int i = 0; i < n; i++) {
        if (!fw_fwd_record_runs(&rs[i], di, k) || rs[i].kernel != FW_FWD_MMA) continue;
        int score = (rs[i].bm == want_bm) * 16 + (rs[i].bn == want_bn) * 8 + (rs[i].warps == want_w) * 4 +
                    (rs[i].stages == want_st) * 2 + (rs[i].sub_n == rs[i].bn);
        if (score > best_score) {
            best_score = score;
            best = i;
        }
    }
    return best >= 0 ? &rs[best] : NULL;
}

/* The configuration that names record r (fw_fwd_record_for finds it again by the name). */
static void record_config(const fw_fwd_record *r, fw_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", r->name);
    c->block_m = r->bm;
    c->block_n = r->bn;
    c->warps = r->warps;
    c->stages = r->stages;
}

/* ---- ragged (varlen) calls ------------------------------------------------------------------ */

/* Can ragged record r run p's shape: f16/bf16, its padded head dim, TMA's int32 row coordinates for the
 * packed tensors (a tile past the end included), and its linear grid within 2^31 - 1 blocks. */
static int varlen_fits(const fw_problem *p, const fw_fwd_record *r)
{
    const int64_t rows_max = ((int64_t)1 << 31) - 1 - 2 * (int64_t)(r->bm > r->bn ? r->bm : r->bn);
    return p->kind == FW_CALL_VARLEN && (p->dtype == FW_F16 || p->dtype == FW_BF16) &&
           fw_fwd_padded_dim(p->head_dim) == r->d && p->total_q > 0 && p->total_k > 0 && p->total_q <= rows_max &&
           p->total_k <= rows_max && (p->total_q / r->bm + p->batch) * p->heads <= (((int64_t)1 << 31) - 1);
}

/* Is r, a ragged record, one p can run here. */
static int varlen_runs(const fw_problem *p, const fw_fwd_record *r, const fw_cuda_device_info *di, const fw_knobs *k)
{
    return fw_fwd_record_runs(r, di, k) && varlen_fits(p, r);
}

extern "C" int fw_fwd_varlen_choice(const fw_problem *p, const fw_config *cfg, const fw_cuda_device_info *di,
                                    const fw_knobs *k, const fw_fwd_record **rec, char *why, size_t why_len)
{
    *rec = NULL;
    if (p->kind != FW_CALL_VARLEN) return 0;
    int n = 0;
    const fw_fwd_record *rs = records_in(fw_fwd_varlen_records, fw_fwd_nvarlen_records, fw_fwd_padded_dim(p->head_dim), &n);
    const char *name = k->cuda_flash_config[0] ? k->cuda_flash_config : cfg && cfg->name[0] ? cfg->name : NULL;
    if (name) { /* a ragged record by name runs or fails; any other name is the serving path's to judge */
        for (int i = 0; i < n; i++)
            if (strcmp(rs[i].name, name) == 0) {
                if (varlen_runs(p, &rs[i], di, k)) {
                    *rec = &rs[i];
                    return 1;
                }
                fw_why(why, why_len,
                       "cuda-flash configuration \"%s\" cannot run this ragged call: it needs compute capability 9.0 "
                       "(FW_CUDA_FLASH_WG unset or 1), f16/bf16, head_dim padding to %d, and packed tensors below "
                       "2^31 rows", name, rs[i].d);
                return -1;
            }
        return 0;
    }
    if (cfg && cfg->block_m) return 0; /* a serving tile by its fields */
    /* Decode-like batches (every sequence's query rows times the group fit one 64-row block): the serving
     * kernel packs the query heads of a KV head into one block and splits long key ranges. */
    if (p->seqlen_q * p->group <= 64) return 0;
    for (int i = 0; i < n; i++) /* the first of the head dim is the default */
        if (varlen_runs(p, &rs[i], di, k)) {
            *rec = &rs[i];
            return 1;
        }
    return 0;
}

/* configs() of a ragged call: the default first (the ragged record, or the serving kernel's heuristic
 * choice), then the serving configurations and the ragged records that run here, for the tuner. */
static int varlen_configs(const fw_problem *p, fw_config *out, int max)
{
    if (max < 1) return 0;
    fw_cuda_device_info di;
    if (!fw_cuda_device_facts(p->device.index, &di)) {
        const int srv = fw_srv_tc_configs(p, out, max);
        if (!srv) memset(out, 0, sizeof *out);
        return srv ? srv : 1;
    }
    const fw_knobs *k = fw_problem_knobs(p);
    fw_knobs plain = *k; /* the heuristic's default, not a forced configuration */
    plain.cuda_flash_config[0] = 0;
    const fw_fwd_record *def = NULL;
    char why[8];
    fw_fwd_varlen_choice(p, NULL, &di, &plain, &def, why, sizeof why);
    int count = 0, nv = 0;
    if (def) record_config(def, &out[count++]);
    if (count < max) count += fw_srv_tc_configs(p, out + count, max - count);
    const fw_fwd_record *rs = records_in(fw_fwd_varlen_records, fw_fwd_nvarlen_records, fw_fwd_padded_dim(p->head_dim), &nv);
    for (int i = 0; i < nv && count < max; i++)
        if (&rs[i] != def && varlen_runs(p, &rs[i], &di, k)) record_config(&rs[i], &out[count++]);
    if (count == 0) {
        memset(out, 0, sizeof *out);
        count = 1;
    }
    return count;
}

extern "C" int fw_fwd_configs(const fw_problem *p, fw_config *out, int max)
{
    if (p->kind == FW_CALL_VARLEN) return varlen_configs(p, out, max);
    /* cached calls and dense decode shapes take the serving kernels (serving/serving.cu) */
    if (const int srv = fw_srv_tc_configs(p, out, max)) return srv;
    int n = 0;
    const fw_fwd_record *rs = fw_fwd_records_of(fw_fwd_padded_dim(p->head_dim), &n);
    const fw_knobs *k = fw_problem_knobs(p);
    fw_cuda_device_info di;
    if (!rs || max < 1 || !fw_cuda_device_facts(p->device.index, &di)) {
        if (max >= 1) memset(out, 0, sizeof *out);
        return 1;
    }
    const fw_fwd_record *def = fw_fwd_default(p, &di, k);
    int count = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n && count < max; i++) {
            if ((pass == 0) != (&rs[i] == def)) continue;
            if (!fw_fwd_record_runs(&rs[i], &di, k)) continue;
            record_config(&rs[i], &out[count++]);
        }
    if (count == 0) {
        memset(out, 0, sizeof *out);
        count = 1;
    }
    return count;
}

extern "C" const fw_fwd_record *fw_fwd_record_for(const fw_problem *p, const fw_config *cfg,
                                                  const fw_cuda_device_info *di, const fw_knobs *k, char *why,
                                                  size_t why_len)
{
    const int dpad = fw_fwd_padded_dim(p->head_dim);
    if (k->cuda_flash_config[0]) cfg = NULL; /* the knob's record, through fw_fwd_default */
    if (cfg && cfg->name[0]) {
        const fw_fwd_record *r = record_named(p, cfg->name, di, k);
        if (!r)
            fw_why(why, why_len,
                   "cuda-flash has no configuration \"%s\" that runs here for head_dim %lld (configs() lists them; "
                   "wg-/ws- ones need compute capability 9.0 and FW_CUDA_FLASH_WG unset or 1)",
                   cfg->name, (long long)p->head_dim);
        return r;
    }
    if (cfg && cfg->block_m) { /* an unnamed mma.sync shape: the first record of that shape without sub-tiles */
        int n = 0;
        const fw_fwd_record *rs = fw_fwd_records_of(dpad, &n);
        for (int i = 0; i < n; i++)
            if (rs[i].kernel == FW_FWD_MMA && rs[i].bm == cfg->block_m && rs[i].bn == cfg->block_n &&
                rs[i].warps == cfg->warps && rs[i].sub_n == rs[i].bn && (cfg->stages == 0 || rs[i].stages == cfg->stages) &&
                fw_fwd_record_runs(&rs[i], di, k))
                return &rs[i];
        fw_why(why, why_len, "cuda-flash has no mma.sync configuration bm%d-bn%d-w%d (stages %d) for head_dim %lld",
               cfg->block_m, cfg->block_n, cfg->warps, cfg->stages, (long long)p->head_dim);
        return NULL;
    }
    const fw_fwd_record *r = fw_fwd_default(p, di, k);
    if (!r) fw_why(why, why_len, "no cuda-flash configuration for head_dim %lld runs here", (long long)p->head_dim);
    return r;
}
