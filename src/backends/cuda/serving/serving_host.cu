/* Host side shared by the serving paths (serving_host.h). */
#include <atomic>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/common/workspace.h"
#include "core/dtype.h"
#include "page_div.h"
#include "serving_host.h"

/* ---- configuration names ------------------------------------------------------------------ */

void srv_choice_name(const srv_choice *c, char *buf, size_t len)
{
    char occ[24] = "", split[24] = "";
    if (c->occupancy > 0) snprintf(occ, sizeof occ, "-occ%d", c->occupancy);
    if (c->split == 1) snprintf(split, sizeof split, "-nosplit");
    else if (c->split > 1) snprintf(split, sizeof split, "-split%d", c->split);
    if (c->bm)
        snprintf(buf, len, "srv-m%d-bn%d-s%d%s%s", c->bm, c->bn, c->stages, occ, split);
    else
        snprintf(buf, len, "srv-f32%s%s", occ, split);
}

int srv_is_serving_name(const char *name) { return name && strncmp(name, "srv-", 4) == 0; }

int srv_choice_parse(const char *name, srv_choice *c)
{
    memset(c, 0, sizeof *c);
    if (!srv_is_serving_name(name)) return 0;
    const char *s = name + 4;
    int n = 0;
    if (strncmp(s, "f32", 3) == 0) {
        s += 3;
    } else {
        if (sscanf(s, "m%d-bn%d-s%d%n", &c->bm, &c->bn, &c->stages, &n) != 3 || c->bm <= 0 || c->bn <= 0 ||
            c->stages <= 0)
            return 0;
        s += n;
    }
    if (strncmp(s, "-occ", 4) == 0) {
        n = 0;
        if (sscanf(s, "-occ%d%n", &c->occupancy, &n) != 1 || c->occupancy < 1) return 0;
        s += n;
    }
    if (strcmp(s, "-nosplit") == 0) {
        c->split = 1;
        s += 8;
    } else if (strncmp(s, "-split", 6) == 0) {
        n = 0;
        if (sscanf(s, "-split%d%n", &c->split, &n) != 1 || c->split < 2 || c->split > 1024) return 0;
        s += n;
    }
    if (*s) return 0;
    char check[48];
    srv_choice_name(c, check, sizeof check); /* one spelling only */
    return strcmp(check, name) == 0;
}

void srv_choice_to_config(const srv_choice *c, fw_precision precision, fw_config *out)
{
    memset(out, 0, sizeof *out);
    srv_choice_name(c, out->name, sizeof out->name);
    out->block_m = c->bm ? c->bm : 16;
    out->block_n = c->bn ? c->bn : 32;
    out->warps = 4;
    out->stages = c->stages ? c->stages : 1;
    out->splits = c->split;
    out->occupancy = c->occupancy;
    out->precision = precision;
}

/* ---- shared memory and occupancy ---------------------------------------------------------- */

