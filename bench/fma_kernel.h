/* The FMA-peak kernels shared by fma_peak.c and cpu_flash_bench.c (bench programs, not the library):
 * many independent FMA chains per thread, AVX2 or AVX-512, timed over all threads together. */
#ifndef FW_BENCH_FMA_KERNEL_H
#define FW_BENCH_FMA_KERNEL_H

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double fma_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FW_X86 1
#endif

#ifdef FW_X86
/* 12 chains x 8 lanes; returns a value so the work is not optimised away. */
__attribute__((target("avx2,fma"), noinline)) static float run_avx2(long iters, float seed)
{
    __m256 a0 = _mm256_set1_ps(seed), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    __m256 a6 = a0, a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (long i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c); a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c); a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c); a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c); a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c); a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c); a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

/* 24 chains x 16 lanes (two 512-bit FMA pipes x 4-cycle latency, with margin). */
__attribute__((target("avx512f"), noinline)) static float run_avx512(long iters, float seed)
{
    __m512 a[24];
    for (int k = 0; k < 24; k++) a[k] = _mm512_set1_ps(seed + (float)k * 1e-3f);
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 24
        for (int k = 0; k < 24; k++) a[k] = _mm512_fmadd_ps(a[k], m, c);
    }
    __m512 s = a[0];
    for (int k = 1; k < 24; k++) s = _mm512_add_ps(s, a[k]);
    return _mm512_reduce_add_ps(s);
}
#endif


/* Which FMA kernel this CPU runs: 2 = AVX-512, 1 = AVX2+FMA, 0 = none. FLASHWATT_SIMD=avx2 lowers
 * it, as for the library. */
static int fma_level(void)
{
#ifdef FW_X86
    __builtin_cpu_init();
    int lvl = 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lvl = 1;
    if (__builtin_cpu_supports("avx512f")) lvl = 2;
    const char *env = getenv("FLASHWATT_SIMD");
    if (env && strcmp(env, "avx2") == 0 && lvl > 1) lvl = 1;
    if (env && strcmp(env, "scalar") == 0) lvl = 0;
    return lvl;
#else
    return 0;
#endif
}

/* One timed burst on `threads` threads: GFLOP/s (2 flops per lane per FMA); 0 without AVX2. */
static double fma_burst_gflops(int threads, long iters, int level, double *sink)
{
#ifdef FW_X86
    if (level == 0) return 0;
    const int lanes = level == 2 ? 16 : 8, chains = level == 2 ? 24 : 12;
    const double t0 = fma_now_s();
    float acc = 0;
#pragma omp parallel num_threads(threads) reduction(+ : acc)
    {
        const float seed = 1.0f + 1e-3f * (float)omp_get_thread_num();
        acc += level == 2 ? run_avx512(iters, seed) : run_avx2(iters, seed);
    }
    const double t = fma_now_s() - t0;
    *sink += acc;
    return 2.0 * lanes * chains * (double)iters * threads / t * 1e-9;
#else
    (void)threads; (void)iters; (void)level; (void)sink;
    return 0;
#endif
}

#endif
