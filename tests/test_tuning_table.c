/* The tuning table (src/sched/tuning_table.c): the size buckets and keys, replace-on-put and its
 * refusals, a bucket's frontier driving the policy like a built-in one (the frontier of
 * controller_plant.h), the file format (save/load round trip, merging on reload, n/a for unmeasured
 * energy) and malformed or missing files (an error naming the line, the table unchanged). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "controller_plant.h"

#define CHECK FWT_CHECK

/* The tuning table: buckets, replace-on-put, frontier per bucket, save/load round trip, errors. */
static void test_tuning_table(void)
{
    CHECK(fw_tune_bucket(0) == 1 && fw_tune_bucket(1) == 1 && fw_tune_bucket(3) == 4 && fw_tune_bucket(1024) == 1024 &&
              fw_tune_bucket(1025) == 2048,
          "buckets");
    fw_tune_key k = fw_tune_key_make("NVIDIA H100\t80GB", FW_BF16, 128, 1, 8 * 16, 1000, 1000);
    CHECK(k.bh == 128 && k.lq == 1024 && k.lk == 1024 && strcmp(k.device, "NVIDIA H100 80GB") == 0, "key %s %lld",
          k.device, (long long)k.lq);
    fw_tune_key other = fw_tune_key_make("NVIDIA H100 80GB", FW_BF16, 128, 1, 128, 2048, 2048);
    fw_tuning_table t;
    fw_tune_init(&t);
    for (int i = 0; i < NPTS; i++) {
        fw_tune_entry e;
        memset(&e, 0, sizeof e);
        e.key = k;
        snprintf(e.backend, sizeof e.backend, "cuda-flash");
        snprintf(e.config, sizeof e.config, "%.40s", k_pts[i].name);
        e.ms = k_pts[i].ms;
        e.j_per_call = k_pts[i].j_per_call;
        e.avg_w = k_pts[i].avg_w;
        e.peak_w = k_pts[i].avg_w * 1.1 + 0.123456789;
        e.stamp = 1795000000 + i;
        CHECK(fw_tune_put(&t, &e) == FW_OK, "put %d", i);
        e.key = other;
        e.ms *= 3;
        CHECK(fw_tune_put(&t, &e) == FW_OK, "put other %d", i);
    }
    fw_tune_entry e = t.e[0];
    e.ms = 0.5; /* replaces D's entry in bucket k */
    CHECK(fw_tune_put(&t, &e) == FW_OK && t.n == 2 * NPTS && t.e[0].ms == 0.5, "replace: n %d", t.n);
    e.ms = 1.0 / 0.0;
    CHECK(fw_tune_put(&t, &e) == FW_ERR_INVALID_VALUE, "inf ms accepted");
    e.ms = 2.0;
    e.avg_w = -1;
    CHECK(fw_tune_put(&t, &e) == FW_ERR_INVALID_VALUE, "negative watts accepted");
    t.e[0].ms = k_pts[0].ms;
    t.e[0].avg_w = k_pts[0].avg_w;

    /* the bucket's frontier drives the policy like the built-in one */
    fw_frontier_point pts[FW_CTRL_MAX_POINTS];
    int n = fw_tune_frontier(&t, &k, pts, FW_CTRL_MAX_POINTS);
    CHECK(n == NPTS, "frontier of the bucket has %d points", n);
    fw_policy p = policy(FW_OBJECTIVE_POWER_CAP, 450, 0);
    char why[512];
    double gap;
    int pick = fw_policy_pick(pts, n, &p, NULL, &gap, why, sizeof why);
    CHECK(pick >= 0 && strcmp(pts[pick].name, "cuda-flash C") == 0, "cap 450 picks %s", pick >= 0 ? pts[pick].name : why);

    /* save, load into a fresh table: identical */
    char path[] = "/tmp/fw_tuning_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    CHECK(fw_tune_save(&t, path, why, sizeof why) == FW_OK, "save: %s", why);
    fw_tuning_table u;
    fw_tune_init(&u);
    CHECK(fw_tune_load(&u, path, why, sizeof why) == FW_OK, "load: %s", why);
    int same = u.n == t.n;
    for (int i = 0; same && i < t.n; i++)
        same = fw_tune_key_equal(&u.e[i].key, &t.e[i].key) && !strcmp(u.e[i].backend, t.e[i].backend) &&
               !strcmp(u.e[i].config, t.e[i].config) && u.e[i].ms == t.e[i].ms && u.e[i].j_per_call == t.e[i].j_per_call &&
               u.e[i].avg_w == t.e[i].avg_w && u.e[i].peak_w == t.e[i].peak_w && u.e[i].stamp == t.e[i].stamp;
    CHECK(same, "round trip differs (n %d vs %d)", u.n, t.n);
    /* loading again merges (replaces), it does not duplicate */
    CHECK(fw_tune_load(&u, path, why, sizeof why) == FW_OK && u.n == t.n, "reload duplicated: %d", u.n);
    fw_tune_free(&u);

    /* unmeasured energy is written as n/a and read back as 0 */
    fw_tuning_table v;
    fw_tune_init(&v);
    e = t.e[1];
    e.j_per_call = 0;
    e.avg_w = 0;
    e.peak_w = 0;
    e.config[0] = 0;
    fw_tune_put(&v, &e);
    fw_tune_save(&v, path, why, sizeof why);
    FILE *f = fopen(path, "r");
    char buf[1024] = "";
    size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[got] = 0;
    if (f) fclose(f);
    CHECK(strstr(buf, "\tn/a\tn/a\tn/a\t") != NULL && strstr(buf, "\t-\t") != NULL, "file:\n%s", buf);
    fw_tune_free(&v);
    fw_tune_init(&v);
    CHECK(fw_tune_load(&v, path, why, sizeof why) == FW_OK && v.n == 1 && v.e[0].avg_w == 0 && v.e[0].config[0] == 0,
          "n/a round trip: %s", why);
    fw_tune_free(&v);

    /* malformed files: an error with the line number, the table unchanged */
    f = fopen(path, "w");
    if (f) {
        fprintf(f, "# flashwatt tuning table v1\n# comment\nX\tf16\t64\t0\t8\t512\t512\tb\t-\t1.0\tn/a\tn/a\tn/a\t0\n");
        fprintf(f, "X\tf16\t64\t0\t8\t512\t512\tb\t-\tfast\tn/a\tn/a\tn/a\t0\n");
        fclose(f);
    }
    int before = t.n;
    CHECK(fw_tune_load(&t, path, why, sizeof why) == FW_ERR_INVALID_VALUE && strstr(why, "line 4") && t.n == before,
          "bad ms: %s", why);
    f = fopen(path, "w");
    if (f) {
        fprintf(f, "# flashwatt tuning table v9\n");
        fclose(f);
    }
    CHECK(fw_tune_load(&t, path, why, sizeof why) == FW_ERR_INVALID_VALUE && strstr(why, "v1"), "version: %s", why);
    f = fopen(path, "w");
    if (f) {
        fprintf(f, "# flashwatt tuning table v1\nX\tf16\t64\t0\t8\t512\t512\tb\t-\t1.0\tn/a\tn/a\n");
        fclose(f);
    }
    CHECK(fw_tune_load(&t, path, why, sizeof why) == FW_ERR_INVALID_VALUE && strstr(why, "line 2"), "short line: %s", why);
    remove(path);
    CHECK(fw_tune_load(&t, path, why, sizeof why) == FW_OK && t.n == before && strstr(why, "no tuning table"),
          "missing file: %s", why);
    fw_tune_free(&t);
}

int main(void)
{
    test_tuning_table();
    printf("%d passed, %d failed\n", fwt_passed, fwt_failed);
    return fwt_failed ? 1 : 0;
}
