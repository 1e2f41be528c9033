/* Staging of the problems cuda-flash's kernels cannot read in place (stage.h): which tensors, the staged
 * problem's shape, and the copies in and out. */
#include <stdint.h>
#include <string.h>
#include "backends/cuda/bwd/heuristics.h"
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/common/stage.h"
#include "backends/cuda/common/workspace.h"

/* The tensors a problem may stage, in the order they are laid out in the workspace. */
enum { ST_Q, ST_K, ST_V, ST_O, ST_DOUT, ST_DQ, ST_DK, ST_DV, ST_N };

/* One tensor of a problem: the caller's pointer and strides, its geometry (batch entries, heads, rows a head;
 * packed tensors: 1 entry of total rows), and whether the call writes it (copied back) or reads it (copied in). */
typedef struct stage_slot {
    const void *ptr; /* NULL: the call has no such tensor */
    const int64_t *stride;
    int64_t nb, nh, ns;
    int out;
} stage_slot;

static stage_slot slot_of(const fw_problem *p, int i)
{
    const int64_t qb = p->cu_seqlens_q ? 1 : p->batch, qs = p->cu_seqlens_q ? p->total_q : p->seqlen_q;
    const int64_t kb = p->kind == FW_CALL_VARLEN ? 1 : p->batch, ks = p->kind == FW_CALL_VARLEN ? p->total_k : p->seqlen_k;
    const int64_t H = p->heads, Hk = p->kv_heads;
    const int bwd = p->dout != NULL; /* the backward reads o; the forward writes it */
    switch (i) {
    case ST_Q: return {p->q, p->q_stride, qb, H, qs, 0};
    case ST_K: return {p->k, p->k_stride, kb, Hk, ks, 0};
    case ST_V: return {p->v, p->v_stride, kb, Hk, ks, 0};
    case ST_O: return {p->o, p->o_stride, qb, H, qs, !bwd};
    case ST_DOUT: return {p->dout, p->do_stride, qb, H, qs, 0};
    case ST_DQ: return {p->dq, p->dq_stride, qb, H, qs, 1};
    case ST_DK: return {p->dk, p->dk_stride, kb, Hk, ks, 1};
    default: return {p->dv, p->dv_stride, kb, Hk, ks, 1};
    }
}

/* The staged problem's tensor i now points at ptr with contiguous (B, S, H, dp) strides. */
static void slot_place(fw_problem *s, int i, void *ptr, const stage_slot *t, int64_t dp)
{
    int64_t *stride = NULL;
    switch (i) {
    case ST_Q: s->q = ptr; stride = s->q_stride; break;
    case ST_K: s->k = ptr; stride = s->k_stride; break;
    case ST_V: s->v = ptr; stride = s->v_stride; break;
    case ST_O: s->o = ptr; stride = s->o_stride; break;
    case ST_DOUT: s->dout = ptr; stride = s->do_stride; break;
    case ST_DQ: s->dq = ptr; stride = s->dq_stride; break;
    case ST_DK: s->dk = ptr; stride = s->dk_stride; break;
    default: s->dv = ptr; stride = s->dv_stride; break;
    }
    stride[0] = t->ns * t->nh * dp;
    stride[1] = dp;
    stride[2] = t->nh * dp;
    stride[3] = 1;
}

/* Can the 16-byte-row kernels read tensor t of a problem with head dim d in place. */
static int slot_in_place(const stage_slot *t, int64_t d)
{
    return d % 8 == 0 && fw_cuda_aligned16(t->ptr) && fw_cuda_unaligned_stride(t->stride, t->nb, t->nh, t->ns, 8) < 0;
}

/* Tensor i of p into *t; 1 where it is staged (present, and not readable in place). */
static int slot_staged(const fw_problem *p, int i, stage_slot *t)
{
    *t = slot_of(p, i);
    return t->ptr && !slot_in_place(t, p->head_dim);
}

static int64_t staged_dim(int64_t d) { return (d + 7) / 8 * 8; }

/* Bytes of one staged tensor, rounded up so that every staged tensor starts 256-byte aligned (TMA maps). */
static size_t slot_bytes(const stage_slot *t, int64_t dp)
{
    return ((size_t)(t->nb * t->nh * t->ns * dp) * 2 + 255) & ~(size_t)255;
}

extern "C" int fw_stage_needed(const fw_problem *p)
{
    if (p->device.kind != FW_DEVICE_CUDA || (p->dtype != FW_F16 && p->dtype != FW_BF16)) return 0;
    if (p->kind == FW_CALL_KVCACHE || p->head_dim < 1 || p->head_dim > 256) return 0;
    stage_slot t;
    for (int i = 0; i < ST_N; i++)
        if (slot_staged(p, i, &t)) return 1;
    return 0;
}

