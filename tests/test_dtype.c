/* The scalar f16/bf16 conversions of src/core/dtype.h:
 *  - every one of the 65536 f16 and bf16 bit patterns: to f32 exact (against an independent formula
 *    and, for f16, the F16C instruction), and back identical (NaN stays NaN; its payload may be
 *    canonicalised);
 *  - f32 -> f16 and f32 -> bf16 round-to-nearest-even against an independent software reference
 *    (binary search over the ordered 16-bit values, ties to the even pattern, inf past max + ulp/2),
 *    and f32 -> f16 against the hardware F16C conversion (VCVTPS2PH via _cvtss_sh, round to nearest) where the CPU
 *    has it: random bit patterns, random values over the f16 range, every halfway point between
 *    neighbouring f16 values and its f32 neighbours, subnormals, overflow (65504, 65520), inf, NaN. */
#include <float.h>
#include <stdint.h>
#include "fw_check.h"
#include "flashwatt_internal.h"
#include "fw_harness.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

#ifdef HAVE_X86
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float x)
{
    return (uint16_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); /* VCVTPS2PH, scalar form */
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
static int have_f16c(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c");
}
#else
static uint16_t hw_f32_to_f16(float x) { (void)x; return 0; }
static float hw_f16_to_f32(uint16_t h) { (void)h; return 0; }
static int have_f16c(void) { return 0; }
#endif

static int is_nan16(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
static int is_nan_bf16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

/* Independent value of an f16 pattern, in double (exact). */
static double f16_value(uint16_t h)
{
    const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp(1024.0 + m, e - 25);
    return s ? -v : v;
}

static double bf16_value(uint16_t h)
{
    const int s = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v;
    if (e == 0xff) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -133);
    else v = ldexp(128.0 + m, e - 134);
    return s ? -v : v;
}

/* Round-to-nearest-even by search: the positive patterns 0..top are ordered by value; top is the
 * infinity, taken as the next power of two (where RNE puts the overflow threshold). */
static uint16_t soft_round(float x, int bf16)
{
    const uint16_t top = bf16 ? 0x7f80u : 0x7c00u;
    const uint16_t sign = signbit(x) ? 0x8000u : 0;
    const double inf_as = bf16 ? ldexp(1.0, 128) : 65536.0;
    if (isnan(x)) return (uint16_t)(sign | top | 1u); /* any NaN; callers check NaN-ness only */
    const double a = fabs((double)x);
    if (isinf(x)) return (uint16_t)(sign | top);
    /* largest pattern with value <= a */
    unsigned lo = 0, hi = top; /* value(lo) <= a always (value 0); find max */
    while (lo < hi) {
        const unsigned mid = (lo + hi + 1) / 2;
        const double vm = mid == top ? inf_as : (bf16 ? bf16_value((uint16_t)mid) : f16_value((uint16_t)mid));
        if (vm <= a) lo = mid;
        else hi = mid - 1;
    }
    if (lo == top) return (uint16_t)(sign | top);
    const double vlo = bf16 ? bf16_value((uint16_t)lo) : f16_value((uint16_t)lo);
    if (vlo == a) return (uint16_t)(sign | lo);
    const unsigned up = lo + 1;
    const double vup = up == top ? inf_as : (bf16 ? bf16_value((uint16_t)up) : f16_value((uint16_t)up));
    const double dlo = a - vlo, dup = vup - a;
    unsigned r;
    if (dlo < dup) r = lo;
    else if (dup < dlo) r = up;
    else r = (lo & 1u) ? up : lo;
    return (uint16_t)(sign | r);
}

static uint64_t rng = 0x0123456789abcdefull;
static uint64_t next64(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- 16-bit -> f32 -> 16-bit ------------------------------------------------------------------ */
static void all_f16_patterns(int f16c)
{
    long bad_value = 0, bad_hw = 0, bad_trip = 0, bad_nan = 0;
    uint16_t first_bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float f = fw_f16_to_f32(h);
        const double want = f16_value(h);
        if (is_nan16(h)) {
            if (!isnan(f)) bad_value++;
            if (f16c && !isnan(hw_f16_to_f32(h))) bad_hw++;
            const uint16_t back = fw_f32_to_f16(f);
            if (!is_nan16(back)) { bad_nan++; first_bad = h; }
            continue;
        }
        if ((double)f != want || !signbit(f) != !signbit(want)) { bad_value++; first_bad = h; }
        if (f16c && fw_f32_to_bits(hw_f16_to_f32(h)) != fw_f32_to_bits(f)) { bad_hw++; first_bad = h; }
        if (fw_f32_to_f16(f) != h) { bad_trip++; first_bad = h; }
    }
    const int ok = !bad_value && !bad_hw && !bad_trip && !bad_nan;
    fwt_case(ok, "f16: all 65536 patterns: to-f32 value wrong %ld, differs from F16C %ld%s, round trip changed %ld, "
             "NaN lost %ld%s0x%04x",
             bad_value, bad_hw, f16c ? "" : " (no F16C here)", bad_trip, bad_nan, ok ? "; last checked " : "; first bad ",
             ok ? 0xffffu : first_bad);
}

static void all_bf16_patterns(void)
{
    long bad_value = 0, bad_trip = 0, bad_nan = 0;
    uint16_t first_bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float f = fw_bf16_to_f32(h);
        if (is_nan_bf16(h)) {
            if (!isnan(f)) bad_value++;
            if (!is_nan_bf16(fw_f32_to_bf16(f))) { bad_nan++; first_bad = h; }
            continue;
        }
        const double want = bf16_value(h);
        if ((double)f != want || !signbit(f) != !signbit(want)) { bad_value++; first_bad = h; }
        if (fw_f32_to_bf16(f) != h) { bad_trip++; first_bad = h; }
    }
    const int ok = !bad_value && !bad_trip && !bad_nan;
    fwt_case(ok, "bf16: all 65536 patterns: to-f32 value wrong %ld, round trip changed %ld, NaN lost %ld%s0x%04x",
             bad_value, bad_trip, bad_nan, ok ? "; last checked " : "; first bad ", ok ? 0xffffu : first_bad);
}

