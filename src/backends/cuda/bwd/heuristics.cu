/* The CUDA backward's heuristics (heuristics.h): every choice among store and recompute, the dQ modes and the
 * generated records is made here. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "backends/cuda/bwd/heuristics.h"
#include "backends/cuda/bwd/materialize.h"

/* The defaults per padded head dim, measured with gpu_backward --bench on an H100 (docs/PERF.md).
 * Atomic mode: at head_dim 128 the 2-D tiled dK/dV kernel, 10-17% faster than bm64-w8-dq-w4-mt2-bn32; at 64 it lost
 * to bm64-w4-qs32-dq-w4-mt2-bn32 below L = 16k. On compute capability 9.0 (atomic_sm90): the producer-warpgroup
 * kernel with dQ fused in, 64 query rows a step at head_dim 128 and 128 at 64 (fused_dq_default).
 * Deterministic mode on compute capability 9.0: the wgmma kernels with the overlapped dK/dV schedule. At head_dim
 * 64 dK/dV and dQ both with a TMA producer warpgroup (8-12% faster than wg-bm64-ovl-dq-wg-bn128); at 128 the dQ
 * pass with the producer warpgroup (3-5% faster than wg-bm64-ovl-dq-wg-bn64; its dK/dV kernel would spill with the
 * producer's register split). At head_dim 64 and seqlen_k <= 1024 (det_short) the 128-row dK/dV steps with
 * cp.async were 5% faster than the producer warpgroup's in two runs, at 2048 even.
 * The fallbacks run where a default is a wgmma record and the device is not compute capability 9.0.
 * Ragged batches, deterministic mode on 9.0 (varlen_det): the dense defaults' kernels in their ragged form (the TMA
 * boxes start at each sequence's rows; the rows they bring of the next sequence are zeroed in shared memory), 1.22x
 * (D=64) and 1.08x (D=128) the overlapped cp.async records on bench/varlen_bwd's batch on an H200; the atomic
 * records and the fallbacks are the dense ones (all have ragged kernels), the fused dQ too (fused_dq_default).
 * f32 in tf32 and 3xtf32 (tf32, varlen_tf32; bench/sdpa_bwd.py --f32 on an H100): at head_dim 64 the 64-row steps
 * with a dQ pass of two m16 tiles a warp, 1.06-1.08x the other records at L = 1024; at 128 the 16-row steps, 1.23x
 * the 32-row ones. */
static const struct bwd_defaults {
    int d;
    const char *atomic, *deterministic, *det_short, *atomic_fallback, *det_fallback, *varlen_det;
    const char *atomic_sm90; /* the atomic mode on sm_90a (NULL: atomic) */
    const char *tf32, *varlen_tf32; /* f32 in the tf32 and 3xtf32 forms (deterministic mode) */
    const char *fit[2]; /* 16-bit, where the mode's record needs more shared memory than the device has: the first of
                           these that fits (the 2-D kernel at head_dim 128 takes 173 KB; an A100 has 163) */
} bwd_defaults[] = {
    {64, "bm64-w4-qs32-dq-w4-mt2-bn32", "ws-bm64-dq-ws-bn128", "wg-bm128-dq-wg-bn128", "bm64-w4-qs32-dq-w4-mt2-bn32",
     "bm64-w4-qs32-dq-w4-mt2-bn32", "ws-bm64-dq-ws-bn128", "ws-bm128-dq-ws-bn128", "tf32-bm64-w4-dq-mt2-bn32",
     "tf32-bm64-w4-dq-mt2-bn32", {NULL, NULL}},
    {128, "bm64-w8-2d-dq-w4-mt2-bn32", "wg-bm64-ovl-dq-ws-bn64", NULL, "bm64-w8-2d-dq-w4-mt2-bn32",
     "bm32-w4-dq-w4-mt2-bn32", "wg-bm64-ovl-dq-ws-bn64", "ws-bm64-dq-ws-bn64", "tf32-bm16-w4-dq-mt1-bn16",
     "tf32-bm16-w4-dq-mt1-bn16", {"bm64-w8-dq-w4-mt2-bn32", "bm32-w4-dq-w4-mt2-bn32"}},
};
#define BWD_DET_SHORT_LK 1024

#define BWD_ATOMIC_PREFIX "bwd-atomic"
#define BWD_DETERMINISTIC_PREFIX "bwd-deterministic"

