/* cuda-flash-f32's serving path: ragged batches and KV caches in exact float32 on CUDA cores. Correct
 * first, speed secondary: the rows, key addressing, clamping, split-KV plan, append and merge are the
 * cuda-flash path's (serving_common.cuh, serving_host.cu); the kernel is a plain online softmax.
 *
 * A block owns 16 packed rows (query heads of one KV head, as cuda-flash) of one (sequence, KV head, key
 * chunk); each of its 4 warps owns 4 rows. Tiles of 32 keys are staged in shared memory (K rows padded
 * by one float, so that lane j reading key j's column c is conflict-free); lane j scores key j, then
 * every lane accumulates its DP / 32 output columns over the tile's keys. Dense calls keep the f32
 * kernels of cuda_flash_f32.cu. Any precision setting runs exact here. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "serving_common.cuh"
#include "serving_host.h"

namespace fwsrv {

constexpr int F32_BM = 16, F32_TK = 32;

template <int DP> struct f32_shape {
    static constexpr size_t Q_FLOATS = (size_t)F32_BM * DP;
    static constexpr size_t K_FLOATS = (size_t)F32_TK * (DP + 1);
    static constexpr size_t V_FLOATS = (size_t)F32_TK * DP;
    static constexpr size_t SMEM = (Q_FLOATS + K_FLOATS + V_FLOATS) * 4 + F32_TK;
};

template <int DP>
__global__ void __launch_bounds__(128) f32_kernel(const fw_srv_params p)
{
    constexpr int NE = DP / 32; /* output columns a lane: lane + 32 e */
    using S = f32_shape<DP>;
    extern __shared__ __align__(16) unsigned char smem[];
    float *sq = reinterpret_cast<float *>(smem);  /* [F32_BM][DP] */
    float *sk = sq + S::Q_FLOATS;                   /* [F32_TK][DP + 1] */
    float *sv = sk + S::K_FLOATS;                   /* [F32_TK][DP] */
    unsigned char *key_ok = reinterpret_cast<unsigned char *>(sv + S::V_FLOATS);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int split = (int)(blockIdx.x % (unsigned)p.splits);
    int mb = (int)(blockIdx.x / (unsigned)p.splits);
    if (p.reverse_m) mb = p.m_blocks - 1 - mb;
    const int hk = blockIdx.y, b = blockIdx.z;
    const seq_t sqi = seq_info(p, b);
    const int rows = sqi.lq * p.group;
    const int m0 = mb * F32_BM;
    if (m0 >= rows) return;
    const int i_first = m0 / p.group, i_last = (min(m0 + F32_BM, rows) - 1) / p.group;
    int n_begin, n_tiles;
    block_key_tiles<F32_TK>(p, sqi, i_first, i_last, split, n_begin, n_tiles);

    {
        const float *qg = reinterpret_cast<const float *>(p.q) + q_base(p, p.q_s, b, sqi);
        for (int x = tid; x < F32_BM * DP; x += 128) {
            const int r = x / DP, c = x % DP, pm = m0 + r;
            float val = 0.f;
            if (pm < rows && c < p.d)
                val = qg[(int64_t)(hk * p.group + pm % p.group) * p.q_s[1] + (int64_t)(pm / p.group) * p.q_s[2] + c];
            sq[x] = val;
        }
    }
    int jlo[4], jhi[4];
#pragma unroll
    for (int rr = 0; rr < 4; rr++) row_key_range(p, sqi, (m0 + warp * 4 + rr) / p.group, jlo[rr], jhi[rr]);
    float o[4][NE], m[4], l[4];