/* ---- f32 -> 16-bit rounding ------------------------------------------------------------------- */
typedef struct tally {
    long n, bad_soft, bad_hw, bad_nan;
    float first_bad;
    uint16_t got, want;
} tally;

static void check_f16(tally *t, float x, int f16c)
{
    t->n++;
    const uint16_t got = fw_f32_to_f16(x);
    if (isnan(x)) {
        if (!is_nan16(got)) { t->bad_nan++; t->first_bad = x; t->got = got; }
        return;
    }
    const uint16_t want = soft_round(x, 0);
    if (got != want && !t->bad_soft++) { t->first_bad = x; t->got = got; t->want = want; }
    if (f16c) {
        const uint16_t hw = hw_f32_to_f16(x);
        if (got != hw && !t->bad_hw++) { t->first_bad = x; t->got = got; t->want = hw; }
    }
}

static void check_bf16(tally *t, float x)
{
    t->n++;
    const uint16_t got = fw_f32_to_bf16(x);
    if (isnan(x)) {
        if (!is_nan_bf16(got)) { t->bad_nan++; t->first_bad = x; t->got = got; }
        return;
    }
    const uint16_t want = soft_round(x, 1);
    if (got != want && !t->bad_soft++) { t->first_bad = x; t->got = got; t->want = want; }
}

static void report(const char *what, const tally *t, int f16c)
{
    const int ok = !t->bad_soft && !t->bad_hw && !t->bad_nan;
    char first[96] = "";
    if (!ok)
        snprintf(first, sizeof first, "; first bad %.9g (0x%08x) -> 0x%04x want 0x%04x", (double)t->first_bad,
                 fw_f32_to_bits(t->first_bad), t->got, t->want);
    fwt_case(ok, "%s: %ld values: differ from the RNE reference %ld, from F16C %ld%s, NaN not NaN %ld%s", what, t->n,
             t->bad_soft, t->bad_hw, f16c ? "" : " (not checked)", t->bad_nan, first);
}

static const float edges[] = {
    0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 65504.0f, -65504.0f, 65505.0f, 65519.0f, 65519.99f, 65520.0f,
    -65520.0f, 65536.0f, 65535.0f, 1e5f, 1e30f, FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN, -NAN,
    0x1p-24f, -0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-25f, 0x1.8p-24f, 0x1.4p-24f, 0x1p-26f, 0x1p-14f,
    0x1.ff8p-15f, 0x1.ffcp-15f, 0x1.ffep-15f, 0x1.ff4p-15f, 0x1p-15f, FLT_MIN, 0x1p-149f, -0x1p-149f, 0x1p-127f,
    1.0009765625f /* 1 + 2^-10 */, 1.00048828125f /* 1 + 2^-11: tie, to even 1 */,
    1.00146484375f /* 1 + 3·2^-11: tie, to even 1 + 2^-9 */, 2049.0f, 2051.0f, 4097.0f, 0.1f, 0.2f, 3.14159265f,
    0x1.7fep-1f, 1.0f + 0x1p-23f, 1.0f - 0x1p-24f, 255.5f, 256.5f, 0x1.fffffep127f, 0x1.fefffep127f,
    0x1.ff0000p127f, 0x1.ff0002p127f, 0x1.fe8000p127f, 0x1.008p0f, 0x1.018p0f, 0x1.00800p-126f, 3.0e-39f};

