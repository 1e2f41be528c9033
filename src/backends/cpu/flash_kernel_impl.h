/* cpu-flash micro-kernels, written once for every ISA. Included by cpu_flash_{scalar,avx2,avx512}.c
 * after they define their vector primitives:
 *
 *   FWV, FWV_W                    vector type and its float lanes
 *   fwv_load/store(p[,x])         unaligned load/store of FWV_W floats
 *   fwv_set1(x), fwv_bcast(p)     broadcast a value / the float at p
 *   fwv_fma(a,b,c) = a*b+c, fwv_mul, fwv_add, fwv_sub
 *   fwv_max(a,b)                  max; returns b when either is NaN (x86 MAXPS rule)
 *   fwv_exp2(x)                   2^x for x <= 0 (x = -inf gives 0; NaN stays NaN)
 *   fwv_zero_neginf(x)            x == -inf ? 0 : x (NaN stays NaN)
 *   fwv_load_f16(p), fwv_load_bf16(p)  FWV_W 16-bit values at p as float
 *   FW_SK, FW_SV                  S register tile: FW_SK keys x FW_SV vectors of query rows
 *   FW_PVR, FW_PC                 P·V register tile: FW_PVR rows x FW_PC vectors of head dims
 *   FW_ISA                        suffix of the generated names (scalar, avx2, avx512)
 *
 * One call of panel() advances the online softmax of PR = FW_SV * FW_W query rows over keys
 * [k0, k1) of one packed key tile:
 *   1. Sᵀ = scale · K Qᵀ   register-blocked micro-GEMM, FW_SK keys x PR rows per tile; scale
 *                          includes log2(e), so scores, m and the exponentials are base 2
 *   2. masked entries -> -inf (only when the tile crosses some row's window edge)
 *   3. per row: m' = max(m, max_j S), alpha = 2^(m - m'), P = 2^(S - m'), l = alpha·l + Σ P
 *      (a row that has seen only -inf keeps m' = -inf and uses 0 in the exponent: P = 0, no NaN)
 *   4. O = alpha·O + P·V   micro-GEMM with fresh accumulators per tile (blocked summation)
 *      When V holds inf/NaN and the tile is masked, each row sums only its visible keys, so a
 *      masked key never reaches the output through 0·NaN.
 */
#include <math.h>
#include <stdint.h>
#include "core/dtype.h"
#include "flash_kernels.h"

#define FW_PR (FW_SV * FWV_W)
#define FW_CAT2(a, b) a##_##b
#define FW_CAT(a, b) FW_CAT2(a, b)
#define FW_FN(name) FW_CAT(name, FW_ISA)

#if defined(__GNUC__)
#define FW_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define FW_ALWAYS_INLINE inline
#endif

/* The next tile's rows j .. j + FW_SK - 1 into L2 (fw_flash_panel.next_rows): a few lines per step of
 * the key loop rather than a burst, which would stall on the core's outstanding-miss limit. */
static FW_ALWAYS_INLINE void FW_FN(fetch_next)(const fw_flash_panel *a, const int j)
{
    const int end = j + FW_SK < a->next_n ? j + FW_SK : a->next_n;
    for (int r = 2 * j; r < 2 * end; r++)
        for (int64_t c = 0; c < a->next_row_bytes; c += 64) __builtin_prefetch(a->next_rows[r] + c, 0, 2);
}

/* 1. Sᵀ[j][r] = scale · Σ_d K[j][d] Q[r][d] for j in [k0, k1), and the running row max of this
 * tile (into a->alpha, which step 3 overwrites) taken while the tile is still in registers.
 * Masked tiles take the max after masking instead (want_max = 0, step 3 scans the tile). */
