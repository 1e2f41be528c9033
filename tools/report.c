/* Table, CSV and JSON output for check and bench. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "report.h"

void fw_row_init(fw_row *r)
{
    memset(r, 0, sizeof *r);
    r->ms = r->tflops = r->gbps = r->intensity = NAN;
    r->max_abs_err = r->rel_l2 = r->tol = NAN;
    r->peak_mem_bytes = NAN;
    r->kv_bytes = r->tokens = r->copy_gbps = r->copy_pct = NAN;
    r->watts_avg = r->watts_peak = r->joules_per_call = r->gflops_per_watt = r->watts_std = r->idle_w = NAN;
    r->status = FW_ROW_OK;
}

void fw_row_free(fw_row *r)
{
    free(r->power_trace);
    r->power_trace = NULL;
    r->ntrace = 0;
}

static const char *mask_text(const fw_shape *s, char *buf, size_t len)
{
    const int win = s->window_left != FW_WINDOW_UNLIMITED || s->window_right != FW_WINDOW_UNLIMITED;
    size_t n;
    if (!win) n = (size_t)snprintf(buf, len, "%s", s->causal ? "causal" : "-");
    else n = (size_t)snprintf(buf, len, "%sw%lld,%lld", s->causal ? "c+" : "", (long long)s->window_left,
                              (long long)s->window_right);
    if (s->layout_bshd && n < len) snprintf(buf + n, len - n, "/bshd");
    return buf;
}

static const char *num(double x, const char *fmt, char *buf, size_t len)
{
    if (isnan(x)) snprintf(buf, len, "-");
    else snprintf(buf, len, fmt, x);
    return buf;
}

void fw_report_bench_header(FILE *f)
{
    fprintf(f, "%-14s %-6s %-4s %4s %4s %4s %6s %6s %4s %-7s %3s %10s %8s %8s %7s %9s %5s %6s %6s %9s %7s  %s\n",
            "backend", "device", "dtype", "B", "H", "Hkv", "Lq", "Lk", "D", "mask", "thr", "ms", "TFLOP/s", "GB/s",
            "FLOP/B", "max_err", "reps", "W_avg", "W_pk", "J/call", "GF/W", "note");
    fflush(f);
}

void fw_report_bench_row(FILE *f, const fw_row *r)
{
    char m[32], a[32], b[32], c[32], d[32];
    const fw_shape *s = &r->s;
    char err[40];
    if (r->checked) snprintf(err, sizeof err, "%.2e%s", r->max_abs_err, r->pass ? "" : "!");
    else snprintf(err, sizeof err, "-");
    char reps[16];
    if (r->status == FW_ROW_OK) snprintf(reps, sizeof reps, "%d", r->reps);
    else snprintf(reps, sizeof reps, "-");
    const char *note = r->note;
    char buf[480];
    char text[256];
    if (s->serving && r->status == FW_ROW_OK) { /* the batch in words: the Lq/Lk columns hold its longest */
        snprintf(buf, sizeof buf, "%s%s%.200s", fw_shape_text(s, text, sizeof text), r->note[0] ? "; " : "", r->note);
        note = buf;
    }
    if (r->status == FW_ROW_SKIPPED) { snprintf(buf, sizeof buf, "skipped: %s", r->note); note = buf; }
    else if (r->status == FW_ROW_ERROR) { snprintf(buf, sizeof buf, "ERROR: %s", r->note); note = buf; }
    else if (r->checked && !r->pass) { snprintf(buf, sizeof buf, "FAIL (tol %.2e)%s%s", r->tol, r->note[0] ? "; " : "", r->note); note = buf; }
    char thr[16];
    if (s->threads > 0) snprintf(thr, sizeof thr, "%d", s->threads);
    else snprintf(thr, sizeof thr, "all");
    char wa[32], wp[32], jc[32], gw[32];
    num(r->watts_avg, "%.0f", wa, sizeof wa);
    num(r->watts_peak, "%.0f", wp, sizeof wp);
    num(r->joules_per_call, "%.3e", jc, sizeof jc);
    num(r->gflops_per_watt, "%.1f", gw, sizeof gw);
    if (!isfinite(r->watts_avg)) snprintf(wa, sizeof wa, "n/a");
    if (!isfinite(r->watts_peak)) snprintf(wp, sizeof wp, "n/a");
    if (!isfinite(r->joules_per_call)) snprintf(jc, sizeof jc, "n/a");
    if (!isfinite(r->gflops_per_watt)) snprintf(gw, sizeof gw, "n/a");
    fprintf(f, "%-14s %-6s %-4s %4lld %4lld %4lld %6lld %6lld %4lld %-7s %3s %10s %8s %8s %7s %9s %5s %6s %6s %9s %7s  %s\n",
            r->backend, r->device, fw_dtype_name(s->dtype), (long long)s->batch, (long long)s->heads,
            (long long)s->kv_heads, (long long)s->seqlen_q, (long long)s->seqlen_k, (long long)s->head_dim,
            mask_text(s, m, sizeof m), r->device[0] == 'c' && r->device[1] == 'u' ? "-" : thr,
            num(r->ms, "%.4f", a, sizeof a), num(r->tflops, r->tflops < 10 ? "%.3g" : "%.1f", b, sizeof b),
            num(r->gbps, r->gbps < 10 ? "%.3g" : "%.1f", c, sizeof c), num(r->intensity, "%.1f", d, sizeof d), err, reps, wa, wp, jc, gw, note);
    fflush(f);
}

