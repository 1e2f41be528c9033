/* One row of flashwatt bench, measured (bench_row.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "flashwatt.h"
#include "args.h"
#include "fw_harness.h"
#include "report.h"
#include "energy.h"
#include "bandwidth.h"
#include "calibrate.h"
#include "bench_row.h"
#include "flashwatt_internal.h"
#ifdef FW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- GPU memory (cudaMemGetInfo) -------------------------------------------------------- */
static double gpu_used_bytes(fw_device dev)
{
#ifdef FW_HAVE_CUDA
    size_t free_b = 0, total_b = 0;
    if (dev.kind == FW_DEVICE_CUDA && cudaSetDevice(dev.index) == cudaSuccess &&
        cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        return (double)(total_b - free_b);
#else
    (void)dev;
#endif
    return NAN;
}

static int clampi(double x, int lo, int hi)
{
    if (!(x >= lo)) return lo;
    if (x > hi) return hi;
    return (int)x;
}

/* Marks row as errored, its note `what` followed by the context's last error (else the status's
 * text); returns 1, the error count of the row. */
static int mark_error(fw_row *row, fw_context *ctx, const char *what, fw_status st)
{
    row->status = FW_ROW_ERROR;
    snprintf(row->note, sizeof row->note, "%s%s", what,
             fw_context_last_error(ctx)[0] ? fw_context_last_error(ctx) : fw_status_string(st));
    return 1;
}

/* A probe call the backend refused as unsupported (a --precision it has no mode for: supports() sees no
 * precision) skips the row, as the shape check before it would have; 1 where it did. */
static int unsupported_skip(fw_row *row, fw_context *ctx, fw_status st)
{
    if (st != FW_ERR_UNSUPPORTED) return 0;
    row->status = FW_ROW_SKIPPED;
    snprintf(row->note, sizeof row->note, "unsupported: %.240s", fw_context_last_error(ctx));
    return 1;
}

/* Adaptive repetitions from the probe time t (s) of one call: ~1 s of timed calls on the cpu, ~0.5 s on
 * a GPU (di: device row), at least 3 (fewer only when 3 would exceed ~10 s), at most 200 / 1000; the
 * user's --warmup / --reps where given. */
static void plan_reps(const fw_cli *cli, double t, int di, fw_row *row)
{
    const double budget = di ? 0.5 : 1.0;
    row->warmup = cli->warmup >= 0 ? cli->warmup : (t > 1.0 ? 0 : clampi(0.2 / t, 1, di ? 100 : 20));
    if (cli->reps > 0) row->reps = cli->reps;
    else if (3 * t > 10.0) row->reps = clampi(10.0 / t, 1, 3);
    else row->reps = clampi(budget / t, 3, di ? 1000 : 200);
}

/* ---- --backward: one row of forward + backward ----------------------------------------- */
int fw_bench_backward_row(const fw_cli *cli, fw_run *r, fw_bwd *bw, fw_context *ctx, fw_row *row, fw_bench_pos pos)
{
    const int di = r->c.device.kind == FW_DEVICE_CUDA;
    row->pass_kind = "fwd+bwd";
    const fw_case *c = &r->c;
    const double flops = 3.5 * fw_run_flops(r);
    const double es = (double)fw_dtype_size(c->dtype);
    /* query and key rows: a ragged batch's totals, not its sequences times the longest */
    const int ragged = c->kind != FW_CASE_DENSE;
    const double rows_q = ragged ? (double)r->problem.total_q : (double)(c->batch * c->seqlen_q);
    const double rows_k = ragged ? (double)r->problem.total_k : (double)(c->batch * c->seqlen_k);
    const double nq = rows_q * (double)(c->heads * c->head_dim), nkv = rows_k * (double)(c->kv_heads * c->head_dim);
    const double bytes = fw_run_bytes(r) + es * (4.0 * nq + 4.0 * nkv) + 4.0 * rows_q * (double)c->heads;
    fw_status st = fw_context_set_backend(ctx, row->backend);
    double probe_ms = NAN;
    if (st == FW_OK) st = fw_bwd_time(r, bw, ctx, 0, 1, &probe_ms);
    if (st == FW_ERR_NOT_IMPLEMENTED) {
        row->status = FW_ROW_SKIPPED;
        snprintf(row->note, sizeof row->note, "no backward");
        return 0;
    }
    if (unsupported_skip(row, ctx, st)) return 0;
    if (st != FW_OK) return mark_error(row, ctx, "", st);
    const double t = fmax(probe_ms * 1e-3, 1e-6);
    plan_reps(cli, t, di, row);
    const double expect = t * (row->warmup + row->reps);
    if (expect > FW_BENCH_PROGRESS_S)
        fprintf(stderr, "flashwatt bench: [%d/%d] timing %s %s fwd+bwd: %d+%d calls, ~%.0f s\n", pos.done + 1,
                pos.total, row->backend, pos.text, row->warmup, row->reps, expect);
    double ms = NAN;
    st = fw_bwd_time(r, bw, ctx, row->warmup, row->reps, &ms);
    if (st != FW_OK) return mark_error(row, ctx, "timing failed: ", st);
    row->ms = ms;
    row->tflops = flops / (ms * 1e-3) / 1e12;
    row->gbps = bytes / (ms * 1e-3) / 1e9;
    row->intensity = flops / bytes;
    snprintf(row->note, sizeof row->note, "fwd+bwd");
    if (!strcmp(row->backend, "auto")) {
        size_t nl = strlen(row->note);
        snprintf(row->note + nl, sizeof row->note - nl, "; ran %s", fw_context_last_backend(ctx));
    }
    return 0;
}

/* ---- KV-cache rows: the decode roofline ------------------------------------------------------ */
#define BW_ROUNDS 9

static double median_of(double *x, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j] < x[j - 1]; j--) {
            const double t = x[j]; x[j] = x[j - 1]; x[j - 1] = t;
        }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* K+V bytes per call against a copy on the same device: copies and calls alternate for BW_ROUNDS
 * rounds and the percentage is the median of each round's ratio. On the cpu a round's call is one
 * call (other processes come and go); on a GPU a window of ~20 ms of back-to-back calls, an engine's
 * steady state, whose median also becomes the row's time (one synchronised call also shows the
 * host's work a call, which the queue hides in a serving loop). */
