/* cuda-flash: f16/bf16 FlashAttention-2 forward on tensor cores (mma.sync, sm_80+).
 * The kernel is in flash_tc.cuh; its instantiations, one file per padded head dim, in
 * flash_tc_d<D>.cu. This file is the backend table entry: what it supports, its search space,
 * and the launch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flash_tc.cuh"
#include "flash_wg.cuh"

/* The padded head dim that runs head_dim d, or 0. */
static int tc_padded_dim(int64_t d)
{
    if (d <= 0 || d % 8 != 0) return 0;
    if (d <= 32) return 32;
    if (d <= 64) return 64;
    if (d <= 96) return 96;
    if (d <= 128) return 128;
    if (d <= 256) return 256;
    return 0;
}

static const fw_flash_tc_variant *tc_variants(int dpad, int *n)
{
    switch (dpad) {
    case 32: *n = fw_flash_tc_nvariants_d32; return fw_flash_tc_variants_d32;
    case 64: *n = fw_flash_tc_nvariants_d64; return fw_flash_tc_variants_d64;
    case 96: *n = fw_flash_tc_nvariants_d96; return fw_flash_tc_variants_d96;
    case 128: *n = fw_flash_tc_nvariants_d128; return fw_flash_tc_variants_d128;
    case 256: *n = fw_flash_tc_nvariants_d256; return fw_flash_tc_variants_d256;
    default: *n = 0; return NULL;
    }
}

static void tc_variant_name(const fw_flash_tc_variant *v, char *buf, size_t len)
{
    char sub[16] = "";
    if (v->sub != v->bn) snprintf(sub, sizeof sub, "-sb%d", v->sub);
    if (v->wg == 2)
        snprintf(buf, len, "ws-bm%d-bn%d-s%d%s", v->bm, v->bn, v->stages, v->qreg ? "-pp" : "");
    else if (v->wg)
        snprintf(buf, len, "wg-bm%d-bn%d-s%d", v->bm, v->bn, v->stages);
    else
        snprintf(buf, len, "bm%d-bn%d-w%d-s%d%s%s", v->bm, v->bn, v->warps, v->stages, v->qreg ? "-qr" : "", sub);
}

static size_t tc_variant_smem(const fw_flash_tc_variant *v)
{
    if (v->wg) /* the warp-specialised kernel adds its mbarriers */
        return FW_FLASH_WG_SMEM(v->d, v->bm, v->bn, v->stages) + (v->wg == 2 ? 256 : 0);
    return FW_FLASH_TC_SMEM(v->d, v->bm, v->bn, v->stages);
}

/* Can this device run the variant: it fits the shared memory, and wgmma kernels need sm_90a's
 * machine code, which runs on compute capability 9.0 only. */
static int tc_variant_runs(const fw_flash_tc_variant *v, const fw_cuda_device_info *di)
{
    if (v->wg && !fw_cuda_wg_enabled(di)) return 0;
    return (int)tc_variant_smem(v) <= di->smem_optin;
}

/* fw_cuda_unaligned_stride with the reason. */
static int tc_strides_ok(const int64_t *s, int64_t nb, int64_t nh, int64_t ns, const char *name, char *why,
                         size_t why_len)
{
    const int i = fw_cuda_unaligned_stride(s, nb, nh, ns, 8);
    if (i >= 0)
        return fw_why(why, why_len,
                      "%s stride[%d] is %lld elements; cuda-flash needs rows 16-byte aligned "
                      "(batch/head/seq strides multiples of 8 elements)",
                      name, i, (long long)s[i]);
    return 1;
}

