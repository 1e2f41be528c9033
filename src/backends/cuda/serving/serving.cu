/* cuda-flash's serving path on the host: which calls take it, what it supports, its configurations
 * (the heuristic's first), its workspace bound and the launch. The kernel is serving_tc.cuh.
 *
 * Dispatch (cuda_flash.cu calls these): every ragged or cached call runs here; a dense forward runs here
 * when seqlen_q · group <= 64 (decode shapes: the query heads of a KV head fit one block of rows, so
 * each K/V tile is read once per KV head and long keys split across the GPU), unless its configuration
 * (or FW_CUDA_FLASH_CONFIG) names one of the dense kernels'.
 *
 * Heuristic: rows a block BM = 8, 16, 32 or 64, the smallest that holds seqlen_q · group (64 beyond:
 * ragged prefill; 8 runs keys as the MMA's M dimension, serving_tc_keys.cuh); tiles of 64 keys (128 at
 * head dim 64 up to 16 rows), three stages where they fit twice per SM (two at head dim 256); the split
 * count from the SMs and the blocks per SM (srv_plan_splits). Decode at head dim 128 (8 rows) takes the
 * tiles that were fastest on an H200 across the decode table: 128-key tiles in two stages (one block an
 * SM) for a single wave, 64-key tiles in two stages capped at two blocks an SM otherwise. When even one block
 * per SM leaves SMs without work (B · H_kv · row blocks below the SM count), the keys are split into about
 * one wave of blocks that start and finish together: a second block per SM then hides no block's start
 * or end behind another's stream; it only doubles the blocks (Q loads, partials to merge) and the
 * concurrent streams at the memory. Such calls take one block per SM ("-occ1") where the tile keeps all
 * of three stages in flight, which is also the configuration with fewer blocks in flight at the same
 * bandwidth (energy). Calls with several waves of blocks keep as many blocks per SM as fit, so that one
 * block's start overlaps another's stream. */
#include <stdio.h>
#include <string.h>
#include "serving_tc.cuh"
#include "serving_host.h"

static int srv_tc_dpad(int64_t d)
{
    if (d <= 0 || d % 8 != 0) return 0;
    return d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0;
}

static const fw_srv_tc_variant *srv_tc_table(int64_t d, int *n)
{
    switch (srv_tc_dpad(d)) {
    case 64: *n = fw_srv_tc_nvariants_d64; return fw_srv_tc_variants_d64;
    case 128: *n = fw_srv_tc_nvariants_d128; return fw_srv_tc_variants_d128;
    case 256: *n = fw_srv_tc_nvariants_d256; return fw_srv_tc_variants_d256;
    default: *n = 0; return NULL;
    }
}

/* Packed rows a (sequence, KV head) at most, and the block height that holds them. */
static int64_t srv_tc_rows(const fw_problem *p) { return p->seqlen_q * p->group; }
static int srv_tc_bm(const fw_problem *p)
{
    const int64_t rows = srv_tc_rows(p);
    return rows <= 8 ? 8 : rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
}

/* Dynamic shared memory variant v takes for p: paged calls also hold block-table slices. */
static size_t srv_tc_smem(const fw_srv_tc_variant *v, const fw_problem *p)
{
    return p->kind == FW_CALL_KVCACHE && p->block_table ? v->smem_paged : v->smem;
}

static const fw_srv_tc_variant *srv_tc_find(const fw_problem *p, const srv_choice *c, const fw_cuda_device_info *di)
{
    int n = 0;
    const fw_srv_tc_variant *vs = srv_tc_table(p->head_dim, &n);
    for (int i = 0; i < n; i++)
        if (vs[i].bm == c->bm && vs[i].bn == c->bn && vs[i].stages == c->stages && (int)srv_tc_smem(&vs[i], p) <= di->smem_optin)
            return &vs[i];
    return NULL;
}

/* The heuristic's configuration: see the file's comment. */
static int srv_tc_default(const fw_problem *p, const fw_cuda_device_info *di, srv_choice *c)
{
    memset(c, 0, sizeof *c);
    const int dpad = srv_tc_dpad(p->head_dim);
    c->bm = srv_tc_bm(p);
    c->bn = c->bm == 64 && dpad == 256 ? 32 : (c->bm <= 16 && dpad == 64 ? 128 : 64);
    c->stages = dpad == 256 || c->bm == 64 ? 2 : 3;
    if (srv_tc_find(p, c, di)) return 1;
    int n = 0;
    const fw_srv_tc_variant *vs = srv_tc_table(p->head_dim, &n);
    for (int i = 0; i < n; i++) /* a smaller device: the first of this height that fits */
        if (vs[i].bm == c->bm && (int)srv_tc_smem(&vs[i], p) <= di->smem_optin) {
            c->bn = vs[i].bn;
            c->stages = vs[i].stages;
            return 1;
        }
    return 0;
}

