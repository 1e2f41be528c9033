/* The CUDA backward's entry point, fw_cuda_backward: the f16/bf16 (cuda-flash) and f32 (cuda-flash-f32) backend
 * tables point their `backward` slot here. It checks the problem, asks the heuristics (heuristics.h) for the plan
 * its configuration names, and runs it:
 *   store      the materialised backward (materialize.h: S/P and dP/dS of whole slices, cuBLAS)
 *   recompute  Δ (and lse2 for the tensor-core records) by the preprocess (preprocess.cuh), the record's kernels
 *              (a tensor-core record of kernels.tsv, or the head dim's CUDA-core one), and in the atomic dQ mode
 *              the conversion of the f32 dQ accumulator.
 * dQ mode: atomic (atomicAdd into an f32 workspace during the dK/dV pass, then a conversion, as FlashAttention-2)
 * or deterministic (a separate dQ pass, no atomics: fw_context_set_deterministic).
 * Ragged (varlen) batches run the recompute with the records' ragged kernels (kernel_common.cuh: ragged_block), one
 * grid over every sequence; the workspaces hold H·total_q rows, sequence-major. */
#include <stdio.h>
#include <string.h>
#include "backends/cuda/bwd/heuristics.h"
#include "backends/cuda/bwd/materialize.h"
#include "backends/cuda/bwd/preprocess.cuh"
#include "backends/cuda/common/stage.h"
#include "backends/cuda/common/workspace.h"

extern "C" fw_status fw_cuda_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);

/* A ragged batch's grids fit: (rows / 16 + sequences) x heads blocks, 16 the fewest rows or keys any of its
 * kernels' blocks take, at most 2^31 - 1. */
static int fw_bwd_ragged_fits(const fw_problem *p, char *why, size_t why_len)
{
    const int64_t limit = ((int64_t)1 << 31) - 1;
    if (p->total_q / 16 + p->batch > limit / p->heads || p->total_k / 16 + p->batch > limit / p->kv_heads)
        return fw_why(why, why_len, "the CUDA backward's grid limit: a ragged batch's (total_q / 16 + batch) x heads "
                      "and (total_k / 16 + batch) x kv_heads must be below 2^31");
    return 1;
}

extern "C" int fw_cuda_backward_supports(const fw_problem *p, char *why, size_t why_len)
{
    if (p->kind == FW_CALL_KVCACHE) return fw_why(why, why_len, "a KV-cache call has no backward");
    if (p->device.kind != FW_DEVICE_CUDA) return fw_why(why, why_len, "tensors are not on a CUDA device");
    if (p->dtype != FW_F32 && p->dtype != FW_F16 && p->dtype != FW_BF16)
        return fw_why(why, why_len, "the CUDA backward takes f32, f16 or bf16, not dtype %d", (int)p->dtype);
    if (p->head_dim < 1 || p->head_dim > 256)
        return fw_why(why, why_len, "the CUDA backward takes head_dim 1..256, not %lld", (long long)p->head_dim);
    if (p->seqlen_q >= (1LL << 30) || p->seqlen_k >= (1LL << 30))
        return fw_why(why, why_len, "the CUDA backward takes sequence lengths below 2^30");
    if ((p->kind == FW_CALL_DENSE && p->batch > 65535) || p->heads > 65535 || p->kv_heads > 65535)
        return fw_why(why, why_len, "the CUDA backward's grid limit: batch and heads must be <= 65535");
    if (p->kind == FW_CALL_VARLEN && !fw_bwd_ragged_fits(p, why, why_len)) return 0;
    if (!p->lse || !p->dout || !p->dq || !p->dk || !p->dv || !p->o)
        return fw_why(why, why_len, "the CUDA backward needs o, lse, dout, dq, dk and dv");
    return 1;
}

/* Rows of the Δ / lse2 workspaces: one per (batch entry, head, query row), of a ragged batch per (head, packed row). */
static long long fw_bwd_stat_rows(const fw_problem *p)
{
    return p->kind == FW_CALL_VARLEN ? (long long)p->heads * p->total_q : (long long)p->batch * p->heads * p->seqlen_q;
}

/* The atomic dQ accumulator: rows of head_dim floats, or where the record fuses dQ into its dK/dV kernel 64 x 64 tiles
 * (params.h: dq_acc_tile, dq_acc_seq_tiles; at least as large: its fallbacks accumulate in rows in the same
 * workspace). */
static int dq_acc_tiled(const fw_bwd_plan *plan) { return plan->atomic && fw_bwd_fuses_dq(plan->record); }
static size_t dq_acc_bytes(const fw_problem *p, int tiled)
{
    if (!tiled) return (size_t)fw_bwd_stat_rows(p) * (size_t)p->head_dim * sizeof(float);
    const size_t blocks = p->kind == FW_CALL_VARLEN ? (size_t)(p->total_q / 64 + p->batch)
                                                    : (size_t)p->batch * (size_t)((p->seqlen_q + 63) / 64);
    return blocks * (size_t)p->heads * 64 * (size_t)((p->head_dim + 63) / 64 * 64) * sizeof(float);
}

