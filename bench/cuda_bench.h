/* What the CUDA-runtime-only bench programs (launch_overhead.cu, memory_floor.cu) share: the error check, a float
 * comparison for qsort, and the median time of a CUDA graph's replays (inline: not every program uses them). */
#ifndef FW_BENCH_CUDA_BENCH_H
#define FW_BENCH_CUDA_BENCH_H
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static inline int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

/* Median ms of `reps` replays of `exec` on `st` (after `warm` unmeasured ones), each timed by events around it. */
static inline float graph_median_ms(cudaGraphExec_t exec, cudaStream_t st, int warm, int reps)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    float *ms = (float *)malloc(sizeof(float) * reps);
    if (!ms) { printf("out of host memory\n"); exit(1); }
    for (int r = -warm; r < reps; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        if (r >= 0) CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    qsort(ms, reps, sizeof ms[0], cmpf);
    const float med = ms[reps / 2];
    free(ms);
    CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
    return med;
}
#endif
