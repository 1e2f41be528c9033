/* What the backward's kernels share: the dQ mode, the kinds of kernel a configuration names, and the (batch, head)
 * slice of a tensor.
 *
 * Configurations (generated/bwd_*.cu, from kernels.tsv) are structs of named constants, one per compiled kernel
 * shape, with KIND saying which kernel they configure:
 *   dK/dV   kv_kernel::mma    D, BM, WARPS, QS (query rows per sub-tile)          kernel_dkdv_mma.cuh
 *           kv_kernel::mma2d  D, BM (64), WARPS (8)                               kernel_dkdv_mma2d.cuh
 *           kv_kernel::wg     D, BM, STAGES, OVERLAP, ATOMIC_KV                   kernel_dkdv_wg.cuh
 *           kv_kernel::ws     D, BM, STAGES, FUSE_DQ, FALLBACK, ATOMIC_KV         kernel_dkdv_ws.cuh
 *           kv_kernel::cores  D, BM, BN (dQ included)                             kernel_cores.cuh
 *   dQ      dq_kernel::mma    D, WARPS, MT (m16 tiles per warp), BN               kernel_dq_mma.cuh
 *           dq_kernel::wg     D, BN, STAGES                                       kernel_dq_wg.cuh
 *           dq_kernel::ws     D, BN, STAGES, FALLBACK                             kernel_dq_ws.cuh
 * ATOMIC_KV: the configuration whose kernel runs the atomic dQ mode (the overlapped schedule is for the
 * deterministic mode; with FUSE_DQ the producer warpgroup's kernel runs the atomic mode itself, with dQ fused in:
 * launch.cuh's fused_dq, and ATOMIC_KV only where a tensor map is refused); FALLBACK: the
 * cp.async kernel that runs where the driver refuses a tensor map. */
#ifndef FW_BWD_KERNEL_COMMON_CUH
#define FW_BWD_KERNEL_COMMON_CUH

#include "backends/cuda/bwd/params.h"
#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/parts/scheduler.cuh"
#include "backends/cuda/parts/tensor_maps.cuh"

namespace fwbwd {

/* How dQ is reduced: atomically into an f32 accumulator by the dK/dV kernel (as FlashAttention-2), or by a
 * separate dQ pass with no atomics (bit-identical run to run). */
enum class dq_mode { atomic, deterministic };

enum class kv_kernel { cores, mma, mma2d, wg, ws };
enum class dq_kernel { mma, wg, ws };

/* The (batch b, head h) slice of a tensor: base + b·s[0] + h·s[1] elements. */
template <typename T>
__device__ __forceinline__ const T *head_base(const void *base, const long long (&s)[3], int b, int h)
{
    return reinterpret_cast<const T *>(base) + (long long)b * s[0] + (long long)h * s[1];
}
template <typename T> __device__ __forceinline__ T *head_base(void *base, const long long (&s)[3], int b, int h)
{
    return reinterpret_cast<T *>(base) + (long long)b * s[0] + (long long)h * s[1];
}

/* fw_bwd_args → fw_bwd_tc_params: the window as ints (an unbounded side becomes Lq + Lk, which is as good). */
static inline fw_bwd_tc_params make_tc_params(const fw_bwd_args *a)
{
    fw_bwd_tc_params p;
    p.q = a->q; p.k = a->k; p.v = a->v; p.dout = a->dout;
    p.dq = a->dq; p.dk = a->dk; p.dv = a->dv;
    p.lse2 = a->lse2; p.delta = a->delta; p.dq_acc = a->dq_acc;
    for (int i = 0; i < 3; i++) {
        p.q_s[i] = a->q_s[i]; p.k_s[i] = a->k_s[i]; p.v_s[i] = a->v_s[i]; p.do_s[i] = a->do_s[i];
        p.dq_s[i] = a->dq_s[i]; p.dk_s[i] = a->dk_s[i]; p.dv_s[i] = a->dv_s[i];
    }
    p.B = a->B; p.H = a->H; p.group = a->group; p.Lq = a->Lq; p.Lk = a->Lk; p.d = a->D;
    const long long big = (long long)a->Lq + a->Lk + 1;
    const long long wl = a->wl < big ? a->wl : big, wr = a->wr < big ? a->wr : big;
    p.has_window = wl < big || wr < big;
    p.wl = (int)wl; p.wr = (int)wr; p.off = (int)a->off;
    p.scale = a->scale;
    p.scale_log2 = a->scale * 1.4426950408889634f;
    p.seqs = a->seqs;
    return p;
}

/* lse2 and Δ of a dQ warp's rows m0 + wrow0 + 16·mt + g (+ 8) of (batch b, head h), 0 past Lq. */
template <int MT>
__device__ __forceinline__ void dq_row_stats(const fw_bwd_tc_params &p, int b, int h, int m0, int wrow0, int g,
                                             float (&l2)[MT][2], float (&dl)[MT][2])
{
    const long long row0 = ((long long)b * p.H + h) * p.Lq;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int i = m0 + wrow0 + mt * 16 + g + r * 8;
            l2[mt][r] = i < p.Lq ? p.lse2[row0 + i] : 0.f;
            dl[mt][r] = i < p.Lq ? p.delta[row0 + i] : 0.f;
        }
}