void fw_report_check_header(FILE *f)
{
    fprintf(f, "%-14s %-7s %10s %10s %10s %9s  %s\n", "backend", "device", "max_abs", "rel_l2", "tol", "result", "note");
    fflush(f);
}

void fw_report_check_row(FILE *f, const fw_row *r)
{
    char a[32], b[32], c[32];
    const char *res = r->status == FW_ROW_SKIPPED ? "skipped" : r->status == FW_ROW_ERROR ? "ERROR"
                    : r->pass ? "pass" : "FAIL";
    fprintf(f, "%-14s %-7s %10s %10s %10s %9s  %s\n", r->backend, r->device, num(r->max_abs_err, "%.3e", a, sizeof a),
            num(r->rel_l2, "%.3e", b, sizeof b), num(r->tol, "%.3e", c, sizeof c), res, r->note);
    fflush(f);
}

void fw_report_bandwidth(FILE *f, const fw_row *rows, int n)
{
    int any = 0;
    for (int i = 0; i < n; i++) any |= rows[i].status == FW_ROW_OK && isfinite(rows[i].kv_bytes);
    if (!any) return;
    fprintf(f, "\nKV-cache bandwidth: GB/s = K+V bytes read per call / median time; copy = a copy on the same device "
               "beside each round, bytes read + written (GPU: device-to-device cudaMemcpy; CPU: multi-threaded memcpy); "
               "%% copy: the median over 9 rounds of a copy then the call (GPU: us = a call in ~20 ms windows of "
               "back-to-back calls, the median of the rounds; CPU: one call, paired against other load); "
               "J/token = joules per call / new tokens\n");
    fprintf(f, "%-14s %-6s %10s %9s %9s %7s %10s  %s\n", "backend", "device", "us", "GB/s", "copy GB/s", "% copy",
            "J/token", "shape");
    for (int i = 0; i < n; i++) {
        const fw_row *r = &rows[i];
        if (r->status != FW_ROW_OK || !isfinite(r->kv_bytes)) continue;
        char shape[256], jt[32], cp[32], pct[32];
        fw_shape_text(&r->s, shape, sizeof shape);
        const double gbps = r->kv_bytes / (r->ms * 1e-3) / 1e9;
        num(r->copy_gbps, "%.1f", cp, sizeof cp);
        num(r->copy_pct, "%.0f%%", pct, sizeof pct);
        if (isfinite(r->joules_per_call) && r->tokens > 0) snprintf(jt, sizeof jt, "%.3e", r->joules_per_call / r->tokens);
        else snprintf(jt, sizeof jt, "n/a");
        fprintf(f, "%-14s %-6s %10.1f %9.1f %9s %7s %10s  %s\n", r->backend, r->device, r->ms * 1e3, gbps, cp, pct, jt,
                shape);
    }
    fflush(f);
}

