/* cuda-tiled: shared-memory tiled attention of seed 002's kind, float32 only.
 *
 * One block per (query tile of TQ rows, head, batch). The Q tile, one K/V tile of TK keys, the score
 * tile and the O accumulator live in shared memory; online softmax per row (running max and sum),
 * so nothing of size Lq×Lk is stored. Simple and correct rather than fast: cuda-flash-f32 is the
 * fast float32 path. Any head_dim up to 256 (runtime), any strides, GQA, causal/window with the
 * key tiles outside the visible band skipped. */
#include <math.h>
#include <stdint.h>
#include "backends/cuda/common/cuda_common.h"

#define TQ 16
#define TK 32
#define TILED_THREADS 128

struct tiled_args {
    const float *q, *k, *v;
    float *o, *lse;
    long long qs[3], ks[3], vs[3], os[3];
    long long diag, wl, wr;
    int H, group, Lq, Lk, D;
    float scale;
};

__device__ __forceinline__ void tiled_range(const tiled_args &a, long long i, int *lo, int *hi)
{
    long long x = i + a.diag - a.wl, y = i + a.diag + a.wr + 1;
    *lo = x < 0 ? 0 : (x > a.Lk ? a.Lk : (int)x);
    *hi = y > a.Lk ? a.Lk : (y < 0 ? 0 : (int)y);
}

__global__ void __launch_bounds__(TILED_THREADS) tiled_kernel(const tiled_args a)
{
    extern __shared__ float sm[];
    const int D = a.D, KD = D + 1; /* K rows padded: the dot products read K by row */
    float *Qs = sm;                /* TQ × D   */
    float *Ks = Qs + TQ * D;       /* TK × KD  */
    float *Vs = Ks + TK * KD;      /* TK × D   */
    float *Os = Vs + TK * D;       /* TQ × D   */
    float *Ss = Os + TQ * D;       /* TQ × (TK+1) */
    float *mrow = Ss + TQ * (TK + 1), *lrow = mrow + TQ, *arow = lrow + TQ;
    __shared__ int lo_s[TQ], hi_s[TQ];

    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * TQ, h = blockIdx.y, b = blockIdx.z, hk = h / a.group;
    const int rows = min(TQ, a.Lq - m0);
    const float *q = a.q + b * a.qs[0] + h * a.qs[1];
    const float *k = a.k + b * a.ks[0] + hk * a.ks[1];
    const float *v = a.v + b * a.vs[0] + hk * a.vs[1];

    for (int e = tid; e < TQ * D; e += TILED_THREADS) {
        const int r = e / D, d = e % D;
        Qs[e] = r < rows ? q[(long long)(m0 + r) * a.qs[2] + d] : 0.0f;
        Os[e] = 0.0f;
    }
    if (tid < TQ) {
        mrow[tid] = -INFINITY;
        lrow[tid] = 0.0f;
        int lo, hi;
        tiled_range(a, m0 + tid, &lo, &hi);
        if (tid >= rows) lo = hi = 0;
        lo_s[tid] = lo;
        hi_s[tid] = hi;
    }
    __syncthreads();
    int lo_all = a.Lk, hi_all = 0;
    for (int r = 0; r < rows; r++) {
        if (hi_s[r] > lo_s[r]) {
            lo_all = min(lo_all, lo_s[r]);
            hi_all = max(hi_all, hi_s[r]);
        }
    }
    for (int n0 = (lo_all / TK) * TK; n0 < hi_all; n0 += TK) {
        const int nk = min(TK, a.Lk - n0);
        for (int e = tid; e < TK * D; e += TILED_THREADS) {
            const int r = e / D, d = e % D;
            Ks[r * KD + d] = r < nk ? k[(long long)(n0 + r) * a.ks[2] + d] : 0.0f;
            Vs[e] = r < nk ? v[(long long)(n0 + r) * a.vs[2] + d] : 0.0f;
        }
        __syncthreads();
        for (int e = tid; e < TQ * TK; e += TILED_THREADS) {
            const int r = e / TK, c = e % TK, j = n0 + c;
            float s = -INFINITY;
            if (j >= lo_s[r] && j < hi_s[r]) {
                float acc = 0.0f;
                for (int d = 0; d < D; d++) acc = fmaf(Qs[r * D + d], Ks[c * KD + d], acc);
                s = acc * a.scale;
            }
            Ss[r * (TK + 1) + c] = s;
        }
        __syncthreads();
        if (tid < TQ) { /* online softmax of row tid over this tile */
            float *s = Ss + tid * (TK + 1);
            float mx = mrow[tid];
            for (int c = 0; c < TK; c++) mx = fmaxf(mx, s[c]);
            const float mu = mx == -INFINITY ? 0.0f : mx;
            const float alpha = expf(mrow[tid] - mu); /* 0 while the row has seen nothing */
            float l = lrow[tid] * alpha;
            for (int c = 0; c < TK; c++) {
                const float p = expf(s[c] - mu);
                s[c] = p;
                l += p;
            }
            mrow[tid] = mx;
            lrow[tid] = l;
            arow[tid] = alpha;
        }
        __syncthreads();
        for (int e = tid; e < TQ * D; e += TILED_THREADS) {
            const int r = e / D, d = e % D;
            float acc = Os[e] * arow[r];
            for (int c = 0; c < TK; c++) acc = fmaf(Ss[r * (TK + 1) + c], Vs[c * D + d], acc);
            Os[e] = acc;
        }
        __syncthreads();
    }
    float *o = a.o + b * a.os[0] + h * a.os[1];
    for (int e = tid; e < rows * D; e += TILED_THREADS) {
        const int r = e / D, d = e % D;
        const float l = lrow[r];
        o[(long long)(m0 + r) * a.os[2] + d] = (l > 0.0f || l != l) ? Os[e] / l : 0.0f;
    }
    if (a.lse && tid < rows) {
        const float l = lrow[tid];
        a.lse[((long long)b * a.H + h) * a.Lq + m0 + tid] =
            (l > 0.0f || l != l) ? (mrow[tid] == -INFINITY ? 0.0f : mrow[tid]) + logf(l) : -INFINITY;
    }
}