extern "C" int fw_bwd_padded_dim(int64_t d) { return d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0; }

extern "C" const fw_bwd_record *fw_bwd_records_of(int dpad, int *n)
{
    int first = -1, count = 0;
    for (int i = 0; i < fw_bwd_nrecords; i++)
        if (fw_bwd_records[i].d == dpad) {
            if (first < 0) first = i;
            count++;
        }
    *n = count;
    return first < 0 ? NULL : &fw_bwd_records[first];
}

extern "C" const fw_bwd_record *fw_bwd_record_named(int dpad, const char *name)
{
    int n = 0;
    const fw_bwd_record *rs = fw_bwd_records_of(dpad, &n);
    for (int i = 0; name && i < n; i++)
        if (!strcmp(rs[i].name, name)) return &rs[i];
    return NULL;
}

extern "C" int fw_bwd_fuses_dq(const fw_bwd_record *r) { return r->fuse_dq; }

/* Every row of the tensor 16-byte aligned: strides multiples of per16 elements. */
static int rows16(const int64_t *s, int64_t nb, int64_t nh, int64_t ns, int per16 = 8)
{
    return fw_cuda_unaligned_stride(s, nb, nh, ns, per16) < 0;
}

/* The tensors of p 16-byte aligned with every row 16-byte aligned (per16 elements a 16-byte chunk). */
static int aligned_rows(const fw_problem *p, int per16)
{
    const void *ptrs[7] = {p->q, p->k, p->v, p->dout, p->dq, p->dk, p->dv};
    for (int i = 0; i < 7; i++)
        if (!fw_cuda_aligned16(ptrs[i])) return 0;
    const int64_t H = p->heads, Hk = p->kv_heads;
    int64_t B, Lq, Lk;
    fw_bwd_extents(p, &B, &Lq, &Lk);
    return rows16(p->q_stride, B, H, Lq, per16) && rows16(p->do_stride, B, H, Lq, per16) &&
           rows16(p->dq_stride, B, H, Lq, per16) && rows16(p->k_stride, B, Hk, Lk, per16) &&
           rows16(p->v_stride, B, Hk, Lk, per16) && rows16(p->dk_stride, B, Hk, Lk, per16) &&
           rows16(p->dv_stride, B, Hk, Lk, per16);
}

extern "C" int fw_bwd_tensor_cores_take(const fw_problem *p, const fw_knobs *k, char *why, size_t why_len)
{
    if (p->dtype != FW_F16 && p->dtype != FW_BF16) return fw_why(why, why_len, "the tensor-core backward takes f16 or bf16");
    if (p->head_dim % 8 != 0 || p->head_dim > 128)
        return fw_why(why, why_len, "the tensor-core backward takes head_dim a multiple of 8 up to 128");
    if (p->seqlen_q >= (1 << 28) || p->seqlen_k >= (1 << 28)) /* int window sums stay in range */
        return fw_why(why, why_len, "the tensor-core backward takes sequences below 2^28");
    if (!k->cuda_bwd_tensor_cores) return fw_why(why, why_len, "FW_CUDA_BWD_TC=0 asks for the CUDA-core backward");
    if (!aligned_rows(p, 8))
        return fw_why(why, why_len, "the tensor-core backward needs 16-byte aligned tensors and rows (strides multiples of 8 elements)");
    return 1;
}

extern "C" int fw_bwd_tf32_take(const fw_problem *p, const fw_knobs *k, char *why, size_t why_len)
{
    if (p->dtype != FW_F32) return fw_why(why, why_len, "the tf32 backward takes f32");
    if (p->precision != FW_PRECISION_TF32 && p->precision != FW_PRECISION_3XTF32)
        return fw_why(why, why_len, "the tf32 backward runs precision tf32 or 3xtf32 (fw_context_set_precision), not exact");
    if (p->head_dim % 4 != 0 || p->head_dim > 128)
        return fw_why(why, why_len, "the tf32 backward takes head_dim a multiple of 4 up to 128");
    if (p->seqlen_q >= (1 << 28) || p->seqlen_k >= (1 << 28)) /* int window sums stay in range */
        return fw_why(why, why_len, "the tf32 backward takes sequences below 2^28");
    if (!k->cuda_bwd_tensor_cores) return fw_why(why, why_len, "FW_CUDA_BWD_TC=0 asks for the CUDA-core backward");
    if (!aligned_rows(p, 4))
        return fw_why(why, why_len, "the tf32 backward needs 16-byte aligned tensors and rows (strides multiples of 4 elements)");
    return 1;
}