static int tc_supports(const fw_problem *p, char *why, size_t why_len)
{
    if (p->kind != FW_CALL_DENSE)
        return fw_why(why, why_len, "cuda-flash runs dense calls only (no ragged or KV-cache kernels)");
    if (p->device.kind != FW_DEVICE_CUDA) return fw_why(why, why_len, "tensors are not on a CUDA device");
    if (p->dtype != FW_F16 && p->dtype != FW_BF16)
        return fw_why(why, why_len, "cuda-flash takes f16 or bf16 tensors, these are %s (f32 runs on cuda-flash-f32)",
                      fw_dtype_name(p->dtype));
    if (p->head_dim % 8 != 0)
        return fw_why(why, why_len, "head_dim %lld is not a multiple of 8 (cuda-flash loads 16-byte row chunks)",
                      (long long)p->head_dim);
    if (p->head_dim > 256)
        return fw_why(why, why_len, "head_dim %lld is above cuda-flash's 256", (long long)p->head_dim);
    fw_cuda_device_info di;
    if (!fw_cuda_device_facts(p->device.index, &di))
        return fw_why(why, why_len, "cannot query CUDA device %d", p->device.index);
    if (di.cc_major < 8)
        return fw_why(why, why_len, "cuda-flash needs compute capability 8.0 or newer (mma.sync bf16, cp.async); device %d is %d.%d",
                      p->device.index, di.cc_major, di.cc_minor);
    if (p->seqlen_q >= (1 << 29) || p->seqlen_k >= (1 << 29))
        return fw_why(why, why_len, "sequence lengths must be below 2^29 for cuda-flash");
    if (p->heads > 65535 || p->batch > 65535)
        return fw_why(why, why_len, "batch %lld and heads %lld must each be at most 65535 (grid limits)",
                      (long long)p->batch, (long long)p->heads);
    if (!fw_cuda_aligned16(p->q) || !fw_cuda_aligned16(p->k) || !fw_cuda_aligned16(p->v) || !fw_cuda_aligned16(p->o))
        return fw_why(why, why_len, "q, k, v and o must start on 16-byte boundaries for cuda-flash");
    if (!tc_strides_ok(p->q_stride, p->batch, p->heads, p->seqlen_q, "q", why, why_len) ||
        !tc_strides_ok(p->k_stride, p->batch, p->kv_heads, p->seqlen_k, "k", why, why_len) ||
        !tc_strides_ok(p->v_stride, p->batch, p->kv_heads, p->seqlen_k, "v", why, why_len) ||
        !tc_strides_ok(p->o_stride, p->batch, p->heads, p->seqlen_q, "o", why, why_len))
        return 0;
    int n = 0;
    const fw_flash_tc_variant *vs = tc_variants(tc_padded_dim(p->head_dim), &n);
    for (int i = 0; i < n; i++)
        if (tc_variant_runs(&vs[i], &di)) return 1;
    return fw_why(why, why_len, "no cuda-flash configuration for head_dim %lld fits the device's %d bytes of shared memory per block",
                  (long long)p->head_dim, di.smem_optin);
}

