/* cuda-flash-f32's heuristics (heuristics.h): every choice among the generated records, and every launch-time
 * decision of a record's launch, is made here. Times are H100 unless marked; docs/PERF.md has the current ones. */
#include <stdio.h>
#include <string.h>
#include "backends/cuda/f32/heuristics.h"

extern "C" int fw_f32_padded_dim(int64_t d) { return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 256; }

extern "C" const fw_f32_form *fw_f32_form_of(const fw_f32_record *r, fw_precision prec)
{
    const fw_f32_form *f = prec == FW_PRECISION_TF32 ? &r->tf32 : prec == FW_PRECISION_3XTF32 ? &r->tf32x3 : &r->exact;
    return f->launch ? f : NULL;
}

/* wgmma records run on compute capability 9.0 only (sm_90a machine code); FW_CUDA_FLASH_WG=0 hides them (as for
 * cuda-flash). */
extern "C" int fw_f32_record_runs(const fw_f32_record *r, const fw_cuda_device_info *di, const fw_knobs *k)
{
    return r->arch != 90 || (di && fw_cuda_wg_enabled(di, k));
}

/* The records of p's padded head dim with a launch in p's precision, in the table's order. */
struct f32_records {
    const fw_problem *p;
    int dpad;
    explicit f32_records(const fw_problem *p_) : p(p_), dpad(fw_f32_padded_dim(p_->head_dim)) {}
    bool has(const fw_f32_record *r) const { return r->d == dpad && fw_f32_form_of(r, p->precision); }
    /* the first record that pred accepts, or NULL */
    template <class Pred> const fw_f32_record *find(Pred pred) const
    {
        for (int i = 0; i < fw_f32_nrecords; i++)
            if (has(&fw_f32_records[i]) && pred(&fw_f32_records[i])) return &fw_f32_records[i];
        return NULL;
    }
    template <class Fn> void each(Fn fn) const
    {
        for (int i = 0; i < fw_f32_nrecords; i++)
            if (has(&fw_f32_records[i])) fn(&fw_f32_records[i]);
    }
};

static long long query_blocks(const fw_problem *p, int bm) { return (p->seqlen_q + bm - 1) / bm; }

extern "C" const fw_f32_record *fw_f32_default(const fw_problem *p, const fw_cuda_device_info *di, const fw_knobs *k)
{
    const f32_records rs(p);
    const fw_f32_record *first = rs.find([&](const fw_f32_record *r) { return fw_f32_record_runs(r, di, k) != 0; });
    if (!first) return NULL;
    const int sms = di ? di->sm_count : 0; /* 0: not known */
    const long long qblocks = query_blocks(p, first->bm), blocks = qblocks * p->heads * p->batch;
    if (first->arch == 90) {
        /* The wgmma kernels (head dim 64 on compute capability 9.0), by the keys' length and how the query blocks
         * fill the SMs:
         *  - keys of at most four tiles, or 128-row blocks that would not fill the SMs and keys of at most 16 tiles
         *    (its 3xtf32 P·V accumulates in O: 7.6e-6 at 16 tiles, FW_F32_SHORT_TILES): the one-warpgroup kernel,
         *    with split-KV where its blocks are few (3xtf32 7-30% faster at L = 128 and B = 1; commits c3f873c,
         *    54981c5, where staging its first tile made it pass the two-warpgroup kernel at L = 256);
         *  - short keys where there is no one-warpgroup kernel: the two-warpgroup kernel (20-25% faster at L <= 256);
         *  - fewer than n_kt / 2 query blocks per kv head to share the split (Lk much longer than Lq): the pre-pass;
         *  - no mask and at most 8 rounds of query blocks per SM: the persistent kernel (with the consumers' ping-pong
         *    5-13% faster than the others at L = 512 / 1024 in both modes; 40938bc), in its short-key form where the
         *    keys are at most FW_F32_SHORT_TILES tiles (3-7% faster at L = 512; 735a199);
         *  - else tf32 the pre-pass kernel (its tiles are half the size) and 3xtf32 the in-kernel shared split, the
         *    first record. */
        const long long n_kt = (p->seqlen_k + first->bn - 1) / first->bn;
        auto kind = [&](fw_f32_kernel kernel, int local, int persistent, int short_keys) {
            return rs.find([&](const fw_f32_record *r) {
                return r->kernel == kernel && (kernel != FW_F32_WS || (r->local_tiles == local && r->persistent == persistent &&
                                                                        r->short_keys == short_keys));
            });
        };
        const fw_f32_record *wg1 = kind(FW_F32_WG1, 0, 0, 0), *wg = kind(FW_F32_WG, 0, 0, 0);
        const fw_f32_record *prepass = kind(FW_F32_WS, 0, 0, 0), *persistent = kind(FW_F32_WS, 0, 1, 0);
        const fw_f32_record *persistent_short = kind(FW_F32_WS, 0, 1, 1);
        const fw_f32_record *r = first;
        if (wg1 && (p->seqlen_k <= 256 || (sms > 0 && blocks < sms && p->seqlen_k <= 1024))) r = wg1;
        else if (!wg1 && p->seqlen_k <= 256) r = wg;
        else if (2 * qblocks * p->group < n_kt) r = prepass;
        else if (!p->has_window && sms > 0 && blocks <= 8LL * sms)
            r = n_kt <= FW_F32_SHORT_TILES && persistent_short ? persistent_short : persistent;
        else if (p->precision == FW_PRECISION_TF32) r = prepass;
        return r ? r : first;
    }
    /* Exact: where the first record's blocks would not fill the SMs, a few-blocks record with smaller blocks and so
     * more of them (kernels.tsv: few=N; the seed suite at L = 128: bm64, 2 an SM; at B = 1 and L <= 512: bm32, 1 an
     * SM) */
    if (p->precision == FW_PRECISION_EXACT && sms > 0) {
        const fw_f32_record *best = NULL;
        rs.each([&](const fw_f32_record *r) {
            const long long nb = query_blocks(p, r->bm) * p->heads * p->batch;
            if (r->few_blocks && nb <= (long long)r->few_blocks * sms && (!best || r->bm < best->bm)) best = r;
        });
        if (best) return best;
    }
    return first;
}