extern "C" int fw_stage_allowed(const fw_problem *p, char *why, size_t why_len)
{
    if (p->workspace && !p->dout && fw_stage_needed(p))
        return fw_why(why, why_len,
                      "this call (head_dim %lld) needs a staged copy of its tensors (cuda-flash reads 16-byte row "
                      "chunks: head_dim a multiple of 8, rows 16-byte aligned), and a call under a context workspace "
                      "(fw_context_set_workspace) does not allocate",
                      (long long)p->head_dim);
    return 1;
}

/* A 16-byte-aligned address that stands for a staged tensor in a shape (never dereferenced). */
alignas(16) static const unsigned char stage_placeholder[16] = {0};

extern "C" void fw_stage_shape(const fw_problem *p, fw_problem *s)
{
    *s = *p;
    s->head_dim = staged_dim(p->head_dim);
    stage_slot t;
    for (int i = 0; i < ST_N; i++)
        if (slot_staged(p, i, &t)) slot_place(s, i, (void *)stage_placeholder, &t, s->head_dim);
}

extern "C" int fw_stage_backward_wanted(const fw_problem *p, const fw_knobs *k)
{
    if (p->kind != FW_CALL_DENSE || !fw_stage_needed(p)) return 0; /* ragged backward: not staged */
    fw_problem s;
    fw_stage_shape(p, &s);
    return fw_bwd_tensor_cores_take(&s, k, NULL, 0) && !fw_bwd_tensor_cores_take(p, k, NULL, 0);
}

/* ---- the copies ---------------------------------------------------------------------------------- */

/* A caller's tensor and its staged copy: rows in the staged order (b, s, h), cpr 16-byte chunks a staged row. */
typedef struct stage_geom {
    long long nh, ns;         /* heads, rows a head */
    long long sb, sh, ss;     /* the caller's strides (elements) */
    long long chunks;         /* staged chunks in all: rows · cpr */
    int d, cpr;               /* the real head dim; chunks of 8 elements a staged row */
} stage_geom;

/* The caller's element offset of staged row `row` (rows in the staged order b, s, h). */
static __device__ __forceinline__ long long stage_row_offset(const stage_geom &g, long long row)
{
    const long long h = row % g.nh, bs = row / g.nh, s = bs % g.ns, b = bs / g.ns;
    return b * g.sb + h * g.sh + s * g.ss;
}

/* In: each thread assembles one 16-byte chunk of the staged tensor from the caller's elements (any alignment),
 * zero past the head dim, and stores it whole. */
static __global__ void stage_in_kernel(uint4 *staged, const uint16_t *src, stage_geom g)
{
    for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < g.chunks;
         c += (long long)gridDim.x * blockDim.x) {
        const long long row = c / g.cpr;
        const int col = (int)(c - row * g.cpr) * 8;
        const uint16_t *in = src + stage_row_offset(g, row) + col;
        union {
            uint4 v;
            uint16_t e[8];
        } u;
#pragma unroll
        for (int j = 0; j < 8; j++) u.e[j] = col + j < g.d ? in[j] : (uint16_t)0;
        staged[c] = u.v;
    }
}

/* Out: the staged result's rows back into the caller's tensor, elements below the head dim only (the caller's
 * padding stays as it was). A warp copies whole rows, its lanes on consecutive elements, so that each store
 * instruction writes one contiguous run of the caller's row (a thread a 16-byte chunk wrote 2-byte elements 16
 * bytes apart, the largest cost of a staged call: docs/PERF.md, Staged head dims). A block takes (b, s) pairs
 * from blockIdx.x by the grid's stride, its warps the heads; a pair steps by (step_b, step_s), without dividing. */
static __global__ void stage_out_kernel(uint16_t *dst, const uint16_t *staged, stage_geom g, long long nbs,
                                        long long step_b, long long step_s)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
    const int dp = g.cpr * 8;
    long long b = blockIdx.x / g.ns, s = blockIdx.x - b * g.ns;
    for (long long bs = blockIdx.x; bs < nbs; bs += gridDim.x) {
        for (long long h = warp; h < g.nh; h += nwarps) {
            uint16_t *out = dst + b * g.sb + h * g.sh + s * g.ss;
            const uint16_t *in = staged + (bs * g.nh + h) * dp;
            for (int j = lane; j < g.d; j += 32) out[j] = in[j];
        }
        b += step_b;
        s += step_s;
        if (s >= g.ns) {
            s -= g.ns;
            b++;
        }
    }
}

#define STAGE_THREADS 256
#define STAGE_MAX_BLOCKS (1u << 20)
#define STAGE_OUT_BLOCKS 8192u /* (b, s) pairs in flight; each block then loops */