/* A dQ kernel's block (grid (⌈Lq/BM⌉, H, B)): its query rows, head, kv head and the key tiles of BN its rows may see;
 * under any window the last query blocks first (under a causal mask they see the most keys). */
template <int BM, int BN> __device__ __forceinline__ fwparts::query_block dq_block(const fw_bwd_tc_params &p)
{
    const int nmb = (p.Lq + BM - 1) / BM;
    return fwparts::query_block::of<BM, BN>(p, p.has_window, nmb);
}

/* ---- ragged batches (fw_cuda_seqs; the records' varlen launches) ------------------------------------------------
 * The grid is linear over (slot, head) (parts/scheduler.cuh: varlen_tile_scheduler): a dK/dV kernel's slots are its
 * sequences' key blocks (kv heads), a dQ kernel's their query blocks (query heads). A block finds its sequence from
 * the device offsets (clamped: corrupted ones cannot reach outside the tensors) and then runs the dense kernel's body
 * on that sequence as a problem of its own (seq_problem): b = 0, Lq and Lk its lengths, the diagonal Lk - Lq (causal
 * and windows bottom-right aligned per sequence), the query side's tensors from its first query row, the key side's
 * from its first key row, the workspaces from its block of rows. The dense bodies then load only its rows (the
 * cp.async loads zero-fill past Lq and Lk; the TMA kernels, whose maps cover the packed tensors, zero in shared
 * memory the next sequence's rows that a product would sum over), mask its keys, and store only its rows; a
 * sequence without queries still writes its dK, dV rows (zeros), one without keys its dQ rows (zeros). */

template <typename T> __device__ __forceinline__ const void *rows_from(const void *base, int64_t row0, long long ss)
{
    return reinterpret_cast<const T *>(base) + row0 * ss;
}
template <typename T> __device__ __forceinline__ void *rows_from(void *base, int64_t row0, long long ss)
{
    return reinterpret_cast<T *>(base) + row0 * ss;
}

/* What seq_problem moves that the two parameter structs hold differently: the row statistics the kernels read (the
 * tensor-core kernels lse2, the CUDA-core kernels the LSE itself), O (read only by the CUDA-core kernels), and the
 * head dim's name. (The statistics move in place, not through a returned reference, which changed the machine code.) */
__device__ __forceinline__ void seq_stats_rows(fw_bwd_tc_params &p, int64_t w) { p.lse2 += w; }
__device__ __forceinline__ void seq_stats_rows(fw_bwd_args &a, int64_t w) { a.lse += w; }
template <typename T> __device__ __forceinline__ void seq_o_rows(const fwparts::seq_span &, fw_bwd_tc_params &) {}
template <typename T> __device__ __forceinline__ void seq_o_rows(const fwparts::seq_span &s, fw_bwd_args &a)
{
    a.o = rows_from<T>(a.o, s.q_row0, a.o_s[2]);
}
__device__ __forceinline__ int seq_head_dim(const fw_bwd_tc_params &p) { return p.d; }
__device__ __forceinline__ int seq_head_dim(const fw_bwd_args &a) { return a.D; }

/* p (fw_bwd_tc_params or fw_bwd_args), the packed batch, becomes sequence s's own dense problem. The workspaces are
 * sequence-major: sequence s's (H, lq) rows from row H·q_row0, where the dense kernels' index (b·H + h)·Lq + i with
 * b = 0 lands. */
