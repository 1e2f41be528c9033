/* The materialised ("store") CUDA backward: S, P, dP and dS of whole (batch, head) slices live in
 * device memory and cuBLAS does the products. materialize.h says when fw_cuda_backward runs it
 * and what workspace it takes.
 *
 * The unit of work is a kv unit u = b·H_kv + hk: kv head hk of batch b with the `group` query heads
 * h = hk·group + r (r = 0..group-1) that read it. The query-side rows of a unit are stacked: row
 * ρ = r·Lq + i is query i of head hk·group + r, so one GEMM covers the whole group and the GQA sum of
 * dK/dV happens inside the GEMM's f32 reduction (k = group·Lq), with no atomics. Per chunk of units
 * (on the caller's stream, cuBLAS column-major; a row-major X is the column-major Xᵀ):
 *   1. S  = Q Kᵀ      (group·Lq)×Lk f32    GemmStridedBatchedEx(T, N, Lk, group·Lq, D)
 *   2. dP = dO Vᵀ     (group·Lq)×Lk f32    the same with V, dO
 *   3. P = exp(scale·S − LSE) on the visible keys (fw_key_range; 0 elsewhere and where LSE = −inf),
 *      dS = P ∘ (dP − Δ), Δ = rowsum(dO ∘ O) from a pre-pass; f32: in place; f16/bf16: P and dS
 *      written in the input dtype so that steps 4-6 run on tensor cores (f32 accumulation)
 *   4. dV = Pᵀ dO               GemmStridedBatchedEx(N, T, D, Lk, group·Lq)      into f32 dV_acc
 *   5. dQ = scale · dS K        GemmStridedBatchedEx(N, N, D, group·Lq, Lk)      into f32 dQ_acc
 *   6. dK = scale · dSᵀ Q       GemmStridedBatchedEx(N, T, D, Lk, group·Lq)      into f32 dK_acc
 * The batch of one GEMM call is a run of consecutive units with one stride per operand: the whole
 * chunk when every operand's batch stride is H_kv × its kv-head stride (or B = 1), else the units of
 * one batch index. When the budget cannot hold one whole unit, a unit runs in passes of fewer query
 * heads and dK/dV accumulate across passes (beta = 1, f32, fixed order). At the end the f32
 * accumulators are written to dq, dk, dv in their dtype and strides (only the D elements of each row).
 *
 * Inputs are read by cuBLAS in place where their strides allow (row stride >= D and < 2^31; for q and
 * dout of a GQA group, the heads' rows must stack with one stride: head stride = Lq × row stride);
 * otherwise (e.g. q in (B, S, H, D) with group > 1, broadcast rows) they are first copied, in their
 * dtype, to contiguous (B, H, S, D) buffers. Every step is deterministic: cuBLAS GEMMs are
 * bit-reproducible on one GPU model and toolkit, and nothing uses atomics.
 *
 * Precision: f32 compute (CUBLAS_COMPUTE_32F) throughout; f16/bf16 inputs go to cuBLAS as
 * CUDA_R_16F / CUDA_R_16BF with f32 output. An f32 call in FW_PRECISION_TF32 uses
 * CUBLAS_COMPUTE_32F_FAST_TF32. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "backends/cuda/common/cuda_blas.h"
#include "backends/cuda/bwd/materialize.h"
#include "backends/cuda/bwd/preprocess.cuh" /* fw_bwd_io, fw_bwd_launch_delta */
#include "backends/cuda/common/workspace.h"

#define MAT_ALIGN ((size_t)256)
#define MAT_MAX_BLOCKS (1LL << 20)

/* ---- sizes and the plan ----------------------------------------------------------------------- */
static size_t mat_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }
static size_t mat_mul(size_t a, size_t b) { return a && b > SIZE_MAX / a ? SIZE_MAX : a * b; }
static size_t mat_align(size_t x) { return x > SIZE_MAX - MAT_ALIGN ? SIZE_MAX : (x + MAT_ALIGN - 1) & ~(MAT_ALIGN - 1); }

