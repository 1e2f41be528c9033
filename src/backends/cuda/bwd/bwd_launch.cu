/* The CUDA backward's entry point, fw_cuda_backward: checks, workspace, the Δ preprocess, the
 * per-bucket dK/dV (+ dQ) kernels of bwd_kernel.cuh, and the dQ conversion of the atomic mode.
 * The f16/bf16 (cuda-flash) and f32 (cuda-flash-f32) backend tables point their `backward` slot here.
 *
 * f16/bf16 with head_dim <= 128 (a multiple of 8, rows 16-byte aligned) run on tensor cores
 * (bwd_tc.cuh); everything else on the CUDA-core kernels (bwd_kernel.cuh).
 *
 * dQ mode: atomic (default, as FlashAttention-2: atomicAdd into an f32 workspace during the dK/dV pass,
 * then a conversion) or deterministic (a separate dQ pass, no atomics: fw_context_set_deterministic).
 * The config names "bwd-atomic" / "bwd-deterministic" (tests, benchmarks) and the environment variable
 * FW_CUDA_BWD_DQ=deterministic also choose it.
 *
 * Recompute vs store: the kernels here recompute P (O(L) memory). The dispatch hook at the top of
 * fw_cuda_backward hands the call to the materialised backward (bwd_materialize.cu: S/P and dP/dS of
 * whole (batch, head) slices in device memory, cuBLAS GEMMs) when the config name is "bwd-materialize",
 * or when the context's memory budget (fw_context_set_memory_budget) is > 0, seqlen_q·seqlen_k <=
 * FW_BWD_MATERIALIZE_MAX_PAIRS and the workspace of one (batch, head) slice (plus the O(L·D)
 * accumulators) fits the budget; bwd_materialize.h has the details. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cuda/bwd/bwd_kernel.cuh"
#include "backends/cuda/bwd/bwd_tc.cuh"
#include "backends/cuda/bwd/bwd_materialize.h"
#include "backends/cuda/common/workspace.h"

extern "C" fw_status fw_cuda_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);
/* 1 if fw_cuda_backward can run p; else 0 with the reason. */
extern "C" int fw_cuda_backward_supports(const fw_problem *p, char *why, size_t why_len);

#define FW_BWD_MAX_BLOCKS (1u << 20)

/* Atomic mode: the f32 dQ accumulator (B, H, Lq, D) into dq (output dtype and strides). */
template <typename T>
__global__ void __launch_bounds__(256) fw_bwd_dq_convert_kernel(const fw_bwd_args a)
{
    const long long n = (long long)a.B * a.H * a.Lq * a.D;
    T *dq = (T *)a.dq;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long d = idx % a.D, row = idx / a.D;
        const long long i = row % a.Lq, bh = row / a.Lq;
        const long long h = bh % a.H, b = bh / a.H;
        fw_bwd_io<T>::st(dq + b * a.dq_s[0] + h * a.dq_s[1] + i * a.dq_s[2] + d, a.dq_acc[idx]);
    }
}

static unsigned fw_bwd_blocks(long long work, long long per_block)
{
    long long n = (work + per_block - 1) / per_block;
    if (n < 1) n = 1;
    if (n > (long long)FW_BWD_MAX_BLOCKS) n = FW_BWD_MAX_BLOCKS;
    return (unsigned)n;
}

static int fw_bwd_bucket(int64_t D) { return D <= 64 ? 64 : D <= 128 ? 128 : 256; }

static size_t fw_bwd_smem_bytes(int bucket)
{
    return bucket == 64 ? fw_bwd_smem_d64() : bucket == 128 ? fw_bwd_smem_d128() : fw_bwd_smem_d256();
}

