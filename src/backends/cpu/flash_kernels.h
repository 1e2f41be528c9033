/* cpu-flash: the interface between the ISA-independent driver (cpu_flash.c: tiling, threads,
 * split-KV, packing order, LSE merge) and the per-ISA micro-kernels. Every ISA compiles the same
 * kernel source (flash_kernel_impl.h) with its own vector primitives, so AVX-512, AVX2 and scalar
 * run one algorithm.
 *
 * Data layout seen by a kernel (all float32, converted by the driver with the ISA's pack()):
 *   Q panel   q[d * PR + r]       the panel's PR query rows, transposed (d < D)
 *   key tile  k[j * ldk + d]      up to block_n keys: a packed copy (ldk = dp, zero padded), or
 *                                 for f32 inputs the tensor itself (ldk = its row stride)
 *   V tile    v[j * ldv + c]      same as k; direct only when dp == D (P·V reads dp columns)
 *   scores    s[j * PR + r]       Sᵀ for the panel: one key per line, PR query rows across
 *   O panel   o[r * dp + c]       running un-normalised output of the PR rows
 *   m, l      PR floats each      running max (log2 units: scale·log2(e) applied) and sum
 * PR (panel rows), key_align and dim_align are the ISA's register tile sizes. */
#ifndef FW_FLASH_KERNELS_H
#define FW_FLASH_KERNELS_H

#include <stdint.h>
#include "flashwatt.h"

/* 2^f for |f| <= 1/2, degree 6, highest power first: the polynomial of the SIMD exp2 of every ISA
 * (least-squares fit of the relative error, 1.9e-9 in exact arithmetic; see cpu_flash_avx2.c). */
#define FW_EXP2_C6 1.5337585109772255e-4f
#define FW_EXP2_C5 1.3399869912437655e-3f
#define FW_EXP2_C4 9.6185195909144067e-3f
#define FW_EXP2_C3 5.5503289740010606e-2f
#define FW_EXP2_C2 2.4022646607372755e-1f
#define FW_EXP2_C1 6.9314720561125720e-1f
#define FW_EXP2_C0 1.0f

typedef struct fw_flash_panel {
    const float *q, *k, *v;
    float *s, *o, *m, *l;
    float *alpha;          /* PR floats of scratch: this tile's rescale factor per row */
    const int32_t *lo, *hi; /* per row: visible keys [lo, hi) relative to the tile start (mask only) */
    int64_t d, dp;
    int64_t ldk, ldv;      /* row strides of the key and value tiles, in floats */
    int k0, k1;            /* keys [k0, k1) of the tile are computed; multiples of key_align */
    int rows;              /* rows of the panel that are real (the rest is padding), 1..PR */
    int mask;              /* some row does not see every key of [k0, k1): apply lo/hi */
    int v_bad;             /* the V tile holds inf/NaN: masked keys must not be multiplied in
                              (the driver computes it whenever mask is set) */
    float scale;           /* softmax scale times log2(e) */
    /* Optional (NULL): rows to fetch into L2 while this tile is computed, spread over the key loop so
     * that memory works beside the arithmetic (a memory-bound item's next tile: K row j at
     * next_rows[2j], V row j at next_rows[2j + 1], next_row_bytes each, j < next_n). */
    const char *const *next_rows;
    int next_n;
    int64_t next_row_bytes;
} fw_flash_panel;

typedef void (*fw_flash_panel_fn)(const fw_flash_panel *a);

typedef struct fw_flash_isa {
    const char *name;
    int panel_rows; /* PR */
    int key_align;  /* keys per S register tile; block_n is rounded up to it */
    int dim_align;  /* dp = D rounded up to this */
    fw_flash_panel_fn panel_d64, panel_d128, panel_any;
    /* dst[0..n) = src[off..off+n) as float, dst[n..np) = 0. Returns 1 when a value is inf or NaN
     * (checked only when check is set). */
    int (*pack)(float *dst, const void *src, fw_dtype t, int64_t off, int64_t n, int64_t np, int check);
} fw_flash_isa;

extern const fw_flash_isa fw_flash_isa_scalar;
extern const fw_flash_isa fw_flash_isa_avx2;
extern const fw_flash_isa fw_flash_isa_avx512;

#endif