/* How cuBLAS reads one input: element offset of unit (b, hk) = b·batch + hk·unit, stacked rows
 * ρ (= r·Lq + i for q/dout, = j for k/v) at ρ·ld. copy: a contiguous (B, H, S, D) copy is read instead. */
struct mat_view {
    long long ld, unit, batch;
    int copy;
};

/* q or dout: (B, H, Lq, D) with strides s; the group's rows must stack with one stride. */
static mat_view mat_view_q(const fw_problem *p, const int64_t *s)
{
    const long long D = p->head_dim, Lq = p->seqlen_q, G = p->group;
    mat_view v;
    v.copy = 0;
    if (G == 1 && Lq == 1) v.ld = D; /* a single row: any ld >= D */
    else if (G == 1) v.ld = s[2];
    else if (Lq == 1) v.ld = s[1];   /* the stacked rows are the group's heads */
    else v.ld = s[1] == Lq * s[2] ? s[2] : -1;
    if (v.ld < D || v.ld > INT_MAX) {
        v.copy = 1;
        v.ld = D;
        v.unit = G * Lq * D;
        v.batch = p->heads * Lq * D;
    } else {
        v.unit = G * s[1];
        v.batch = s[0];
    }
    if (p->kv_heads == 1) v.unit = v.batch; /* one unit per batch index: batches step by the batch stride */
    return v;
}

/* k or v: (B, H_kv, Lk, D) with strides s. */
static mat_view mat_view_k(const fw_problem *p, const int64_t *s)
{
    const long long D = p->head_dim, Lk = p->seqlen_k;
    mat_view v;
    v.copy = 0;
    v.ld = Lk == 1 ? D : s[2];
    if (v.ld < D || v.ld > INT_MAX) {
        v.copy = 1;
        v.ld = D;
        v.unit = Lk * D;
        v.batch = p->kv_heads * Lk * D;
    } else {
        v.unit = s[1];
        v.batch = s[0];
    }
    if (p->kv_heads == 1) v.unit = v.batch;
    return v;
}

/* Byte offsets of the buffers inside the one workspace allocation. */
struct mat_layout {
    size_t delta, dq, dk, dv, qc, doc, kc, vc; /* fixed part */
    size_t fixed;
    size_t s, dp, p16, ds16; /* chunk part, after the fixed part */
    size_t total;
    long long chunk_pairs;
};

static size_t mat_take(size_t *at, size_t bytes)
{
    const size_t off = *at;
    *at = mat_align(mat_add(*at, bytes));
    return off;
}

static void mat_layout_fixed(const fw_problem *p, int copies, mat_layout *l)
{
    const size_t es = p->dtype == FW_F32 ? 4 : 2;
    const size_t rows_q = mat_mul(mat_mul((size_t)p->batch, (size_t)p->heads), (size_t)p->seqlen_q);
    const size_t rows_k = mat_mul(mat_mul((size_t)p->batch, (size_t)p->kv_heads), (size_t)p->seqlen_k);
    const size_t D = (size_t)p->head_dim;
    size_t at = 0;
    memset(l, 0, sizeof *l);
    l->delta = mat_take(&at, mat_mul(rows_q, 4));
    l->dq = mat_take(&at, mat_mul(mat_mul(rows_q, D), 4));
    l->dk = mat_take(&at, mat_mul(mat_mul(rows_k, D), 4));
    l->dv = mat_take(&at, mat_mul(mat_mul(rows_k, D), 4));
    l->qc = (copies & 1) ? mat_take(&at, mat_mul(mat_mul(rows_q, D), es)) : 0;
    l->doc = (copies & 2) ? mat_take(&at, mat_mul(mat_mul(rows_q, D), es)) : 0;
    l->kc = (copies & 4) ? mat_take(&at, mat_mul(mat_mul(rows_k, D), es)) : 0;
    l->vc = (copies & 8) ? mat_take(&at, mat_mul(mat_mul(rows_k, D), es)) : 0;
    l->fixed = at;
    l->total = at;
}

