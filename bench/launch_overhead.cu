/* What a call costs the host before its kernel runs: the per-call time (event, the work, event; the host waits) of
 * an empty kernel alone and with each piece the cuda-flash-f32 persistent path adds per call (a workspace from a
 * stream-ordered pool, a memset of its flags, the free), medians of 400 after warm-up. Built as `launch_overhead`
 * with the CUDA backends and run by `bench/device.sh floors`. On an H100 an empty kernel cost 6-7 µs a call, +4-5
 * with the memset, +8 with allocation, memset and free (docs/PERF.md): hence the persistent kernels' workspace stays
 * with its stream between calls (fw_cuda_ws_cached). */
#include <time.h>
#include "cuda_bench.h"

__global__ void empty_kernel(int *p) { if (p && threadIdx.x == 1024) p[0] = 1; }

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }

int main(void)
{
    cudaMemPool_t pool;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    unsigned long long thr = ~0ull;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
    void *flags;
    CK(cudaMalloc(&flags, 4608));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const char *names[] = {"kernel", "memset+kernel", "alloc+kernel+free", "alloc+memset+kernel+free", "getdevice+getattr x2"};
    for (int v = 0; v < 5; v++) {
        enum { N = 400 };
        float ms[N];
        double host[N];
        for (int r = -20; r < N; r++) {
            CK(cudaEventRecord(e0, 0));
            const double t0 = now_us();
            void *ws = NULL;
            if (v == 2 || v == 3) CK(cudaMallocFromPoolAsync(&ws, 64 << 20, pool, 0));
            if (v == 1 || v == 3) CK(cudaMemsetAsync(ws ? ws : flags, 0, 4608, 0));
            if (v == 4) { int d, a; CK(cudaGetDevice(&d)); CK(cudaDeviceGetAttribute(&a, cudaDevAttrMultiProcessorCount, d)); CK(cudaDeviceGetAttribute(&a, cudaDevAttrComputeCapabilityMajor, d)); }
            empty_kernel<<<132, 384>>>((int *)ws);
            CK(cudaGetLastError());
            if (ws) CK(cudaFreeAsync(ws, 0));
            const double t1 = now_us();
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            if (r >= 0) { CK(cudaEventElapsedTime(&ms[r], e0, e1)); host[r] = t1 - t0; }
        }
        qsort(ms, N, sizeof ms[0], cmpf);
        double hs = 0;
        for (int r = 0; r < N; r++) hs += host[r];
        printf("%-28s per call %6.2f us (median of %d), host API time %6.2f us (mean)\n", names[v], ms[N / 2] * 1e3, N, hs / N);
    }
    /* The floor of the benchmarks' device-time measure: a CUDA graph of 20 empty kernels (as the benchmarks capture 20
     * calls), replayed; time per kernel, median of 50 replays. */
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const unsigned grids[] = {16, 132, 264, 132};
    for (int g = 0; g < 4; g++) { /* the last: each kernel after a 4.6 KB memset (a workspace's flags zeroed) */
        enum { K = 20, R = 50 };
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < K; k++) {
            if (g == 3) CK(cudaMemsetAsync(flags, 0, 4608, st));
            empty_kernel<<<grids[g], 128, 0, st>>>(NULL);
        }
        CK(cudaStreamEndCapture(st, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        printf("graph of %d empty kernels, %3u blocks of 128%s: %6.2f us a kernel (median of %d replays)\n", K, grids[g],
               g == 3 ? ", each after a memset" : "", graph_median_ms(exec, st, 5, R) * 1e3 / K, R);
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
    }
    return 0;
}
