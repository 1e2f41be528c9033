/* cpu-flash micro-kernels for AVX-512 (F, BW, VL, DQ; 16 float lanes). The algorithm is
 * flash_kernel_impl.h; this file only supplies the vector primitives and the register tiles:
 * S tile 8 keys x 32 query rows (16 accumulators), P·V tile 8 rows x 32 dims (16 accumulators),
 * within the 32 zmm registers. Compiled with -mavx512*; run only when CPUID says so. */
#include <immintrin.h>
#include <math.h>
#include "flash_kernels.h"

typedef __m512 FWV;
#define FWV_W 16
#define FW_SK 8
#define FW_SV 2
#define FW_PVR 8
#define FW_PC 2
#define FW_ISA avx512
#define FW_ISA_NAME "avx512"

#define fwv_load(p) _mm512_loadu_ps(p)
#define fwv_store(p, x) _mm512_storeu_ps((p), (x))
#define fwv_set1(x) _mm512_set1_ps(x)
#define fwv_bcast(p) _mm512_set1_ps(*(p))
#define fwv_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define fwv_mul(a, b) _mm512_mul_ps((a), (b))
#define fwv_add(a, b) _mm512_add_ps((a), (b))
#define fwv_sub(a, b) _mm512_sub_ps((a), (b))
#define fwv_max(a, b) _mm512_max_ps((a), (b))
#define fwv_load_f16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define fwv_load_bf16(p) \
    _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p))), 16))

static inline __m512 fwv_zero_neginf(__m512 x)
{
    const __mmask16 k = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ);
    return _mm512_maskz_mov_ps(k, x);
}

/* 2^x for x <= 0, the same scheme as the AVX2 file (see there). */
static inline __m512 fwv_exp2(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(-127.0f), x);
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(FW_EXP2_C6);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FW_EXP2_C5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FW_EXP2_C4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FW_EXP2_C3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FW_EXP2_C2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FW_EXP2_C1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FW_EXP2_C0));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

#include "flash_kernel_impl.h"