template <typename T, class P> __device__ __forceinline__ void seq_problem(const fwparts::seq_span &s, P &p)
{
    p.q = rows_from<T>(p.q, s.q_row0, p.q_s[2]);
    seq_o_rows<T>(s, p);
    p.dout = rows_from<T>(p.dout, s.q_row0, p.do_s[2]);
    p.dq = rows_from<T>(p.dq, s.q_row0, p.dq_s[2]);
    p.k = rows_from<T>(p.k, s.k_row0, p.k_s[2]);
    p.v = rows_from<T>(p.v, s.k_row0, p.v_s[2]);
    p.dk = rows_from<T>(p.dk, s.k_row0, p.dk_s[2]);
    p.dv = rows_from<T>(p.dv, s.k_row0, p.dv_s[2]);
    const int64_t w = (int64_t)p.H * s.q_row0;
    seq_stats_rows(p, w);
    p.delta += w;
    if (p.dq_acc) p.dq_acc += w * seq_head_dim(p);
    p.Lq = s.lq;
    p.Lk = s.lk;
    p.off = s.lk - s.lq;
}

/* This block's work in a ragged batch: its tile (KEYS: key block BLOCK·m_block.. of kv head h, else query block
 * BLOCK·m_block.. of query head h; b = 0) and sp, its sequence's problem made from a (fw_bwd_tc_params or
 * fw_bwd_args); rows, where given: the sequence's place in the packed tensors (the TMA kernels' maps cover those).
 * False: a slot past its sequence's blocks, no work (every thread of the block alike). */
template <typename T, int BLOCK, bool KEYS, class P>
__device__ __forceinline__ bool ragged_block(const P &a, bool longest_first, P &sp, fwparts::tile_coord &tile,
                                             fwparts::seq_span *rows = nullptr)
{
    fwparts::seq_span s;
    const int heads = KEYS ? a.H / a.group : a.H;
    if (!fwparts::varlen_tile_scheduler::get_tile<BLOCK, KEYS>(a.seqs, heads, a.Lq, a.Lk, longest_first, tile, s))
        return false;
    sp = a;
    seq_problem<T>(s, sp);
    if (rows) *rows = s;
    return true;
}

/* Host: the TMA maps of the producer-warpgroup kernels' operands (their map structs M: q, dout, k, v and swap_*),
 * boxes of q_rows rows of q and dout and kv_rows of k and v; VARLEN: over the packed tensors (one batch entry of
 * total rows, p.seqs), the boxes then placed at each sequence's rows. 0 where the driver refuses one. */
template <typename T, bool VARLEN, class M>
static int make_operand_maps(M &m, const fw_bwd_tc_params &p, int q_rows, int kv_rows)
{
    const int Lq = VARLEN ? (int)p.seqs.total_q : p.Lq, Lk = VARLEN ? (int)p.seqs.total_k : p.Lk; /* < 2^31 */
    const int B = VARLEN ? 1 : p.B, Hk = p.H / p.group;
    return fwparts::tma_make<T>(&m.q, &m.swap_q, p.q, p.d, Lq, p.H, B, p.q_s[2], p.q_s[1], p.q_s[0], q_rows) &&
           fwparts::tma_make<T>(&m.dout, &m.swap_do, p.dout, p.d, Lq, p.H, B, p.do_s[2], p.do_s[1], p.do_s[0], q_rows) &&
           fwparts::tma_make<T>(&m.k, &m.swap_k, p.k, p.d, Lk, Hk, B, p.k_s[2], p.k_s[1], p.k_s[0], kv_rows) &&
           fwparts::tma_make<T>(&m.v, &m.swap_v, p.v, p.d, Lk, Hk, B, p.v_s[2], p.v_s[1], p.v_s[0], kv_rows);
}

/* Blocks of a ragged batch's grid: BLOCK rows (KEYS: keys) a block, heads (KEYS: kv heads) of its own. */
template <int BLOCK, bool KEYS> static inline unsigned ragged_blocks(const fw_cuda_seqs &s, int heads)
{
    return (unsigned)fwparts::varlen_tile_scheduler::blocks(KEYS ? s.total_k : s.total_q, s.batch, heads, BLOCK);
}

} /* namespace fwbwd */
#endif