/* Blocks per SM of variant v at launch size smem (at least 1). */
static int srv_tc_blocks_per_sm(const fw_srv_tc_variant *v, fw_dtype dt, size_t smem)
{
    const int n = v->occupancy[dt == FW_BF16](smem);
    return n > 0 ? n : 1;
}

/* The heuristic's configuration with its occupancy (see the file's comment); the device is current. */
static int srv_tc_heuristic(const fw_problem *p, const fw_cuda_device_info *di, srv_choice *c)
{
    if (!srv_tc_default(p, di, c)) return 0;
    const fw_srv_tc_variant *v = srv_tc_find(p, c, di);
    const int64_t m_blocks = (srv_tc_rows(p) + c->bm - 1) / c->bm;
    const int64_t base = p->batch * p->kv_heads * (m_blocks > 0 ? m_blocks : 1);
    if (c->bm == 8 && srv_tc_dpad(p->head_dim) == 128) {
        /* decode at head dim 128 (see the file's comment): one wave of 128-key tiles, else two 64-key stages
         * at two blocks an SM */
        srv_choice t = *c;
        t.bn = base < di->sm_count ? 128 : 64;
        t.stages = 2;
        t.occupancy = base < di->sm_count ? 0 : 2;
        if (srv_tc_find(p, &t, di)) {
            *c = t;
            return 1;
        }
    }
    if (v && c->stages >= 3 && p->seqlen_k > c->bn && base < di->sm_count &&
        srv_tc_blocks_per_sm(v, p->dtype, srv_tc_smem(v, p)) > 1)
        c->occupancy = 1;
    return 1;
}

extern "C" int fw_srv_tc_routes(const fw_problem *p)
{
    if (p->device.kind != FW_DEVICE_CUDA) return 0;
    if (p->kind != FW_CALL_DENSE) return 1;
    return !p->dout && (p->dtype == FW_F16 || p->dtype == FW_BF16) && srv_tc_dpad(p->head_dim) &&
           srv_tc_rows(p) <= 64;
}

extern "C" int fw_srv_tc_claims(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    if (p->kind != FW_CALL_DENSE) return 1;
    const char *forced = fw_exec_knobs(ex)->cuda_flash_config;
    if (forced[0]) return srv_is_serving_name(forced);
    if (cfg && cfg->name[0]) return srv_is_serving_name(cfg->name);
    if (cfg && cfg->block_m) return 0; /* a dense kernel's tile by its fields */
    char why[8];
    return fw_srv_tc_routes(p) && fw_srv_tc_supports(p, why, sizeof why);
}

/* fw_cuda_unaligned_stride with the reason. */
static int srv_rows16(const int64_t *s, int64_t nb, int64_t nh, int64_t ns, const char *name, char *why, size_t len)
{
    const int i = fw_cuda_unaligned_stride(s, nb, nh, ns, 8);
    if (i >= 0)
        return fw_why(why, len, "%s stride[%d] is %lld elements; cuda-flash's KV-cache calls need rows 16-byte aligned "
                      "(strides multiples of 8 elements)", name, i, (long long)s[i]);
    return 1;
}

