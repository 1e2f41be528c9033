/* A seeded random driver for the fuzz targets of tests/fuzz (each defines LLVMFuzzerTestOneInput), for
 * builds without libFuzzer: it runs every input of the corpus once, then a fixed number of inputs made
 * by mutating them (bit flips, interesting integers, inserted and erased bytes, splices, the target's
 * tokens), deterministically from the seed. ctest runs it under ASan/UBSan with a small budget; any
 * sanitizer report or a target's abort() is the failure. The same targets build with clang's
 * -fsanitize=fuzzer instead (tests/fuzz/README.md).
 *
 *   fuzz_<target> [-runs=N] [-seed=S] [-max_len=BYTES] CORPUS_DIR_OR_FILE...
 *
 * (libFuzzer's flags, so that one command line serves both builds).
 * A failing input is written to ./crash-<target>-<seed>-<run> (from the sanitizer's death callback),
 * and the run can be repeated exactly with the same -seed and -runs. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* DT_REG, strdup */
#endif
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fuzz_targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
/* Tokens worth inserting (NULL-terminated), where a target has them. */
extern const char *const fuzz_tokens[] __attribute__((weak));
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

typedef struct input {
    uint8_t *data;
    size_t size;
} input;

static input *corpus;
static size_t n_corpus, cap_corpus;
static const uint8_t *cur_data;
static size_t cur_size;
static char crash_path[256];

static uint64_t rng = 1;
static uint64_t next(void)
{
    rng += 0x9e3779b97f4a7c15ull;
    uint64_t z = rng;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }

static void on_death(void)
{
    FILE *f = fopen(crash_path, "wb");
    if (!f) return;
    fwrite(cur_data, 1, cur_size, f);
    fclose(f);
    fprintf(stderr, "fuzz driver: the failing input is in %s\n", crash_path);
}

static void add_input(const uint8_t *data, size_t size)
{
    if (n_corpus == cap_corpus) {
        cap_corpus = cap_corpus ? 2 * cap_corpus : 64;
        corpus = (input *)realloc(corpus, cap_corpus * sizeof *corpus);
        if (!corpus) abort();
    }
    uint8_t *copy = (uint8_t *)malloc(size ? size : 1);
    if (!copy) abort();
    memcpy(copy, data, size);
    corpus[n_corpus++] = (input){copy, size};
}

static int load_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint8_t buf[1 << 16];
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    add_input(buf, n);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every regular file of a directory in name order (a run does not depend on the directory's order). */
static int load_path(const char *path)
{
    DIR *d = opendir(path);
    if (!d) return load_file(path);
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            names = (char **)realloc(names, cap * sizeof *names);
            if (!names) abort();
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        if (load_file(full) != 0) fprintf(stderr, "fuzz driver: cannot read %s\n", full);
        free(names[i]);
    }
    free(names);
    return 0;
}

