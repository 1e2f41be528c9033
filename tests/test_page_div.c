/* The page-size division of the CUDA serving kernels (src/backends/cuda/serving/page_div.h): the
 * quotient (umulhi(j, mul) + j) >> shr against j / d, for every page size 1..256 (the API's range) on
 * every key index below 2^17, near every multiple of d up to the key limit 2^29, and on random indices
 * below 2^31; and for large divisors (powers of two and their neighbours up to 2^31 - 1). */
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"
#include "backends/cuda/serving/page_div.h"

static uint64_t state = 0x243f6a8885a308d3ull;
static uint32_t rnd31(void)
{
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(state >> 33); /* 31 bits */
}

/* Counts the indices where the quotient is wrong; the first one is reported. */
static int check(uint32_t d, uint32_t j, fw_page_div v, uint32_t *bad_j)
{
    if (fw_page_div_apply(j, v) == j / d) return 0;
    if (*bad_j == UINT32_MAX) *bad_j = j;
    return 1;
}

int main(void)
{
    const double t0 = fw_now_seconds();
    for (uint32_t d = 1; d <= 256; d++) {
        const fw_page_div v = fw_page_div_make(d);
        uint32_t bad_j = UINT32_MAX;
        long wrong = 0;
        for (uint32_t j = 0; j < (1u << 17); j++) wrong += check(d, j, v, &bad_j);
        for (uint32_t m = (1u << 29) / d - 64; m <= (1u << 29) / d + 1; m++) /* around the multiples near 2^29 */
            for (uint32_t e = 0; e < 2 * d && m * d + e < (1u << 31) && m * d + e >= d; e++) wrong += check(d, m * d + e - d, v, &bad_j);
        for (int i = 0; i < 20000; i++) wrong += check(d, rnd31(), v, &bad_j);
        wrong += check(d, (1u << 31) - 1, v, &bad_j);
        FWT_CHECK(wrong == 0, "page size %u: %ld wrong quotients, the first at %u (got %u, want %u)", d, wrong, bad_j,
                  bad_j == UINT32_MAX ? 0 : fw_page_div_apply(bad_j, v), bad_j == UINT32_MAX ? 0 : bad_j / d);
    }
    fwt_case(fwt_failed == 0, "page sizes 1..256: the multiply-shift quotient equals j / page_size");
    const int before = fwt_failed;
    for (int s = 8; s <= 31; s++)
        for (int64_t delta = -1; delta <= 1; delta++) {
            const int64_t d64 = ((int64_t)1 << s) + delta;
            if (d64 < 1 || d64 > 0x7fffffff) continue;
            const uint32_t d = (uint32_t)d64;
            const fw_page_div v = fw_page_div_make(d);
            uint32_t bad_j = UINT32_MAX;
            long wrong = 0;
            for (int i = 0; i < 20000; i++) wrong += check(d, rnd31(), v, &bad_j);
            for (uint32_t k = 1; k <= 3; k++)
                if ((uint64_t)k * d < (1u << 31)) {
                    wrong += check(d, k * d - 1, v, &bad_j);
                    wrong += check(d, k * d, v, &bad_j);
                }
            FWT_CHECK(wrong == 0, "divisor %u: %ld wrong quotients, the first at %u", d, wrong, bad_j);
        }
    fwt_case(fwt_failed == before, "divisors near 2^8 .. 2^31: the multiply-shift quotient equals j / d");
    return fwt_finish("test_page_div", fw_now_seconds() - t0);
}
