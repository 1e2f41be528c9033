/* The floor of decode: a kernel that only streams the K/V cache the way cuda-flash's decode kernel reads it (a block
 * per (sequence, KV head, key range), four warps each with its own ring of 16-row K and V tiles, the cache laid out
 * (B, L, H_kv, 128) in bf16) and reads a little of each tile so that no load is dead, for each shape of the decode
 * table (docs/PERF.md). Three ways to load a tile: 16-byte cp.async by every lane (the decode kernel's), one 1-D bulk
 * copy a row completing on the warp's mbarrier, and one 3-D TMA box a tile from a producer warp; 1 to 3 blocks an SM.
 * Beside a device-to-device copy (read + written bytes): the decode kernel cannot beat this stream, and its gap to
 * it is the cost of everything else (products, merges, block ends). With --energy, the stream's joules a token on
 * the GPU's energy counter, from every SM and from a quarter to three quarters of them (a persistent TMA stream):
 * the energy a decode cannot go under at this rate, against cuDNN's from bench/serving_sdpa.py --energy. sm_90
 * (bulk copies, TMA); built with the CUDA backends as `decode_floor` and run by `bench/device.sh floors`. */
#include <stdint.h>
#include <string.h>
#include <time.h>
#include "backends/cuda/parts/copy.cuh"
#include "backends/cuda/parts/pipeline.cuh"
#include "backends/cuda/parts/tensor_maps.cuh"
#include "cuda_bench.h"
#include "flashwatt.h"

using namespace fwparts;
enum { D = 128, BN = 64, ROWB = D * 2, TILE_BYTES = 2 * BN * ROWB /* K and V of a tile */ };
struct stream_params {
    const char *k, *v;
    int L, Hkv, splits;
    unsigned *sink;
};

/* Work item i's (sequence, KV head) and its key range: tiles n0 / BN .. + nt (one item a block, except stream_tma
 * on fewer SMs). */
__device__ __forceinline__ void item_range(const stream_params &p, int i, int &b, int &hk, int &n0, int &nt)
{
    const int s = i % p.splits;
    hk = (i / p.splits) % p.Hkv;
    b = i / (p.splits * p.Hkv);
    nt = p.L / p.splits / BN;
    n0 = s * nt * BN;
}
__device__ __forceinline__ const char *row_ptr(const stream_params &p, const char *base, int b, int hk, int j)
{
    return base + (((int64_t)b * p.L + j) * p.Hkv + hk) * ROWB;
}
/* What the decode kernel's products would read of this warp's 16 rows, cut to two 16-byte loads a lane. */
__device__ __forceinline__ unsigned consume(uint32_t sk, uint32_t sv, int lane)
{
    uint4 a, c;
    const uint32_t o = (uint32_t)((lane & 15) * ROWB + (lane >> 4) * 16);
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w) : "r"(sk + o));
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(c.x), "=r"(c.y), "=r"(c.z), "=r"(c.w) : "r"(sv + o + 128));
    return a.x ^ c.w;
}

/* The decode kernel's loads: lane l of warp w copies chunk l % 16 of 8 consecutive rows (w's 16 rows of a tile). */
template <int ST> __global__ void __launch_bounds__(128) stream_cp_async(const stream_params p)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t s0 = (uint32_t)__cvta_generic_to_shared(smem);
    int b, hk, n0, nt;
    item_range(p, (int)blockIdx.x, b, hk, n0, nt);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, lcol = tid % 16, t0 = (tid / 16) * 8;
    auto issue = [&](int m) {
        const uint32_t sk = s0 + (uint32_t)((m % ST) * TILE_BYTES);
        for (int r = 0; r < 8; r++) {
            const uint32_t so = (uint32_t)((t0 + r) * ROWB + lcol * 16);
            const int j = n0 + m * BN + t0 + r;
            cp_async16(sk + so, row_ptr(p, p.k, b, hk, j) + lcol * 16, 16);
            cp_async16(sk + BN * ROWB + so, row_ptr(p, p.v, b, hk, j) + lcol * 16, 16);
        }
    };
    for (int s = 0; s < ST - 1; s++) {
        if (s < nt) issue(s);
        cp_async_commit();
    }
    unsigned x = 0;
    for (int it = 0; it < nt; it++) {
        __syncwarp();
        if (it + ST - 1 < nt) issue(it + ST - 1);
        cp_async_commit();
        cp_async_wait<ST - 1>();
        __syncwarp();
        const uint32_t sk = s0 + (uint32_t)((it % ST) * TILE_BYTES + warp * 16 * ROWB);
        x ^= consume(sk, sk + BN * ROWB, lane);
    }
    if (x == 0x12345678u) p.sink[0] = x;
}