/* Index (into the padded dim's variant list) of the default configuration for p. */
static int tc_default_index(const fw_problem *p, const fw_flash_tc_variant *vs, int n, const fw_cuda_device_info *di)
{
    /* An explicit override for benchmarking and tuning: FW_CUDA_FLASH_CONFIG=bm128-bn64-w4-s2 */
    const char *env = getenv("FW_CUDA_FLASH_CONFIG");
    if (env && *env) {
        char name[48];
        for (int i = 0; i < n; i++) {
            tc_variant_name(&vs[i], name, sizeof name);
            if (strcmp(name, env) == 0 && tc_variant_runs(&vs[i], di)) return i;
        }
    }
    const int dpad = vs[0].d;
    /* Preferred shapes (FA-grid sweep on an H200, docs/PERF-gpu-tc.md). */
    int want_bm = 128, want_bn = 64, want_w = 4, want_st = 2;
    if (dpad <= 32) want_bn = 128;
    /* The H200 run of 2026-11-26 06:44 UTC (docs/PERF.md): over the FA grid at L >= 1024,
     * bm128-bn64-w4-s3-qr was the best D=64 shape (min 1.12x FlashAttention-2) and
     * bm128-bn32-w4-s2 the best D=128 shape (min 1.00x); the former defaults gave min 0.99x / 0.93x. */
    if (dpad == 64) want_st = 3;
    if (dpad == 128) want_bn = 32;
    if (dpad == 256) want_bm = 64;
    /* Few query blocks: smaller blocks fill the machine better. */
    const int64_t blocks128 = ((p->seqlen_q + 127) / 128) * p->heads * p->batch;
    if (blocks128 < 132 && dpad <= 128) {
        want_bm = 64;
        want_bn = 64;
    }
    /* Hopper (compute capability 9.0): the warp-specialised wgmma + TMA kernel ws-bm128-bn128-s3. H100,
     * 2026-11-26 10:12 UTC (docs/PERF.md): at D=128 1.17-1.46x the mma.sync default (0.78-1.09x cuDNN) at
     * every FA-grid shape; at D=64 1.08-1.32x, except causal L=512 (0.94x). */
    const int causal_like = p->window_right < p->seqlen_q + p->seqlen_k + 1;
    const int ws_ok = blocks128 >= 132 && (dpad == 128 || (dpad == 64 && (p->seqlen_k >= 1024 || !causal_like)));
    for (int i = 0; ws_ok && i < n; i++)
        if (vs[i].wg == 2 && !vs[i].qreg && vs[i].bn == 128 && tc_variant_runs(&vs[i], di)) return i;
    int best = -1, best_score = -1;
    for (int i = 0; i < n; i++) {
        if (!tc_variant_runs(&vs[i], di) || vs[i].wg) continue;
        int score = (vs[i].bm == want_bm) * 16 + (vs[i].bn == want_bn) * 8 + (vs[i].warps == want_w) * 4 +
                    (vs[i].stages == want_st) * 2 + (vs[i].sub == vs[i].bn);
        if (score > best_score) {
            best_score = score;
            best = i;
        }
    }
    return best;
}

static int tc_configs(const fw_problem *p, fw_config *out, int max)
{
    int n = 0;
    const fw_flash_tc_variant *vs = tc_variants(tc_padded_dim(p->head_dim), &n);
    fw_cuda_device_info di;
    if (!vs || max < 1 || !fw_cuda_device_facts(p->device.index, &di)) {
        if (max >= 1) memset(out, 0, sizeof *out);
        return 1;
    }
    const int def = tc_default_index(p, vs, n, &di);
    int count = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n && count < max; i++) {
            if ((pass == 0) != (i == def)) continue;
            if (!tc_variant_runs(&vs[i], &di)) continue;
            fw_config *c = &out[count++];
            memset(c, 0, sizeof *c);
            tc_variant_name(&vs[i], c->name, sizeof c->name);
            c->block_m = vs[i].bm;
            c->block_n = vs[i].bn;
            c->warps = vs[i].warps;
            c->stages = vs[i].stages;
        }
    if (count == 0) {
        memset(out, 0, sizeof *out);
        count = 1;
    }
    return count;
}

static const fw_flash_tc_variant *tc_pick(const fw_problem *p, const fw_config *cfg, const fw_cuda_device_info *di)
{
    int n = 0;
    const fw_flash_tc_variant *vs = tc_variants(tc_padded_dim(p->head_dim), &n);
    if (!vs) return NULL;
    char name[48];
    if (cfg && cfg->name[0]) {
        for (int i = 0; i < n; i++) {
            tc_variant_name(&vs[i], name, sizeof name);
            if (strcmp(name, cfg->name) == 0 && tc_variant_runs(&vs[i], di)) return &vs[i];
        }
    }
    if (cfg && cfg->block_m) {
        for (int i = 0; i < n; i++)
            if (vs[i].bm == cfg->block_m && vs[i].bn == cfg->block_n && vs[i].warps == cfg->warps &&
                vs[i].sub == vs[i].bn && !vs[i].wg &&
                (cfg->stages == 0 || vs[i].stages == cfg->stages) && tc_variant_runs(&vs[i], di))
                return &vs[i];
    }
    const int def = tc_default_index(p, vs, n, di);
    return def >= 0 ? &vs[def] : NULL;
}