extern "C" int fw_f32_configs(const fw_problem *p, fw_config *out, int max)
{
    if (max < 1) return 1;
    const fw_knobs *k = fw_problem_knobs(p);
    fw_cuda_device_info di;
    const fw_cuda_device_info *dip = fw_cuda_device_facts(p->device.index, &di) ? &di : NULL;
    const fw_f32_record *def = fw_f32_default(p, dip, k);
    const char *prefix = p->precision == FW_PRECISION_TF32 ? "tf32-" : p->precision == FW_PRECISION_3XTF32 ? "3xtf32-" : "";
    const f32_records rs(p);
    int count = 0;
    for (int pass = 0; pass < 2; pass++)
        rs.each([&](const fw_f32_record *r) {
            if (count >= max || (pass == 0) != (r == def) || !fw_f32_record_runs(r, dip, k)) return;
            fw_config *c = &out[count++];
            memset(c, 0, sizeof *c);
            snprintf(c->name, sizeof c->name, "%s%s", prefix, r->name);
            c->block_m = r->bm;
            c->block_n = r->bn;
            c->warps = r->warps;
            c->stages = r->stages;
            c->precision = p->precision;
        });
    if (count == 0) {
        memset(out, 0, sizeof *out);
        count = 1;
    }
    return count;
}

extern "C" const fw_f32_record *fw_f32_record_for(const fw_problem *p, const fw_config *cfg, const fw_cuda_device_info *di,
                                                  const fw_knobs *k, char *why, size_t why_len)
{
    const f32_records rs(p);
    const fw_f32_record *r;
    if (cfg && (cfg->name[0] || cfg->block_m)) {
        const char *nm = cfg->name;
        if (!strncmp(nm, "tf32-", 5)) nm += 5;
        else if (!strncmp(nm, "3xtf32-", 7)) nm += 7;
        r = rs.find([&](const fw_f32_record *x) {
            return nm[0] ? !strcmp(nm, x->name)
                         : (cfg->block_m == x->bm && cfg->block_n == x->bn && (!cfg->warps || cfg->warps == x->warps) &&
                            fw_f32_record_runs(x, di, k));
        });
        if (!r) {
            fw_why(why, why_len, "cuda-flash-f32 has no configuration \"%s\" (bm%d bn%d) for head_dim %lld", cfg->name,
                   cfg->block_m, cfg->block_n, (long long)p->head_dim);
            return NULL;
        }
        if (!fw_f32_record_runs(r, di, k)) {
            fw_why(why, why_len, "cuda-flash-f32 configuration \"%s\" is a wgmma kernel: it needs a compute "
                   "capability 9.0 device (and FW_CUDA_FLASH_WG unset or 1)", r->name);
            return NULL;
        }
    } else {
        r = fw_f32_default(p, di, k);
        if (!r) {
            fw_why(why, why_len, "no cuda-flash-f32 configuration for head_dim %lld runs here", (long long)p->head_dim);
            return NULL;
        }
    }
    /* The short-key form erred above FW_F32_SHORT_TILES tiles (params.h): its fallback runs those. */
    if (r->short_keys && (p->seqlen_k + 63) / 64 > FW_F32_SHORT_TILES) {
        const fw_f32_record *f = rs.find([&](const fw_f32_record *x) { return !strcmp(x->name, r->fallback); });
        if (!f) {
            fw_why(why, why_len, "cuda-flash-f32 configuration \"%s\" has no fallback \"%s\"", r->name, r->fallback);
            return NULL;
        }
        r = f;
    }
    return r;
}