/* One bulk copy a row: lanes 0..15 K rows, 16..31 V rows of the warp's 16; an mbarrier a warp and stage. */
template <int ST> __global__ void __launch_bounds__(128) stream_bulk(const stream_params p)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t bars[4][ST];
    const uint32_t s0 = (uint32_t)__cvta_generic_to_shared(smem);
    int b, hk, n0, nt;
    item_range(p, (int)blockIdx.x, b, hk, n0, nt);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t bar0 = (uint32_t)__cvta_generic_to_shared(&bars[warp][0]);
    if (lane < ST) mbar_init(bar0 + lane * 8, 1);
    mbar_init_fence();
    __syncwarp();
    auto issue = [&](int m) {
        const int r = lane & 15, j = n0 + m * BN + warp * 16 + r;
        const uint32_t bar = bar0 + (m % ST) * 8;
        if (lane == 0) mbar_expect_tx(bar, 32 * ROWB);
        const uint32_t dst = s0 + (uint32_t)((m % ST) * TILE_BYTES + (lane >= 16 ? BN * ROWB : 0) + (warp * 16 + r) * ROWB);
        bulk_copy(dst, row_ptr(p, lane >= 16 ? p.v : p.k, b, hk, j), ROWB, bar);
    };
    for (int s = 0; s < ST && s < nt; s++) issue(s);
    unsigned x = 0;
    for (int it = 0; it < nt; it++) {
        mbar_wait(bar0 + (it % ST) * 8, (it / ST) & 1);
        const uint32_t sk = s0 + (uint32_t)((it % ST) * TILE_BYTES + warp * 16 * ROWB);
        x ^= consume(sk, sk + BN * ROWB, lane);
        __syncwarp();
        if (it + ST < nt) issue(it + ST);
    }
    if (x == 0x12345678u) p.sink[0] = x;
#else
    (void)p;
#endif
}

/* A producer warp (warp 4) loads each tile's K and V as two 3-D TMA boxes; the four warps release a stage on its
 * "empty" mbarrier. A block takes items blockIdx.x, + gridDim.x, ...: one item a block for the table's TMA column,
 * or a grid of fewer blocks than items (one block an SM on `gridDim.x` SMs, the others idle, the producer running on
 * through the ring across items) for --energy's question: whether a stream on fewer SMs keeps HBM busy at less
 * power. */
template <int ST>
__global__ void __launch_bounds__(160) stream_tma(const stream_params p, int items, const __grid_constant__ CUtensorMap mk,
                                                    const __grid_constant__ CUtensorMap mv)
{
#if __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t full[ST], empty[ST];
    const uint32_t s0 = ((uint32_t)__cvta_generic_to_shared(smem) + 127) & ~127u;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const uint32_t f0 = (uint32_t)__cvta_generic_to_shared(&full[0]), e0 = (uint32_t)__cvta_generic_to_shared(&empty[0]);
    if (tid < ST) {
        mbar_init(f0 + tid * 8, 1);
        mbar_init(e0 + tid * 8, 4);
    }
    mbar_init_fence();
    __syncthreads();
    int m = 0; /* tiles through the ring so far */
    unsigned x = 0;
    for (int i = blockIdx.x; i < items; i += gridDim.x) {
        int b, hk, n0, nt;
        item_range(p, i, b, hk, n0, nt);
        for (int t = 0; t < nt; t++, m++) {
            const uint32_t f = f0 + (m % ST) * 8;
            if (warp == 4) {
                if (lane == 0) {
                    if (m >= ST) mbar_wait(e0 + (m % ST) * 8, (m / ST - 1) & 1);
                    const uint32_t dst = s0 + (uint32_t)((m % ST) * TILE_BYTES);
                    const int row = b * p.L + n0 + t * BN;
                    mbar_expect_tx(f, TILE_BYTES);
                    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
                                 ::"r"(dst), "l"((uint64_t)&mk), "r"(f), "r"(0), "r"(hk), "r"(row) : "memory");
                    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
                                 ::"r"(dst + BN * ROWB), "l"((uint64_t)&mv), "r"(f), "r"(0), "r"(hk), "r"(row) : "memory");
                }
            } else {
                mbar_wait(f, (m / ST) & 1);
                const uint32_t sk = s0 + (uint32_t)((m % ST) * TILE_BYTES + warp * 16 * ROWB);
                x ^= consume(sk, sk + BN * ROWB, lane);
                __syncwarp();
                if (lane == 0) mbar_arrive(e0 + (m % ST) * 8);
            }
        }
    }
    if (x == 0x12345678u) p.sink[0] = x;
