/* Division of a key index by the page size without a divide instruction: the page slot of key j is
 * (umulhi(j, mul) + j) >> shr with mul, shr from fw_page_div_make (Granlund and Montgomery's round-up
 * method, as PyTorch's IntDivider), exact for every divisor 1 .. 2^31 - 1 and every j below 2^31. The
 * host computes (mul, shr) once per call; the kernels spend a multiply-high, an add and a shift where a
 * 32-bit division costs about twenty instructions. Plain C, so that a CPU test checks the arithmetic. */
#ifndef FW_CUDA_PAGE_DIV_H
#define FW_CUDA_PAGE_DIV_H

#include <stdint.h>

typedef struct fw_page_div {
    uint32_t mul;
    int shr;
} fw_page_div;

static inline fw_page_div fw_page_div_make(uint32_t d)
{
    fw_page_div r;
    int s = 0;
    while (s < 32 && ((uint64_t)1 << s) < d) s++; /* ceil(log2 d) */
    r.shr = s;
    r.mul = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << s) - d)) / (d ? d : 1) + 1);
    return r;
}

/* The quotient as the kernels compute it (j < 2^31). */
static inline uint32_t fw_page_div_apply(uint32_t j, fw_page_div v)
{
    return (uint32_t)(((((uint64_t)j * v.mul) >> 32) + j) >> v.shr);
}

#endif
