/* cuda-flash-f32: exact float32 FlashAttention-2 on CUDA cores (default), with opt-in tf32 and
 * 3xtf32 tensor-core modes (fw_context_set_precision). The kernels are in flash_f32_kernel.cuh and
 * instantiated per head-dim bucket in cuda_flash_f32_d{32,64,128,256}.cu; this file is the backend
 * table: what it supports, its configurations (tile shapes), and the launcher. */
#include <stdio.h>
#include <string.h>
#include "flash_f32_kernel.cuh"

static int ff32_bucket(int64_t D) { return D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256; }

static int ff32_variant(fw_precision p)
{
    return p == FW_PRECISION_TF32 ? 1 : p == FW_PRECISION_3XTF32 ? 2 : 0;
}

static int ff32_table(int64_t D, int variant, const ff32_cfg_info **t)
{
    switch (ff32_bucket(D)) {
    case 32: return ff32_configs_d32(variant, t);
    case 64: return ff32_configs_d64(variant, t);
    case 128: return ff32_configs_d128(variant, t);
    default: return ff32_configs_d256(variant, t);
    }
}

/* wgmma configurations run on compute capability 9.0 only (sm_90a machine code); FW_CUDA_FLASH_WG=0 hides
 * them (as for cuda-flash). */
static int ff32_cfg_runs(const ff32_cfg_info *c, int device)
{
    fw_cuda_device_info di;
    return !c->sm90a || (fw_cuda_device_facts(device, &di) && fw_cuda_wg_enabled(&di));
}

static int supports_(const fw_problem *p, char *why, size_t why_len)
{
    if (p->kind != FW_CALL_DENSE)
        return fw_why(why, why_len, "cuda-flash-f32 runs dense calls only (no ragged or KV-cache kernels)");
    if (p->device.kind != FW_DEVICE_CUDA) return fw_why(why, why_len, "tensors are not on a CUDA device");
    if (p->dtype != FW_F32)
        return fw_why(why, why_len, "cuda-flash-f32 takes float32 only (got %s; cuda-flash runs 16-bit)",
                      fw_dtype_name(p->dtype));
    if (p->precision != FW_PRECISION_EXACT && p->precision != FW_PRECISION_TF32 &&
        p->precision != FW_PRECISION_3XTF32)
        return fw_why(why, why_len, "cuda-flash-f32 runs exact, tf32 or 3xtf32 precision, not mode %d",
                      (int)p->precision);
    if (p->head_dim > 256) return fw_why(why, why_len, "cuda-flash-f32 takes head_dim up to 256, not %lld",
                                         (long long)p->head_dim);
    if (p->seqlen_q > (1LL << 30) || p->seqlen_k > (1LL << 30))
        return fw_why(why, why_len, "cuda-flash-f32 takes sequence lengths up to 2^30");
    if (p->heads > 65535 || p->batch > 65535)
        return fw_why(why, why_len, "cuda-flash-f32 grid limit: heads and batch must be <= 65535");
    return 1;
}

static int configs_(const fw_problem *p, fw_config *out, int max)
{
    int n = 0;
    for (int variant = 0; variant < 3 && n < max; variant++) {
        if (variant != ff32_variant(p->precision)) continue;
        const ff32_cfg_info *t;
        const int cnt = ff32_table(p->head_dim, variant, &t);
        for (int i = 0; i < cnt && n < max; i++) {
            if (!ff32_cfg_runs(&t[i], p->device.index)) continue;
            fw_config *c = &out[n++];
            memset(c, 0, sizeof *c);
            snprintf(c->name, sizeof c->name, "%s%s", variant == 1 ? "tf32-" : variant == 2 ? "3xtf32-" : "",
                     t[i].name);
            c->block_m = t[i].block_m;
            c->block_n = t[i].block_n;
            c->warps = t[i].warps;
            c->stages = 2;
            c->precision = p->precision;
        }
    }
    return n > 0 ? n : 1;
}