#else
    (void)p;
    (void)items;
    (void)mk;
    (void)mv;
#endif
}

/* Random bytes (the stream must not run on constant data). */
__global__ void fill(uint32_t *a, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        a[i] = (h ^ (h >> 13)) & 0x3fff3fffu; /* two finite bf16 a word */
    }
}

/* A 3-D map (head dim, KV head, B·L rows) of the cache with 128 x 1 x 64 boxes, unswizzled. */
static CUtensorMap make_map(const void *ptr, int B, int L, int Hkv)
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tma_encode_fn();
    CUtensorMap m;
    cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)Hkv, (cuuint64_t)B * L};
    cuuint64_t strides[2] = {(cuuint64_t)ROWB, (cuuint64_t)Hkv * ROWB};
    cuuint32_t box[3] = {D, 1, BN}, es[3] = {1, 1, 1};
    if (!encode ||
        encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void *>(ptr), dims, strides, box, es,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        printf("cuTensorMapEncodeTiled failed\n");
        exit(1);
    }
    return m;
}

/* Median µs of 40 launches after 5 (events around each). */
template <typename F> static float median_us(F launch)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float t[40];
    for (int r = -5; r < 40; r++) {
        CK(cudaEventRecord(a));
        launch();
        CK(cudaGetLastError());
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r >= 0) t[r] = ms * 1000.f;
    }
    qsort(t, 40, sizeof t[0], cmpf);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return t[20];
}

