/* cuda-naive: the seeds' three-kernel baseline, materialising the Lq×Lk score matrix.
 *
 *   S = Q·Kᵀ            cuBLAS strided-batched GEMM (f32; f16/bf16 operands with f32 compute)
 *   P = softmax(mask(scale·S))   one block per query row, in place, writes the LSE
 *   O = P·V             cuBLAS strided-batched GEMM (f16/bf16: V widened to f32 first, O narrowed after)
 *
 * The S buffer (B·H·Lq·Lk floats) comes from the counted workspace pool (fw_cuda_workspace_peak).
 * GQA: cuBLAS batches need one stride between matrices, so the batch runs over kv heads and the
 * launcher loops over the query heads of a group (and over the batch when the layout's batch stride
 * is not heads × head stride). Exact mode forbids TF32; FW_PRECISION_TF32 lets cuBLAS use it. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "backends/cuda/common/cuda_blas.h"
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/common/workspace.h"

#define NAIVE_MAX_WORKSPACE (((size_t)1) << 38) /* 256 GiB: refuse, rather than try, beyond this */

/* Checks that free the workspace on the way out (goto done). */
#define NAIVE_CUBLAS(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            st = fw_cublas_failed(ex, #call, s_, __FILE__, __LINE__);                              \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

#define NAIVE_CUDA(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            st = fw_cuda_failed(ex, #call, e_, __FILE__, __LINE__);                                \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* ---- kernels ---------------------------------------------------------------------------------- */
struct naive_mask {
    long long diag, wl, wr; /* fw_problem's normalised window */
    int Lq, Lk, heads;
    float scale;
};

__device__ __forceinline__ float naive_block_reduce(float x, bool is_max, float *red)
{
    for (int o = 16; o > 0; o >>= 1) {
        float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = is_max ? fmaxf(x, y) : x + y;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads(); /* red[] may still be read from the previous reduction */
    if (lane == 0) red[warp] = x;
    __syncthreads();
    x = lane < nw ? red[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = is_max ? fmaxf(x, y) : x + y;
    }
    return x;
}

/* One block per score row (b, h, i): P = softmax(scale·S) over the visible keys, 0 elsewhere. */
__global__ void naive_softmax_kernel(float *S, float *lse, naive_mask m)
{
    __shared__ float red[32];
    const long long row = blockIdx.x; /* (b·H + h)·Lq + i */
    const long long i = row % m.Lq;
    float *s = S + row * (long long)m.Lk;
    long long a = i + m.diag - m.wl, bnd = i + m.diag + m.wr + 1;
    const int lo = a < 0 ? 0 : (a > m.Lk ? m.Lk : (int)a);
    const int hi = bnd > m.Lk ? m.Lk : (bnd < 0 ? 0 : (int)bnd);
    if (hi <= lo) { /* no visible key: output row 0, LSE -inf */
        for (int j = threadIdx.x; j < m.Lk; j += blockDim.x) s[j] = 0.0f;
        if (lse && threadIdx.x == 0) lse[row] = -INFINITY;
        return;
    }
    float mx = -INFINITY;
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) mx = fmaxf(mx, s[j] * m.scale);
    mx = naive_block_reduce(mx, true, red);
    const float mu = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f;
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x) sum += expf(s[j] * m.scale - mu);
    sum = naive_block_reduce(sum, false, red);
    const float inv = sum > 0.0f ? 1.0f / sum : (sum != sum ? sum : 0.0f);
    for (int j = threadIdx.x; j < m.Lk; j += blockDim.x)
        s[j] = (j >= lo && j < hi) ? expf(s[j] * m.scale - mu) * inv : 0.0f;
    if (lse && threadIdx.x == 0) lse[row] = (sum > 0.0f || sum != sum) ? mu + logf(sum) : -INFINITY;
}

template <typename T> __device__ __forceinline__ float naive_to_f32(T x);
template <> __device__ __forceinline__ float naive_to_f32<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float naive_to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T naive_from_f32(float x);
template <> __device__ __forceinline__ __half naive_from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 naive_from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