static const char *status_text(fw_row_status s)
{
    return s == FW_ROW_OK ? "ok" : s == FW_ROW_SKIPPED ? "skipped" : "error";
}

/* ---- CSV ----------------------------------------------------------------------------------- */
static void csv_num(FILE *f, double x)
{
    if (isfinite(x)) fprintf(f, ",%.9g", x);
    else fputc(',', f);
}

static void csv_str(FILE *f, const char *s)
{
    fputs(",\"", f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

int fw_report_write_csv(const char *path, const fw_row *rows, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "flashwatt: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "backend,device,dtype,batch,heads,kv_heads,seqlen_q,seqlen_k,head_dim,causal,window_left,window_right,"
               "layout,threads,status,ms,tflops,gbps,intensity,max_abs_err,rel_l2,tol,pass,warmup,reps,peak_mem_bytes,"
               "watts_avg,watts_peak,joules_per_call,gflops_per_watt,watts_std,note\n");
    for (int i = 0; i < n; i++) {
        const fw_row *r = &rows[i];
        const fw_shape *s = &r->s;
        fprintf(f, "%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%d,%lld,%lld,%s,%d,%s", r->backend, r->device,
                fw_dtype_name(s->dtype), (long long)s->batch, (long long)s->heads, (long long)s->kv_heads,
                (long long)s->seqlen_q, (long long)s->seqlen_k, (long long)s->head_dim, s->causal,
                (long long)s->window_left, (long long)s->window_right, s->layout_bshd ? "bshd" : "bhsd", s->threads,
                status_text(r->status));
        csv_num(f, r->ms); csv_num(f, r->tflops); csv_num(f, r->gbps); csv_num(f, r->intensity);
        csv_num(f, r->checked ? r->max_abs_err : NAN); csv_num(f, r->checked ? r->rel_l2 : NAN);
        csv_num(f, r->checked ? r->tol : NAN);
        if (r->checked) fprintf(f, ",%d", r->pass);
        else fputc(',', f);
        if (r->status == FW_ROW_OK) fprintf(f, ",%d,%d", r->warmup, r->reps);
        else fputs(",,", f);
        if (isfinite(r->peak_mem_bytes)) fprintf(f, ",%.0f", r->peak_mem_bytes);
        else fputc(',', f);
        csv_num(f, r->watts_avg); csv_num(f, r->watts_peak); csv_num(f, r->joules_per_call);
        csv_num(f, r->gflops_per_watt); csv_num(f, r->watts_std);
        char note[512];
        if (s->serving) { /* the ragged batch in words beside the note (the columns hold its longest lengths) */
            char text[256];
            snprintf(note, sizeof note, "%s%s%s", fw_shape_text(s, text, sizeof text), r->note[0] ? "; " : "", r->note);
        } else {
            snprintf(note, sizeof note, "%s", r->note);
        }
        csv_str(f, note);
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "flashwatt: writing %s failed: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- JSON ---------------------------------------------------------------------------------- */
static void json_num(FILE *f, const char *key, double x)
{
    if (isfinite(x)) fprintf(f, ", \"%s\": %.9g", key, x);
    else fprintf(f, ", \"%s\": null", key);
}

static void json_str(FILE *f, const char *key, const char *s)
{
    fprintf(f, "\"%s\": \"", key);
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

int fw_report_write_json(const char *path, const fw_row *rows, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "flashwatt: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs("[", f);
    for (int i = 0; i < n; i++) {
        const fw_row *r = &rows[i];
        const fw_shape *s = &r->s;
        fputs(i ? ",\n  {" : "\n  {", f);
        json_str(f, "backend", r->backend);
        fputs(", ", f);
        json_str(f, "device", r->device);
        fprintf(f, ", \"dtype\": \"%s\", \"batch\": %lld, \"heads\": %lld, \"kv_heads\": %lld, \"seqlen_q\": %lld, "
                   "\"seqlen_k\": %lld, \"head_dim\": %lld, \"causal\": %s",
                fw_dtype_name(s->dtype), (long long)s->batch, (long long)s->heads, (long long)s->kv_heads,
                (long long)s->seqlen_q, (long long)s->seqlen_k, (long long)s->head_dim, s->causal ? "true" : "false");
        if (s->window_left == FW_WINDOW_UNLIMITED) fputs(", \"window_left\": null", f);
        else fprintf(f, ", \"window_left\": %lld", (long long)s->window_left);
        if (s->window_right == FW_WINDOW_UNLIMITED) fputs(", \"window_right\": null", f);
        else fprintf(f, ", \"window_right\": %lld", (long long)s->window_right);
        fprintf(f, ", \"layout\": \"%s\", \"threads\": %d, \"status\": \"%s\"", s->layout_bshd ? "bshd" : "bhsd",
                s->threads, status_text(r->status));
        json_num(f, "ms", r->ms);
        json_num(f, "tflops", r->tflops);
        json_num(f, "gbps", r->gbps);
        json_num(f, "intensity", r->intensity);
        json_num(f, "max_abs_err", r->checked ? r->max_abs_err : NAN);
        json_num(f, "rel_l2", r->checked ? r->rel_l2 : NAN);
        json_num(f, "tol", r->checked ? r->tol : NAN);
        if (r->checked) fprintf(f, ", \"pass\": %s", r->pass ? "true" : "false");
        else fputs(", \"pass\": null", f);
        if (r->pass_kind) fprintf(f, ", \"phase\": \"%s\"", r->pass_kind);
        if (r->status == FW_ROW_OK) fprintf(f, ", \"warmup\": %d, \"reps\": %d", r->warmup, r->reps);
        else fputs(", \"warmup\": null, \"reps\": null", f);
        if (strncmp(r->device, "cuda", 4) == 0) {
            if (isfinite(r->peak_mem_bytes)) fprintf(f, ", \"peak_mem_bytes\": %.0f", r->peak_mem_bytes);
            else fputs(", \"peak_mem_bytes\": null", f);
        }
        if (s->serving) { /* the ragged batch in words, and the KV-cache bandwidth numbers */
            char text[256];
            fputs(", ", f);
            json_str(f, "call", fw_shape_text(s, text, sizeof text));
            json_num(f, "kv_gbps", r->kv_bytes / (r->ms * 1e-3) / 1e9);
            json_num(f, "copy_gbps", r->copy_gbps);
            json_num(f, "copy_percent", r->copy_pct);
            json_num(f, "joules_per_token", r->tokens > 0 ? r->joules_per_call / r->tokens : NAN);
        }
        json_num(f, "watts_avg", r->watts_avg);
        json_num(f, "watts_peak", r->watts_peak);
        json_num(f, "joules_per_call", r->joules_per_call);
        json_num(f, "gflops_per_watt", r->gflops_per_watt);
        json_num(f, "watts_std", r->watts_std);
        json_num(f, "idle_w", r->idle_w);
        if (r->energy_source) fprintf(f, ", \"energy_source\": \"%s\"", r->energy_source);
        else fputs(", \"energy_source\": null", f);
        if (r->power_trace && r->ntrace > 0) {
            fputs(", \"power_trace\": [", f);
            for (int k = 0; k < r->ntrace; k++)
                fprintf(f, "%s[%.4f, %.2f]", k ? ", " : "", r->power_trace[k][0], r->power_trace[k][1]);
            fputs("]", f);
        } else {
            fputs(", \"power_trace\": null", f);
        }
        fputs(", ", f);
        json_str(f, "note", r->note);
        fputs("}", f);
    }
    fputs(n ? "\n]\n" : "]\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "flashwatt: writing %s failed: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}