static int tc_clamp_window(int64_t w, int64_t limit) { return (int)(w > limit ? limit : w); }

static fw_status tc_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    char why[256];
    if (!tc_supports(p, why, sizeof why)) {
        fw_why(ex->err, ex->err_len, "%s", why);
        return FW_ERR_UNSUPPORTED;
    }
    fw_cuda_device_info di;
    if (!fw_cuda_device_facts(p->device.index, &di)) {
        fw_why(ex->err, ex->err_len, "cannot query CUDA device %d", p->device.index);
        return FW_ERR_DEVICE;
    }
    const fw_flash_tc_variant *v = tc_pick(p, cfg, &di);
    if (!v) {
        fw_why(ex->err, ex->err_len, "no cuda-flash configuration for head_dim %lld", (long long)p->head_dim);
        return FW_ERR_UNSUPPORTED;
    }
    int prev = 0;
    FW_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != p->device.index) FW_CUDA_CHECK(cudaSetDevice(p->device.index));

    fw_flash_tc_params a;
    memset(&a, 0, sizeof a);
    a.q = p->q;
    a.k = p->k;
    a.v = p->v;
    a.o = p->o;
    a.lse = p->lse;
    a.q_sb = p->q_stride[0]; a.q_sh = p->q_stride[1]; a.q_ss = p->q_stride[2];
    a.k_sb = p->k_stride[0]; a.k_sh = p->k_stride[1]; a.k_ss = p->k_stride[2];
    a.v_sb = p->v_stride[0]; a.v_sh = p->v_stride[1]; a.v_ss = p->v_stride[2];
    a.o_sb = p->o_stride[0]; a.o_sh = p->o_stride[1]; a.o_ss = p->o_stride[2];
    a.Lq = (int)p->seqlen_q;
    a.Lk = (int)p->seqlen_k;
    a.H = (int)p->heads;
    a.group = (int)p->group;
    a.d = (int)p->head_dim;
    const int64_t lim = p->seqlen_q + p->seqlen_k + 1;
    a.wl = tc_clamp_window(p->window_left, lim);
    a.wr = tc_clamp_window(p->window_right, lim);
    a.off = (int)p->diag_offset;
    a.has_window = p->has_window;
    /* Causal-like masks give later query blocks more keys: schedule them first. */
    a.reverse_m = p->window_right < lim && p->window_left >= lim;
    a.scale = p->scale;
    a.scale_log2 = p->scale * 1.4426950408889634f;
    fw_flash_tc_launch_fn fn = p->dtype == FW_F16 ? v->f16 : v->bf16;
    cudaError_t e = fn(&a, (int)p->batch, (cudaStream_t)ex->stream);
    if (prev != p->device.index) cudaSetDevice(prev);
    if (e != cudaSuccess) {
        char name[48];
        tc_variant_name(v, name, sizeof name);
        fw_why(ex->err, ex->err_len, "cuda-flash %s launch failed: %s", name, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? FW_ERR_OUT_OF_MEMORY : FW_ERR_DEVICE;
    }
    return FW_OK;
}

extern "C" fw_status fw_cuda_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex); /* src/backends/cuda/bwd_launch.cu */

extern "C" const fw_backend fw_backend_cuda_flash = {
    "cuda-flash",
    "FlashAttention-2 forward on tensor cores (mma.sync m16n8k16, f16/bf16, f32 accumulation)",
    FW_DEVICE_CUDA,
    fw_cuda_available,
    tc_supports,
    tc_configs,
    tc_forward,
    fw_cuda_backward,
};