static size_t tiled_smem(int D)
{
    return sizeof(float) * ((size_t)TQ * D * 2 + (size_t)TK * (D + 1) + (size_t)TK * D + TQ * (TK + 1) + 3 * TQ);
}

static int supports_(const fw_problem *p, char *why, size_t why_len)
{
    if (fw_problem_ragged_backward(p)) return fw_why(why, why_len, "%s", FW_RAGGED_BACKWARD_WHERE);
    if (p->kind != FW_CALL_DENSE)
        return fw_why(why, why_len, "cuda-tiled runs dense calls only (no ragged or KV-cache kernels)");
    if (p->device.kind != FW_DEVICE_CUDA) return fw_why(why, why_len, "tensors are not on a CUDA device");
    if (p->kind != FW_CALL_DENSE)
        return fw_why(why, why_len, "cuda-tiled runs dense calls only; ragged and KV-cache calls run on "
                      "cuda-flash (f16, bf16) and cuda-flash-f32");
    if (p->dtype != FW_F32)
        return fw_why(why, why_len, "cuda-tiled is float32 only (got %s)", fw_dtype_name(p->dtype));
    if (p->precision != FW_PRECISION_EXACT)
        return fw_why(why, why_len, "cuda-tiled runs exact float32 only (no reduced-precision modes)");
    if (p->seqlen_q > (1LL << 30) || p->seqlen_k > (1LL << 30))
        return fw_why(why, why_len, "cuda-tiled takes sequences up to 2^30");
    if ((p->seqlen_q + TQ - 1) / TQ > 2147483647LL || p->heads > 65535 || p->batch > 65535)
        return fw_why(why, why_len, "cuda-tiled grid limit: heads and batch must be <= 65535");
    if (p->head_dim > 256) return fw_why(why, why_len, "cuda-tiled takes head_dim up to 256");
    return 1;
}

static fw_status forward_(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)cfg;
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed()) {
        fw_why(ex->err, ex->err_len, "cannot select cuda:%d", p->device.index);
        return FW_ERR_DEVICE;
    }
    tiled_args a;
    a.q = (const float *)p->q; a.k = (const float *)p->k; a.v = (const float *)p->v;
    a.o = (float *)p->o; a.lse = p->lse;
    for (int i = 0; i < 3; i++) {
        a.qs[i] = p->q_stride[i]; a.ks[i] = p->k_stride[i]; a.vs[i] = p->v_stride[i]; a.os[i] = p->o_stride[i];
    }
    a.diag = p->diag_offset; a.wl = p->window_left; a.wr = p->window_right;
    a.H = (int)p->heads; a.group = (int)p->group; a.Lq = (int)p->seqlen_q; a.Lk = (int)p->seqlen_k;
    a.D = (int)p->head_dim; a.scale = p->scale;
    const size_t smem = tiled_smem(a.D);
    /* The limit is the device's whole opt-in size, set once: a per-call limit of this call's size would race
     * with calls of other head dims on other threads (a launch above another thread's smaller limit fails). */
    FW_CUDA_CHECK(fw_cuda_smem_limit<tiled_kernel>(0));
    dim3 grid((unsigned)((a.Lq + TQ - 1) / TQ), (unsigned)a.H, (unsigned)p->batch);
    tiled_kernel<<<grid, TILED_THREADS, smem, (cudaStream_t)ex->stream>>>(a);
    FW_CUDA_CHECK_LAUNCH();
    return FW_OK;
}

extern "C" const fw_backend fw_backend_cuda_tiled = {
    "cuda-tiled",
    "shared-memory tiled attention, one block per query tile, online softmax (f32)",
    FW_DEVICE_CUDA,
    fw_cuda_available,
    supports_,
    NULL,
    forward_,
    NULL,
    NULL,
};
