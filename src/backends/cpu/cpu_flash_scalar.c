/* cpu-flash micro-kernels without SIMD intrinsics (one float per "vector"): the portable fallback
 * and the FLASHWATT_SIMD=scalar test path. The algorithm is flash_kernel_impl.h, as for AVX2 and
 * AVX-512; tiles 4 keys x 4 rows (S) and 4 rows x 4 dims (P·V). */
#include <math.h>

typedef float FWV;
#define FWV_W 1
#define FW_SK 4
#define FW_SV 4
#define FW_PVR 4
#define FW_PC 4
#define FW_ISA scalar
#define FW_ISA_NAME "scalar"

#define fwv_load(p) (*(p))
#define fwv_store(p, x) (*(p) = (x))
#define fwv_set1(x) ((float)(x))
#define fwv_bcast(p) (*(p))
#define fwv_fma(a, b, c) ((a) * (b) + (c))
#define fwv_mul(a, b) ((a) * (b))
#define fwv_add(a, b) ((a) + (b))
#define fwv_sub(a, b) ((a) - (b))
#define fwv_load_f16(p) fw_f16_to_f32(*(p))
#define fwv_load_bf16(p) fw_bf16_to_f32(*(p))

static inline float fwv_max(float a, float b) { return (a != a || b != b) ? b : (a > b ? a : b); }
static inline float fwv_zero_neginf(float x) { return x == -INFINITY ? 0.0f : x; }
static inline float fwv_exp2(float x) { return exp2f(x); }

#include "flash_kernel_impl.h"