/* Copies tensor t into its staged copy (or, for an output, back), ordered on the stream. */
static fw_status stage_copy(const stage_slot *t, void *staged, int64_t d, int64_t dp, const fw_exec *ex)
{
    stage_geom g;
    g.nh = t->nh;
    g.ns = t->ns;
    g.sb = t->stride[0];
    g.sh = t->stride[1];
    g.ss = t->stride[2];
    g.d = (int)d;
    g.cpr = (int)(dp / 8);
    g.chunks = (long long)(t->nb * t->nh * t->ns) * g.cpr;
    if (g.chunks == 0) return FW_OK;
    const cudaStream_t s = (cudaStream_t)ex->stream;
    if (t->out) {
        const long long nbs = (long long)t->nb * t->ns;
        const unsigned blocks = nbs > STAGE_OUT_BLOCKS ? STAGE_OUT_BLOCKS : (unsigned)nbs;
        const unsigned threads = 32u * (unsigned)(t->nh < 8 ? t->nh : 8);
        const long long step_b = blocks / t->ns, step_s = blocks - step_b * t->ns;
        stage_out_kernel<<<blocks, threads, 0, s>>>((uint16_t *)const_cast<void *>(t->ptr), (const uint16_t *)staged, g,
                                                    nbs, step_b, step_s);
    } else {
        const long long want = (g.chunks + STAGE_THREADS - 1) / STAGE_THREADS;
        const unsigned blocks = want > (long long)STAGE_MAX_BLOCKS ? STAGE_MAX_BLOCKS : (unsigned)want;
        stage_in_kernel<<<blocks, STAGE_THREADS, 0, s>>>((uint4 *)staged, (const uint16_t *)t->ptr, g);
    }
    FW_CUDA_CHECK_LAUNCH();
    return FW_OK;
}

/* The copies of one direction (out = 0: the inputs, before the body; 1: the outputs, after it). */
static fw_status stage_copies(const stage_slot *t, void *const *staged, int out, int64_t d, int64_t dp,
                              const fw_exec *ex)
{
    for (int i = 0; i < ST_N; i++)
        if (staged[i] && t[i].out == out) {
            const fw_status st = stage_copy(&t[i], staged[i], d, dp, ex);
            if (st != FW_OK) return st;
        }
    return FW_OK;
}

extern "C" fw_status fw_stage_run(const fw_problem *p, const fw_config *cfg, const fw_exec *ex, fw_stage_body body)
{
    char why[256];
    if (!fw_stage_allowed(p, why, sizeof why)) {
        fw_why(ex->err, ex->err_len, "%s", why);
        return FW_ERR_UNSUPPORTED;
    }
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed()) {
        fw_why(ex->err, ex->err_len, "cannot select cuda:%d", p->device.index);
        return FW_ERR_DEVICE;
    }
    const int64_t d = p->head_dim, dp = staged_dim(d);
    stage_slot t[ST_N];
    size_t at[ST_N], bytes = 0;
    for (int i = 0; i < ST_N; i++) {
        at[i] = bytes;
        if (slot_staged(p, i, &t[i])) bytes += slot_bytes(&t[i], dp);
        else t[i].ptr = NULL; /* absent, or read or written in place */
    }
    const cudaStream_t s = (cudaStream_t)ex->stream;
    void *mem = NULL;
    const cudaError_t e = fw_cuda_ws_alloc(&mem, bytes, s);
    if (e != cudaSuccess) {
        fw_why(ex->err, ex->err_len, "staging head_dim %lld as %lld needs %zu bytes of device workspace: %s",
               (long long)d, (long long)dp, bytes, cudaGetErrorString(e));
        return e == cudaErrorMemoryAllocation ? FW_ERR_OUT_OF_MEMORY : FW_ERR_DEVICE;
    }
    fw_problem sp = *p;
    sp.head_dim = dp;
    void *staged[ST_N];
    for (int i = 0; i < ST_N; i++) {
        staged[i] = t[i].ptr ? (char *)mem + at[i] : NULL;
        if (staged[i]) slot_place(&sp, i, staged[i], &t[i], dp);
    }
    fw_status st = stage_copies(t, staged, 0, d, dp, ex);
    if (st == FW_OK) st = body(&sp, cfg, ex);
    if (st == FW_OK) st = stage_copies(t, staged, 1, d, dp, ex);
    const cudaError_t fe = fw_cuda_ws_free(mem, bytes, s); /* stream-ordered: after the copies out */
    if (st == FW_OK && fe != cudaSuccess) st = fw_cuda_failed(ex, "fw_cuda_ws_free", fe, __FILE__, __LINE__);
    return st;
}