#pragma unroll
    for (int rr = 0; rr < 4; rr++) {
        m[rr] = -INFINITY;
        l[rr] = 0.f;
#pragma unroll
        for (int e = 0; e < NE; e++) o[rr][e] = 0.f;
    }
    const float *kg = reinterpret_cast<const float *>(p.k), *vg = reinterpret_cast<const float *>(p.v);
    const int64_t kb = p.paged ? (int64_t)hk * p.k_s[1] : key_base(p, p.k_s, b, hk, sqi);
    const int64_t vb = p.paged ? (int64_t)hk * p.v_s[1] : key_base(p, p.v_s, b, hk, sqi);
    const int32_t *bt = p.paged ? p.block_table + (int64_t)b * p.bt_stride : nullptr;

    for (int t = 0; t < n_tiles; t++) {
        const int n0 = n_begin + t * F32_TK;
        __syncthreads(); /* the last tile is consumed (and Q is written) */
        for (int r = warp; r < F32_TK; r += 4) {
            const int j = n0 + r;
            bool ok = j < sqi.lk;
            int64_t ko = kb + (int64_t)j * p.k_s[2], vo = vb + (int64_t)j * p.v_s[2];
            if (p.paged) {
                const int page = ok ? page_of(p, bt, j) : -1; /* a page outside the pool: masked, not read */
                ok = page >= 0;
                ko = kb + (int64_t)page * p.k_s[0] + (int64_t)page_row(p, j) * p.k_s[2];
                vo = vb + (int64_t)page * p.v_s[0] + (int64_t)page_row(p, j) * p.v_s[2];
            }
            for (int c = lane; c < DP; c += 32) {
                const bool in = ok && c < p.d;
                sk[r * (DP + 1) + c] = in ? kg[ko + c] : 0.f;
                sv[r * DP + c] = in ? vg[vo + c] : 0.f;
            }
            if (lane == 0) key_ok[r] = ok;
        }
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < 4; rr++) {
            const float *qrow = sq + (warp * 4 + rr) * DP;
            float s = 0.f;
#pragma unroll 8
            for (int c = 0; c < DP; c++) s = fmaf(qrow[c], sk[lane * (DP + 1) + c], s);
            const int col = n0 + lane;
            if (!(col >= jlo[rr] && col < jhi[rr] && key_ok[lane])) s = -INFINITY;
            float mx = s;
#pragma unroll
            for (int x = 16; x > 0; x >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
            const float mnew = fmaxf(m[rr], mx);
            const float msc = mnew == -INFINITY ? 0.f : mnew * p.scale_log2;
            const float alpha = exp2f(m[rr] * p.scale_log2 - msc);
            const float pv = exp2f(s * p.scale_log2 - msc);
            float sum = pv;
#pragma unroll
            for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
            l[rr] = l[rr] * alpha + sum;
            m[rr] = mnew;
#pragma unroll
            for (int e = 0; e < NE; e++) o[rr][e] *= alpha;
#pragma unroll 4
            for (int key = 0; key < F32_TK; key++) {
                const float pk = __shfl_sync(0xffffffffu, pv, key);
#pragma unroll
                for (int e = 0; e < NE; e++) o[rr][e] = fmaf(pk, sv[key * DP + lane + 32 * e], o[rr][e]);
            }
        }
    }

    const int ld = part_ld(p);
#pragma unroll
    for (int rr = 0; rr < 4; rr++) {
        const int pm = m0 + warp * 4 + rr;
        if (pm >= rows) continue;
        const int i = pm / p.group, h = hk * p.group + pm % p.group;
        const float inv = l[rr] > 0.f ? 1.f / l[rr] : (l[rr] == l[rr] ? 0.f : l[rr]);
        const float lse = row_lse(m[rr], p.scale, l[rr]);
        if (p.splits == 1) {
            float *og = reinterpret_cast<float *>(p.o) + q_base(p, p.o_s, b, sqi) + (int64_t)h * p.o_s[1] +
                        (int64_t)i * p.o_s[2];
#pragma unroll
            for (int e = 0; e < NE; e++)
                if (lane + 32 * e < p.d) og[lane + 32 * e] = o[rr][e] * inv;
            if (lane == 0 && p.lse) p.lse[lse_index(p, b, h, i, sqi)] = lse;
        } else {
            const int64_t pr = part_row(p, split, b, h, i);
            float *po = p.part_o + pr * ld;
#pragma unroll
            for (int e = 0; e < NE; e++) /* zeros in the row's padding: the merge reads whole float4s */
                if (lane + 32 * e < ld) po[lane + 32 * e] = lane + 32 * e < p.d ? o[rr][e] * inv : 0.f;
            if (lane == 0) p.part_lse[pr] = lse;
        }
    }
}