extern "C" int fw_cuda_backward_supports(const fw_problem *p, char *why, size_t why_len)
{
    if (p->device.kind != FW_DEVICE_CUDA) return fw_why(why, why_len, "tensors are not on a CUDA device");
    if (p->dtype != FW_F32 && p->dtype != FW_F16 && p->dtype != FW_BF16)
        return fw_why(why, why_len, "the CUDA backward takes f32, f16 or bf16, not dtype %d", (int)p->dtype);
    if (p->head_dim < 1 || p->head_dim > 256)
        return fw_why(why, why_len, "the CUDA backward takes head_dim 1..256, not %lld", (long long)p->head_dim);
    if (p->seqlen_q >= (1LL << 30) || p->seqlen_k >= (1LL << 30))
        return fw_why(why, why_len, "the CUDA backward takes sequence lengths below 2^30");
    if (p->batch > 65535 || p->heads > 65535 || p->kv_heads > 65535)
        return fw_why(why, why_len, "the CUDA backward's grid limit: batch and heads must be <= 65535");
    if (!p->lse || !p->dout || !p->dq || !p->dk || !p->dv || !p->o)
        return fw_why(why, why_len, "the CUDA backward needs o, lse, dout, dq, dk and dv");
    return 1;
}

/* dQ by atomics (as FlashAttention-2) or by the deterministic separate pass: the config name decides
 * where it names a mode, then the problem's deterministic flag, then the knobs' FW_CUDA_BWD_DQ
 * (deterministic|atomic); -1 where none of them does. */
static int fw_bwd_atomic_mode(const fw_problem *p, const fw_config *cfg, const fw_knobs *k)
{
    if (cfg && !strcmp(cfg->name, "bwd-atomic")) return 1;
    if (cfg && !strcmp(cfg->name, "bwd-deterministic")) return 0;
    if (p->deterministic) return 0;
    return k->cuda_bwd_atomic; /* -1, no preference: fw_cuda_backward takes the faster */
}

static int fw_bwd_rows16(const int64_t *s, int64_t nb, int64_t nh, int64_t ns)
{
    return fw_cuda_unaligned_stride(s, nb, nh, ns, 8) < 0;
}

/* The tensor-core kernels' variant for p, or -1 where they do not apply (f32; head_dim above 128 or not
 * a multiple of 8; a row not 16-byte aligned; not enough shared memory): then the CUDA-core kernels
 * run. The knobs' FW_CUDA_BWD_TC=0 forces the CUDA-core kernels, FW_CUDA_BWD_TC_VARIANT=n picks a variant. */
static int fw_bwd_tc_pick(const fw_problem *p, int atomic, const fw_cuda_device_info *di, const fw_knobs *k)
{
    if (p->dtype != FW_F16 && p->dtype != FW_BF16) return -1;
    if (p->head_dim % 8 != 0 || p->head_dim > 128) return -1;
    if (p->seqlen_q >= (1 << 28) || p->seqlen_k >= (1 << 28)) return -1; /* int window sums stay in range */
    if (!k->cuda_bwd_tensor_cores) return -1;
    const void *ptrs[7] = {p->q, p->k, p->v, p->dout, p->dq, p->dk, p->dv};
    for (int i = 0; i < 7; i++)
        if (!fw_cuda_aligned16(ptrs[i])) return -1;
    const int64_t B = p->batch, H = p->heads, Hk = p->kv_heads, Lq = p->seqlen_q, Lk = p->seqlen_k;
    if (!fw_bwd_rows16(p->q_stride, B, H, Lq) || !fw_bwd_rows16(p->do_stride, B, H, Lq) ||
        !fw_bwd_rows16(p->dq_stride, B, H, Lq) || !fw_bwd_rows16(p->k_stride, B, Hk, Lk) ||
        !fw_bwd_rows16(p->v_stride, B, Hk, Lk) || !fw_bwd_rows16(p->dk_stride, B, Hk, Lk) ||
        !fw_bwd_rows16(p->dv_stride, B, Hk, Lk))
        return -1;
    const int d64 = p->head_dim <= 64;
    const int n = d64 ? fw_bwd_tc_nvariants_d64 : fw_bwd_tc_nvariants_d128;
    int v = atomic ? (d64 ? FW_BWD_TC_ATOM_DEFAULT_64 : FW_BWD_TC_ATOM_DEFAULT_128)
                   : (d64 ? (Lk <= FW_BWD_TC_DET_SHORT_LK_64 ? FW_BWD_TC_DET_SHORT_64 : FW_BWD_TC_DET_DEFAULT_64)
                          : FW_BWD_TC_DET_DEFAULT_128);
    if (k->cuda_bwd_variant >= 0) v = k->cuda_bwd_variant;
    if (v < 0 || v >= n) v = 0;
    const fw_bwd_tc_variant *vs = d64 ? fw_bwd_tc_variants_d64 : fw_bwd_tc_variants_d128;
    if (vs[v].qs < 0 && !fw_cuda_is_sm90a(di)) /* the wgmma kernels: sm_90a machine code */
        v = atomic ? (d64 ? FW_BWD_TC_ATOM_FALLBACK_64 : FW_BWD_TC_ATOM_FALLBACK_128)
                   : (d64 ? FW_BWD_TC_DET_FALLBACK_64 : FW_BWD_TC_DET_FALLBACK_128);
    const size_t smem = d64 ? fw_bwd_tc_smem_d64(v, atomic) : fw_bwd_tc_smem_d128(v, atomic);
    return smem <= (size_t)di->smem_optin ? v : -1;
}