/* One mutation of buf (size *n, capacity max) in place. */
static void mutate(uint8_t *buf, size_t *n, size_t max)
{
    static const int64_t interesting[] = {0, 1, -1, 2, 16, 64, 127, 128, 255, 256, 1024, 65535, 65536, 0x7fffffff,
                                          -0x7fffffffll - 1, 0x80000000ll, 0xffffffffll, 0x100000000ll, INT64_MAX,
                                          INT64_MIN};
    const size_t ni = sizeof interesting / sizeof interesting[0];
    switch (below(8)) {
    case 0: /* flip a bit */
        if (*n) buf[below(*n)] ^= (uint8_t)(1u << below(8));
        break;
    case 1: /* a random byte */
        if (*n) buf[below(*n)] = (uint8_t)next();
        break;
    case 2: { /* an interesting integer, 1, 2, 4 or 8 bytes little-endian */
        const size_t w = (size_t)1 << below(4);
        if (*n < w) break;
        const uint64_t v = (uint64_t)interesting[below(ni)];
        const size_t at = below(*n - w + 1);
        for (size_t i = 0; i < w; i++) buf[at + i] = (uint8_t)(v >> (8 * i));
        break;
    }
    case 3: { /* insert random bytes */
        const size_t k = 1 + below(8);
        if (*n + k > max) break;
        const size_t at = below(*n + 1);
        memmove(buf + at + k, buf + at, *n - at);
        for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)next();
        *n += k;
        break;
    }
    case 4: { /* erase bytes */
        if (!*n) break;
        const size_t at = below(*n), k = 1 + below(*n - at < 16 ? *n - at : 16);
        memmove(buf + at, buf + at + k, *n - at - k);
        *n -= k;
        break;
    }
    case 5: { /* copy a chunk over another place */
        if (*n < 2) break;
        const size_t from = below(*n), to = below(*n), k = 1 + below(*n - (from > to ? from : to));
        memmove(buf + to, buf + from, k);
        break;
    }
    case 6: { /* splice: the tail of another corpus input */
        if (!n_corpus) break;
        const input *o = &corpus[below(n_corpus)];
        const size_t at = below(*n + 1), from = below(o->size + 1);
        size_t k = o->size - from;
        if (at + k > max) k = max - at;
        memcpy(buf + at, o->data + from, k);
        if (at + k > *n) *n = at + k;
        break;
    }
    default: { /* a token of the target, inserted */
        if (!fuzz_tokens) break;
        size_t nt = 0;
        while (fuzz_tokens[nt]) nt++;
        if (!nt) break;
        const char *t = fuzz_tokens[below(nt)];
        const size_t k = strlen(t);
        if (*n + k > max) break;
        const size_t at = below(*n + 1);
        memmove(buf + at + k, buf + at, *n - at);
        memcpy(buf + at, t, k);
        *n += k;
        break;
    }
    }
}

static void run_one(const uint8_t *data, size_t size)
{
    cur_data = data;
    cur_size = size;
    LLVMFuzzerTestOneInput(data, size);
}

int main(int argc, char **argv)
{
    long runs = 1000;
    uint64_t seed = 1;
    size_t max_len = 4096;
    const char *target = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "-runs=", 6)) runs = atol(argv[i] + 6);
        else if (!strncmp(argv[i], "-seed=", 6)) seed = strtoull(argv[i] + 6, NULL, 10);
        else if (!strncmp(argv[i], "-max_len=", 9)) max_len = (size_t)atol(argv[i] + 9);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: %s [-runs=N] [-seed=S] [-max_len=BYTES] CORPUS_DIR_OR_FILE...\n", target);
            return 2;
        } else if (load_path(argv[i]) != 0) {
            fprintf(stderr, "%s: cannot read %s\n", target, argv[i]);
            return 2;
        }
    }
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_death);
    rng = seed;
    const clock_t t0 = clock();
    snprintf(crash_path, sizeof crash_path, "crash-%s-%llu-corpus", target, (unsigned long long)seed);
    for (size_t i = 0; i < n_corpus; i++) run_one(corpus[i].data, corpus[i].size);
    uint8_t *buf = (uint8_t *)malloc(max_len ? max_len : 1);
    if (!buf) abort();
    for (long r = 0; r < runs; r++) {
        size_t n = 0;
        if (n_corpus) {
            const input *base = &corpus[below(n_corpus)];
            n = base->size < max_len ? base->size : max_len;
            memcpy(buf, base->data, n);
        }
        const int k = 1 + (int)below(4);
        for (int m = 0; m < k; m++) mutate(buf, &n, max_len);
        snprintf(crash_path, sizeof crash_path, "crash-%s-%llu-%ld", target, (unsigned long long)seed, r);
        /* the target sees exactly n bytes in their own allocation (an overread shows under ASan) */
        uint8_t *exact = (uint8_t *)malloc(n ? n : 1);
        if (!exact) abort();
        memcpy(exact, buf, n);
        run_one(exact, n);
        free(exact);
    }
    free(buf);
    for (size_t i = 0; i < n_corpus; i++) free(corpus[i].data);
    free(corpus);
    printf("%s: %zu corpus inputs and %ld mutated ones, seed %llu, %.1f s, no failure\n", target, n_corpus, runs,
           (unsigned long long)seed, (double)(clock() - t0) / CLOCKS_PER_SEC);
    return 0;
}