static void bandwidth_row(fw_run *r, fw_context *ctx, fw_row *row, fw_device dev)
{
    const fw_serving_shape *sv = row->s.serving;
    row->kv_bytes = fw_run_kv_bytes(r);
    row->tokens = 0;
    for (int b = 0; b < sv->nseq; b++) row->tokens += sv->seq_q[b];
    char why[256] = "";
    const int gpu = dev.kind == FW_DEVICE_CUDA;
    fw_copier *cp = fw_copier_open(dev, row->s.threads, gpu ? (size_t)1 << 30 : (size_t)256 << 20, why, sizeof why);
    double bw[BW_ROUNDS], ratio[BW_ROUNDS], win[BW_ROUNDS];
    int ok = cp != NULL;
    for (int i = 0; ok && i < BW_ROUNDS; i++) {
        bw[i] = 2.0 * (double)fw_copier_bytes(cp) / fw_copier_run(cp) / 1e9;
        double call_s = row->ms * 1e-3;
        if (!gpu) {
            const double t0 = fw_now_seconds();
            ok = fw_run_forward(r, ctx) == FW_OK;
            call_s = fw_now_seconds() - t0;
        } else {
            /* steady state: ~20 ms of back-to-back calls, so the host's work a call hides behind the queue */
            double ms = 0;
            const int calls = (int)fmin(2000.0, fmax(1.0, 20.0 / fmax(row->ms, 1e-3)));
            ok = fw_run_time_window(r, ctx, calls, &ms) == FW_OK && ms > 0;
            call_s = ms * 1e-3;
            win[i] = ms;
        }
        ratio[i] = row->kv_bytes / call_s / 1e9 / bw[i];
        if (!isfinite(bw[i])) {
            ok = 0;
            snprintf(why, sizeof why, "the copy failed");
        }
    }
    fw_copier_close(cp);
    if (ok) {
        row->copy_gbps = median_of(bw, BW_ROUNDS);
        row->copy_pct = 100.0 * median_of(ratio, BW_ROUNDS);
        if (gpu) { /* the row's time becomes a call's in back-to-back windows; its rates follow */
            const double ms = median_of(win, BW_ROUNDS);
            row->tflops *= row->ms / ms;
            row->gbps *= row->ms / ms;
            row->ms = ms;
        }
    } else {
        const size_t nl = strlen(row->note);
        snprintf(row->note + nl, sizeof row->note - nl, "%scopy bandwidth n/a: %.120s", nl ? "; " : "",
                 why[0] ? why : fw_context_last_error(ctx));
    }
}

