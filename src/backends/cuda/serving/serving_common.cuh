/* Device code shared by the serving kernels of cuda-flash and cuda-flash-f32: the per-sequence facts
 * (read from device-resident offsets and lengths, clamped), row and key addressing (packed, dense,
 * contiguous cache, paged cache), a block's key tiles (window and split chunk), the kernel that appends
 * new keys/values into the cache, and the kernel that merges split-KV partials.
 *
 * These mirror the host accessors of src/core/problem.h exactly for valid values: fw_seq_q (seq_info's
 * q_row0, lq), fw_seq_k_len (lk), fw_seq_key_range (off = lk - lq, windows bottom-right aligned),
 * fw_row_offset (q_base + h·s1 + i·s2), fw_key_offset (key_base / page_of) and fw_lse_index
 * (lse_index). */
#ifndef FW_CUDA_SERVING_COMMON_CUH
#define FW_CUDA_SERVING_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/parts/softmax.cuh"
#include "backends/cuda/common/workspace.h"
#include "serving.h"

namespace fwsrv {

/* One sequence of the batch as the kernels see it. */
struct seq_t {
    int lq;         /* query rows (packed rows of o / q are q_row0 .. q_row0 + lq - 1) */
    int lk;         /* keys it attends to (the cache's with the new tokens) */
    int off;        /* lk - lq: query i sees keys up to i + off (+ window_right) */
    int cache_len;  /* FW_CALL_KVCACHE: keys already cached, where the new tokens go */
    int64_t q_row0; /* packed q: the sequence's first row in the seq dimension; else 0 */
    int64_t k_row0; /* FW_CALL_VARLEN: its first key row; else 0 */
};

__device__ __forceinline__ int64_t clamp64(int64_t x, int64_t lo, int64_t hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

/* Device-resident values are clamped here, never trusted (the host does not read them, so that a call
 * can be captured into a CUDA graph and replayed while they change; include/flashwatt.h states the
 * contract). An offset is clamped into [0, total] and the next one into [that offset, total], so a
 * sequence's rows stay inside the packed tensor; a length is cut to the host maximum (max_seqlen, which
 * sized the launch; rows beyond are not written); a cache length is clamped into [0, capacity] and the
 * keys with the new tokens are cut at capacity. Every row and key index the kernels form from these is
 * inside its tensor; a block-table entry is checked where it is read (page_of). */
__device__ __forceinline__ seq_t seq_info(const fw_srv_params &p, int b)
{
    seq_t s;
    s.q_row0 = 0;
    s.k_row0 = 0;
    s.cache_len = 0;
    s.lq = p.max_q;
    if (p.cu_q) {
        const int64_t a = clamp64(__ldg(p.cu_q + b), 0, p.total_q);
        const int64_t e = clamp64(__ldg(p.cu_q + b + 1), a, p.total_q);
        s.q_row0 = a;
        s.lq = (int)(e - a < (int64_t)p.max_q ? e - a : (int64_t)p.max_q);
    }
    if (p.kind == FW_CALL_VARLEN) {
        const int64_t a = clamp64(__ldg(p.cu_k + b), 0, p.total_k);
        const int64_t e = clamp64(__ldg(p.cu_k + b + 1), a, p.total_k);
        s.k_row0 = a;
        s.lk = (int)(e - a < (int64_t)p.max_k ? e - a : (int64_t)p.max_k);
    } else if (p.kind == FW_CALL_KVCACHE) {
        s.cache_len = (int)clamp64(__ldg(p.cache_seqlens + b), 0, p.capacity);
        s.lk = min(s.cache_len + (p.k_new ? s.lq : 0), p.capacity);
    } else {
        s.lk = p.max_k;
    }
    s.off = s.lk - s.lq;
    return s;
}

/* Element offset of sequence b's row 0, head 0 in a tensor laid out like q (q, o, k_new, v_new). */
__device__ __forceinline__ int64_t q_base(const fw_srv_params &p, const int64_t (&st)[3], int b, const seq_t &s)
{
    return p.cu_q ? s.q_row0 * st[2] : (int64_t)b * st[0];
}

/* Index of the LSE of row i, head h: (H, total_q) for packed queries, (B, H, max_q) otherwise. */
__device__ __forceinline__ int64_t lse_index(const fw_srv_params &p, int b, int h, int i, const seq_t &s)
{
    return p.cu_q ? (int64_t)h * p.total_q + s.q_row0 + i : ((int64_t)b * p.H + h) * p.max_q + i;
}

/* Element offset of key 0 of (sequence b, KV head hk) in k or v when not paged: key j is at + j·st[2]. */
__device__ __forceinline__ int64_t key_base(const fw_srv_params &p, const int64_t (&st)[3], int b, int hk, const seq_t &s)
{
    const int64_t row0 = p.kind == FW_CALL_VARLEN ? s.k_row0 * st[2] : (int64_t)b * st[0];
    return row0 + (int64_t)hk * st[1];
}

/* j / page_size for 0 <= j < 2^31: a multiply-high, an add and a shift (page_div.h), not a division. */
__device__ __forceinline__ uint32_t page_div(const fw_srv_params &p, uint32_t j)
{
    return (__umulhi(j, p.page_mul) + j) >> p.page_shr;
}

/* Key j's page within its sequence's table row and its row within the page (j >= 0). */
__device__ __forceinline__ int page_slot(const fw_srv_params &p, int j) { return (int)page_div(p, (uint32_t)j); }
__device__ __forceinline__ int page_row(const fw_srv_params &p, int j) { return j - page_slot(p, j) * p.page_size; }

/* The page holding key j (0 <= j < capacity) of the table row bt, or -1 when the entry is outside
 * [0, num_pages): such keys are masked and never read, and appends there are not written. */
__device__ __forceinline__ int page_of(const fw_srv_params &p, const int32_t *bt, int j)
{
    const int page = __ldg(bt + page_slot(p, j));
    return page >= 0 && page < p.num_pages ? page : -1;
}

/* The key tiles of BN keys a block visits: the keys any of its query rows i_first..i_last may see
 * (window, bottom-right aligned), within its split's chunk. n_begin is a multiple of BN, and so is the
 * chunk, so the tiles of two splits never overlap. */
template <int BN>
__device__ __forceinline__ void block_key_tiles(const fw_srv_params &p, const seq_t &s, int i_first, int i_last,
                                                int split, int &n_begin, int &n_tiles)
{
    int lo = 0, hi = s.lk;
    if (p.has_window) {
        lo = max(lo, i_first + s.off - p.wl);
        hi = min(hi, i_last + s.off + p.wr + 1);
    }
    const int c0 = split * p.chunk;
    lo = max(lo, c0);
    hi = min(hi, c0 + p.chunk);
    n_begin = lo / BN * BN;
    n_tiles = hi > lo ? (hi - n_begin + BN - 1) / BN : 0;
}

/* Keys visible to query row i of a sequence: [lo, hi) (fw_seq_key_range). */
__device__ __forceinline__ void row_key_range(const fw_srv_params &p, const seq_t &s, int i, int &lo, int &hi)
{
    lo = 0;
    hi = s.lk;
    if (p.has_window) {
        lo = max(0, i + s.off - p.wl);
        hi = min(s.lk, i + s.off + p.wr + 1);
    }
}

/* Row stride (floats) of the partial outputs: 16-byte rows for the merge's vector loads. */
__device__ __forceinline__ int part_ld(const fw_srv_params &p) { return (p.d + 3) & ~3; }

/* Index of row (b, h, i) of split `split` among the partials. */
__device__ __forceinline__ int64_t part_row(const fw_srv_params &p, int split, int b, int h, int i)
{
    return (((int64_t)split * p.B + b) * p.H + h) * p.max_q + i;
}

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* The online-softmax step (base 2, raw scores) of one row of the serving kernels: mx is the row's new max
 * over every key it has seen (its lanes reduced); the N scores this thread holds, x(0) .. x(N-1), become
 * exp2(s·scale_log2 - mx·scale_log2) and their sum joins row_l. Returns alpha, the rescale of the row's old
 * state: exactly 1 where the max did not move, so that the caller can skip rescaling its output (past the
 * first tiles of a long key range the maxima rarely move). */
template <int N, class X>
__device__ __forceinline__ float online_row_step(float mx, float &row_m, float &row_l, float scale_log2, X &&x)
{
    const float msc = mx == -INFINITY ? 0.f : mx * scale_log2;
    const float alpha = mx == row_m ? 1.f : fwparts::fast_exp2(row_m * scale_log2 - msc);
    row_m = mx;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < N; i++) {
        const float v = fwparts::fast_exp2(fmaf(x(i), scale_log2, -msc));
        x(i) = v;
        sum += v;
    }
    row_l = row_l * alpha + sum;
    return alpha;
}

/* LSE of a row from its running max (raw score units), the scale and the sum of exponentials:
 * -inf for a row that saw no key, NaN kept. */
__device__ __forceinline__ float row_lse(float m, float scale, float l)
{
    return l > 0.f ? m * scale + logf(l) : (l == l ? -INFINITY : l);
}

/* Appends k_new/v_new into the cache at rows cache_len .. cache_len + lq - 1 of each sequence (before
 * the attention kernel, on the same stream). One thread copies 8 elements of one (token, KV head) for
 * K and V. A position at or past capacity, or on a page outside the pool, is not written. Grid: x over
 * max_q · H_kv · ceil(d / 8) in blocks of 128, y = B. */
template <typename T>
__global__ void __launch_bounds__(128) append_kernel(const fw_srv_params p, T *kc, T *vc)
{
    const int b = blockIdx.y;
    const int cpr = (p.d + 7) / 8;
    const int64_t idx = (int64_t)blockIdx.x * 128 + threadIdx.x;
    if (idx >= (int64_t)p.max_q * p.H_kv * cpr) return;
    const int c = (int)(idx % cpr);
    const int hk = (int)((idx / cpr) % p.H_kv);
    const int i = (int)(idx / ((int64_t)cpr * p.H_kv));
    const seq_t s = seq_info(p, b);
    if (i >= s.lq) return;
    const int pos = s.cache_len + i;
    if (pos >= p.capacity) return;
    int64_t ko, vo;
    if (p.paged) {
        const int page = page_of(p, p.block_table + (int64_t)b * p.bt_stride, pos);
        if (page < 0) return;
        const int r = page_row(p, pos);
        ko = (int64_t)page * p.k_s[0] + (int64_t)hk * p.k_s[1] + (int64_t)r * p.k_s[2];
        vo = (int64_t)page * p.v_s[0] + (int64_t)hk * p.v_s[1] + (int64_t)r * p.v_s[2];
    } else {
        ko = key_base(p, p.k_s, b, hk, s) + (int64_t)pos * p.k_s[2];
        vo = key_base(p, p.v_s, b, hk, s) + (int64_t)pos * p.v_s[2];
    }
    const T *kn = (const T *)p.k_new + q_base(p, p.kn_s, b, s) + (int64_t)hk * p.kn_s[1] + (int64_t)i * p.kn_s[2];
    const T *vn = (const T *)p.v_new + q_base(p, p.vn_s, b, s) + (int64_t)hk * p.vn_s[1] + (int64_t)i * p.vn_s[2];
    const int e0 = c * 8, e1 = min(e0 + 8, p.d);
    for (int e = e0; e < e1; e++) {
        kc[ko + e] = kn[e];
        vc[vo + e] = vn[e];
    }
}

/* Merges the split partials of one (b, h, i) row a block: O = Σ w_s O_s with w_s = exp(lse_s - M) / L,
 * L = Σ exp(lse_s - M), LSE = M + log L. Splits that saw no key (lse -inf) are skipped (their O_s is not
 * read); a NaN LSE propagates. The block's four warps take every fourth split, each lane four columns, and
 * sum through shared memory: a row's splits are read in parallel, not one after another (a single
 * sequence has few rows, so a warp a row left most of the GPU idle and the merge took a tenth of the
 * call). Launched as a programmatic dependent (merge_pdl), its blocks start while the attention kernel's
 * last blocks run and wait for that kernel's results at griddepcontrol.wait (a no-op otherwise).
 * Grid: B · H · max_q blocks of 128 threads. */
template <typename T>
__global__ void __launch_bounds__(128) merge_kernel(const fw_srv_params p)
{
    constexpr int W = 4;
    __shared__ float4 part[W - 1][32];
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t rows = (int64_t)p.B * p.H * p.max_q; /* partial rows a split */
    const int64_t row = blockIdx.x;
    const int i = (int)(row % p.max_q);
    const int h = (int)((row / p.max_q) % p.H);
    const int b = (int)(row / ((int64_t)p.max_q * p.H));
    const seq_t s = seq_info(p, b);
    if (i >= s.lq) return; /* the whole block: uniform */
    const float *lse = p.part_lse + row; /* split sp's at lse[sp · rows] */
    float m = -INFINITY;
    for (int sp = lane; sp < p.splits; sp += 32) m = fmaxf(m, lse[sp * rows]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0.f;
    for (int sp = lane; sp < p.splits; sp += 32) {
        const float x = lse[sp * rows];
        if (x != -INFINITY) l += expf(x - m);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    const float inv = fwparts::softmax_inv_sum(l);
    const int ld = part_ld(p);
    T *o = (T *)p.o + q_base(p, p.o_s, b, s) + (int64_t)h * p.o_s[1] + (int64_t)i * p.o_s[2];
    for (int c0 = 0; c0 < p.d; c0 += 128) { /* block-uniform trip count */
        const int c = c0 + lane * 4;
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c < p.d)
            for (int sp = warp; sp < p.splits; sp += W) {
                const float x = lse[sp * rows];
                if (x == -INFINITY) continue;
                const float w = expf(x - m) * inv;
                const float4 v = *reinterpret_cast<const float4 *>(p.part_o + (sp * rows + row) * ld + c);
                a.x += w * v.x;
                a.y += w * v.y;
                a.z += w * v.z;
                a.w += w * v.w;
            }
        if (warp > 0) part[warp - 1][lane] = a;
        __syncthreads();
        if (warp == 0) {
#pragma unroll
            for (int q = 0; q < W - 1; q++) {
                const float4 v = part[q][lane];
                a.x += v.x;
                a.y += v.y;
                a.z += v.z;
                a.w += v.w;
            }
            const float e[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (c + k < p.d) o[c + k] = from_float<T>(e[k]);
        }
        __syncthreads(); /* part is reused by the next column chunk */
    }
    if (threadIdx.x == 0 && p.lse) p.lse[lse_index(p, b, h, i, s)] = l > 0.f ? m + logf(l) : (l == l ? -INFINITY : l);
}

/* Blocks of 128 threads per SM of `kernel` at dynamic shared memory `smem` (the caller has set its
 * attributes), remembered for the last four (device, size) asked, by size: the backend's configs() runs
 * on every scheduled call, and a call asks for its natural and its capped size. 0 where the runtime
 * cannot say. */
template <auto kernel> static int blocks_per_sm(size_t smem)
{
    static std::atomic<unsigned long long> memo[4]; /* valid bit 63, device 40..47, smem 8..39, blocks 0..7 */
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    const unsigned long long key = 1ull << 63 | (unsigned long long)(dev & 0xff) << 40 | (unsigned long long)(smem & 0xffffffffu) << 8;
    std::atomic<unsigned long long> &slot = memo[(smem >> 4) & 3];
    const unsigned long long m = slot.load(std::memory_order_relaxed);
    if ((m & ~0xffull) == key) return (int)(m & 0xff);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 128, smem) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    slot.store(key | (unsigned long long)(n & 0xff), std::memory_order_relaxed);
    return n;
}

/* Host launchers of the two kernels above (kc, vc: the cache written by the append). */
template <typename T> static cudaError_t append_launch(const fw_srv_params *p, cudaStream_t stream)
{
    const int64_t n = (int64_t)p->max_q * p->H_kv * ((p->d + 7) / 8);
    const dim3 grid((unsigned)((n + 127) / 128), (unsigned)p->B);
    append_kernel<T><<<grid, 128, 0, stream>>>(*p, (T *)p->k, (T *)p->v);
    return fw_cuda_launch_error();
}

template <typename T> static cudaError_t merge_launch(const fw_srv_params *p, cudaStream_t stream)
{
    const int64_t rows = (int64_t)p->B * p->H * p->max_q;
    if (!p->merge_pdl) {
        merge_kernel<T><<<(unsigned)rows, 128, 0, stream>>>(*p);
        return fw_cuda_launch_error();
    }
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)rows);
    cfg.blockDim = dim3(128);
    cfg.stream = stream;
    cfg.attrs = pdl;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, merge_kernel<T>, *p);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not left behind for the next check */
        return e;
    }
    return fw_cuda_launch_error();
}

} /* namespace fwsrv */

#endif