static FW_ALWAYS_INLINE void FW_FN(qk)(const fw_flash_panel *a, const int64_t D, const int want_max,
                                        const int nv)
{
    const FWV sc = fwv_set1(a->scale);
    FWV mx[FW_SV];
    for (int v = 0; v < nv; v++) mx[v] = fwv_set1(-INFINITY);
    const int k1 = a->k1;
    float *s = a->s;
    for (int j = a->k0; j < k1; j += FW_SK) {
        if (a->next_rows) FW_FN(fetch_next)(a, j);
        FWV acc[FW_SK][FW_SV];
        for (int kk = 0; kk < FW_SK; kk++)
            for (int v = 0; v < nv; v++) acc[kk][v] = fwv_set1(0.0f);
        const int64_t ldk = a->ldk;
        const float *kj = a->k + (int64_t)j * ldk;
        const float *q = a->q;
#pragma GCC unroll 4
        for (int64_t d = 0; d < D; d++) {
            FWV qv[FW_SV];
            for (int v = 0; v < nv; v++) qv[v] = fwv_load(q + d * FW_PR + v * FWV_W);
            for (int kk = 0; kk < FW_SK; kk++) {
                const FWV kb = fwv_bcast(kj + kk * ldk + d);
                for (int v = 0; v < nv; v++) acc[kk][v] = fwv_fma(kb, qv[v], acc[kk][v]);
            }
        }
        for (int kk = 0; kk < FW_SK; kk++)
            for (int v = 0; v < nv; v++) {
                const FWV x = fwv_mul(acc[kk][v], sc);
                if (want_max) mx[v] = fwv_max(mx[v], x);
                fwv_store(s + (int64_t)(j + kk) * FW_PR + v * FWV_W, x);
            }
    }
    if (want_max)
        for (int v = 0; v < nv; v++) fwv_store(a->alpha + v * FWV_W, mx[v]);
}

/* 2. Entries outside a row's window become -inf (they were computed, never read from memory
 * beyond the tile, and any NaN they carry from K is overwritten here). */
static inline void FW_FN(mask)(const fw_flash_panel *a)
{
    for (int j = a->k0; j < a->k1; j++) {
        float *sj = a->s + (int64_t)j * FW_PR;
        for (int r = 0; r < FW_PR; r++)
            if (j < a->lo[r] || j >= a->hi[r]) sj[r] = -INFINITY;
    }
}

/* 3. Online softmax on the panel, vectorised across query rows. have_max: step 1 left this
 * tile's row max in a->alpha. */
static FW_ALWAYS_INLINE void FW_FN(softmax)(const fw_flash_panel *a, const int have_max, const int nv)
{
    const int k0 = a->k0, k1 = a->k1;
    for (int v = 0; v < nv; v++) {
        FWV mx = fwv_set1(-INFINITY);
        if (have_max) mx = fwv_load(a->alpha + v * FWV_W);
        else
            for (int j = k0; j < k1; j++) mx = fwv_max(mx, fwv_load(a->s + (int64_t)j * FW_PR + v * FWV_W));
        const FWV mold = fwv_load(a->m + v * FWV_W);
        const FWV mnew = fwv_max(mold, mx);
        const FWV muse = fwv_zero_neginf(mnew);
        const FWV alpha = fwv_exp2(fwv_sub(mold, muse));
        FWV sum0 = fwv_set1(0.0f), sum1 = fwv_set1(0.0f);
        float *sj = a->s + (int64_t)k0 * FW_PR + v * FWV_W;
        int j = k0;
        for (; j + 1 < k1; j += 2, sj += 2 * FW_PR) {
            const FWV p0 = fwv_exp2(fwv_sub(fwv_load(sj), muse));
            const FWV p1 = fwv_exp2(fwv_sub(fwv_load(sj + FW_PR), muse));
            fwv_store(sj, p0);
            fwv_store(sj + FW_PR, p1);
            sum0 = fwv_add(sum0, p0);
            sum1 = fwv_add(sum1, p1);
        }
        if (j < k1) {
            const FWV p0 = fwv_exp2(fwv_sub(fwv_load(sj), muse));
            fwv_store(sj, p0);
            sum0 = fwv_add(sum0, p0);
        }
        fwv_store(a->m + v * FWV_W, mnew);
        fwv_store(a->alpha + v * FWV_W, alpha);
        fwv_store(a->l + v * FWV_W, fwv_fma(fwv_load(a->l + v * FWV_W), alpha, fwv_add(sum0, sum1)));
    }
}