/* ---- energy: calls for the window ------------------------------------------------------- */
typedef struct bench_arg {
    fw_run *r;
    fw_context *ctx;
    int cuda_index;
} bench_arg;

static fw_status bench_call(void *a)
{
    bench_arg *b = (bench_arg *)a;
    return fw_run_call(b->r, b->ctx);
}

static fw_status bench_sync(void *a) { return fw_device_sync(((bench_arg *)a)->cuda_index); }

/* ---- the forward row ------------------------------------------------------------------- */
int fw_bench_forward_row(const fw_cli *cli, fw_run *r, fw_context *ctx, fw_row *row, fw_device dev, fw_bench_ref *ref,
                         int energy_asked, int *energy_warned, fw_bench_pos pos)
{
    const fw_shape *s = &row->s;
    const int di = dev.kind == FW_DEVICE_CUDA;
    const double flops = fw_run_flops(r), bytes = fw_run_bytes(r);
    const double mem_row_before = di ? gpu_used_bytes(dev) : NAN;
    fw_status st = fw_context_set_backend(ctx, row->backend);
    if (st == FW_OK) st = fw_run_poison(r);
    double t0 = fw_now_seconds();
    if (st == FW_OK) st = fw_run_forward(r, ctx);
    const double probe = fw_now_seconds() - t0;
    if (unsupported_skip(row, ctx, st)) return 0;
    if (st != FW_OK) return mark_error(row, ctx, "", st);
    /* the error of this run's output against the reference (computed once per shape) */
    if (!ref->decided) {
        ref->decided = 1;
        const double rrate = fw_calib_rate(NULL, dev, s->dtype, s->head_dim, 0);
        ref->est_s = rrate > 0 ? flops / rrate : INFINITY;
        ref->ok = cli->max_ref_s > 0 && ref->est_s <= cli->max_ref_s;
        if (ref->ok && ref->est_s > FW_BENCH_PROGRESS_S)
            fprintf(stderr, "flashwatt bench: [%d/%d] float64 reference for %s: ~%.0f s\n", pos.done + 1, pos.total,
                    pos.text, ref->est_s);
    }
    if (ref->ok) {
        fw_errors e;
        const int first = !r->have_ref;
        const double tr = fw_now_seconds();
        st = fw_run_compare(r, &e);
        if (st == FW_OK && first)
            fw_calib_learn(NULL, dev, s->dtype, s->head_dim, 0, flops / fmax(fw_now_seconds() - tr, 1e-6));
        if (st != FW_OK) {
            snprintf(row->note, sizeof row->note, "reference comparison failed: %s", fw_status_string(st));
        } else {
            row->checked = 1;
            row->pass = e.pass;
            row->max_abs_err = e.max_abs;
            row->rel_l2 = e.rel_l2;
            row->tol = e.tol;
            if (e.unwritten || e.nan_mismatch || e.cache_mismatch)
                snprintf(row->note, sizeof row->note, "%ld unwritten, %ld NaN mismatches, %ld cache elements wrong",
                         e.unwritten, e.nan_mismatch, e.cache_mismatch);
        }
    } else {
        if (cli->max_ref_s <= 0)
            snprintf(row->note, sizeof row->note, "reference comparison off (--max-ref-s 0)");
        else
            snprintf(row->note, sizeof row->note, "reference skipped for size (~%.0f s > --max-ref-s %g)",
                     ref->est_s, cli->max_ref_s);
    }
    const double t = fmax(probe, 1e-6);
    plan_reps(cli, t, di, row);
    const double expect = t * (row->warmup + row->reps);
    if (expect > FW_BENCH_PROGRESS_S)
        fprintf(stderr, "flashwatt bench: [%d/%d] timing %s %s: %d+%d calls, ~%.0f s\n", pos.done + 1, pos.total,
                row->backend, pos.text, row->warmup, row->reps, expect);
    double ms = NAN;
    st = fw_run_time(r, ctx, row->warmup, row->reps, &ms);
    if (st != FW_OK) return mark_error(row, ctx, "timing failed: ", st);
    row->ms = ms;
    fw_calib_learn(row->backend, dev, s->dtype, s->head_dim, s->threads, flops / (ms * 1e-3));
    row->tflops = flops / (ms * 1e-3) / 1e12;
    row->gbps = bytes / (ms * 1e-3) / 1e9;
    row->intensity = flops / bytes;
    if (s->serving && s->serving->kind == FW_CASE_KVCACHE) bandwidth_row(r, ctx, row, dev);
    if (di) {
        /* the call's tensors plus the device memory the backend newly holds after this row's
         * calls (cudaMemGetInfo before and after). Workspace a backend cached on an earlier
         * row and allocations freed inside a call are not seen. */
        const double used = gpu_used_bytes(dev);
        const double es = s->dtype == FW_F32 ? 4.0 : 2.0;
        const double tensors = es * (double)(r->q_elems + 2 * r->kv_elems + r->o_elems) +
                               (r->lse ? 4.0 * (double)(s->batch * s->heads * s->seqlen_q) : 0.0);
        if (isfinite(used) && isfinite(mem_row_before))
            row->peak_mem_bytes = tensors + fmax(used - mem_row_before, 0);
        /* energy window: cool-down (bounded), warm-up, >= 1 s of back-to-back calls */
        if (energy_asked != 0) {
            int gpu = -1;
            double idle_w = 0;
            char ewhy[256] = "";
            fw_telemetry *tel = fw_energy_session(dev.index, &gpu, &idle_w, ewhy, sizeof ewhy);
            if (!tel && energy_asked == 1 && !*energy_warned) {
                *energy_warned = 1;
                fprintf(stderr, "flashwatt bench: --energy: no GPU power telemetry here (%s): energy n/a\n", ewhy);
            }
            if (tel) {
                bench_arg ba = {r, ctx, dev.index};
                fw_emeas m;
                fw_status es = fw_energy_measure(tel, gpu, idle_w, cli->cooldown_s, 0.5, cli->window_s, ms * 1e-3,
                                                 bench_call, bench_sync, &ba, &m);
                if (es == FW_OK && m.valid) {
                    row->watts_avg = m.watts_avg;
                    row->joules_per_call = m.joules_per_call;
                    row->gflops_per_watt = flops / m.joules_per_call / 1e9;
                    row->energy_source = m.source;
                }
                if (es == FW_OK && m.peak_valid) row->watts_peak = m.watts_peak;
                if (es == FW_OK && m.std_valid) row->watts_std = m.watts_std;
                row->idle_w = m.idle_w;
                row->power_trace = m.trace;
                row->ntrace = m.ntrace;
                m.trace = NULL;
                if (es != FW_OK || m.note[0]) {
                    size_t nl = strlen(row->note);
                    snprintf(row->note + nl, sizeof row->note - nl, "%s%s", nl ? "; " : "",
                             es != FW_OK ? "energy window failed" : m.note);
                }
                fw_emeas_free(&m);
            }
        }
    }
    if (!strcmp(row->backend, "auto")) { /* the scheduler's choice */
        size_t nl = strlen(row->note);
        snprintf(row->note + nl, sizeof row->note - nl, "%sran %s: %.200s", nl ? "; " : "",
                 fw_context_last_backend(ctx), fw_sched_last_choice(fw_context_sched(ctx)));
    }
    return 0;
}