/* The launches, with the workspace already allocated. */
static fw_status fw_bwd_run(const fw_problem *p, fw_bwd_args *a, int atomic, int tc, const fw_exec *ex)
{
    const cudaStream_t s = (cudaStream_t)ex->stream;
    const long long rows = (long long)p->batch * p->heads * p->seqlen_q;
    const int dt = p->dtype == FW_F32 ? FW_BWD_F32 : p->dtype == FW_F16 ? FW_BWD_F16 : FW_BWD_BF16;
    float *delta = (float *)a->delta, *lse2 = (float *)a->lse2;
    switch (dt) {
    case FW_BWD_F32: fw_bwd_launch_delta<float>(p, delta, lse2, s); break;
    case FW_BWD_F16: fw_bwd_launch_delta<__half>(p, delta, lse2, s); break;
    default: fw_bwd_launch_delta<__nv_bfloat16>(p, delta, lse2, s); break;
    }
    FW_CUDA_CHECK_LAUNCH();
    if (atomic) FW_CUDA_CHECK(cudaMemsetAsync(a->dq_acc, 0, (size_t)rows * (size_t)p->head_dim * sizeof(float), s));
    if (tc >= 0) {
        FW_CUDA_CHECK(p->head_dim <= 64 ? fw_bwd_tc_launch_d64(a, dt, atomic, tc, s)
                                        : fw_bwd_tc_launch_d128(a, dt, atomic, tc, s));
    } else switch (fw_bwd_bucket(p->head_dim)) {
    case 64: FW_CUDA_CHECK(fw_bwd_launch_d64(a, dt, atomic, s)); break;
    case 128: FW_CUDA_CHECK(fw_bwd_launch_d128(a, dt, atomic, s)); break;
    default: FW_CUDA_CHECK(fw_bwd_launch_d256(a, dt, atomic, s)); break;
    }
    FW_CUDA_CHECK_LAUNCH();
    if (atomic) {
        const unsigned cblocks = fw_bwd_blocks(rows * p->head_dim, 256);
        switch (dt) {
        case FW_BWD_F32: fw_bwd_dq_convert_kernel<float><<<cblocks, 256, 0, s>>>(*a); break;
        case FW_BWD_F16: fw_bwd_dq_convert_kernel<__half><<<cblocks, 256, 0, s>>>(*a); break;
        default: fw_bwd_dq_convert_kernel<__nv_bfloat16><<<cblocks, 256, 0, s>>>(*a); break;
        }
        FW_CUDA_CHECK_LAUNCH();
    }
    return FW_OK;
}