extern "C" int fw_srv_tc_supports(const fw_problem *p, char *why, size_t why_len)
{
    if (p->device.kind != FW_DEVICE_CUDA) return fw_why(why, why_len, "tensors are not on a CUDA device");
    if (p->dtype != FW_F16 && p->dtype != FW_BF16)
        return fw_why(why, why_len, "cuda-flash takes f16 or bf16 tensors, these are %s (f32 runs on cuda-flash-f32)",
                      fw_dtype_name(p->dtype));
    if (!srv_tc_dpad(p->head_dim))
        return fw_why(why, why_len, "head_dim %lld: cuda-flash's KV-cache calls take multiples of 8 up to 256 (the cache "
                      "is read and appended in place in 16-byte row chunks; dense and ragged calls of other head dims "
                      "run staged)", (long long)p->head_dim);
    fw_cuda_device_info di;
    if (!fw_cuda_device_facts(p->device.index, &di))
        return fw_why(why, why_len, "cannot query CUDA device %d", p->device.index);
    if (di.cc_major < 8)
        return fw_why(why, why_len, "cuda-flash needs compute capability 8.0 or newer (mma.sync bf16, cp.async); "
                      "device %d is %d.%d", p->device.index, di.cc_major, di.cc_minor);
    if (p->seqlen_q >= (1 << 29) || p->seqlen_k >= (1 << 29) || srv_tc_rows(p) >= (1 << 30))
        return fw_why(why, why_len, "cuda-flash's serving path takes max_seqlen_q, max_seqlen_k (or the cache's "
                      "capacity) below 2^29 and max_seqlen_q x group below 2^30");
    if (p->batch > 65535 || p->kv_heads > 65535)
        return fw_why(why, why_len, "batch %lld and kv_heads %lld must each be at most 65535 (grid limits)",
                      (long long)p->batch, (long long)p->kv_heads);
    if (p->num_pages > 0x7fffffff)
        return fw_why(why, why_len, "a page pool of %lld pages is above 2^31 - 1", (long long)p->num_pages);
    if (!srv_key_strides_fit(p, why, why_len)) return 0;
    const void *ptrs[6] = {p->q, p->k, p->v, p->o, p->k_new, p->v_new};
    for (int i = 0; i < 6; i++)
        if (ptrs[i] && !fw_cuda_aligned16(ptrs[i]))
            return fw_why(why, why_len, "q, k, v, o (and k_new, v_new) must start on 16-byte boundaries for "
                          "cuda-flash's KV-cache calls");
    const int packed = p->cu_seqlens_q != NULL;
    const int64_t qb = packed ? 1 : p->batch, qs = packed ? p->total_q : p->seqlen_q;
    int64_t kb = p->batch, ks = p->seqlen_k;
    if (p->kind == FW_CALL_VARLEN) {
        kb = 1;
        ks = p->total_k;
    } else if (p->kind == FW_CALL_KVCACHE && p->block_table) {
        kb = p->num_pages;
        ks = p->page_size;
    }
    if (!srv_rows16(p->q_stride, qb, p->heads, qs, "q", why, why_len) ||
        !srv_rows16(p->o_stride, qb, p->heads, qs, "o", why, why_len) ||
        !srv_rows16(p->k_stride, kb, p->kv_heads, ks, "k", why, why_len) ||
        !srv_rows16(p->v_stride, kb, p->kv_heads, ks, "v", why, why_len) ||
        (p->k_new && !srv_rows16(p->kn_stride, qb, p->kv_heads, qs, "k_new", why, why_len)) ||
        (p->v_new && !srv_rows16(p->vn_stride, qb, p->kv_heads, qs, "v_new", why, why_len)))
        return 0;
    srv_choice c;
    if (!srv_tc_default(p, &di, &c))
        return fw_why(why, why_len, "no cuda-flash serving configuration for head_dim %lld fits the device's %d bytes "
                      "of shared memory per block", (long long)p->head_dim, di.smem_optin);
    return 1;
}

extern "C" int fw_srv_tc_configs(const fw_problem *p, fw_config *out, int max)
{
    fw_cuda_device_info di;
    srv_choice def;
    if (max < 1 || !fw_srv_tc_routes(p) || !fw_cuda_device_facts(p->device.index, &di))
        return 0;
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed() ? !srv_tc_default(p, &di, &def) : !srv_tc_heuristic(p, &di, &def)) return 0;
    int n = 0, nv = 0;
    srv_choice_to_config(&def, p->precision, &out[n++]);
    const fw_srv_tc_variant *vs = srv_tc_table(p->head_dim, &nv);
    /* every tile of the heuristic's height (8 rows: also 16, the rows-as-M math), as many blocks per SM as
     * fit, then capped at 1 and 2 where that binds (fewer blocks in flight: the energy configurations the
     * tuner measures) */
    for (int i = 0; i < nv && n < max; i++) {
        const int height_ok = vs[i].bm == def.bm || (def.bm == 8 && vs[i].bm == 16);
        if (!height_ok || (int)srv_tc_smem(&vs[i], p) > di.smem_optin) continue;
        const int natural = guard.failed() ? 0 : srv_tc_blocks_per_sm(&vs[i], p->dtype, srv_tc_smem(&vs[i], p));
        for (int cap = 0; cap <= 2 && n < max; cap++) {
            if (cap > 0 && natural <= cap) continue;
            const srv_choice c = {vs[i].bm, vs[i].bn, vs[i].stages, 0, cap};
            if (!memcmp(&c, &def, sizeof c)) continue;
            srv_choice_to_config(&c, p->precision, &out[n++]);
        }
    }
    /* the heuristic's tile with the split forced off and on */
    static const int forced[] = {1, 4, 16};
    for (int i = 0; i < 3 && n < max && p->seqlen_k > def.bn; i++) {
        srv_choice c = def;
        c.split = forced[i];
        srv_choice_to_config(&c, p->precision, &out[n++]);
    }
    return n;
}

