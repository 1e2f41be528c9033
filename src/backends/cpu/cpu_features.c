/* Which SIMD code the CPU backends run, chosen once at run time from CPUID
 * (FLASHWATT_SIMD=scalar|avx2|avx512 in the environment lowers it, for tests). */
#include <stdlib.h>
#include <string.h>
#include "cpu_features.h"

static fw_simd detect(void)
{
    fw_simd best = FW_SIMD_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = FW_SIMD_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        best = FW_SIMD_AVX512;
#endif
    const char *env = getenv("FLASHWATT_SIMD");
    if (env) {
        fw_simd want = best;
        if (strcmp(env, "scalar") == 0) want = FW_SIMD_SCALAR;
        else if (strcmp(env, "avx2") == 0) want = FW_SIMD_AVX2;
        else if (strcmp(env, "avx512") == 0) want = FW_SIMD_AVX512;
        if (want < best) best = want;
    }
    return best;
}

fw_simd fw_cpu_simd(void)
{
    static int cached = -1; /* benign race: every thread computes the same value */
    if (cached < 0) cached = (int)detect();
    return (fw_simd)cached;
}

const char *fw_cpu_simd_level(void)
{
    switch (fw_cpu_simd()) {
    case FW_SIMD_AVX512: return "avx512";
    case FW_SIMD_AVX2: return "avx2";
    default: return "scalar";
    }
}
