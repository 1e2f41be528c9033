/* cuda-flash: the f16/bf16 FlashAttention forward on tensor cores (mma.sync on sm_80+, wgmma on sm_90a), the
 * backend table's entry: what it supports, its search space and the launch. The kernels are kernel_*.cuh,
 * their instantiations and records generated/ (scripts/gen_kernels.py), the choice among them
 * heuristics.cu; this file validates, asks the heuristics, and launches the record it is handed. Dense and
 * ragged problems the kernels cannot read in place (head_dim not a multiple of 8, rows not 16-byte aligned) run
 * staged (common/stage.h): supports(), configs() and forward() all see the staged problem. */
#include <stdio.h>
#include <string.h>
#include "backends/cuda/bwd/heuristics.h"
#include "backends/cuda/common/stage.h"
#include "backends/cuda/fwd/heuristics.h"
#include "backends/cuda/serving/serving.h"

static int flash_supports(const fw_problem *p, char *why, size_t why_len)
{
    if (fw_problem_ragged_backward(p)) { /* the CUDA backward's ragged kernels, in place (bwd/cuda_backward.cu) */
        if (p->dtype != FW_F16 && p->dtype != FW_BF16)
            return fw_why(why, why_len, "cuda-flash takes f16 or bf16 tensors, these are %s (f32 runs on cuda-flash-f32)",
                          fw_dtype_name(p->dtype));
        return fw_cuda_backward_supports(p, why, why_len);
    }
    fw_problem staged;
    if (fw_stage_needed(p)) { /* judged as it runs: staged, every row 16-byte aligned */
        if (!fw_stage_allowed(p, why, why_len)) return 0;
        fw_stage_shape(p, &staged);
        p = &staged;
    }
    if (p->kind != FW_CALL_DENSE) return fw_srv_tc_supports(p, why, why_len); /* ragged and cached calls */
    if (p->device.kind != FW_DEVICE_CUDA) return fw_why(why, why_len, "tensors are not on a CUDA device");
    if (p->dtype != FW_F16 && p->dtype != FW_BF16)
        return fw_why(why, why_len, "cuda-flash takes f16 or bf16 tensors, these are %s (f32 runs on cuda-flash-f32)",
                      fw_dtype_name(p->dtype));
    if (p->head_dim < 1 || p->head_dim > 256)
        return fw_why(why, why_len, "head_dim %lld is outside cuda-flash's 1..256", (long long)p->head_dim);
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
    int n = 0;
    const fw_fwd_record *rs = fw_fwd_records_of(fw_fwd_padded_dim(p->head_dim), &n);
    for (int i = 0; i < n; i++)
        if (fw_fwd_record_runs(&rs[i], &di, fw_problem_knobs(p))) return 1;
    return fw_why(why, why_len, "no cuda-flash configuration for head_dim %lld fits the device's %d bytes of shared memory per block",
                  (long long)p->head_dim, di.smem_optin);
}

/* The forward of a problem the kernels read in place. */
static fw_status flash_forward_in_place(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    /* ragged calls on the wgmma kernels where heuristics.cu says so (the device facts are cached) */
    const fw_fwd_record *r = NULL;
    fw_cuda_device_info di;
    if (p->kind == FW_CALL_VARLEN && fw_cuda_device_facts(p->device.index, &di) &&
        fw_fwd_varlen_choice(p, cfg, &di, fw_exec_knobs(ex), &r, ex->err, ex->err_len) < 0)
        return FW_ERR_INVALID_VALUE;
    if (!r && fw_srv_tc_claims(p, cfg, ex)) return fw_srv_tc_forward(p, cfg, ex); /* serving calls and decode shapes */
    char why[256];
    if (!flash_supports(p, why, sizeof why)) {
        fw_why(ex->err, ex->err_len, "%s", why);
        return FW_ERR_UNSUPPORTED;
    }
    if (!fw_cuda_device_facts(p->device.index, &di)) {
        fw_why(ex->err, ex->err_len, "cannot query CUDA device %d", p->device.index);
        return FW_ERR_DEVICE;
    }
    if (!r) r = fw_fwd_record_for(p, cfg, &di, fw_exec_knobs(ex), ex->err, ex->err_len);
    if (!r) return cfg && (cfg->name[0] || cfg->block_m) ? FW_ERR_INVALID_VALUE : FW_ERR_UNSUPPORTED;
    int prev = 0;
    FW_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != p->device.index) FW_CUDA_CHECK(cudaSetDevice(p->device.index));

    fw_fwd_params a;
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
    fw_fwd_band(p, &a);
    a.H = (int)p->heads;
    a.group = (int)p->group;
    a.d = (int)p->head_dim;
    a.persist_blocks = fw_fwd_persist_blocks(&di, fw_exec_knobs(ex));
    a.scale = p->scale;
    a.scale_log2 = p->scale * 1.4426950408889634f;
    fw_cuda_seqs seqs; /* ragged: Lq, Lk above are the maxima, the offsets and totals here */
    fw_cuda_seqs_fill(&seqs, p);
    const fw_fwd_launch_fn fn = p->dtype == FW_F16 ? r->f16 : r->bf16;
    cudaError_t e = fn(&a, (int)p->batch, p->kind == FW_CALL_VARLEN ? &seqs : NULL, (cudaStream_t)ex->stream);
    if (prev != p->device.index) cudaSetDevice(prev);
    if (e == cudaErrorNotSupported && p->kind == FW_CALL_VARLEN) /* the driver refused a map: nothing ran */
        return fw_srv_tc_forward(p, cfg, ex);
    if (e != cudaSuccess) {
        fw_why(ex->err, ex->err_len, "cuda-flash %s launch failed: %s", r->name, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? FW_ERR_OUT_OF_MEMORY : FW_ERR_DEVICE;
    }
    return FW_OK;
}

/* Staged first where needed: the serving path's claim on dense decode shapes is then made for the staged problem. */
static fw_status flash_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    if (fw_stage_needed(p)) return fw_stage_run(p, cfg, ex, flash_forward_in_place);
    return flash_forward_in_place(p, cfg, ex);
}

extern "C" fw_status fw_cuda_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex); /* bwd/cuda_backward.cu */

/* The search space of p: a backward problem (dq set) lists the backward's configurations, which backward() runs;
 * either for the staged problem where that is what runs. */
static int flash_configs(const fw_problem *p, fw_config *out, int max)
{
    fw_problem staged;
    if (p->dq ? fw_stage_backward_wanted(p, fw_problem_knobs(p)) : fw_stage_needed(p)) {
        fw_stage_shape(p, &staged);
        p = &staged;
    }
    return p->dq ? fw_bwd_configs(p, out, max) : fw_fwd_configs(p, out, max);
}

extern "C" const fw_backend fw_backend_cuda_flash = {
    "cuda-flash",
    "FlashAttention-2 forward on tensor cores (mma.sync m16n8k16, f16/bf16, f32 accumulation)",
    FW_DEVICE_CUDA,
    fw_cuda_available,
    flash_supports,
    flash_configs,
    flash_forward,
    fw_cuda_backward,
    fw_srv_tc_workspace,
};
