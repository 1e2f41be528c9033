/* Tiny shared helpers of the C test programs test_numerics/validation/dtype/api/sched/...:
 * pass/fail counting, one line per case, a final "N passed, N failed" line, the CPU backends of the
 * registry. Header-only (each test is one program); everything is static. */
#ifndef FW_CHECK_H
#define FW_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flashwatt.h"

static int fwt_passed, fwt_failed, fwt_skipped; /* one copy per test program */

/* Prints "PASS name: details" or "FAIL name: details" and counts it. Returns ok. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int fwt_case(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "PASS " : "FAIL ", stdout);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
    if (ok) fwt_passed++;
    else fwt_failed++;
    return ok;
}

/* An assertion among many: counted like a case, printed only when it fails, with its place. */
#define FWT_CHECK(cond, ...)                                                                       \
    do {                                                                                           \
        if (cond) {                                                                                \
            fwt_passed++;                                                                          \
        } else {                                                                                   \
            fwt_failed++;                                                                          \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                 \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static inline void fwt_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP ", stdout);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
    fwt_skipped++;
}

/* The summary line and the exit status of main. */
static inline int fwt_finish(const char *program, double seconds)
{
    if (fwt_skipped) printf("%s: %d skipped (backend does not support the case; reason printed)\n", program, fwt_skipped);
    printf("%s: %.1f s\n", program, seconds);
    printf("%d passed, %d failed\n", fwt_passed, fwt_failed);
    fflush(stdout);
    return fwt_failed ? 1 : 0;
}

/* Case-insensitive substring test. */
static inline int fwt_contains(const char *hay, const char *needle)
{
    if (!hay || !needle) return 0;
    const size_t n = strlen(needle);
    for (const char *p = hay; *p; p++) {
        size_t i = 0;
        while (i < n && p[i]) {
            char a = p[i], b = needle[i];
            if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
            if (b >= 'A' && b <= 'Z') b = (char)(b - 'A' + 'a');
            if (a != b) break;
            i++;
        }
        if (i == n) return 1;
    }
    return n == 0;
}

/* Names of the usable CPU backends in registry order (at most max). Picks up new ones by itself. */
static inline int fwt_cpu_backends(const char **names, int max)
{
    int n = 0;
    for (int i = 0; i < fw_backend_count() && n < max; i++) {
        fw_backend_info info;
        if (fw_backend_get_info(i, &info) != FW_OK) continue;
        if (info.device != FW_DEVICE_CPU || !info.usable) continue;
        names[n++] = info.name;
    }
    return n;
}

/* cpu-ref and cpu-naive must run every case; other backends may decline with a reason. */
static inline int fwt_must_support(const char *name)
{
    return strcmp(name, "cpu-ref") == 0 || strcmp(name, "cpu-naive") == 0;
}

#endif