extern "C" size_t fw_srv_tc_workspace(const fw_problem *query)
{
    fw_problem q = *query; /* the sizes only; group from the heads where the caller left it 0 */
    if (q.group <= 0 && q.kv_heads > 0) q.group = q.heads / q.kv_heads;
    const fw_problem *p = &q;
    fw_cuda_device_info di;
    int n = 0;
    const fw_srv_tc_variant *vs = srv_tc_table(p->head_dim, &n);
    if (!vs || !fw_cuda_device_facts(p->device.index, &di)) return 0;
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed()) return 0;
    const int bm_max = srv_tc_bm(p);
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (vs[i].bm > bm_max || (int)vs[i].smem > di.smem_optin) continue;
        const int64_t slots2 = 2LL * di.sm_count * srv_tc_blocks_per_sm(&vs[i], p->dtype, vs[i].smem);
        const size_t b = srv_ws_bound(p, vs[i].bm, vs[i].bn, slots2);
        if (b > bytes) bytes = b;
    }
    return bytes;
}

extern "C" fw_status fw_srv_tc_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    char why[256];
    if (!fw_srv_tc_supports(p, why, sizeof why)) {
        fw_why(ex->err, ex->err_len, "%s", why);
        return FW_ERR_UNSUPPORTED;
    }
    fw_cuda_device_guard guard(p->device.index);
    fw_cuda_device_info di;
    if (guard.failed() || !fw_cuda_device_facts(p->device.index, &di)) {
        fw_why(ex->err, ex->err_len, "cannot select CUDA device %d", p->device.index);
        return FW_ERR_DEVICE;
    }
    /* the configuration: FW_CUDA_FLASH_CONFIG, else cfg by name, else by its fields, else the heuristic's */
    srv_choice c;
    const char *forced = fw_exec_knobs(ex)->cuda_flash_config;
    const char *name = srv_is_serving_name(forced) ? forced : cfg && srv_is_serving_name(cfg->name) ? cfg->name : NULL;
    if (name) {
        if (!srv_choice_parse(name, &c) || !c.bm) {
            fw_why(ex->err, ex->err_len, "cuda-flash has no serving configuration named '%s'", name);
            return FW_ERR_INVALID_VALUE;
        }
    } else if (cfg && !cfg->name[0] && cfg->block_m) {
        const srv_choice f = {cfg->block_m, cfg->block_n, cfg->stages, cfg->splits, cfg->occupancy};
        c = f;
    } else if (!srv_tc_heuristic(p, &di, &c)) {
        fw_why(ex->err, ex->err_len, "no cuda-flash serving configuration fits head_dim %lld", (long long)p->head_dim);
        return FW_ERR_UNSUPPORTED;
    }
    const fw_srv_tc_variant *v = srv_tc_find(p, &c, &di);
    if (!v) {
        fw_why(ex->err, ex->err_len, "cuda-flash serving configuration bm%d bn%d s%d is not compiled for head_dim %lld "
               "or does not fit the device's shared memory", c.bm, c.bn, c.stages, (long long)p->head_dim);
        return FW_ERR_INVALID_VALUE;
    }
    fw_srv_params a;
    srv_fill_params(p, &a);
    a.block_rows = v->bm;
    a.m_blocks = (int)((srv_tc_rows(p) + v->bm - 1) / v->bm);
    if (a.m_blocks < 1) a.m_blocks = 1;
    /* causal-like masks give later row blocks more keys: schedule them first */
    a.reverse_m = a.m_blocks > 1 && p->window_right < p->seqlen_q + p->seqlen_k && p->window_left >= p->seqlen_q + p->seqlen_k;
    const size_t smem = srv_launch_smem(p->device.index, srv_tc_smem(v, p), c.occupancy);
    const int64_t slots = (int64_t)di.sm_count * srv_tc_blocks_per_sm(v, p->dtype, smem);
    srv_kernels k;
    char cname[48];
    srv_choice_name(&c, cname, sizeof cname);
    k.name = cname;
    k.attend = v->launch[p->dtype == FW_BF16];
    if (p->dtype == FW_BF16) {
        k.merge = fwsrv::merge_launch<__nv_bfloat16>;
        k.append = fwsrv::append_launch<__nv_bfloat16>;
    } else {
        k.merge = fwsrv::merge_launch<__half>;
        k.append = fwsrv::append_launch<__half>;
    }
    return srv_run(p, ex, &a, &c, v->bn, slots, smem, &k);
}