struct naive_shape {
    long long st[3]; /* strides of the 16-bit tensor: batch, head, seq (head_dim stride is 1) */
    int heads, seq, dim;
    long long total;
};

/* 16-bit strided (B, H, S, D) -> contiguous f32. */
template <typename T>
__global__ void naive_widen_kernel(const T *src, float *dst, naive_shape s)
{
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < s.total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long t = idx;
        const int d = (int)(t % s.dim); t /= s.dim;
        const int q = (int)(t % s.seq); t /= s.seq;
        const int h = (int)(t % s.heads); t /= s.heads;
        dst[idx] = naive_to_f32<T>(src[t * s.st[0] + h * s.st[1] + q * s.st[2] + d]);
    }
}

/* Contiguous f32 (B, H, S, D) -> 16-bit strided. */
template <typename T>
__global__ void naive_narrow_kernel(const float *src, T *dst, naive_shape s)
{
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < s.total;
         idx += (long long)gridDim.x * blockDim.x) {
        long long t = idx;
        const int d = (int)(t % s.dim); t /= s.dim;
        const int q = (int)(t % s.seq); t /= s.seq;
        const int h = (int)(t % s.heads); t /= s.heads;
        dst[t * s.st[0] + h * s.st[1] + q * s.st[2] + d] = naive_from_f32<T>(src[idx]);
    }
}

/* ---- backend table ---------------------------------------------------------------------------- */
static size_t naive_ws_bytes(const fw_problem *p)
{
    double s = (double)p->batch * (double)p->heads * (double)p->seqlen_q * (double)p->seqlen_k * 4.0;
    if (p->dtype != FW_F32)
        s += ((double)p->batch * (double)p->kv_heads * (double)p->seqlen_k +
              (double)p->batch * (double)p->heads * (double)p->seqlen_q) * (double)p->head_dim * 4.0;
    return s > (double)NAIVE_MAX_WORKSPACE ? NAIVE_MAX_WORKSPACE + 1 : (size_t)s;
}

static int supports_(const fw_problem *p, char *why, size_t why_len)
{
    if (fw_problem_ragged_backward(p)) return fw_why(why, why_len, "%s", FW_RAGGED_BACKWARD_WHERE);
    if (p->kind != FW_CALL_DENSE)
        return fw_why(why, why_len, "cuda-naive runs dense calls only (no ragged or KV-cache kernels)");
    if (p->device.kind != FW_DEVICE_CUDA) return fw_why(why, why_len, "tensors are not on a CUDA device");
    if (p->kind != FW_CALL_DENSE)
        return fw_why(why, why_len, "cuda-naive runs dense calls only; ragged and KV-cache calls run on "
                      "cuda-flash (f16, bf16) and cuda-flash-f32");
    if (p->precision != FW_PRECISION_EXACT && p->precision != FW_PRECISION_TF32)
        return fw_why(why, why_len, "cuda-naive runs exact or tf32 precision only (cuBLAS), not mode %d",
                      (int)p->precision);
    if (p->seqlen_q > INT_MAX || p->seqlen_k > INT_MAX || p->batch * p->heads * p->seqlen_q > INT_MAX)
        return fw_why(why, why_len, "sequence lengths beyond 2^31 rows are not supported by cuda-naive");
    const int64_t D = p->head_dim;
    if (p->q_stride[2] < D || p->k_stride[2] < D || p->v_stride[2] < D || p->o_stride[2] < D ||
        p->q_stride[2] > INT_MAX || p->k_stride[2] > INT_MAX || p->v_stride[2] > INT_MAX ||
        p->o_stride[2] > INT_MAX)
        return fw_why(why, why_len,
                      "cuda-naive (cuBLAS) needs each tensor's sequence stride in [head_dim, 2^31)");
    if (naive_ws_bytes(p) > NAIVE_MAX_WORKSPACE)
        return fw_why(why, why_len, "cuda-naive would need %.0f GiB of score workspace",
                      (double)p->batch * p->heads * p->seqlen_q * p->seqlen_k * 4.0 / 1073741824.0);
    return 1;
}

