/* The memory floor of one attention forward at the short seed shapes: a kernel that does nothing but what any exact
 * kernel must, read Q, K and V once and write O once (here O = Q + K + V, so that no read is dead), timed the way
 * tests/gpu_cuda_f32.c times device time: a CUDA graph of G calls whose inputs rotate over 4 copies (past the 50 MB L2),
 * the median replay over G. Also a device-to-device copy of 256 MB (the card's bandwidth ceiling, bytes read + written).
 * An attention kernel at these shapes cannot be faster than this floor; docs/PERF.md sets it beside the f32 kernels'
 * measured floor at L=128. Built as `memory_floor` with the CUDA backends and run by `bench/device.sh floors`. */
#include "cuda_bench.h"

/* n4 float4 per tensor; each thread 4 float4 of each input in flight */
__global__ void __launch_bounds__(256) qkv_sum(const float4 *q, const float4 *k, const float4 *v, float4 *o, long long n4)
{
    const long long base = (long long)blockIdx.x * 1024 + threadIdx.x;
    float4 a[4], b[4], c[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const long long i = base + 256 * u;
        if (i < n4) { a[u] = __ldcs(q + i); b[u] = __ldcs(k + i); c[u] = __ldcs(v + i); }
    }
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const long long i = base + 256 * u;
        if (i < n4) __stcs(o + i, make_float4(a[u].x + b[u].x + c[u].x, a[u].y + b[u].y + c[u].y, a[u].z + b[u].z + c[u].z,
                                             a[u].w + b[u].w + c[u].w));
    }
}

int main(void)
{
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s\n", prop.name);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    { /* the bandwidth ceiling */
        const size_t bytes = 256u << 20;
        void *a, *b;
        CK(cudaMalloc(&a, bytes)); CK(cudaMalloc(&b, bytes));
        CK(cudaMemset(a, 1, bytes));
        float ms[20];
        for (int r = -3; r < 20; r++) {
            CK(cudaEventRecord(e0, st));
            CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            if (r >= 0) CK(cudaEventElapsedTime(&ms[r], e0, e1));
        }
        qsort(ms, 20, sizeof ms[0], cmpf);
        printf("device-to-device copy 256 MB: %.3f ms, %.2f TB/s (read + written)\n", ms[10], 2.0 * bytes / (ms[10] * 1e9));
        CK(cudaFree(a)); CK(cudaFree(b));
    }
    const struct { int B, H, L, D; } shapes[] = {{16, 8, 128, 64}, {16, 8, 256, 64}, {32, 8, 128, 64}, {1, 8, 128, 64},
                                                 {1, 8, 512, 64}, {16, 8, 512, 64}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const long long n = (long long)shapes[s].B * shapes[s].H * shapes[s].L * shapes[s].D, n4 = n / 4;
        enum { SETS = 4, G = 40, R = 21 };
        float4 *t[SETS][4];
        for (int i = 0; i < SETS; i++)
            for (int j = 0; j < 4; j++) {
                CK(cudaMalloc(&t[i][j], n * sizeof(float)));
                CK(cudaMemset(t[i][j], 0x3f, n * sizeof(float))); /* 0.75 and the like: not zeros */
            }
        const unsigned blocks = (unsigned)((n4 + 1023) / 1024);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int g = 0; g < G; g++) {
            float4 **x = t[g % SETS];
            qkv_sum<<<blocks, 256, 0, st>>>(x[0], x[1], x[2], x[3], n4);
        }
        CK(cudaStreamEndCapture(st, &graph));
        CK(cudaGetLastError());
        CK(cudaGraphInstantiate(&exec, graph, 0));
        const double us = graph_median_ms(exec, st, 3, R) * 1e3 / G, mb = 4.0 * n * sizeof(float) / 1e6;
        printf("B=%-2d H=%d L=%-4d D=%d: read Q,K,V + write O (%.1f MB) %.2f us a call in a graph (%.2f TB/s), %u blocks\n",
               shapes[s].B, shapes[s].H, shapes[s].L, shapes[s].D, mb, us, mb / us, blocks);
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
        for (int i = 0; i < SETS; i++)
            for (int j = 0; j < 4; j++) CK(cudaFree(t[i][j]));
    }
    return 0;
}