static void mat_layout_chunk(const fw_problem *p, long long chunk_pairs, mat_layout *l)
{
    size_t at = l->fixed;
    const size_t n = (size_t)chunk_pairs;
    l->chunk_pairs = chunk_pairs;
    l->s = mat_take(&at, mat_mul(n, 4));
    l->dp = mat_take(&at, mat_mul(n, 4));
    if (p->dtype != FW_F32) {
        l->p16 = mat_take(&at, mat_mul(n, 2));
        l->ds16 = mat_take(&at, mat_mul(n, 2));
    }
    l->total = at;
}

static int mat_copies(const fw_problem *p)
{
    return (mat_view_q(p, p->q_stride).copy ? 1 : 0) | (mat_view_q(p, p->do_stride).copy ? 2 : 0) |
           (mat_view_k(p, p->k_stride).copy ? 4 : 0) | (mat_view_k(p, p->v_stride).copy ? 8 : 0);
}

extern "C" int fw_bwd_materialize_plan(const fw_problem *p, fw_bwd_mat_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    const size_t bpp = p->dtype == FW_F32 ? 8 : 12; /* workspace bytes per (query, key) pair */
    pl->slice_bytes = mat_mul(mat_mul((size_t)p->seqlen_q, (size_t)p->seqlen_k), bpp);
    pl->copies = mat_copies(p);
    mat_layout l;
    mat_layout_fixed(p, pl->copies, &l);
    pl->fixed_bytes = l.fixed;
    if (pl->slice_bytes == SIZE_MAX || pl->fixed_bytes >= ((size_t)1 << 62)) return 0;
    long long slices; /* (batch, head) slices per chunk */
    if (p->memory_budget > 0) {
        /* each of the chunk's (up to) four buffers is rounded up to MAT_ALIGN: keep that slack inside too */
        if (p->memory_budget <= pl->fixed_bytes || p->memory_budget - pl->fixed_bytes <= 4 * MAT_ALIGN) return 0;
        slices = (long long)((p->memory_budget - pl->fixed_bytes - 4 * MAT_ALIGN) / pl->slice_bytes);
    } else {
        slices = (long long)(FW_BWD_MATERIALIZE_DEFAULT_BYTES / pl->slice_bytes);
    }
    if (slices < 1) {
        if (p->memory_budget > 0) return 0;
        slices = 1; /* no budget: one slice, however large */
    }
    const long long G = p->group, U = p->batch * p->kv_heads;
    const long long gmax = INT_MAX / p->seqlen_q; /* the GEMMs' n = heads·Lq is an int */
    if (slices >= G && G <= gmax) {
        long long units = slices / G;
        if (units > U) units = U;
        if (units > INT_MAX) units = INT_MAX; /* cuBLAS batch count */
        pl->units_per_chunk = units;
        pl->heads_per_pass = G;
    } else {
        long long g = slices < G ? slices : G;
        if (g > gmax) g = gmax;
        pl->units_per_chunk = 1;
        pl->heads_per_pass = g;
    }
    pl->chunk_bytes = mat_mul(pl->slice_bytes, (size_t)(pl->units_per_chunk * pl->heads_per_pass));
    pl->fits = 1;
    return 1;
}

/* ---- kernels ---------------------------------------------------------------------------------- */
/* A strided (N1, N2, N3, D) tensor and its contiguous twin. */
struct mat_shape {
    long long st[3];
    long long n2, n3, d, total;
};

/* Offset in the strided tensor of element idx of its contiguous twin. */
__device__ __forceinline__ long long mat_strided(const mat_shape &s, long long idx)
{
    const long long d = idx % s.d; idx /= s.d;
    const long long i = idx % s.n3; idx /= s.n3;
    const long long h = idx % s.n2; idx /= s.n2;
    return idx * s.st[0] + h * s.st[1] + i * s.st[2] + d;
}