/* Can p run on record r's kind of kernels at all (dtype, precision, alignment), else 0 with the reason. */
static int kernels_take(const fw_bwd_record *r, const fw_problem *p, const fw_knobs *k, char *why, size_t why_len)
{
    if (r->kernel == FW_BWD_CORES) return 1;
    if (r->kernel == FW_BWD_TF32) return fw_bwd_tf32_take(p, k, why, why_len);
    return fw_bwd_tensor_cores_take(p, k, why, why_len);
}

extern "C" int fw_bwd_materialize_wanted(const fw_problem *p, const fw_config *cfg)
{
    if (p->kind != FW_CALL_DENSE) return 0; /* whole (batch, head) slices: dense calls only */
    if (cfg && !strcmp(cfg->name, "bwd-materialize")) return 1;
    if (cfg && !strncmp(cfg->name, "bwd-", 4)) return 0; /* a recompute configuration */
    if (p->memory_budget == 0) return 0;
    /* Where it was measured faster (H100): only against the deterministic f32 CUDA-core recompute at head_dim > 64
     * (1.6-1.7x at L 256..2048). The tensor-core recompute (f16/bf16) was 2.7-4.7x faster than storing, and so was
     * every atomic recompute. */
    if (!p->deterministic || p->dtype != FW_F32 || p->head_dim <= 64) return 0;
    if (p->seqlen_q * p->seqlen_k > FW_BWD_MATERIALIZE_MAX_PAIRS) return 0; /* both < 2^30: no overflow */
    fw_bwd_mat_plan pl;
    return fw_bwd_materialize_plan(p, &pl);
}

static size_t record_smem(const fw_bwd_record *r, int atomic) { return atomic ? r->smem_atomic : r->smem_deterministic; }

/* Has the record kernels for p's element type and call (dense, or ragged: kernels.tsv's varlen option); f16 and bf16
 * come together. */
static int record_takes(const fw_bwd_record *r, const fw_problem *p)
{
    const int f32 = p->dtype == FW_F32;
    if (p->kind == FW_CALL_DENSE) return (f32 ? r->f32 : r->bf16) != NULL;
    return (f32 ? r->varlen_f32 : r->varlen_bf16) != NULL;
}

/* Does the record run on the device in the mode: its machine code runs there and its shared memory fits. */
static int record_runs(const fw_bwd_record *r, int atomic, const fw_cuda_device_info *di)
{
    if (r->arch == 90 && !fw_cuda_is_sm90a(di)) return 0;
    return record_smem(r, atomic) <= (size_t)di->smem_optin;
}

/* Has the record a kernel for the dQ mode: a tf32 record the deterministic one only, a fuse record (dQ added up in its
 * dK/dV kernel) the atomic one only. */
static int mode_takes(const fw_bwd_record *r, int atomic)
{
    return atomic ? r->kernel != FW_BWD_TF32 : !fw_bwd_fuses_dq(r);
}

/* The tensor-core record the heuristics choose for p in the mode (the knobs' FW_CUDA_BWD_CONFIG first, where it
 * names a record of the head dim with p's kernels), or NULL where the tensor-core kernels do not apply or do not
 * fit: then the CUDA-core record runs. f32 runs a tf32 record in the deterministic mode only. */
