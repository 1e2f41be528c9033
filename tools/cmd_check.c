/* flashwatt check: one problem, fresh random inputs, every chosen backend against the float64
 * reference and DESIGN.md's numerics contract. Exit 0 only if all pass. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "flashwatt.h"
#include "args.h"
#include "commands.h"
#include "fw_harness.h"
#include "report.h"
#include "suites.h"

static fw_shape shape_of(const fw_cli *cli)
{
    fw_shape s;
    memset(&s, 0, sizeof s);
    s.batch = cli->batch.n ? cli->batch.v[0] : FW_DEFAULT_BATCH;
    s.heads = cli->heads.n ? cli->heads.v[0] : FW_DEFAULT_HEADS;
    s.kv_heads = cli->kv_heads.n ? cli->kv_heads.v[0] : s.heads;
    s.seqlen_q = cli->seqlen.n ? cli->seqlen.v[0] : FW_DEFAULT_SEQLEN;
    s.seqlen_k = cli->seqlen_k.n ? cli->seqlen_k.v[0] : s.seqlen_q;
    s.head_dim = cli->head_dim.n ? cli->head_dim.v[0] : FW_DEFAULT_HEAD_DIM;
    s.dtype = cli->dtype.n ? (fw_dtype)cli->dtype.v[0] : FW_F32;
    s.causal = cli->causal.n ? (int)cli->causal.v[0] : 0;
    s.window_left = cli->have_window ? cli->window_left : FW_WINDOW_UNLIMITED;
    s.window_right = cli->have_window ? cli->window_right : FW_WINDOW_UNLIMITED;
    s.layout_bshd = cli->layout.n ? (int)cli->layout.v[0] : 0;
    s.threads = cli->threads.n ? (int)cli->threads.v[0] : 0;
    return s;
}

int fw_cmd_check(int argc, char **argv)
{
    fw_cli cli;
    char err[1024];
    if (fw_args_parse(argc, argv, 1, 0, &cli, err, sizeof err)) {
        fprintf(stderr, "flashwatt check: %s\n", err);
        return 2;
    }
    if (cli.help) {
        fw_usage_check(stdout);
        return 0;
    }
    fw_plan plan;
    int rc = fw_args_plan(&cli, 0, NULL, NULL, 1, &plan, err, sizeof err);
    if (rc) {
        fprintf(stderr, "flashwatt check: %s\n", err);
        return rc;
    }
    const fw_shape s = shape_of(&cli);
    char text[256];
    printf("flashwatt check: %s, seed %llu%s\n", fw_shape_text(&s, text, sizeof text), (unsigned long long)cli.seed,
           cli.lse ? ", with lse" : "");

    fw_context *ctx = NULL;
    if (fw_context_create(&ctx) != FW_OK) {
        fprintf(stderr, "flashwatt check: cannot create a context\n");
        return 1;
    }
    if (fw_context_set_threads(ctx, s.threads) != FW_OK) {
        fprintf(stderr, "flashwatt check: --threads: %s\n", fw_context_last_error(ctx));
        fw_context_destroy(ctx);
        return 2;
    }

    /* one run (inputs + reference) per device, shared by that device's backends */
    fw_run runs[2];
    int have_run[2] = {0, 0};
    int passed = 0, failed = 0, skipped = 0, header = 0;
    rc = 0;
    for (int i = 0; i < plan.n && rc == 0; i++) {
        fw_row row;
        fw_row_init(&row);
        row.s = s;
        snprintf(row.backend, sizeof row.backend, "%s", plan.name[i]);
        fw_args_device_name(plan.device[i], row.device, sizeof row.device);
        const int di = plan.device[i].kind == FW_DEVICE_CUDA;
        const int named = cli.backends.n > 0 && strcmp(cli.backends.v[0], "all") != 0;
        if (!have_run[di]) {
            fw_case c = fw_shape_case(&s, plan.device[i], cli.seed, cli.lse);
            char msg[1024];
            fw_status st = fw_run_alloc(&runs[di], &c, msg, sizeof msg);
            if (st != FW_OK) {
                const int usage = st == FW_ERR_INVALID_SHAPE || st == FW_ERR_INVALID_VALUE ||
                                  st == FW_ERR_INVALID_STRIDE;
                fprintf(stderr, "flashwatt check: %s\n", msg);
                rc = usage ? 2 : 1;
                break;
            }
            have_run[di] = 1;
        }
        fw_run *r = &runs[di];
        if (!header) { fw_report_check_header(stdout); header = 1; }

        fw_backend_info info;
        memset(&info, 0, sizeof info);
        for (int b = 0; b < fw_backend_count(); b++)
            if (fw_backend_get_info(b, &info) == FW_OK && !strcmp(info.name, row.backend)) break;
        char why[512] = "";
        if (!info.usable) {
            snprintf(row.note, sizeof row.note, "not usable here: %.230s", info.why_not);
            row.status = FW_ROW_SKIPPED;
        } else if (fw_backend_supports(row.backend, &r->q, &r->k, &r->v, &r->o, &r->c.params, why, sizeof why) != FW_OK) {
            snprintf(row.note, sizeof row.note, "does not support this problem: %.220s", why);
            row.status = FW_ROW_SKIPPED;
        }
        if (row.status == FW_ROW_SKIPPED) {
            /* a backend the user named must run; the default set skips what does not apply */
            if (named) { row.status = FW_ROW_ERROR; failed++; }
            else skipped++;
            fw_report_check_row(stdout, &row);
            continue;
        }
        fw_status st = fw_context_set_backend(ctx, row.backend);
        if (st == FW_OK) st = fw_run_poison(r);
        if (st == FW_OK) st = fw_run_forward(r, ctx);
        if (st != FW_OK) {
            snprintf(row.note, sizeof row.note, "%s: %s", fw_status_string(st), fw_context_last_error(ctx));
            row.status = FW_ROW_ERROR;
            failed++;
            fw_report_check_row(stdout, &row);
            continue;
        }
        fw_errors e;
        st = fw_run_compare(r, &e);
        if (st != FW_OK) {
            snprintf(row.note, sizeof row.note, "comparison failed: %s", fw_status_string(st));
            row.status = FW_ROW_ERROR;
            failed++;
            fw_report_check_row(stdout, &row);
            continue;
        }
        row.checked = 1;
        row.pass = e.pass;
        row.max_abs_err = e.max_abs;
        row.rel_l2 = e.rel_l2;
        row.tol = e.tol;
        size_t n = 0;
        if (e.unwritten) n += (size_t)snprintf(row.note + n, sizeof row.note - n, "%ld unwritten; ", e.unwritten);
        if (e.stray) n += (size_t)snprintf(row.note + n, sizeof row.note - n, "%ld stray writes; ", e.stray);
        if (e.nan_mismatch) n += (size_t)snprintf(row.note + n, sizeof row.note - n, "%ld NaN mismatches; ", e.nan_mismatch);
        if (r->lse && n < sizeof row.note)
            n += (size_t)snprintf(row.note + n, sizeof row.note - n, "lse err %.2e; ", e.lse_max_abs);
        if (s.dtype != FW_F32 && n < sizeof row.note)
            n += (size_t)snprintf(row.note + n, sizeof row.note - n, "input-dtype emulation err %.2e; ", e.lowp_err);
        if (n >= 2 && n < sizeof row.note) row.note[n - 2] = 0;
        if (e.pass) passed++;
        else failed++;
        fw_report_check_row(stdout, &row);
    }
    for (int d = 0; d < 2; d++)
        if (have_run[d]) fw_run_free(&runs[d]);
    fw_context_destroy(ctx);
    if (rc) return rc;
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (passed == 0 && failed == 0) {
        fprintf(stderr, "flashwatt check: no backend could run this problem\n");
        return 1;
    }
    return failed ? 1 : 0;
}