static void f32_rounding(int f16c)
{
    tally t16, tb;
    memset(&t16, 0, sizeof t16);
    memset(&tb, 0, sizeof tb);
    const size_t ne = sizeof edges / sizeof edges[0];
    for (size_t i = 0; i < ne; i++) { check_f16(&t16, edges[i], f16c); check_bf16(&tb, edges[i]); }
    report("f32->f16 edge values", &t16, f16c);
    report("f32->bf16 edge values", &tb, 0);

    /* every halfway point between neighbouring positive f16 values (incl. 65504 | 65536=inf), both
     * signs, and the f32 values one ulp either side */
    memset(&t16, 0, sizeof t16);
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        const double a = f16_value((uint16_t)h), b = h + 1 == 0x7c00u ? 65536.0 : f16_value((uint16_t)(h + 1));
        const float mid = (float)((a + b) / 2); /* exact: 12 significant bits */
        const float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) { check_f16(&t16, xs[k], f16c); check_f16(&t16, -xs[k], f16c); }
    }
    report("f32->f16 every halfway point and its f32 neighbours", &t16, f16c);
    memset(&tb, 0, sizeof tb);
    for (uint32_t h = 0; h < 0x7f80u; h++) {
        const double a = bf16_value((uint16_t)h), b = h + 1 == 0x7f80u ? ldexp(1.0, 128) : bf16_value((uint16_t)(h + 1));
        const double midd = (a + b) / 2;
        if (midd > FLT_MAX) continue; /* the tie below 2^128 is not an f32 */
        const float mid = (float)midd;
        const float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int k = 0; k < 3; k++) { check_bf16(&tb, xs[k]); check_bf16(&tb, -xs[k]); }
    }
    report("f32->bf16 every halfway point and its f32 neighbours", &tb, 0);

    /* random bit patterns: every exponent, NaNs and infinities included */
    memset(&t16, 0, sizeof t16);
    memset(&tb, 0, sizeof tb);
    for (int i = 0; i < 1000000; i++) {
        const float x = fw_bits_to_f32((uint32_t)next64());
        check_f16(&t16, x, f16c);
        check_bf16(&tb, x);
    }
    report("f32->f16 random bit patterns", &t16, f16c);
    report("f32->bf16 random bit patterns", &tb, 0);

    /* random values over the f16 range and its subnormals: exponents 2^-26 .. 2^17 */
    memset(&t16, 0, sizeof t16);
    memset(&tb, 0, sizeof tb);
    for (int i = 0; i < 1000000; i++) {
        const uint64_t r = next64();
        const int e = (int)(r % 44) - 26;
        const float x = (float)ldexp(1.0 + (double)(r >> 20) * 0x1p-44, e) * ((r >> 8) & 1 ? -1.0f : 1.0f);
        check_f16(&t16, x, f16c);
        check_bf16(&tb, x);
    }
    report("f32->f16 random values 2^-26..2^17", &t16, f16c);
    report("f32->bf16 random values 2^-26..2^17", &tb, 0);

    /* the subnormal f16 range, densely: every f32 in [2^-25, 2^-24 · 4) */
    memset(&t16, 0, sizeof t16);
    for (uint32_t u = fw_f32_to_bits(0x1p-26f); u < fw_f32_to_bits(0x1p-22f); u += 7) check_f16(&t16, fw_bits_to_f32(u), f16c);
    report("f32->f16 dense below 2^-22 (subnormal f16)", &t16, f16c);
}

/* The element accessors used by every CPU backend and the harness. */
static void load_store(void)
{
    long bad = 0;
    const fw_dtype dts[3] = {FW_F32, FW_F16, FW_BF16};
    for (int t = 0; t < 3; t++) {
        unsigned char buf[4 * 16];
        for (int i = 0; i < 16; i++) {
            const float x = (float)(i - 8) * 0.3f;
            fw_store_f32(buf, dts[t], i, x);
            const float y = fw_load_f32(buf, dts[t], i);
            const float want = dts[t] == FW_F32 ? x : dts[t] == FW_F16 ? fw_f16_to_f32(fw_f32_to_f16(x))
                                                                       : fw_bf16_to_f32(fw_f32_to_bf16(x));
            if (fw_f32_to_bits(y) != fw_f32_to_bits(want)) bad++;
        }
    }
    const int sizes_ok = fw_dtype_size(FW_F32) == 4 && fw_dtype_size(FW_F16) == 2 && fw_dtype_size(FW_BF16) == 2;
    fwt_case(!bad && sizes_ok, "fw_load_f32/fw_store_f32 in f32, f16, bf16 agree with the conversions: %ld bad; sizes %s",
             bad, sizes_ok ? "4/2/2" : "wrong");
}

int main(void)
{
    const double t0 = fw_now_seconds();
    const int f16c = have_f16c();
    printf("F16C %s\n", f16c ? "present: checking against the hardware conversion" : "absent: software reference only");
    if (!f16c) fwt_skip("F16C hardware comparison (the CPU lacks f16c)");
    all_f16_patterns(f16c);
    all_bf16_patterns();
    f32_rounding(f16c);
    load_store();
    return fwt_finish("test_dtype", fw_now_seconds() - t0);
}