static const fw_bwd_record *tc_pick(const fw_problem *p, int atomic, const fw_cuda_device_info *di, const fw_knobs *k)
{
    const int f32 = p->dtype == FW_F32, varlen = p->kind == FW_CALL_VARLEN;
    if (f32 ? atomic || !fw_bwd_tf32_take(p, k, NULL, 0) : !fw_bwd_tensor_cores_take(p, k, NULL, 0)) return NULL;
    const int dpad = fw_bwd_padded_dim(p->head_dim);
    const struct bwd_defaults *df = dpad == 64 ? &bwd_defaults[0] : &bwd_defaults[1];
    const char *name = f32                            ? (varlen ? df->varlen_tf32 : df->tf32)
                       : atomic && df->atomic_sm90 && fw_cuda_is_sm90a(di) ? df->atomic_sm90
                       : atomic                       ? df->atomic
                       : varlen                       ? df->varlen_det
                       : df->det_short && p->seqlen_k <= BWD_DET_SHORT_LK ? df->det_short
                                                      : df->deterministic;
    const fw_bwd_record *r = fw_bwd_record_named(dpad, name);
    const fw_bwd_record *chosen = k->cuda_bwd_config[0] ? fw_bwd_record_named(dpad, k->cuda_bwd_config) : NULL;
    const int forced = chosen && record_takes(chosen, p) && mode_takes(chosen, atomic);
    if (forced) r = chosen;
    if (r && r->arch == 90 && !fw_cuda_is_sm90a(di)) /* the wgmma kernels: sm_90a machine code */
        r = fw_bwd_record_named(dpad, atomic ? df->atomic_fallback : df->det_fallback);
    auto fits = [&](const fw_bwd_record *x) { return x && record_takes(x, p) && record_smem(x, atomic) <= (size_t)di->smem_optin; };
    for (int i = 0; i < 2 && !forced && !fits(r); i++)
        if (df->fit[i]) r = fw_bwd_record_named(dpad, df->fit[i]);
    return fits(r) ? r : NULL;
}

/* The CUDA-core record that runs p where no tensor-core record does: the knobs' FW_CUDA_BWD_CONFIG where it names one
 * that fits, else the first of the head dim's (kernels.tsv: "cores", then smaller tiles) whose shared memory the device
 * has; NULL if none fits, with the least shared memory any of them needs in *least. */
static const fw_bwd_record *cores_pick(int dpad, const fw_problem *p, const fw_cuda_device_info *di, const fw_knobs *k,
                                       size_t *least)
{
    const fw_bwd_record *forced = k->cuda_bwd_config[0] ? fw_bwd_record_named(dpad, k->cuda_bwd_config) : NULL;
    if (forced && forced->kernel == FW_BWD_CORES && record_takes(forced, p) && record_runs(forced, 0, di)) return forced;
    int n = 0;
    const fw_bwd_record *rs = fw_bwd_records_of(dpad, &n);
    *least = SIZE_MAX;
    for (int i = 0; i < n; i++) {
        if (rs[i].kernel != FW_BWD_CORES || !record_takes(&rs[i], p)) continue;
        if (record_runs(&rs[i], 0, di)) return &rs[i];
        if (rs[i].smem_deterministic < *least) *least = rs[i].smem_deterministic;
    }
    return NULL;
}

/* dQ by atomics (as FlashAttention-2) or by the deterministic separate pass: the config name decides where it names
 * a mode, then the problem's deterministic flag, then the knobs' FW_CUDA_BWD_DQ; -1 where none of them does. */
static int atomic_mode(const fw_problem *p, const char *cfg_mode, const fw_knobs *k)
{
    if (cfg_mode) return !strcmp(cfg_mode, BWD_ATOMIC_PREFIX);
    if (p->deterministic) return 0;
    return k->cuda_bwd_atomic;
}

/* Where no mode is asked for: where the atomic mode's record ra fuses dQ into its dK/dV kernel (launch.cuh: fused_dq;
 * only wgmma records for 16-bit inputs on sm_90a do) and no other record is forced: ra. On an H200 (fwd+bwd, causal,
 * 16k tokens) 1.01-1.14x the deterministic pipeline at 256-1024 keys (`flashwatt bench --backward`), 1.04-1.29x at
 * 1024-16384 keys, causal and not, and 1.11x at the GQA shape (bench/sdpa_bwd.py); on bench/varlen_bwd's ragged batch
 * (16 sequences of 128..4096) 1.15-1.21x (docs/PERF.md, "Ragged backward"). */
static int fused_dq_default(const fw_bwd_record *ra, const fw_knobs *k)
{
    return ra && fw_bwd_fuses_dq(ra) && (!k->cuda_bwd_config[0] || !strcmp(ra->name, k->cuda_bwd_config));
}

/* Splits "bwd-<mode>[:<record>]" into its mode and record (NULL: none); 0 if the name is no such name. */
static int parse_config(const char *name, char *mode, size_t mode_len, const char **record)
{
    const char *colon = strchr(name, ':');
    const size_t n = colon ? (size_t)(colon - name) : strlen(name);
    if (n >= mode_len) return 0;
    memcpy(mode, name, n);
    mode[n] = 0;
    *record = colon ? colon + 1 : NULL;
    return !strcmp(mode, BWD_ATOMIC_PREFIX) || !strcmp(mode, BWD_DETERMINISTIC_PREFIX);
}