extern "C" fw_status fw_cuda_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    char why[256];
    if (!fw_cuda_backward_supports(p, why, sizeof why)) {
        fw_why(ex->err, ex->err_len, "%s", why);
        return FW_ERR_UNSUPPORTED;
    }
    if (fw_bwd_materialize_wanted(p, cfg)) return fw_cuda_backward_materialize(p, cfg, ex); /* store, not recompute */
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed()) {
        fw_why(ex->err, ex->err_len, "cannot select cuda:%d", p->device.index);
        return FW_ERR_DEVICE;
    }
    fw_cuda_device_info di;
    if (!fw_cuda_device_facts(p->device.index, &di)) {
        fw_why(ex->err, ex->err_len, "cannot query CUDA device %d", p->device.index);
        return FW_ERR_DEVICE;
    }
    const int optin = di.smem_optin;
    const int bucket = fw_bwd_bucket(p->head_dim);
    if (fw_bwd_smem_bytes(bucket) > (size_t)optin) {
        fw_why(ex->err, ex->err_len, "the CUDA backward for head_dim %lld needs %zu bytes of shared memory per block; "
               "cuda:%d allows %d", (long long)p->head_dim, fw_bwd_smem_bytes(bucket), p->device.index, optin);
        return FW_ERR_UNSUPPORTED;
    }
    const fw_knobs *k = fw_exec_knobs(ex);
    int atomic = fw_bwd_atomic_mode(p, cfg, k), tc;
    if (atomic < 0) {
        /* On Hopper the deterministic pipeline of wgmma kernels (dK/dV, then dQ) beat the atomic one at
         * every FA-grid shape (H100, docs/PERF.md); elsewhere atomics, as FlashAttention-2. */
        tc = fw_bwd_tc_pick(p, 0, &di, k);
        const fw_bwd_tc_variant *vs = p->head_dim <= 64 ? fw_bwd_tc_variants_d64 : fw_bwd_tc_variants_d128;
        atomic = !(tc >= 0 && vs[tc].qs < 0);
        if (atomic) tc = fw_bwd_tc_pick(p, 1, &di, k);
    } else {
        tc = fw_bwd_tc_pick(p, atomic, &di, k);
    }

    fw_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = p->q; a.k = p->k; a.v = p->v; a.o = p->o; a.dout = p->dout;
    a.dq = p->dq; a.dk = p->dk; a.dv = p->dv;
    a.lse = p->lse;
    for (int i = 0; i < 3; i++) {
        a.q_s[i] = p->q_stride[i]; a.k_s[i] = p->k_stride[i]; a.v_s[i] = p->v_stride[i];
        a.o_s[i] = p->o_stride[i]; a.do_s[i] = p->do_stride[i]; a.dq_s[i] = p->dq_stride[i];
        a.dk_s[i] = p->dk_stride[i]; a.dv_s[i] = p->dv_stride[i];
    }
    a.off = p->diag_offset; a.wl = p->window_left; a.wr = p->window_right;
    a.B = (int)p->batch; a.H = (int)p->heads; a.Hkv = (int)p->kv_heads; a.group = (int)p->group;
    a.Lq = (int)p->seqlen_q; a.Lk = (int)p->seqlen_k; a.D = (int)p->head_dim;
    a.scale = p->scale;

    const cudaStream_t s = (cudaStream_t)ex->stream;
    const size_t rows = (size_t)(p->batch * p->heads * p->seqlen_q);
    const size_t rows16 = (rows + 3) & ~(size_t)3; /* lse2 starts 16-byte aligned (the TMA kernels' maps) */
    const size_t delta_bytes = (rows16 + (tc >= 0 ? rows : 0)) * sizeof(float); /* Δ, and lse2 for tensor cores */
    const size_t acc_bytes = atomic ? rows * (size_t)p->head_dim * sizeof(float) : 0;
    void *delta = NULL, *acc = NULL;
    FW_CUDA_CHECK(fw_cuda_ws_alloc(&delta, delta_bytes, s));
    if (atomic) {
        cudaError_t e = fw_cuda_ws_alloc(&acc, acc_bytes, s);
        if (e != cudaSuccess) {
            fw_cuda_ws_free(delta, delta_bytes, s);
            fw_why(ex->err, ex->err_len, "dQ workspace of %zu bytes: %s", acc_bytes, cudaGetErrorString(e));
            return e == cudaErrorMemoryAllocation ? FW_ERR_OUT_OF_MEMORY : FW_ERR_DEVICE;
        }
    }
    a.delta = (const float *)delta;
    a.lse2 = tc >= 0 ? (const float *)delta + rows16 : NULL;
    a.dq_acc = (float *)acc;
    fw_status st = fw_bwd_run(p, &a, atomic, tc, ex);
    /* stream-ordered frees: safe while the kernels above are still running */
    cudaError_t e1 = acc ? fw_cuda_ws_free(acc, acc_bytes, s) : cudaSuccess;
    cudaError_t e2 = fw_cuda_ws_free(delta, delta_bytes, s);
    if (st == FW_OK && (e1 != cudaSuccess || e2 != cudaSuccess)) {
        fw_why(ex->err, ex->err_len, "freeing the backward workspace failed: %s",
               cudaGetErrorString(e1 != cudaSuccess ? e1 : e2));
        st = FW_ERR_DEVICE;
    }
    return st;
}