static cudaDataType naive_cuda_type(fw_dtype t)
{
    return t == FW_F32 ? CUDA_R_32F : (t == FW_F16 ? CUDA_R_16F : CUDA_R_16BF);
}

static fw_status forward_(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)cfg;
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed()) {
        fw_why(ex->err, ex->err_len, "cannot select cuda:%d", p->device.index);
        return FW_ERR_DEVICE;
    }
    cudaStream_t stream = (cudaStream_t)ex->stream;
    fw_status st = FW_OK;
    float *S = NULL, *Vf = NULL, *Of = NULL;
    size_t s_bytes = 0, vf_bytes = 0, of_bytes = 0;
    cublasHandle_t handle = NULL;
    const int B = (int)p->batch, H = (int)p->heads, Hkv = (int)p->kv_heads, group = (int)p->group;
    const int Lq = (int)p->seqlen_q, Lk = (int)p->seqlen_k, D = (int)p->head_dim;
    const long long LL = (long long)Lq * Lk;
    const int f32 = p->dtype == FW_F32;
    const cudaDataType in_t = naive_cuda_type(p->dtype);
    const cublasComputeType_t ct =
        p->precision == FW_PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float one = 1.0f, zero = 0.0f;
    /* V and O as the second GEMM sees them: the tensors themselves (f32) or f32 copies. */
    const void *v_ptr = p->v;
    void *o_ptr = p->o;
    long long vs0 = p->v_stride[0], vs1 = p->v_stride[1], vs2 = p->v_stride[2];
    long long os0 = p->o_stride[0], os1 = p->o_stride[1], os2 = p->o_stride[2];
    int flat;
    naive_mask mk;

    if (fw_cublas_handle(p->device.index, &handle) != CUBLAS_STATUS_SUCCESS) {
        fw_why(ex->err, ex->err_len, "cublasCreate failed on cuda:%d", p->device.index);
        return FW_ERR_DEVICE;
    }
    NAIVE_CUBLAS(cublasSetStream(handle, stream));
    NAIVE_CUBLAS(cublasSetMathMode(handle, p->precision == FW_PRECISION_TF32
                                               ? CUBLAS_TF32_TENSOR_OP_MATH
                                               : CUBLAS_PEDANTIC_MATH));

    s_bytes = (size_t)B * H * (size_t)LL * sizeof(float);
    NAIVE_CUDA(fw_cuda_ws_alloc((void **)&S, s_bytes, stream));
    if (!f32) {
        naive_shape vs = {{p->v_stride[0], p->v_stride[1], p->v_stride[2]}, Hkv, Lk, D,
                          (long long)B * Hkv * Lk * D};
        vf_bytes = (size_t)vs.total * sizeof(float);
        of_bytes = (size_t)B * H * (size_t)Lq * D * sizeof(float);
        NAIVE_CUDA(fw_cuda_ws_alloc((void **)&Vf, vf_bytes, stream));
        NAIVE_CUDA(fw_cuda_ws_alloc((void **)&Of, of_bytes, stream));
        const int blocks = (int)((vs.total + 255) / 256 < 65536 ? (vs.total + 255) / 256 : 65536);
        if (p->dtype == FW_F16)
            naive_widen_kernel<__half><<<blocks, 256, 0, stream>>>((const __half *)p->v, Vf, vs);
        else
            naive_widen_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>((const __nv_bfloat16 *)p->v, Vf, vs);
        NAIVE_CUDA(fw_cuda_launch_error());
        v_ptr = Vf;
        o_ptr = Of;
        vs2 = D; vs1 = (long long)Lk * D; vs0 = (long long)Hkv * vs1;
        os2 = D; os1 = (long long)Lq * D; os0 = (long long)H * os1;
    }

    /* Batch over (b, kv head) in one call when the batch strides allow it, else over kv heads. */
    flat = B == 1 || (p->q_stride[0] == (long long)H * p->q_stride[1] &&
                      p->k_stride[0] == (long long)Hkv * p->k_stride[1] && vs0 == (long long)Hkv * vs1 &&
                      os0 == (long long)H * os1);
    {
        const int nb = flat ? B * Hkv : Hkv;
        const size_t esz = f32 ? 4 : 2;
        for (int b = 0; b < (flat ? 1 : B); b++) {
            for (int r = 0; r < group; r++) {
                const char *q = (const char *)p->q + (size_t)(b * p->q_stride[0] + r * p->q_stride[1]) * esz;
                const char *k = (const char *)p->k + (size_t)(b * p->k_stride[0]) * esz;
                float *s = S + ((long long)b * H + r) * LL;
                /* Sᵀ (Lk×Lq, col-major) = Kᵀ-as-stored (op T) · Q (D×Lq col-major) */
                NAIVE_CUBLAS(cublasGemmStridedBatchedEx(
                    handle, CUBLAS_OP_T, CUBLAS_OP_N, Lk, Lq, D, &one, k, in_t, (int)p->k_stride[2],
                    p->k_stride[1], q, in_t, (int)p->q_stride[2], (long long)group * p->q_stride[1], &zero,
                    s, CUDA_R_32F, Lk, (long long)group * LL, nb, ct, CUBLAS_GEMM_DEFAULT));
            }
        }
    }
    mk.diag = p->diag_offset; mk.wl = p->window_left; mk.wr = p->window_right;
    mk.Lq = Lq; mk.Lk = Lk; mk.heads = H; mk.scale = p->scale;
    naive_softmax_kernel<<<(unsigned)((long long)B * H * Lq), 256, 0, stream>>>(S, p->lse, mk);
    NAIVE_CUDA(fw_cuda_launch_error());
    {
        const int nb = flat ? B * Hkv : Hkv;
        for (int b = 0; b < (flat ? 1 : B); b++) {
            for (int r = 0; r < group; r++) {
                const float *v = (const float *)v_ptr + b * vs0;
                float *o = (float *)o_ptr + b * os0 + r * os1;
                const float *s = S + ((long long)b * H + r) * LL;
                /* Oᵀ (D×Lq, col-major, ld os2) = V (D×Lk col-major, ld vs2) · Pᵀ-as-stored (Lk×Lq) */
                NAIVE_CUBLAS(cublasGemmStridedBatchedEx(
                    handle, CUBLAS_OP_N, CUBLAS_OP_N, D, Lq, Lk, &one, v, CUDA_R_32F, (int)vs2, vs1, s,
                    CUDA_R_32F, Lk, (long long)group * LL, &zero, o, CUDA_R_32F, (int)os2,
                    (long long)group * os1, nb, ct, CUBLAS_GEMM_DEFAULT));
            }
        }
    }
    if (!f32) {
        naive_shape os = {{p->o_stride[0], p->o_stride[1], p->o_stride[2]}, H, Lq, D, (long long)B * H * Lq * D};
        const int blocks = (int)((os.total + 255) / 256 < 65536 ? (os.total + 255) / 256 : 65536);
        if (p->dtype == FW_F16)
            naive_narrow_kernel<__half><<<blocks, 256, 0, stream>>>(Of, (__half *)p->o, os);
        else
            naive_narrow_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(Of, (__nv_bfloat16 *)p->o, os);
        NAIVE_CUDA(fw_cuda_launch_error());
    }
done:
    if (S) fw_cuda_ws_free(S, s_bytes, stream);
    if (Vf) fw_cuda_ws_free(Vf, vf_bytes, stream);
    if (Of) fw_cuda_ws_free(Of, of_bytes, stream);
    return st;
}

extern "C" const fw_backend fw_backend_cuda_naive = {
    "cuda-naive",
    "cuBLAS Q·Kᵀ, row softmax kernel, cuBLAS P·V; materialises Lq×Lk (baseline)",
    FW_DEVICE_CUDA,
    fw_cuda_available,
    supports_,
    NULL,
    forward_,
    NULL,
    NULL,
};
