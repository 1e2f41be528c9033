/* Shared by the fuzz targets of tests/fuzz: a reader that turns the fuzzer's bytes into arguments
 * (zeros once they run out, so every input decodes), and the check that aborts on a broken property. */
#ifndef FW_FUZZ_TARGETS_H
#define FW_FUZZ_TARGETS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fz {
    const uint8_t *p;
    size_t n;
} fz;

static inline uint8_t fz_u8(fz *f)
{
    if (!f->n) return 0;
    f->n--;
    return *f->p++;
}

static inline uint64_t fz_u64(fz *f)
{
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x |= (uint64_t)fz_u8(f) << (8 * i);
    return x;
}

/* Mostly 1..small_max; one byte value in eight an edge: 0, -1, 2^31 - 1, 2^31, INT64_MAX, ... or any
 * 64-bit value. */
static inline int64_t fz_size(fz *f, int64_t small_max)
{
    static const int64_t edge[] = {0, -1, 2, 64, 257, 65536, 0x7fffffff, 0x80000000ll, 0x100000001ll, (int64_t)1 << 40,
                                   (int64_t)1 << 62, INT64_MAX, INT64_MIN, -0x80000000ll, 1024, 0};
    const uint8_t b = fz_u8(f);
    if (b < 224) return 1 + b % small_max;
    if (b < 240) return edge[b - 224];
    return (int64_t)fz_u64(f);
}

#define FZ_REQUIRE(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz: property broken (%s:%d): ", __FILE__, __LINE__);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
