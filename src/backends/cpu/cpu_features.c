/* Which SIMD code the CPU backends run, chosen once per process from CPUID; FLASHWATT_SIMD
 * (scalar|avx2|avx512, src/core/knobs.h) lowers it, for tests. */
#include <pthread.h>
#include <string.h>
#include "flashwatt.h" /* fw_cpu_simd_level, exported */
#include "cpu_features.h"
#include "core/knobs.h"

static fw_simd level;
static pthread_once_t level_once = PTHREAD_ONCE_INIT;

static void detect(void)
{
    fw_simd best = FW_SIMD_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = FW_SIMD_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        best = FW_SIMD_AVX512;
#endif
    char want[32];
    fw_knobs_read_simd(want, sizeof want);
    fw_simd lowered = best;
    if (strcmp(want, "scalar") == 0) lowered = FW_SIMD_SCALAR;
    else if (strcmp(want, "avx2") == 0) lowered = FW_SIMD_AVX2;
    else if (strcmp(want, "avx512") == 0) lowered = FW_SIMD_AVX512;
    level = lowered < best ? lowered : best;
}

fw_simd fw_cpu_simd(void)
{
    pthread_once(&level_once, detect);
    return level;
}

const char *fw_cpu_simd_level(void)
{
    switch (fw_cpu_simd()) {
    case FW_SIMD_AVX512: return "avx512";
    case FW_SIMD_AVX2: return "avx2";
    default: return "scalar";
    }
}
