/* Fuzz target: the tuning-table file parser (src/sched/tuning_table.c) and the selection that reads
 * its entries. The input is a table file; properties besides "no crash, no sanitizer report": a table
 * that loads saves and loads back to the same entries, and a failed load leaves the table unchanged. */
#include <unistd.h>
#include "sched/sched.h"
#include "sched/tuning_table.h"
#include "fuzz_targets.h"

static char in_path[64], out_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* memory-backed files where there are: a write and a rename per input on a disk take milliseconds */
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(in_path, sizeof in_path, "%s/fw_fuzz_tuning_%d.txt", dir, (int)getpid());
    snprintf(out_path, sizeof out_path, "%s/fw_fuzz_tuning_%d.out", dir, (int)getpid());
    return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!in_path[0]) LLVMFuzzerInitialize(NULL, NULL);
    write_file(in_path, data, size);
    fw_tuning_table t, back;
    fw_tune_init(&t);
    fw_tune_init(&back);
    /* an entry already there: a failed load must leave it alone */
    fw_tune_entry first;
    memset(&first, 0, sizeof first);
    first.key = fw_tune_key_make("cpu", FW_F32, 64, 1, 8, 128, 128);
    snprintf(first.backend, sizeof first.backend, "cpu-flash");
    first.ms = 1.0;
    FZ_REQUIRE(fw_tune_put(&t, &first) == FW_OK, "fw_tune_put of a valid entry");
    char why[1200] = "";
    const fw_status st = fw_tune_load(&t, in_path, why, sizeof why);
    FZ_REQUIRE(st == FW_OK || st == FW_ERR_INVALID_VALUE, "fw_tune_load returned %s", fw_status_string(st));
    if (st != FW_OK) {
        FZ_REQUIRE(why[0], "a refused table without a reason");
        FZ_REQUIRE(t.n == 1 && !memcmp(&t.e[0], &first, sizeof first), "a refused table changed the entries (%d)", t.n);
    } else {
        FZ_REQUIRE(fw_tune_save(&t, out_path, why, sizeof why) == FW_OK, "saving a loaded table: %s", why);
        FZ_REQUIRE(fw_tune_load(&back, out_path, why, sizeof why) == FW_OK, "its saved form does not load: %s", why);
        FZ_REQUIRE(back.n == t.n, "saved %d entries, loaded %d back", t.n, back.n);
        /* the selection over every bucket the table has, each policy */
        for (int i = 0; i < t.n && i < 64; i++) {
            for (int obj = 0; obj < 3; obj++) {
                fw_policy pol = fw_policy_default();
                pol.objective = (fw_objective)obj;
                pol.power_cap_w = 300;
                pol.allow_reduced_precision = obj == 1;
                pol.error_budget = 1e-3;
                int cand[64], ncand = 0;
                const int pick = fw_sched_select(&t, &t.e[i].key, t.e[i].key.dtype, FW_PRECISION_EXACT, &pol, NULL, NULL,
                                                 cand, &ncand, why, sizeof why);
                FZ_REQUIRE(pick >= -1 && pick < t.n, "fw_sched_select picked %d of %d entries", pick, t.n);
            }
            fw_frontier_point pts[16];
            const int np = fw_tune_frontier(&t, &t.e[i].key, pts, 16);
            FZ_REQUIRE(np >= 1 && np <= 16, "the frontier of an entry's own bucket has %d points", np);
        }
        remove(out_path);
    }
    remove(in_path);
    fw_tune_free(&t);
    fw_tune_free(&back);
    return 0;
}

const char *const fuzz_tokens[] = {"# flashwatt tuning table v3\n", "# flashwatt tuning table v2\n",
                                   "# flashwatt tuning table v1\n", "\t", "\n", "n/a", "cpu", "f32", "bf16", "f16",
                                   "cpu-flash", "cuda-flash", "exact", "tf32", "3xtf32", "paged", "varlen", "cache",
                                   "dense", "1e308", "-1", "nan", "inf", "2147483648", "9223372036854775807", "0x10",
                                   NULL};
