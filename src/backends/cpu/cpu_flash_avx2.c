/* cpu-flash micro-kernels for AVX2 + FMA + F16C (8 float lanes). The algorithm is
 * flash_kernel_impl.h; this file only supplies the vector primitives and the register tiles:
 * S tile 4 keys x 24 query rows (12 accumulators), P·V tile 6 rows x 16 dims (12 accumulators),
 * within the 16 ymm registers. Compiled with -mavx2 -mfma -mf16c; run only when CPUID says so. */
#include <immintrin.h>
#include <math.h>
#include "flash_kernels.h"

typedef __m256 FWV;
#define FWV_W 8
#define FW_SK 4
#define FW_SV 3
#define FW_PVR 6
#define FW_PC 2
#define FW_ISA avx2
#define FW_ISA_NAME "avx2"

#define fwv_load(p) _mm256_loadu_ps(p)
#define fwv_store(p, x) _mm256_storeu_ps((p), (x))
#define fwv_set1(x) _mm256_set1_ps(x)
#define fwv_bcast(p) _mm256_broadcast_ss(p)
#define fwv_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define fwv_mul(a, b) _mm256_mul_ps((a), (b))
#define fwv_add(a, b) _mm256_add_ps((a), (b))
#define fwv_sub(a, b) _mm256_sub_ps((a), (b))
#define fwv_max(a, b) _mm256_max_ps((a), (b))
#define fwv_load_f16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define fwv_load_bf16(p) \
    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p))), 16))

static inline __m256 fwv_zero_neginf(__m256 x)
{
    /* keep x where x != -inf (unordered counts as "not equal", so NaN is kept) */
    return _mm256_and_ps(x, _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_NEQ_UQ));
}

/* 2^x for x <= 0 (scores live in log2 units: the driver folds log2(e) into the scale).
 * x = n + f, |f| <= 1/2, 2^f by a degree-6 polynomial (least-squares fit of the relative error:
 * 1.9e-9 in exact arithmetic, about 1e-7 = 1-2 ulp evaluated in float), 2^n from exponent bits. x is clamped at -127,
 * where 2^n's bit pattern is exactly 0.0, so -inf and anything below about -126.5 give 0. NaN passes
 * the clamp (MAXPS returns its second operand when one is NaN) and stays NaN through the
 * polynomial. */
static inline __m256 fwv_exp2(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(FW_EXP2_C6);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FW_EXP2_C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FW_EXP2_C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FW_EXP2_C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FW_EXP2_C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FW_EXP2_C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FW_EXP2_C0));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#include "flash_kernel_impl.h"