/* strided T -> contiguous T (the input copies) */
template <typename T>
__global__ void __launch_bounds__(256) mat_pack_kernel(const T *src, T *dst, mat_shape s)
{
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < s.total;
         idx += (long long)gridDim.x * blockDim.x)
        dst[idx] = src[mat_strided(s, idx)];
}

/* contiguous f32 accumulator -> the output in its dtype and strides */
template <typename T>
__global__ void __launch_bounds__(256) mat_unpack_kernel(const float *src, T *dst, mat_shape s)
{
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < s.total;
         idx += (long long)gridDim.x * blockDim.x)
        fw_bwd_io<T>::st(dst + mat_strided(s, idx), src[idx]);
}

/* Step 3 over the rows of one chunk. Row ρ of the chunk's workspace: unit u0 + ρ / (g·Lq), query head
 * r0 + (ρ mod g·Lq) / Lq of the group, query i = ρ mod Lq; its (B, H, Lq) row is (u·group + r)·Lq + i. */
struct mat_grad_args {
    const float *lse, *delta;
    long long nrows, u0;
    long long diag, wl, wr; /* fw_problem's normalised window (FW_UNBOUNDED ok) */
    int g, r0, group, Lq, Lk;
    int tpr;                /* threads per row: 32, 64, 128 or 256 */
    float scale;
};

/* T = float: P and dS overwrite S and dP in place (each element read, then written, by one thread);
 * T = __half / __nv_bfloat16: P and dS go to separate buffers in the input dtype. */
template <typename T>
__global__ void __launch_bounds__(256) mat_grad_kernel(const float *S, const float *dP, T *P, T *dS, mat_grad_args a)
{
    const int rpb = 256 / a.tpr, sub = threadIdx.x / a.tpr, t = threadIdx.x % a.tpr;
    const long long rows_per_unit = (long long)a.g * a.Lq;
    for (long long row = blockIdx.x * (long long)rpb + sub; row < a.nrows; row += (long long)gridDim.x * rpb) {
        const long long ul = row / rows_per_unit, rem = row % rows_per_unit;
        const long long r = a.r0 + rem / a.Lq, i = rem % a.Lq;
        const long long gi = ((a.u0 + ul) * a.group + r) * a.Lq + i;
        const float lse = a.lse[gi], dl = a.delta[gi];
        /* fw_key_range */
        const long long lo_ = i + a.diag - a.wl, hi_ = i + a.diag + a.wr + 1;
        const long long lo = lo_ < 0 ? 0 : lo_, hi = hi_ > a.Lk ? a.Lk : hi_;
        const bool none = lse == -INFINITY;
        const long long base = row * a.Lk;
        for (long long j = t; j < a.Lk; j += a.tpr) {
            const float s = S[base + j], dp = dP[base + j];
            float pv = 0.0f, ds = 0.0f;
            if (!none && j >= lo && j < hi) {
                pv = expf(fmaf(a.scale, s, -lse));
                ds = pv * (dp - dl);
            }
            fw_bwd_io<T>::st(P + base + j, pv);
            fw_bwd_io<T>::st(dS + base + j, ds);
        }
    }
}

/* ---- host side -------------------------------------------------------------------------------- */
static unsigned mat_blocks(long long work, long long per_block)
{
    long long n = (work + per_block - 1) / per_block;
    if (n < 1) n = 1;
    if (n > MAT_MAX_BLOCKS) n = MAT_MAX_BLOCKS;
    return (unsigned)n;
}

/* One GEMM operand: pointer to the run's first unit, leading dimension, stride between units. */
struct mat_op {
    const void *ptr;
    long long ld, stride;
};

static cublasStatus_t mat_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, long long m,
                               long long n, long long k, float alpha, mat_op A, mat_op B, cudaDataType ab,
                               float beta, float *C, long long ldc, long long sc, long long batch,
                               cublasComputeType_t ct)
{
    return cublasGemmStridedBatchedEx(h, ta, tb, (int)m, (int)n, (int)k, &alpha, A.ptr, ab, (int)A.ld, A.stride,
                                      B.ptr, ab, (int)B.ld, B.stride, &beta, C, CUDA_R_32F, (int)ldc, sc,
                                      (int)batch, ct, CUBLAS_GEMM_DEFAULT);
}