/* Shared memory of an SM and the part the system reserves per block, read once per device. */
static int srv_smem_facts(int device, int *per_sm, int *reserved)
{
    static std::atomic<int> known[64], sm_bytes[64], res_bytes[64];
    if (device < 0 || device >= 64) return 0;
    if (!known[device].load(std::memory_order_acquire)) {
        int a = 0, r = 0;
        if (cudaDeviceGetAttribute(&a, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess ||
            cudaDeviceGetAttribute(&r, cudaDevAttrReservedSharedMemoryPerBlock, device) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        sm_bytes[device].store(a, std::memory_order_relaxed);
        res_bytes[device].store(r, std::memory_order_relaxed);
        known[device].store(1, std::memory_order_release);
    }
    *per_sm = sm_bytes[device].load(std::memory_order_relaxed);
    *reserved = res_bytes[device].load(std::memory_order_relaxed);
    return 1;
}

size_t srv_launch_smem(int device, size_t need, int cap)
{
    fw_cuda_device_info di;
    int per_sm = 0, reserved = 0;
    if (cap <= 0 || !fw_cuda_device_facts(device, &di) || !srv_smem_facts(device, &per_sm, &reserved)) return need;
    /* cap blocks of per_sm / cap bytes (the reserved part included) fill the SM; cap + 1 do not */
    const int64_t want = (int64_t)(per_sm / cap) - reserved;
    if (want <= (int64_t)need) return need;
    return want < di.smem_optin ? (size_t)want : (size_t)di.smem_optin;
}

/* ---- split plan and workspace ------------------------------------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The most splits worth having for max_k keys: chunks of at least max(4 tiles, 256) keys, so that a
 * split's fixed cost (its Q tile, its partial row) stays small beside its K/V. */
static int64_t srv_splits_by_keys(int64_t max_k, int bn)
{
    const int64_t min_chunk = 4 * bn > 256 ? 4 * bn : 256;
    const int64_t s = ceil_div(max_k, min_chunk);
    return s < 1 ? 1 : (s > 128 ? 128 : s);
}

int srv_plan_splits(int policy, int64_t base, int64_t max_k, int bn, int64_t slots, int *chunk)
{
    int64_t s = 1;
    if (policy >= 2) {
        s = policy;
    } else if (policy == 0 && base > 0 && slots > 0 && base < slots) {
        /* Too few blocks to fill the GPU: split the keys. At most two waves of split blocks (that bounds
         * the workspace, srv_ws_bound), the count whose last wave is fullest, the smallest among those
         * within 5% of the best (FlashAttention-2's rule, at 95% as the merge is cheap here). */
        int64_t smax = srv_splits_by_keys(max_k, bn);
        if (smax > 2 * slots / base) smax = 2 * slots / base;
        double best = 0;
        for (int64_t n = 1; n <= smax; n++) {
            const double waves = (double)(base * n) / (double)slots, eff = waves / ceil(waves);
            if (eff > best) best = eff;
        }
        for (int64_t n = 1; n <= smax; n++) {
            const double waves = (double)(base * n) / (double)slots, eff = waves / ceil(waves);
            if (eff >= 0.95 * best) {
                s = n;
                break;
            }
        }
    }
    int64_t c = s > 1 ? ceil_div(ceil_div(max_k, s), bn) * bn : ceil_div(max_k > 0 ? max_k : 1, bn) * bn;
    if (c < bn) c = bn;
    s = ceil_div(max_k > 0 ? max_k : 1, c); /* a chunk of a multiple of bn keys may leave the last ones empty */
    *chunk = (int)c;
    return (int)s;
}

static int64_t ws_ld(int64_t d) { return (d + 3) & ~(int64_t)3; }

size_t srv_ws_bytes(int64_t entries, int64_t d)
{
    if (entries <= 0) return 0;
    const size_t o_bytes = ((size_t)entries * (size_t)ws_ld(d) * 4 + 255) & ~(size_t)255;
    return 256 + o_bytes + (size_t)entries * 4;
}

int64_t srv_ws_entries(size_t bytes, int64_t d)
{
    if (bytes <= 256) return 0;
    int64_t e = (int64_t)((bytes - 256) / ((size_t)(ws_ld(d) + 1) * 4)); /* at least as many as fit */
    while (e > 0 && srv_ws_bytes(e, d) > bytes) e--;
    return e;
}

size_t srv_ws_bound(const fw_problem *p, int bm, int bn, int64_t slots2)
{
    const int64_t rows = p->batch * p->heads * p->seqlen_q; /* partial rows a split */
    if (p->seqlen_k <= bn || rows <= 0) return 0;               /* one chunk: nothing to split */
    const int64_t by_keys = srv_splits_by_keys(p->seqlen_k, bn);
    int64_t e_auto = by_keys >= 2 ? by_keys * rows : 0;
    if (e_auto > slots2 * bm) e_auto = slots2 * bm;
    return srv_ws_bytes(e_auto, p->head_dim);
}

/* ---- kernel arguments --------------------------------------------------------------------- */

void srv_key_stride_bytes(const fw_problem *p, int64_t *k_row, int64_t *v_row, int64_t *k_page, int64_t *v_page)
{
    const int paged = p->kind == FW_CALL_KVCACHE && p->block_table != NULL;
    const int64_t es = (int64_t)fw_dtype_size(p->dtype);
    /* keys a sequence (or a page) holds: a stride between them matters only where there are two */
    const int64_t rows = paged ? p->page_size : p->kind == FW_CALL_VARLEN ? p->total_k
                                                : p->kind == FW_CALL_KVCACHE ? p->capacity : p->seqlen_k;
    *k_row = rows > 1 ? p->k_stride[2] * es : 0;
    *v_row = rows > 1 ? p->v_stride[2] * es : 0;
    *k_page = paged && p->num_pages > 1 ? p->k_stride[0] * es : 0;
    *v_page = paged && p->num_pages > 1 ? p->v_stride[0] * es : 0;
}

int srv_key_strides_fit(const fw_problem *p, char *why, size_t len)
{
    int64_t s[4];
    srv_key_stride_bytes(p, &s[0], &s[1], &s[2], &s[3]);
    static const char *what[4] = {"k's key (seq) stride", "v's key (seq) stride", "k's page stride", "v's page stride"};
    for (int i = 0; i < 4; i++)
        if (s[i] > (int64_t)UINT32_MAX)
            return fw_why(why, len, "%s is %lld bytes; the serving kernels take strides between keys and between "
                          "pages below 2^32 bytes", what[i], (long long)s[i]);
    return 1;
}

static int clamp_window(int64_t w, int64_t limit) { return (int)(w > limit ? limit : w); }

void srv_fill_params(const fw_problem *p, fw_srv_params *a)
{
    memset(a, 0, sizeof *a);
    a->q = p->q;
    a->k = p->k;
    a->v = p->v;
    a->o = p->o;
    a->lse = p->lse;
    a->k_new = p->k_new;
    a->v_new = p->v_new;
    for (int i = 0; i < 3; i++) {
        a->q_s[i] = p->q_stride[i];
        a->o_s[i] = p->o_stride[i];
        a->k_s[i] = p->k_stride[i];
        a->v_s[i] = p->v_stride[i];
        a->kn_s[i] = p->kn_stride[i];
        a->vn_s[i] = p->vn_stride[i];
    }
    a->cu_q = p->cu_seqlens_q;
    a->cu_k = p->kind == FW_CALL_VARLEN ? p->cu_seqlens_k : NULL;
    a->cache_seqlens = p->kind == FW_CALL_KVCACHE ? p->cache_seqlens : NULL;
    a->paged = p->kind == FW_CALL_KVCACHE && p->block_table != NULL;
    a->block_table = a->paged ? p->block_table : NULL;
    a->bt_stride = p->block_table_stride > 0 ? p->block_table_stride : p->max_pages_per_seq;
    a->total_q = p->total_q;
    a->total_k = p->total_k;
    a->kind = (int)p->kind;
    a->B = (int)p->batch;
    a->H = (int)p->heads;
    a->H_kv = (int)p->kv_heads;
    a->group = (int)p->group;
    a->d = (int)p->head_dim;
    a->max_q = (int)p->seqlen_q;
    a->max_k = (int)p->seqlen_k;
    a->page_size = a->paged ? (int)p->page_size : 1;
    const fw_page_div pd = fw_page_div_make((uint32_t)a->page_size);
    a->page_mul = pd.mul;
    a->page_shr = pd.shr;
    a->num_pages = a->paged ? (int)p->num_pages : 0;
    int64_t kr, vr, kp, vp;
    srv_key_stride_bytes(p, &kr, &vr, &kp, &vp);
    a->k_row_bytes = (uint32_t)kr; /* cuda-flash checked that they fit (srv_key_strides_fit); f32 does not use them */
    a->v_row_bytes = (uint32_t)vr;
    a->k_page_bytes = (uint32_t)kp;
    a->v_page_bytes = (uint32_t)vp;
    a->capacity = (int)(p->kind == FW_CALL_KVCACHE ? p->capacity : p->seqlen_k);
    const int64_t lim = p->seqlen_q + p->seqlen_k + 1;
    a->wl = clamp_window(p->window_left, lim);
    a->wr = clamp_window(p->window_right, lim);
    a->has_window = p->has_window;
    a->scale = p->scale;
    a->scale_log2 = p->scale * 1.4426950408889634f;
    a->splits = 1;
    a->chunk = 1;
}

/* ---- the launch sequence ------------------------------------------------------------------ */

fw_status srv_run(const fw_problem *p, const fw_exec *ex, fw_srv_params *a, const srv_choice *c, int bn,
                  int64_t slots, size_t smem, const srv_kernels *k)
{
    const cudaStream_t stream = (cudaStream_t)ex->stream;
    const int64_t base = (int64_t)a->B * a->H_kv * a->m_blocks;
    int chunk = 0;
    int splits = srv_plan_splits(c->split, base, a->max_k, bn, slots, &chunk);
    const int64_t rows = (int64_t)a->B * a->H * a->max_q; /* partial rows a split */
    void *ws = NULL;
    size_t ws_bytes = 0;
    if (splits > 1) {
        /* fewer splits rather than more memory than the caller's workspace (or the pool's limit) holds */
        const int64_t fit = srv_ws_entries(p->workspace ? p->workspace_bytes : SRV_POOL_LIMIT, a->d) / (rows > 0 ? rows : 1);
        if (fit < splits) splits = srv_plan_splits(fit >= 2 ? (int)fit : 1, base, a->max_k, bn, slots, &chunk);
        ws = p->workspace;
    }
    if ((int64_t)a->m_blocks * splits > 0x7fffffff) {
        fw_why(ex->err, ex->err_len, "%s: %d row blocks x %d splits exceed the grid's 2^31 - 1 blocks", k->name,
               a->m_blocks, splits);
        return FW_ERR_UNSUPPORTED;
    }
    if (splits > 1 && !ws) {
        ws_bytes = srv_ws_bytes(splits * rows, a->d);
        FW_CUDA_CHECK(fw_cuda_ws_alloc(&ws, ws_bytes, stream));
    }
    a->splits = splits;
    a->chunk = chunk;
    if (splits > 1) {
        const uintptr_t at = ((uintptr_t)ws + 255) & ~(uintptr_t)255;
        a->part_o = (float *)at;
        a->part_lse = (float *)(at + (((size_t)(splits * rows) * (size_t)((a->d + 3) & ~3) * 4 + 255) & ~(size_t)255));
    }
    cudaError_t e = cudaSuccess;
    const char *what = "append";
    if (a->k_new) e = k->append(a, stream);
    if (e == cudaSuccess) {
        what = "attention";
        e = k->attend(a, smem, stream);
    }
    if (e == cudaSuccess && splits > 1) {
        fw_cuda_device_info di;
        a->merge_pdl = fw_cuda_device_facts(p->device.index, &di) && di.cc_major >= 9;
        what = "merge";
        e = k->merge(a, stream);
    }
    if (ws_bytes) {
        const cudaError_t f = fw_cuda_ws_free(ws, ws_bytes, stream);
        if (e == cudaSuccess) {
            e = f;
            what = "workspace free";
        }
    }
    if (e != cudaSuccess) {
        fw_why(ex->err, ex->err_len, "%s: %s kernel launch failed: %s", k->name, what, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? FW_ERR_OUT_OF_MEMORY : FW_ERR_DEVICE;
    }
    return FW_OK;
}
