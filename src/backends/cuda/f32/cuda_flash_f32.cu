/* cuda-flash-f32: exact float32 FlashAttention-2 on CUDA cores (default), with opt-in tf32 and 3xtf32 tensor-core
 * modes (fw_context_set_precision); the backend table's entry: what it supports, its search space and the launch.
 * The kernels are kernel_*.cuh, their instantiations and records generated/ (scripts/gen_kernels.py), the choice
 * among them and each launch's plan heuristics.cu; this file validates, asks the heuristics, and launches the
 * record and plan it is handed. */
#include <stdio.h>
#include <string.h>
#include "backends/cuda/f32/heuristics.h"
#include "backends/cuda/bwd/heuristics.h"
#include "backends/cuda/serving/serving.h"

static int supports_(const fw_problem *p, char *why, size_t why_len)
{
    if (fw_problem_ragged_backward(p)) { /* the CUDA backward's ragged kernels (bwd/cuda_backward.cu) */
        if (p->dtype != FW_F32)
            return fw_why(why, why_len, "cuda-flash-f32 takes float32 only (got %s; cuda-flash runs 16-bit)",
                          fw_dtype_name(p->dtype));
        return fw_cuda_backward_supports(p, why, why_len);
    }
    if (p->kind != FW_CALL_DENSE) return fw_srv_f32_supports(p, why, why_len); /* serving/serving_f32.cu */
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

/* Backward problems (ragged ones too) list the backward's configurations; ragged and cached forwards run the serving
 * path's f32 kernel. */
static int configs_(const fw_problem *p, fw_config *out, int max)
{
    if (p->dq) return fw_bwd_configs(p, out, max);
    if (p->kind != FW_CALL_DENSE) return fw_srv_f32_configs(p, out, max);
    return fw_f32_configs(p, out, max);
}

static fw_status forward_(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    if (p->kind != FW_CALL_DENSE) return fw_srv_f32_forward(p, cfg, ex);
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed()) {
        fw_why(ex->err, ex->err_len, "cannot select cuda:%d", p->device.index);
        return FW_ERR_DEVICE;
    }
    const fw_knobs *k = fw_exec_knobs(ex);
    fw_cuda_device_info di;
    const fw_cuda_device_info *dip = fw_cuda_device_facts(p->device.index, &di) ? &di : NULL;
    const fw_f32_record *r = fw_f32_record_for(p, cfg, dip, k, ex->err, ex->err_len);
    if (!r) return cfg && (cfg->name[0] || cfg->block_m) ? FW_ERR_INVALID_VALUE : FW_ERR_UNSUPPORTED;
    const fw_f32_form *form = fw_f32_form_of(r, p->precision);
    const int sms = dip ? dip->sm_count : 0; /* 0: not known */
    fw_f32_plan plan;
    fw_f32_plan_for(p, r, sms, k, &plan);

    fw_f32_params a;
    a.q = (const float *)p->q; a.k = (const float *)p->k; a.v = (const float *)p->v;
    a.o = (float *)p->o; a.lse = p->lse;
    int aligned = ((uintptr_t)p->q % 16 == 0) && ((uintptr_t)p->k % 16 == 0) && ((uintptr_t)p->v % 16 == 0);
    for (int i = 0; i < 3; i++) {
        a.qs[i] = p->q_stride[i]; a.ks[i] = p->k_stride[i]; a.vs[i] = p->v_stride[i]; a.os[i] = p->o_stride[i];
        aligned = aligned && a.qs[i] % 4 == 0 && a.ks[i] % 4 == 0 && a.vs[i] % 4 == 0;
    }
    a.vec16 = aligned;
    a.uneven = plan.heads_first;
    a.sms = sms;
    a.delay = plan.delay;
    a.delay_from = plan.delay_from;
    a.delay_to = plan.delay_to;
    a.diag = p->diag_offset; a.wl = p->window_left; a.wr = p->window_right;
    a.H = (int)p->heads; a.group = (int)p->group; a.Lq = (int)p->seqlen_q; a.Lk = (int)p->seqlen_k;
    a.D = (int)p->head_dim;
    a.scale_log2 = p->scale * 1.4426950408889634f;
    FW_CUDA_CHECK(form->launch(&a, &plan, (int)p->batch, (cudaStream_t)ex->stream, k));
    FW_CUDA_CHECK_LAUNCH();
    return FW_OK;
}

extern "C" fw_status fw_cuda_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex); /* bwd/cuda_backward.cu */

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
    fw_srv_f32_workspace,
};