template <typename T>
static void mat_pack(const void *src, const int64_t *st, void *dst, long long n2, long long n3, const fw_problem *p,
                     cudaStream_t s)
{
    mat_shape sh = {{st[0], st[1], st[2]}, n2, n3, p->head_dim, p->batch * n2 * n3 * p->head_dim};
    mat_pack_kernel<T><<<mat_blocks(sh.total, 256), 256, 0, s>>>((const T *)src, (T *)dst, sh);
}

template <typename T>
static void mat_unpack(const float *src, void *dst, const int64_t *st, long long n2, long long n3,
                       const fw_problem *p, cudaStream_t s)
{
    mat_shape sh = {{st[0], st[1], st[2]}, n2, n3, p->head_dim, p->batch * n2 * n3 * p->head_dim};
    mat_unpack_kernel<T><<<mat_blocks(sh.total, 256), 256, 0, s>>>(src, (T *)dst, sh);
}

/* The launches for dtype T, with the workspace `ws` laid out as l. */
template <typename T>
static fw_status mat_run(const fw_problem *p, const fw_bwd_mat_plan *pl, const mat_layout *l, char *ws,
                         cublasHandle_t h, const fw_exec *ex)
{
    const cudaStream_t s = (cudaStream_t)ex->stream;
    const bool f32 = p->dtype == FW_F32;
    const cudaDataType ab = f32 ? CUDA_R_32F : (p->dtype == FW_F16 ? CUDA_R_16F : CUDA_R_16BF);
    const cublasComputeType_t ct =
        f32 && p->precision == FW_PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const long long B = p->batch, H = p->heads, Hkv = p->kv_heads, G = p->group;
    const long long Lq = p->seqlen_q, Lk = p->seqlen_k, D = p->head_dim, LL = Lq * Lk;
    const size_t es = sizeof(T);

    float *delta = (float *)(ws + l->delta), *dq = (float *)(ws + l->dq), *dk = (float *)(ws + l->dk);
    float *dv = (float *)(ws + l->dv), *S = (float *)(ws + l->s), *dP = (float *)(ws + l->dp);
    T *P = f32 ? (T *)S : (T *)(ws + l->p16), *dS = f32 ? (T *)dP : (T *)(ws + l->ds16);

    /* the inputs as cuBLAS reads them */
    mat_view vq = mat_view_q(p, p->q_stride), vdo = mat_view_q(p, p->do_stride);
    mat_view vk = mat_view_k(p, p->k_stride), vv = mat_view_k(p, p->v_stride);
    const char *q = (const char *)p->q, *dout = (const char *)p->dout, *k = (const char *)p->k, *v = (const char *)p->v;
    if (vq.copy) { mat_pack<T>(p->q, p->q_stride, ws + l->qc, H, Lq, p, s); q = ws + l->qc; }
    if (vdo.copy) { mat_pack<T>(p->dout, p->do_stride, ws + l->doc, H, Lq, p, s); dout = ws + l->doc; }
    if (vk.copy) { mat_pack<T>(p->k, p->k_stride, ws + l->kc, Hkv, Lk, p, s); k = ws + l->kc; }
    if (vv.copy) { mat_pack<T>(p->v, p->v_stride, ws + l->vc, Hkv, Lk, p, s); v = ws + l->vc; }
    FW_CUDA_CHECK_LAUNCH();

    fw_bwd_launch_delta<T>(p, delta, NULL, s); /* Δ */
    FW_CUDA_CHECK_LAUNCH();

    /* one GEMM call per run of units with uniform strides */
    const bool flat = B == 1 || (vq.batch == Hkv * vq.unit && vdo.batch == Hkv * vdo.unit &&
                                 vk.batch == Hkv * vk.unit && vv.batch == Hkv * vv.unit);
    const long long U = B * Hkv, upc = pl->units_per_chunk, hpp = pl->heads_per_pass;
    const float one = 1.0f, zero = 0.0f, scale = p->scale;

    mat_grad_args ga;
    ga.lse = p->lse; ga.delta = delta;
    ga.diag = p->diag_offset; ga.wl = p->window_left; ga.wr = p->window_right;
    ga.group = (int)G; ga.Lq = (int)Lq; ga.Lk = (int)Lk; ga.scale = scale;
    ga.tpr = Lk > 128 ? 256 : Lk > 64 ? 128 : Lk > 32 ? 64 : 32;

    for (long long u0 = 0; u0 < U; u0 += upc) {
        const long long nu = upc < U - u0 ? upc : U - u0;
        for (long long r0 = 0; r0 < G; r0 += hpp) {
            const long long g = hpp < G - r0 ? hpp : G - r0;
            const float beta_kv = r0 ? one : zero; /* dK/dV: later passes over a unit's heads accumulate */
            for (int phase = 0; phase < 2; phase++) {
                if (phase == 1) { /* step 3 on the whole chunk */
                    ga.nrows = nu * g * Lq; ga.u0 = u0; ga.g = (int)g; ga.r0 = (int)r0;
                    mat_grad_kernel<T><<<mat_blocks(ga.nrows, 256 / ga.tpr), 256, 0, s>>>(S, dP, P, dS, ga);
                    FW_CUDA_CHECK_LAUNCH();
                }
                for (long long ua = u0; ua < u0 + nu;) {
                    long long ub = u0 + nu;
                    if (!flat && ub > (ua / Hkv + 1) * Hkv) ub = (ua / Hkv + 1) * Hkv; /* end of batch index */
                    const long long b = ua / Hkv, hk = ua % Hkv, n = ub - ua;
                    /* element offsets of the run's first unit; q/dout start at head r0 of the group */
                    const mat_op Q = {q + (size_t)(b * vq.batch + hk * vq.unit + r0 * Lq * vq.ld) * es, vq.ld, vq.unit};
                    const mat_op dO = {dout + (size_t)(b * vdo.batch + hk * vdo.unit + r0 * Lq * vdo.ld) * es, vdo.ld,
                                       vdo.unit};
                    const mat_op K = {k + (size_t)(b * vk.batch + hk * vk.unit) * es, vk.ld, vk.unit};
                    const mat_op V = {v + (size_t)(b * vv.batch + hk * vv.unit) * es, vv.ld, vv.unit};
                    const long long slot = (ua - u0) * g * LL; /* the run's first slice in the chunk */
                    if (phase == 0) {
                        /* 1. Sᵀ (Lk × g·Lq, col-major) = op_T(K as D×Lk) · (Q as D × g·Lq) */
                        FW_CUBLAS_CHECK(mat_gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, Lk, g * Lq, D, one, K, Q, ab, zero, S + slot,
                                            Lk, g * LL, n, ct));
                        /* 2. dPᵀ = op_T(V) · dO */
                        FW_CUBLAS_CHECK(mat_gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, Lk, g * Lq, D, one, V, dO, ab, zero, dP + slot,
                                            Lk, g * LL, n, ct));
                    } else {
                        const mat_op Pm = {P + slot, Lk, g * LL}, dSm = {dS + slot, Lk, g * LL};
                        /* 4. dVᵀ (D × Lk) = (dO as D × g·Lq) · op_T(Pᵀ as Lk × g·Lq) */
                        FW_CUBLAS_CHECK(mat_gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, D, Lk, g * Lq, one, dO, Pm, ab, beta_kv,
                                            dv + ua * Lk * D, D, Lk * D, n, ct));
                        /* 5. dQᵀ (D × g·Lq) = scale · (K as D × Lk) · (dSᵀ as Lk × g·Lq) */
                        FW_CUBLAS_CHECK(mat_gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, D, g * Lq, Lk, scale, K, dSm, ab, zero,
                                            dq + (ua * G + r0) * Lq * D, D, G * Lq * D, n, ct));
                        /* 6. dKᵀ (D × Lk) = scale · (Q as D × g·Lq) · op_T(dSᵀ) */
                        FW_CUBLAS_CHECK(mat_gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, D, Lk, g * Lq, scale, Q, dSm, ab, beta_kv,
                                            dk + ua * Lk * D, D, Lk * D, n, ct));
                    }
                    ua = ub;
                }
            }
        }
    }

    mat_unpack<T>(dq, p->dq, p->dq_stride, H, Lq, p, s);
    mat_unpack<T>(dk, p->dk, p->dk_stride, Hkv, Lk, p, s);
    mat_unpack<T>(dv, p->dv, p->dv_stride, Hkv, Lk, p, s);
    FW_CUDA_CHECK_LAUNCH();
    return FW_OK;
}