extern "C" fw_status fw_bwd_recompute_plan(const fw_problem *p, const fw_config *cfg, const fw_cuda_device_info *di,
                                           const fw_knobs *k, fw_bwd_plan *plan, char *why, size_t why_len)
{
    memset(plan, 0, sizeof *plan);
    const int dpad = fw_bwd_padded_dim(p->head_dim);
    const fw_bwd_record *cores = fw_bwd_record_named(dpad, "cores");
    if (!cores) {
        fw_why(why, why_len, "the CUDA backward has no kernels for head_dim %lld", (long long)p->head_dim);
        return FW_ERR_UNSUPPORTED;
    }
    char mode[24];
    const char *record = NULL;
    const int named = cfg && !strncmp(cfg->name, "bwd-", 4);
    if (named && p->kind != FW_CALL_DENSE && !strcmp(cfg->name, "bwd-materialize")) {
        fw_why(why, why_len, "the CUDA backward's store strategy (bwd-materialize) takes dense calls, not a ragged batch");
        return FW_ERR_INVALID_VALUE;
    }
    if (named && !parse_config(cfg->name, mode, sizeof mode, &record)) {
        fw_why(why, why_len, "the CUDA backward has no configuration \"%s\" (bwd-materialize, bwd-atomic[:RECORD], "
               "bwd-deterministic[:RECORD]; configs() lists them)", cfg->name);
        return FW_ERR_INVALID_VALUE;
    }
    if (record) { /* exactly the record named */
        const fw_bwd_record *r = fw_bwd_record_named(dpad, record);
        plan->atomic = atomic_mode(p, mode, k);
        char reason[160] = "";
        int ok = r != NULL;
        if (!ok)
            snprintf(reason, sizeof reason, "no record of that name for head_dim %lld", (long long)p->head_dim);
        else if (!record_takes(r, p)) {
            ok = 0;
            snprintf(reason, sizeof reason, "the record has no %s%s kernels%s", p->kind == FW_CALL_DENSE ? "" : "ragged ",
                     p->dtype == FW_F32 ? "f32" : "f16/bf16", p->kind == FW_CALL_DENSE ? "" : " (kernels.tsv: varlen)");
        } else if (!mode_takes(r, plan->atomic)) {
            ok = 0;
            snprintf(reason, sizeof reason, "%s",
                     r->kernel == FW_BWD_TF32
                         ? "the tf32 records run the deterministic mode only"
                         : "the record fuses dQ into its dK/dV kernel by atomics: the atomic mode only");
        } else
            ok = kernels_take(r, p, k, reason, sizeof reason);
        if (ok && !record_runs(r, plan->atomic, di)) {
            ok = 0;
            snprintf(reason, sizeof reason, "it needs %s and %zu bytes of shared memory per block; cuda:%d is %d.%d with %d",
                     r->arch == 90 ? "compute capability 9.0" : "compute capability 8.0 or newer",
                     record_smem(r, plan->atomic), p->device.index, di->cc_major, di->cc_minor, di->smem_optin);
        }
        if (!ok) {
            fw_why(why, why_len, "the CUDA backward cannot run \"%s\": %s", cfg->name, reason);
            return FW_ERR_INVALID_VALUE;
        }
        plan->record = r;
        return FW_OK;
    }
    int atomic = atomic_mode(p, named ? mode : NULL, k);
    const fw_bwd_record *r;
    if (atomic < 0) {
        /* On Hopper the deterministic pipeline of wgmma kernels (dK/dV, then dQ) beat the atomic one at every
         * FA-grid shape (H100, docs/PERF.md) but where dQ is fused in (fused_dq_default); elsewhere atomics, as
         * FlashAttention-2. The tf32 records (f32 in the tf32 and 3xtf32 forms) are deterministic. */
        r = tc_pick(p, 0, di, k);
        const fw_bwd_record *ra = tc_pick(p, 1, di, k);
        atomic = !(r && (r->kernel == FW_BWD_WG || r->kernel == FW_BWD_WS || r->kernel == FW_BWD_TF32)) ||
                 fused_dq_default(ra, k);
        if (atomic) r = ra;
    } else {
        r = tc_pick(p, atomic, di, k);
    }
    size_t least = 0;
    if (!r) r = cores_pick(dpad, p, di, k, &least);
    if (!r) {
        fw_why(why, why_len, "the CUDA backward for head_dim %lld needs %zu bytes of shared memory per block; cuda:%d allows %d",
               (long long)p->head_dim, least, p->device.index, di->smem_optin);
        return FW_ERR_UNSUPPORTED;
    }
    plan->atomic = atomic;
    plan->record = r;
    return FW_OK;
}