/* 4. O = alpha·O + P·V over keys [k0, k1), FW_PVR rows x FW_PC vectors per register tile. */
static FW_ALWAYS_INLINE void FW_FN(pv)(const fw_flash_panel *a, const int64_t dp, const int nrows)
{
    for (int rb = 0; rb < nrows; rb += FW_PVR) {
        for (int64_t c = 0; c < dp; c += FW_PC * FWV_W) {
            FWV acc[FW_PVR][FW_PC];
            for (int r = 0; r < FW_PVR; r++)
                for (int i = 0; i < FW_PC; i++) acc[r][i] = fwv_set1(0.0f);
            const int64_t ldv = a->ldv;
            const float *vj = a->v + (int64_t)a->k0 * ldv + c;
            const float *pj = a->s + (int64_t)a->k0 * FW_PR + rb;
            const float *const pend = a->s + (int64_t)a->k1 * FW_PR + rb;
#pragma GCC unroll 2
            for (; pj < pend; vj += ldv, pj += FW_PR) {
                FWV vv[FW_PC];
                for (int i = 0; i < FW_PC; i++) vv[i] = fwv_load(vj + i * FWV_W);
                for (int r = 0; r < FW_PVR; r++) {
                    const FWV pb = fwv_bcast(pj + r);
                    for (int i = 0; i < FW_PC; i++) acc[r][i] = fwv_fma(pb, vv[i], acc[r][i]);
                }
            }
            for (int r = 0; r < FW_PVR; r++) {
                const FWV al = fwv_bcast(a->alpha + rb + r);
                float *orow = a->o + (int64_t)(rb + r) * dp + c;
                for (int i = 0; i < FW_PC; i++)
                    fwv_store(orow + i * FWV_W, fwv_fma(fwv_load(orow + i * FWV_W), al, acc[r][i]));
            }
        }
    }
}

/* 4'. The same, one row at a time over exactly its visible keys (V holds inf/NaN, tile masked). */
static void FW_FN(pv_exact)(const fw_flash_panel *a, const int nrows)
{
    const int64_t dp = a->dp;
    for (int r = 0; r < nrows; r++) {
        const int j0 = a->lo[r] > a->k0 ? a->lo[r] : a->k0;
        const int j1 = a->hi[r] < a->k1 ? a->hi[r] : a->k1;
        const FWV al = fwv_bcast(a->alpha + r);
        float *orow = a->o + (int64_t)r * dp;
        for (int64_t c = 0; c < dp; c += FWV_W) {
            FWV acc = fwv_set1(0.0f);
            for (int j = j0; j < j1; j++)
                acc = fwv_fma(fwv_bcast(a->s + (int64_t)j * FW_PR + r), fwv_load(a->v + (int64_t)j * a->ldv + c), acc);
            fwv_store(orow + c, fwv_fma(fwv_load(orow + c), al, acc));
        }
    }
}

/* nv: vectors of query rows in S and the softmax; nrows (<= nv·FWV_W, a multiple of FW_PVR): rows in
 * P·V. A panel whose tail rows are padding skips them (decode, the last panel of an item). */
static FW_ALWAYS_INLINE void FW_FN(panel_nv)(const fw_flash_panel *a, const int64_t D, const int64_t dp, const int nv,
                                              const int nrows)
{
    if (a->mask) {
        FW_FN(qk)(a, D, 0, nv);
        FW_FN(mask)(a);
        FW_FN(softmax)(a, 0, nv);
    } else {
        FW_FN(qk)(a, D, 1, nv);
        FW_FN(softmax)(a, 1, nv);
    }
    if (a->mask && a->v_bad) FW_FN(pv_exact)(a, nrows);
    else FW_FN(pv)(a, dp, nrows);
}