/* A staggered start. Where the blocks fill the SMs one to four times and each has at most four key tiles, every
 * block of the first wave copies at once and none computes until the copies are nearly all in. The blocks
 * sms .. 2 sms - 1 in launch order (the first wave's second block of each SM; later waves start when slots free,
 * staggered already) sleep ~1 us (2000 cycles at 1.98 GHz) before their copies, so that the first ones' inputs land
 * sooner and they compute while the rest land. Against none: the one-warpgroup kernel's 3xtf32 at the seed suite's
 * L = 128 0.0122 -> 0.0116 ms, B = 32 L = 128 0.0229 -> 0.0216, L = 256 0.0332 -> 0.0326-0.0328; tf32 0.0104 ->
 * 0.0096, 0.0190 -> 0.0178, 0.0249 -> 0.0239-0.0241; the exact kernel at L = 128 0.0213 -> 0.0209 (commits 21b581a,
 * 374fd30, 5cf9de0). fill: the blocks are independent of one another's progress (no split-KV) and fill the SMs.
 * FW_F32_DELAY=cycles forces it (0: off), for sms blocks from the SM count or half the blocks on, whichever is first
 * (tests: the small cases' blocks do not fill the SMs). */
static void plan_stagger(fw_f32_plan *plan, long long blocks, long long n_kt, int sms, bool fill, const fw_knobs *k)
{
    plan->delay = 0;
    plan->delay_from = sms;
    plan->delay_to = 2LL * sms;
    if (k->f32_delay >= 0) {
        plan->delay = k->f32_delay;
        plan->delay_from = sms < blocks / 2 ? sms : blocks / 2;
        plan->delay_to = plan->delay_from + sms;
    } else if (fill && sms > 0 && n_kt <= 4 && blocks >= sms && blocks <= 4LL * sms) {
        plan->delay = 2000;
    }
}

/* Key ranges a query block for the one-warpgroup kernel: where its 64-row blocks are fewer than the SMs, enough
 * ranges for about two blocks an SM, each of at least 4 key tiles (B = 1, 3xtf32: L = 512 2 ranges 0.0160 ms, 4
 * ranges 0.0159, none 0.0212; L = 1024 2 ranges 0.0338, 4 0.0388, none 0.0397; L = 128 2 ranges of a tile 0.0091,
 * none 0.0073; commit c3f873c). FW_F32_KV_SPLITS=n forces n (at most one a tile): tests and experiments. */
static int wg1_ranges(long long blocks, int n_kt, int sms, const fw_knobs *k)
{
    int n = 1;
    if (k->f32_kv_splits > 0) n = k->f32_kv_splits;
    else if (sms > 0 && blocks > 0 && blocks < sms) {
        n = (int)((2LL * sms) / blocks);
        if (n > n_kt / 4) n = n_kt / 4;
    }
    if (n > 8) n = 8;
    if (n > n_kt) n = n_kt;
    return n < 1 ? 1 : n;
}

extern "C" void fw_f32_plan_for(const fw_problem *p, const fw_f32_record *r, int sms, const fw_knobs *k, fw_f32_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    const long long nqb = query_blocks(p, r->bm), blocks = nqb * p->heads * p->batch;
    /* An uneven mask (causal or a window: query blocks see different numbers of key tiles): the exact kernel's grid
     * is heads first, so that every head's heaviest block starts first (the grid's z limit permitting). */
    plan->heads_first = p->has_window && nqb <= 65535;
    const int batch = (int)p->batch, n_kt = (int)((p->seqlen_k + r->bn - 1) / r->bn);
    if (r->kernel == FW_F32_EXACT) {
        plan_stagger(plan, blocks, n_kt, sms, true, k);
    } else if (r->kernel == FW_F32_WG1) {
        plan->kv_splits = wg1_ranges(blocks, n_kt, sms, k);
        if ((long long)batch * plan->kv_splits > 65535) plan->kv_splits = 1; /* the grid's z */
        /* FW_F32_WG1_STAGE0=0/1 forces the first tile's staging (the second test pass and the sanitizers force 1) */
        plan->stage0 = k->f32_wg1_stage0 >= 0 ? k->f32_wg1_stage0 != 0 : sms > 0 && blocks * plan->kv_splits >= sms;
        plan_stagger(plan, blocks * plan->kv_splits, n_kt, sms, plan->stage0 && plan->kv_splits == 1, k);
    } else if (r->kernel == FW_F32_WS && r->persistent) {
        /* one block per SM at most; FW_CUDA_PERSIST_BLOCKS=n: at most n (tests: several query blocks a block on small
         * problems) */
        long long grid = blocks > sms ? sms : blocks;
        if (k->persist_blocks > 0 && grid > k->persist_blocks) grid = k->persist_blocks;
        plan->grid_blocks = sms > 0 ? (int)grid : -1;
    }
}