static fw_status forward_(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed()) {
        fw_why(ex->err, ex->err_len, "cannot select cuda:%d", p->device.index);
        return FW_ERR_DEVICE;
    }
    const int variant = ff32_variant(p->precision);
    const ff32_cfg_info *t;
    const int cnt = ff32_table(p->head_dim, variant, &t);
    int ci = 0; /* the first that runs here; or found by its name (with or without the precision prefix) or tile shape */
    while (ci + 1 < cnt && !ff32_cfg_runs(&t[ci], p->device.index)) ci++;
    /* The wgmma kernels (entries 0-4 and 9 of the head-dim-64 table, docs/PERF-gpu-f32.md "Run 4" to "Run 10"): at most
     * four key tiles (two until Run 10, where `wg1` passed `wg` at L = 256 once it staged its first tile), or a problem
     * whose 128-row blocks would not fill the SMs and keys of at most 16 tiles (its 3xtf32 P·V accumulates in O: 7.6e-6
     * at 16 tiles, see FF32_SHORT_TILES), the one-warpgroup kernel with split-KV (entry 9, "wg1": Run 9, 3xtf32 7-30%
     * faster at L = 128 and B = 1); short keys (where there is no wg1), the in-block split (entry 1: 20-25% faster at
     * L <= 256); fewer than n_kt/2 query blocks per kv head to share
     * the split (Lk much longer than Lq), the pre-pass kernel (entry 2); no mask and at most 8 rounds of query blocks
     * per SM, the persistent kernel (entry 3: with the consumers' ping-pong 5-13% faster than the others at L = 512 /
     * 1024 in both modes, run bq), in its short-key form where the keys are at most FF32_SHORT_TILES tiles (entry 4:
     * 3-7% faster at L = 512, runs bv and by); else tf32 the pre-pass kernel (its tiles are half the size) and 3xtf32 the
     * in-kernel shared split (entry 0). */
    fw_cuda_device_info di;
    const int sms = fw_cuda_device_facts(p->device.index, &di) ? di.sm_count : 0; /* 0: not known */
    auto qblocks_of = [&](int bm) { return (p->seqlen_q + bm - 1) / bm; }; /* query blocks of a head */
    const long long qblocks = qblocks_of(t[ci].block_m), blocks = qblocks * p->heads * p->batch; /* of entry ci */
    int wg1 = -1; /* the one-warpgroup kernel (split-KV where its blocks are few) */
    for (int i = 0; i < cnt && t[ci].sm90a; i++)
        if (!strcmp(t[i].name, "wg1-bm64-bn64")) wg1 = i;
    if (t[ci].sm90a && ci + 3 < cnt && t[ci + 3].sm90a) {
        const long long n_kt = (p->seqlen_k + t[ci].block_n - 1) / t[ci].block_n;
        if (wg1 >= 0 && (p->seqlen_k <= 256 || (sms > 0 && blocks < sms && p->seqlen_k <= 1024))) ci = wg1;
        else if (p->seqlen_k <= 256) ci += 1;
        else if (2 * qblocks * p->group < n_kt) ci += 2;
        else if (!p->has_window && sms > 0 && blocks <= 8LL * sms)
            ci += n_kt <= FF32_SHORT_TILES && ci + 4 < cnt && t[ci + 4].sm90a ? 4 : 3;
        else if (variant == 1) ci += 2;
    }
    /* Exact: where the default's blocks would not fill the SMs, a few_blocks entry with smaller blocks and so more of
     * them (the seed suite at L=128: bm64, 2 a SM; at B=1 and L <= 512: bm32, 1 a SM) */
    if (!t[ci].sm90a && variant == 0 && sms > 0) {
        int best = -1;
        for (int i = 0; i < cnt; i++) {
            const long long nb = qblocks_of(t[i].block_m) * p->heads * p->batch;
            if (t[i].few_blocks && nb <= (long long)t[i].few_blocks * sms && (best < 0 || t[i].block_m < t[best].block_m))
                best = i;
        }
        if (best >= 0) ci = best;
    }
    if (cfg && (cfg->name[0] || cfg->block_m)) {
        ci = -1;
        for (int i = 0; i < cnt && ci < 0; i++) {
            const char *nm = cfg->name;
            if (!strncmp(nm, "tf32-", 5)) nm += 5;
            else if (!strncmp(nm, "3xtf32-", 7)) nm += 7;
            if (nm[0] ? !strcmp(nm, t[i].name)
                      : (cfg->block_m == t[i].block_m && cfg->block_n == t[i].block_n &&
                         (!cfg->warps || cfg->warps == t[i].warps) && ff32_cfg_runs(&t[i], p->device.index)))
                ci = i;
        }
        if (ci < 0) {
            fw_why(ex->err, ex->err_len, "cuda-flash-f32 has no configuration \"%s\" (bm%d bn%d) for head_dim %lld",
                   cfg->name, cfg->block_m, cfg->block_n, (long long)p->head_dim);
            return FW_ERR_INVALID_VALUE;
        }
        if (!ff32_cfg_runs(&t[ci], p->device.index)) {
            fw_why(ex->err, ex->err_len, "cuda-flash-f32 configuration \"%s\" is a wgmma kernel: it needs a compute "
                   "capability 9.0 device (and FW_CUDA_FLASH_WG unset or 1)", t[ci].name);
            return FW_ERR_INVALID_VALUE;
        }
    }
    ff32_args a;
    a.q = (const float *)p->q; a.k = (const float *)p->k; a.v = (const float *)p->v;
    a.o = (float *)p->o; a.lse = p->lse;
    int aligned = ((uintptr_t)p->q % 16 == 0) && ((uintptr_t)p->k % 16 == 0) && ((uintptr_t)p->v % 16 == 0);
    for (int i = 0; i < 3; i++) {
        a.qs[i] = p->q_stride[i]; a.ks[i] = p->k_stride[i]; a.vs[i] = p->v_stride[i]; a.os[i] = p->o_stride[i];
        aligned = aligned && a.qs[i] % 4 == 0 && a.ks[i] % 4 == 0 && a.vs[i] % 4 == 0;
    }
    a.vec16 = aligned;
    a.uneven = p->has_window && qblocks_of(t[ci].block_m) <= 65535; /* a grid's z limit */
    a.sms = sms;
    a.delay = 0; /* the launchers that stagger their blocks set these */
    a.delay_from = a.delay_to = 0;
    a.diag = p->diag_offset; a.wl = p->window_left; a.wr = p->window_right;
    a.H = (int)p->heads; a.group = (int)p->group; a.Lq = (int)p->seqlen_q; a.Lk = (int)p->seqlen_k;
    a.D = (int)p->head_dim;
    a.scale_log2 = p->scale * 1.4426950408889634f;
    const cudaStream_t s = (cudaStream_t)ex->stream;
    const int batch = (int)p->batch;
    switch (ff32_bucket(p->head_dim)) {
    case 32: FW_CUDA_CHECK(ff32_launch_d32(variant, ci, &a, batch, s)); break;
    case 64: FW_CUDA_CHECK(ff32_launch_d64(variant, ci, &a, batch, s)); break;
    case 128: FW_CUDA_CHECK(ff32_launch_d128(variant, ci, &a, batch, s)); break;
    default: FW_CUDA_CHECK(ff32_launch_d256(variant, ci, &a, batch, s)); break;
    }
    FW_CUDA_CHECK_LAUNCH();
    return FW_OK;
}

extern "C" fw_status fw_cuda_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex); /* src/backends/cuda/bwd_launch.cu */

extern "C" const fw_backend fw_backend_cuda_flash_f32 = {
    "cuda-flash-f32",
    "exact float32 FlashAttention-2 on CUDA cores (cp.async double buffering, register blocking); "
    "opt-in tf32/3xtf32 tensor-core modes",
    FW_DEVICE_CUDA,
    fw_cuda_available,
    supports_,
    configs_,
    forward_,
    fw_cuda_backward,
};