/* The whole opt-in shared memory (a launch may pad its size to cap the blocks per SM), once per device. */
template <int DP> static cudaError_t f32_prepare() { return fw_cuda_smem_limit<f32_kernel<DP>>(0); }

template <int DP> static cudaError_t f32_launch(const fw_srv_params *p, size_t smem, cudaStream_t stream)
{
    const cudaError_t e = f32_prepare<DP>();
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)p->m_blocks * (unsigned)p->splits, (unsigned)p->H_kv, (unsigned)p->B);
    f32_kernel<DP><<<grid, 128, smem, stream>>>(*p);
    return fw_cuda_launch_error();
}

template <int DP> static int f32_occupancy(size_t smem)
{
    if (f32_prepare<DP>() != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return blocks_per_sm<f32_kernel<DP>>(smem);
}

} /* namespace fwsrv */

/* The padded head dim: 32, 64, 128 or 256. */
static int srv_f32_dpad(int64_t d) { return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 256; }

static void srv_f32_kernel(int64_t d, size_t *smem, cudaError_t (**launch)(const fw_srv_params *, size_t, cudaStream_t),
                           int (**occupancy)(size_t))
{
    switch (srv_f32_dpad(d)) {
    case 32: *smem = fwsrv::f32_shape<32>::SMEM; *launch = fwsrv::f32_launch<32>; *occupancy = fwsrv::f32_occupancy<32>; break;
    case 64: *smem = fwsrv::f32_shape<64>::SMEM; *launch = fwsrv::f32_launch<64>; *occupancy = fwsrv::f32_occupancy<64>; break;
    case 128: *smem = fwsrv::f32_shape<128>::SMEM; *launch = fwsrv::f32_launch<128>; *occupancy = fwsrv::f32_occupancy<128>; break;
    default: *smem = fwsrv::f32_shape<256>::SMEM; *launch = fwsrv::f32_launch<256>; *occupancy = fwsrv::f32_occupancy<256>; break;
    }
}

extern "C" int fw_srv_f32_supports(const fw_problem *p, char *why, size_t why_len)
{
    if (p->device.kind != FW_DEVICE_CUDA) return fw_why(why, why_len, "tensors are not on a CUDA device");
    if (p->dtype != FW_F32)
        return fw_why(why, why_len, "cuda-flash-f32 takes float32 only (got %s; cuda-flash runs 16-bit)",
                      fw_dtype_name(p->dtype));
    if (p->head_dim < 1 || p->head_dim > 256)
        return fw_why(why, why_len, "cuda-flash-f32 takes head_dim 1..256, not %lld", (long long)p->head_dim);
    if (p->seqlen_q >= (1 << 29) || p->seqlen_k >= (1 << 29) || p->seqlen_q * p->group >= (1 << 30))
        return fw_why(why, why_len, "cuda-flash-f32's serving path takes max_seqlen_q, max_seqlen_k (or the cache's "
                      "capacity) below 2^29 and max_seqlen_q x group below 2^30");
    if (p->batch > 65535 || p->kv_heads > 65535)
        return fw_why(why, why_len, "batch %lld and kv_heads %lld must each be at most 65535 (grid limits)",
                      (long long)p->batch, (long long)p->kv_heads);
    if (p->num_pages > 0x7fffffff)
        return fw_why(why, why_len, "a page pool of %lld pages is above 2^31 - 1", (long long)p->num_pages);
    fw_cuda_device_info di;
    size_t smem;
    cudaError_t (*launch)(const fw_srv_params *, size_t, cudaStream_t);
    int (*occupancy)(size_t);
    srv_f32_kernel(p->head_dim, &smem, &launch, &occupancy);
    if (!fw_cuda_device_facts(p->device.index, &di) || (int)smem > di.smem_optin)
        return fw_why(why, why_len, "cuda-flash-f32's serving kernel for head_dim %lld needs %zu bytes of shared memory "
                      "per block; device %d has %d", (long long)p->head_dim, smem, p->device.index, di.smem_optin);
    return 1;
}