/* The configuration that names a plan. */
static void plan_config(const fw_bwd_plan *plan, fw_config *c)
{
    memset(c, 0, sizeof *c);
    if (plan->materialize) {
        snprintf(c->name, sizeof c->name, "bwd-materialize");
        return;
    }
    const fw_bwd_record *r = plan->record;
    snprintf(c->name, sizeof c->name, "%s:%s", plan->atomic ? BWD_ATOMIC_PREFIX : BWD_DETERMINISTIC_PREFIX, r->name);
    c->block_m = r->bm;
    c->block_n = r->bn;
    c->warps = r->warps;
    c->stages = r->stages;
}

/* In the atomic mode the ws and overlapped wg records run their bm's plain wg kernel (the fuse records their own, with
 * dQ fused in), and the dQ kernel never runs: the first record with each atomic dK/dV kernel stands for the others. */
static int same_atomic_kernel(const fw_bwd_record *a, const fw_bwd_record *b)
{
    if (fw_bwd_fuses_dq(a) || fw_bwd_fuses_dq(b)) return fw_bwd_fuses_dq(a) && fw_bwd_fuses_dq(b);
    const int wa = a->kernel == FW_BWD_WG || a->kernel == FW_BWD_WS, wb = b->kernel == FW_BWD_WG || b->kernel == FW_BWD_WS;
    if (wa || wb) return wa && wb && a->bm == b->bm;
    return a->kernel == b->kernel && a->bm == b->bm && a->warps == b->warps && a->sub_m == b->sub_m;
}

extern "C" int fw_bwd_configs(const fw_problem *p, fw_config *out, int max)
{
    if (max < 1) return 0;
    fw_cuda_device_info di;
    const fw_knobs *k = fw_problem_knobs(p);
    fw_bwd_plan def;
    memset(&def, 0, sizeof def);
    def.materialize = fw_bwd_materialize_wanted(p, NULL);
    if (!fw_cuda_device_facts(p->device.index, &di) ||
        (!def.materialize && fw_bwd_recompute_plan(p, NULL, &di, k, &def, NULL, 0) != FW_OK)) {
        memset(out, 0, sizeof *out);
        return 1;
    }
    int count = 0;
    plan_config(&def, &out[count++]);
    int n = 0;
    const fw_bwd_record *rs = fw_bwd_records_of(fw_bwd_padded_dim(p->head_dim), &n);
    const int first_atomic = def.materialize ? 0 : def.atomic;
    for (int m = 0; m < 2; m++) {
        const int atomic = m == 0 ? first_atomic : !first_atomic;
        if (atomic && p->deterministic) continue;
        const fw_bwd_record *listed[FW_MAX_CONFIGS]; /* this mode's, the default's included */
        int nlisted = 0;
        if (!def.materialize && def.atomic == atomic) listed[nlisted++] = def.record;
        for (int i = 0; i < n && count < max; i++) {
            const fw_bwd_record *r = &rs[i];
            if (!record_takes(r, p) || !kernels_take(r, p, k, NULL, 0) || !mode_takes(r, atomic) ||
                !record_runs(r, atomic, &di))
                continue;
            int dup = 0;
            for (int j = 0; j < nlisted && !dup; j++) dup = listed[j] == r || (atomic && same_atomic_kernel(listed[j], r));
            if (dup || nlisted == FW_MAX_CONFIGS) continue;
            listed[nlisted++] = r;
            fw_bwd_plan pl = {0, atomic, r};
            plan_config(&pl, &out[count++]);
        }
    }
    fw_bwd_mat_plan mp;
    if (!def.materialize && count < max && p->kind == FW_CALL_DENSE && p->seqlen_q * p->seqlen_k <= FW_BWD_MATERIALIZE_MAX_PAIRS &&
        fw_bwd_materialize_plan(p, &mp)) { /* the store strategy is for short sequences (materialize.h) */
        fw_bwd_plan pl = {1, 0, NULL};
        plan_config(&pl, &out[count++]);
    }
    return count;
}