extern "C" fw_status fw_cuda_backward_materialize(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)cfg;
    fw_bwd_mat_plan pl;
    if (!fw_bwd_materialize_plan(p, &pl)) {
        fw_why(ex->err, ex->err_len,
               "bwd-materialize needs %zu bytes of device workspace (%zu for the Lq x Lk = %lld x %lld matrices of one "
               "(batch, head) slice, %zu for delta, the f32 gradient accumulators and input copies); the memory "
               "budget is %zu bytes (fw_context_set_memory_budget)",
               mat_add(mat_add(pl.fixed_bytes, pl.slice_bytes), 4 * MAT_ALIGN), pl.slice_bytes,
               (long long)p->seqlen_q, (long long)p->seqlen_k, pl.fixed_bytes, p->memory_budget);
        return FW_ERR_UNSUPPORTED;
    }
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed()) {
        fw_why(ex->err, ex->err_len, "cannot select cuda:%d", p->device.index);
        return FW_ERR_DEVICE;
    }
    cublasHandle_t h = NULL;
    if (fw_cublas_handle(p->device.index, &h) != CUBLAS_STATUS_SUCCESS) {
        fw_why(ex->err, ex->err_len, "cublasCreate failed on cuda:%d", p->device.index);
        return FW_ERR_DEVICE;
    }
    const cudaStream_t s = (cudaStream_t)ex->stream;
    FW_CUBLAS_CHECK(cublasSetStream(h, s));
    FW_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH)); /* f32 stays f32 with CUBLAS_COMPUTE_32F */
    FW_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));

    mat_layout l;
    mat_layout_fixed(p, pl.copies, &l);
    mat_layout_chunk(p, (long long)(pl.units_per_chunk * pl.heads_per_pass) * p->seqlen_q * p->seqlen_k, &l);
    void *ws = NULL;
    cudaError_t e = fw_cuda_ws_alloc(&ws, l.total, s);
    if (e != cudaSuccess) {
        fw_why(ex->err, ex->err_len, "bwd-materialize: workspace of %zu bytes (%zu fixed + %zu for %lld slices): %s",
               l.total, l.fixed, l.total - l.fixed, (long long)(pl.units_per_chunk * pl.heads_per_pass),
               cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? FW_ERR_OUT_OF_MEMORY : FW_ERR_DEVICE;
    }
    fw_status st;
    switch (p->dtype) {
    case FW_F32: st = mat_run<float>(p, &pl, &l, (char *)ws, h, ex); break;
    case FW_F16: st = mat_run<__half>(p, &pl, &l, (char *)ws, h, ex); break;
    default: st = mat_run<__nv_bfloat16>(p, &pl, &l, (char *)ws, h, ex); break;
    }
    e = fw_cuda_ws_free(ws, l.total, s); /* stream-ordered: safe while the launches run */
    if (st == FW_OK && e != cudaSuccess) {
        fw_why(ex->err, ex->err_len, "freeing the bwd-materialize workspace failed: %s", cudaGetErrorString(e));
        st = FW_ERR_DEVICE;
    }
    return st;
}