extern "C" int fw_srv_f32_configs(const fw_problem *p, fw_config *out, int max)
{
    static const int splits[] = {0, 1, 4, 16};
    int n = 0;
    for (int i = 0; i < 4 && n < max; i++) {
        if (i > 0 && p->seqlen_k <= fwsrv::F32_TK) break;
        const srv_choice c = {0, 0, 0, splits[i], 0};
        srv_choice_to_config(&c, p->precision, &out[n++]);
    }
    return n;
}

static int srv_f32_blocks_per_sm(int (*occupancy)(size_t), size_t smem)
{
    const int n = occupancy(smem);
    return n > 0 ? n : 1;
}

extern "C" size_t fw_srv_f32_workspace(const fw_problem *p)
{
    fw_cuda_device_info di;
    if (!fw_cuda_device_facts(p->device.index, &di)) return 0;
    fw_cuda_device_guard guard(p->device.index);
    if (guard.failed()) return 0;
    size_t smem;
    cudaError_t (*launch)(const fw_srv_params *, size_t, cudaStream_t);
    int (*occupancy)(size_t);
    srv_f32_kernel(p->head_dim, &smem, &launch, &occupancy);
    const int64_t slots2 = 2LL * di.sm_count * srv_f32_blocks_per_sm(occupancy, smem);
    return srv_ws_bound(p, fwsrv::F32_BM, fwsrv::F32_TK, slots2);
}

extern "C" fw_status fw_srv_f32_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    char why[256];
    if (!fw_srv_f32_supports(p, why, sizeof why)) {
        fw_why(ex->err, ex->err_len, "%s", why);
        return FW_ERR_UNSUPPORTED;
    }
    fw_cuda_device_guard guard(p->device.index);
    fw_cuda_device_info di;
    if (guard.failed() || !fw_cuda_device_facts(p->device.index, &di)) {
        fw_why(ex->err, ex->err_len, "cannot select CUDA device %d", p->device.index);
        return FW_ERR_DEVICE;
    }
    /* the configuration: FW_CUDA_FLASH_CONFIG where it names an f32 one, else cfg's, else the heuristic's */
    srv_choice c;
    memset(&c, 0, sizeof c);
    const char *forced = fw_exec_knobs(ex)->cuda_flash_config;
    const char *name = !strncmp(forced, "srv-f32", 7) ? forced : cfg && srv_is_serving_name(cfg->name) ? cfg->name : NULL;
    if (name) {
        if (!srv_choice_parse(name, &c) || c.bm) {
            fw_why(ex->err, ex->err_len, "cuda-flash-f32 has no serving configuration named '%s'", name);
            return FW_ERR_INVALID_VALUE;
        }
    } else if (cfg && !cfg->name[0]) {
        c.split = cfg->splits;
        c.occupancy = cfg->occupancy;
    }
    size_t need;
    cudaError_t (*launch)(const fw_srv_params *, size_t, cudaStream_t);
    int (*occupancy)(size_t);
    srv_f32_kernel(p->head_dim, &need, &launch, &occupancy);
    fw_srv_params a;
    srv_fill_params(p, &a);
    a.block_rows = fwsrv::F32_BM;
    a.m_blocks = (int)((p->seqlen_q * p->group + fwsrv::F32_BM - 1) / fwsrv::F32_BM);
    if (a.m_blocks < 1) a.m_blocks = 1;
    a.reverse_m = a.m_blocks > 1 && p->window_right < p->seqlen_q + p->seqlen_k && p->window_left >= p->seqlen_q + p->seqlen_k;
    const size_t smem = srv_launch_smem(p->device.index, need, c.occupancy);
    const int64_t slots = (int64_t)di.sm_count * srv_f32_blocks_per_sm(occupancy, smem);
    srv_kernels k;
    char cname[48];
    srv_choice_name(&c, cname, sizeof cname);
    k.name = cname;
    k.attend = launch;
    k.merge = fwsrv::merge_launch<float>;
    k.append = fwsrv::append_launch<float>;
    return srv_run(p, ex, &a, &c, fwsrv::F32_TK, slots, smem, &k);
}
