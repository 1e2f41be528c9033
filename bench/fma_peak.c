/* fma_peak: the measured fp32 FMA ceiling of this CPU, the denominator of cpu-flash's efficiency.
 *
 * Each thread runs many independent FMA chains (enough to cover FMA latency x throughput: 12
 * chains of 256-bit for AVX2, 24 of 512-bit for AVX-512) for a fixed number of iterations; the
 * best of 6 trials after a warm-up is the peak. GFLOP/s counts 2 flops per lane per FMA. The SIMD
 * level is chosen from CPUID (AVX-512 where present, else AVX2+FMA); FLASHWATT_SIMD=avx2 lowers it
 * like the library does.
 *
 *   fma_peak [threads]          (default: all online cores)
 */
#include <stdio.h>
#include "fma_kernel.h"

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : omp_get_num_procs();
    if (threads < 1) threads = 1;
    const int level = fma_level();
    if (level == 0) {
        printf("fma_peak: no AVX2+FMA on this CPU (or FLASHWATT_SIMD=scalar)\n");
        return 0;
    }
    double best = 0, sink = 0;
    for (int trial = 0; trial < 7; trial++) {
        const double g = fma_burst_gflops(threads, 50L * 1000 * 1000, level, &sink);
        if (trial > 0 && g > best) best = g; /* trial 0 is the warm-up */
    }
    printf("fma_peak: %s, %d thread(s), %d chains x %d lanes: %.1f GFLOP/s fp32 (%.1f per thread)%s\n",
           level == 2 ? "avx512" : "avx2", threads, level == 2 ? 24 : 12, level == 2 ? 16 : 8, best, best / threads,
           sink == 12345.0 ? " " : "");
    return 0;
}