/* The three loaders at ST stages, blocks capped to `per_sm` an SM by padding their shared memory; best µs in *best. */
template <int ST>
static void run_config(const stream_params &p, int blocks, const CUtensorMap &mk, const CUtensorMap &mv, int per_sm,
                       int smem_optin, float best[3])
{
    const size_t need = (size_t)ST * TILE_BYTES, sm = per_sm == 1 ? (size_t)smem_optin - 2048 : need;
    CK(cudaFuncSetAttribute(stream_cp_async<ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    CK(cudaFuncSetAttribute(stream_bulk<ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    CK(cudaFuncSetAttribute(stream_tma<ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm + 128));
    const float t[3] = {median_us([&] { stream_cp_async<ST><<<blocks, 128, sm>>>(p); }),
                        median_us([&] { stream_bulk<ST><<<blocks, 128, sm>>>(p); }),
                        median_us([&] { stream_tma<ST><<<blocks, 160, sm + 128>>>(p, blocks, mk, mv); })};
    for (int i = 0; i < 3; i++)
        if (best[i] == 0.f || t[i] < best[i]) best[i] = t[i];
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Joules and µs a call over a window of back-to-back launches of at least `seconds` on the GPU's energy counter (as
 * bench/serving_sdpa.py --energy measures cuDNN's decode), after half a second at load; false where it is n/a. *mhz:
 * the median SM clock read before each synchronisation, while launches are still queued (0 where n/a). */
template <typename F> static bool energy_per_call(fw_telemetry *tel, F launch, double seconds, double *j_call,
                                                  double *watts, double *us_call, float *mhz)
{
    float clocks[512];
    int nclk = 0;
    *mhz = 0.f;
    for (double t0 = now_s(); now_s() - t0 < 0.5;) {
        for (int i = 0; i < 20; i++) launch();
        CK(cudaDeviceSynchronize());
    }
    fw_energy_window w;
    if (fw_energy_begin(tel, 0, &w) != FW_OK) return false;
    long n = 0;
    const double t0 = now_s();
    while (now_s() - t0 < seconds) {
        for (int i = 0; i < 100; i++) launch();
        n += 100;
        fw_gpu_reading r;
        if (nclk < 512 && fw_telemetry_read(tel, 0, &r) == FW_OK && (r.valid & FW_TEL_SM_CLOCK))
            clocks[nclk++] = (float)r.sm_clock_mhz;
        CK(cudaDeviceSynchronize());
    }
    const double t1 = now_s();
    CK(cudaGetLastError());
    if (nclk) {
        qsort(clocks, (size_t)nclk, sizeof clocks[0], cmpf);
        *mhz = clocks[nclk / 2];
    }
    if (fw_energy_end(&w) != FW_OK || !w.valid) return false;
    *j_call = w.joules / (double)n;
    *watts = w.avg_w;
    *us_call = (t1 - t0) * 1e6 / (double)n;
    return true;
}

int main(int argc, char **argv)
{
    /* --energy: also the stream's J/token, watts and SM clock at each shape (the decode kernel's loads at 1 and 2
     * blocks an SM; the TMA stream on all or part of the SMs) and the copy's: the energy a decode cannot go under
     * while it reads the cache at this rate.
     * --shape N: the Nth shape of the table alone (0-based; for a profiler). */
    bool energy = false;
    int only = -1;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--energy") == 0) {
            energy = true;
        } else if (strcmp(argv[a], "--shape") == 0 && a + 1 < argc) {
            only = atoi(argv[++a]);
        } else {
            fprintf(stderr, "usage: decode_floor [--energy] [--shape N]\n");
            return 2;
        }
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
    if (prop.major < 9) {
        printf("decode_floor: needs compute capability 9.0 (bulk copies, TMA); this device is %d.%d\n", prop.major, prop.minor);
        return 0;
    }
    const size_t bytes = (size_t)1 << 30; /* each of K and V: every shape's cache fits */
    char *k, *v;
    unsigned *sink;
    CK(cudaMalloc(&k, bytes));
    CK(cudaMalloc(&v, bytes));
    CK(cudaMalloc(&sink, 16));
    fill<<<1024, 256>>>((uint32_t *)k, bytes / 4, 1u);
    fill<<<1024, 256>>>((uint32_t *)v, bytes / 4, 2u);
    CK(cudaGetLastError());
    const float copy_us = median_us([&] { CK(cudaMemcpyAsync(v, k, bytes / 2, cudaMemcpyDeviceToDevice)); });
    const double copy_gbs = 2.0 * (double)(bytes / 2) / copy_us / 1e3;
    printf("device-to-device copy: %.0f GB/s (read + written)\n", copy_gbs);
    fw_telemetry *tel = nullptr;
    if (energy && fw_telemetry_open(&tel) != FW_OK) tel = nullptr;
    enum { NCOL = 6 }; /* cp.async 1 and 2 blocks an SM; the TMA stream on 4/4, 3/4, 2/4, 1/4 of the SMs */
    struct energy_row { char name[32]; int B; double j[NCOL], w[NCOL], us[NCOL]; float mhz[NCOL]; bool ok[NCOL]; } erows[5];
    int nerows = 0;
    printf("%-22s %10s %18s %18s %18s\n", "K/V of the decode shape", "copy-bound", "cp.async", "bulk a row", "TMA a tile");
    /* B, KV heads, keys, key ranges (the decode heuristic's split on 132 SMs) */
    const struct { int B, Hkv, L, splits; } shapes[] = {{8, 8, 8192, 2}, {64, 8, 2048, 1}, {1, 8, 131072, 16}, {16, 32, 4096, 1},
                                                        {128, 8, 1024, 1}};
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
        if (only >= 0 && si != only) continue;
        const auto &s = shapes[si];
        const stream_params p = {k, v, s.L, s.Hkv, s.splits, sink};
        const double kv = 2.0 * s.B * s.L * s.Hkv * ROWB;
        const CUtensorMap mk = make_map(k, s.B, s.L, s.Hkv), mv = make_map(v, s.B, s.L, s.Hkv);
        const int blocks = s.B * s.Hkv * s.splits;
        float best[3] = {0.f, 0.f, 0.f};
        run_config<3>(p, blocks, mk, mv, 1, prop.sharedMemPerBlockOptin, best); /* one block an SM */
        run_config<3>(p, blocks, mk, mv, 2, prop.sharedMemPerBlockOptin, best); /* two */
        run_config<2>(p, blocks, mk, mv, 3, prop.sharedMemPerBlockOptin, best); /* three */
        char name[32];
        snprintf(name, sizeof name, "B=%d %d KV heads %d", s.B, s.Hkv, s.L);
        printf("%-22s %8.1f us", name, kv / copy_gbs / 1e3);
        for (int i = 0; i < 3; i++) printf("  %7.1f us %4.0f%%", best[i], 100.0 * kv / best[i] / 1e3 / copy_gbs);
        printf("\n");
        if (tel) {
            energy_row &e = erows[nerows++];
            snprintf(e.name, sizeof e.name, "%s", name);
            e.B = s.B;
            for (int c = 0; c < 2; c++) { /* one, then two blocks an SM (3 stages) */
                const size_t sm = c == 0 ? (size_t)prop.sharedMemPerBlockOptin - 2048 : (size_t)3 * TILE_BYTES;
                CK(cudaFuncSetAttribute(stream_cp_async<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
                e.ok[c] = energy_per_call(tel, [&] { stream_cp_async<3><<<blocks, 128, sm>>>(p); }, 1.5, &e.j[c], &e.w[c],
                                          &e.us[c], &e.mhz[c]);
            }
            /* the TMA stream, 6 stages (192 KB in flight an SM), on all, 3/4, 1/2 and 1/4 of the SMs */
            const size_t sm6 = (size_t)6 * TILE_BYTES + 128;
            CK(cudaFuncSetAttribute(stream_tma<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm6));
            for (int c = 2; c < NCOL; c++) {
                const int sms = prop.multiProcessorCount * (6 - c) / 4, grid = sms < blocks ? sms : blocks;
                e.ok[c] = energy_per_call(tel, [&] { stream_tma<6><<<grid, 160, sm6>>>(p, blocks, mk, mv); }, 1.5, &e.j[c],
                                          &e.w[c], &e.us[c], &e.mhz[c]);
            }
        }
    }
    printf("(best of 1, 2 and 3 blocks an SM; %% of the copy bandwidth: a stream that only reads can pass 100%%)\n");
    if (energy && !tel) printf("energy: n/a (no telemetry)\n");
    if (tel) {
        double cj, cw, cus;
        float cmhz;
        printf("\nenergy (>= 1.5-s windows of back-to-back launches, GPU energy counter; tokens a call = B):\n");
        if (energy_per_call(tel, [&] { CK(cudaMemcpyAsync(v, k, bytes / 2, cudaMemcpyDeviceToDevice)); }, 1.5, &cj, &cw, &cus, &cmhz))
            printf("  device-to-device copy: %.0f W, %.1f us a 512-MiB copy (%.0f GB/s), SM %.0f MHz\n", cw, cus,
                   2.0 * (double)(bytes / 2) / cus / 1e3, cmhz);
        else
            printf("  device-to-device copy: n/a (%s)\n", fw_telemetry_describe(tel));
        printf("  K/V stream: us a call, average W, mJ a token, median SM clock under load; cp.async as the decode\n"
               "  kernel loads (1 and 2 blocks an SM), TMA with 6 stages from one block on each of all, 3/4, 1/2, 1/4 of\n"
               "  the SMs (the others idle)\n");
        static const char *col[NCOL] = {"cp.async 1/SM", "cp.async 2/SM", "TMA all SMs", "TMA 3/4", "TMA 1/2", "TMA 1/4"};
        for (int i = 0; i < nerows; i++) {
            const energy_row &e = erows[i];
            printf("  %s\n", e.name);
            for (int c = 0; c < NCOL; c++)
                if (e.ok[c])
                    printf("    %-14s %7.1f us %4.0f W %8.3f mJ/token  SM %4.0f MHz\n", col[c], e.us[c], e.w[c],
                           1e3 * e.j[c] / e.B, e.mhz[c]);
                else
                    printf("    %-14s n/a\n", col[c]);
        }
        fw_telemetry_close(tel);
    }
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(sink));
    return 0;
}