/* The launches of a recompute plan, with the workspace already allocated. */
static fw_status fw_bwd_run(const fw_problem *p, const fw_bwd_plan *plan, fw_bwd_args *a, const fw_exec *ex)
{
    const cudaStream_t s = (cudaStream_t)ex->stream;
    const long long rows = fw_bwd_stat_rows(p);
    const int atomic = plan->atomic, varlen = p->kind == FW_CALL_VARLEN;
    const fw_bwd_record *r = plan->record;
    /* a ragged batch's CUDA-core kernels read the LSE sequence-major: the preprocess copies it to lse2's place */
    const int log2 = !varlen || r->kernel != FW_BWD_CORES;
    float *delta = (float *)a->delta, *stats = (float *)a->lse2;
    switch (p->dtype) {
    case FW_F32: fw_bwd_launch_delta<float>(p, delta, stats, s, log2); break;
    case FW_F16: fw_bwd_launch_delta<__half>(p, delta, stats, s, log2); break;
    default: fw_bwd_launch_delta<__nv_bfloat16>(p, delta, stats, s, log2); break;
    }
    FW_CUDA_CHECK_LAUNCH();
    if (atomic) FW_CUDA_CHECK(cudaMemsetAsync(a->dq_acc, 0, dq_acc_bytes(p, a->dq_acc_tiled), s));
    const fw_bwd_launch_fn fn = varlen ? (p->dtype == FW_F32 ? r->varlen_f32 : p->dtype == FW_F16 ? r->varlen_f16 : r->varlen_bf16)
                                       : (p->dtype == FW_F32 ? r->f32 : p->dtype == FW_F16 ? r->f16 : r->bf16);
    if (!fn) { /* the heuristics hand f32 only to CUDA-core and tf32 records, ragged batches only to records with ragged kernels */
        fw_why(ex->err, ex->err_len, "the CUDA backward's record %s has no %s%s kernels", r->name, varlen ? "ragged " : "",
               fw_dtype_name(p->dtype));
        return FW_ERR_INVALID_VALUE;
    }
    int tiled = 0; /* the accumulator's layout, as the launch used it (its fallback accumulates by rows) */
    a->dq_acc_tiled_used = a->dq_acc_tiled ? &tiled : NULL;
    FW_CUDA_CHECK(fn(a, atomic, s));
    a->dq_acc_tiled = tiled;
    a->dq_acc_tiled_used = NULL;
    FW_CUDA_CHECK_LAUNCH();
    if (atomic) {
        switch (p->dtype) {
        case FW_F32: fw_bwd_launch_dq_convert<float>(p, a, s); break;
        case FW_F16: fw_bwd_launch_dq_convert<__half>(p, a, s); break;
        default: fw_bwd_launch_dq_convert<__nv_bfloat16>(p, a, s); break;
        }
        FW_CUDA_CHECK_LAUNCH();
    }
    return FW_OK;
}

/* The backward of a problem the chosen kernels read in place. */
static fw_status cuda_backward_in_place(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
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
    fw_bwd_plan plan;
    const fw_status pst = fw_bwd_recompute_plan(p, cfg, &di, fw_exec_knobs(ex), &plan, ex->err, ex->err_len);
    if (pst != FW_OK) return pst;
    const int atomic = plan.atomic, varlen = p->kind == FW_CALL_VARLEN;
    const int stats = varlen || plan.record->kernel != FW_BWD_CORES; /* lse2, or a ragged batch's LSE copy */

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
    a.B = varlen ? 1 : (int)p->batch; a.H = (int)p->heads; a.Hkv = (int)p->kv_heads; a.group = (int)p->group;
    a.Lq = (int)p->seqlen_q; a.Lk = (int)p->seqlen_k; a.D = (int)p->head_dim;
    a.scale = p->scale;
    a.precision = (int)p->precision;
    if (varlen) fw_cuda_seqs_fill(&a.seqs, p); /* Lq, Lk above: the longest sequences, the lengths' bound */

    const cudaStream_t s = (cudaStream_t)ex->stream;
    const size_t rows = (size_t)fw_bwd_stat_rows(p);
    const size_t rows16 = (rows + 3) & ~(size_t)3; /* lse2 starts 16-byte aligned (the TMA kernels' maps) */
    const size_t delta_bytes = (rows16 + (stats ? rows : 0)) * sizeof(float); /* Δ, and lse2 (or the LSE copy) */
    a.dq_acc_tiled = dq_acc_tiled(&plan);
    const size_t acc_bytes = atomic ? dq_acc_bytes(p, a.dq_acc_tiled) : 0;
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
    a.lse2 = stats ? (const float *)delta + rows16 : NULL;
    if (varlen && plan.record->kernel == FW_BWD_CORES) a.lse = a.lse2; /* the sequence-major copy (fw_bwd_run) */
    a.dq_acc = (float *)acc;
    fw_status st = fw_bwd_run(p, &plan, &a, ex);
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

/* f16/bf16 problems the tensor-core kernels can read only once staged (head_dim not a multiple of 8, rows not
 * 16-byte aligned) run staged (common/stage.h); the rest in place. */
extern "C" fw_status fw_cuda_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    if (fw_stage_backward_wanted(p, fw_exec_knobs(ex))) return fw_stage_run(p, cfg, ex, cuda_backward_in_place);
    return cuda_backward_in_place(p, cfg, ex);
}