/* Rows are computed in whole vectors and whole P·V register tiles: round the panel's valid rows up
 * to both (FW_PVR divides FW_PR in every ISA's tiles). */
static FW_ALWAYS_INLINE void FW_FN(panel_body)(const fw_flash_panel *a, const int64_t D, const int64_t dp)
{
    int need = (a->rows + FW_PVR - 1) / FW_PVR * FW_PVR;
    if (need > FW_PR) need = FW_PR;
    const int nv = (need + FWV_W - 1) / FWV_W;
#if FW_SV > 1
    if (nv == 1) {
        FW_FN(panel_nv)(a, D, dp, 1, need);
        return;
    }
#endif
#if FW_SV > 2
    if (nv == 2) {
        FW_FN(panel_nv)(a, D, dp, 2, need);
        return;
    }
#endif
    FW_FN(panel_nv)(a, D, dp, FW_SV, need);
}

static void FW_FN(panel_d64)(const fw_flash_panel *a) { FW_FN(panel_body)(a, 64, 64); }
static void FW_FN(panel_d128)(const fw_flash_panel *a) { FW_FN(panel_body)(a, 128, 128); }
static void FW_FN(panel_any)(const fw_flash_panel *a) { FW_FN(panel_body)(a, a->d, a->dp); }

/* Row conversion into a packed buffer, with the inf/NaN check V needs. */
static int FW_FN(pack)(float *dst, const void *src, fw_dtype t, int64_t off, int64_t n, int64_t np, int check)
{
    int64_t i = 0;
    FWV bad = fwv_set1(0.0f);
    const FWV zero = fwv_set1(0.0f);
    switch (t) {
    case FW_F32: {
        const float *s = (const float *)src + off;
        for (; i + FWV_W <= n; i += FWV_W) {
            const FWV x = fwv_load(s + i);
            bad = fwv_fma(x, zero, bad);
            fwv_store(dst + i, x);
        }
        for (; i < n; i++) dst[i] = s[i];
        break;
    }
    case FW_F16: {
        const uint16_t *s = (const uint16_t *)src + off;
        for (; i + FWV_W <= n; i += FWV_W) {
            const FWV x = fwv_load_f16(s + i);
            bad = fwv_fma(x, zero, bad);
            fwv_store(dst + i, x);
        }
        for (; i < n; i++) dst[i] = fw_f16_to_f32(s[i]);
        break;
    }
    case FW_BF16: {
        const uint16_t *s = (const uint16_t *)src + off;
        for (; i + FWV_W <= n; i += FWV_W) {
            const FWV x = fwv_load_bf16(s + i);
            bad = fwv_fma(x, zero, bad);
            fwv_store(dst + i, x);
        }
        for (; i < n; i++) dst[i] = fw_bf16_to_f32(s[i]);
        break;
    }
    }
    for (int64_t j = n; j < np; j++) dst[j] = 0.0f;
    if (!check) return 0;
    float lanes[FWV_W];
    fwv_store(lanes, bad);
    int any = 0;
    for (int k = 0; k < FWV_W; k++) any |= lanes[k] != 0.0f; /* x·0 is 0 for finite x, NaN otherwise */
    for (int64_t j = (n / FWV_W) * FWV_W; j < n; j++) any |= !isfinite(dst[j]);
    return any;
}

const fw_flash_isa FW_CAT(fw_flash_isa, FW_ISA) = {
    .name = FW_ISA_NAME,
    .panel_rows = FW_PR,
    .key_align = FW_SK,
    .dim_align = FW_PC * FWV_W,
    .panel_d64 = FW_FN(panel_d64),
    .panel_d128 = FW_FN(panel_d128),
    .panel_any = FW_FN(panel_any),
    .pack = FW_FN(pack),
};
