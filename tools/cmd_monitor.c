/* flashwatt monitor: live view of each GPU's power, energy, temperature, clocks and throttle
 * reasons, refreshed in place (ANSI) on a terminal, or logged as CSV. Absent readings print "n/a". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "flashwatt.h"
#include "commands.h"
#include "flashwatt_internal.h"

#define MON_MAX_GPUS 64

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: flashwatt monitor [--interval MS] [--count N] [--csv FILE] [--gpu N]\n"
            "\n"
            "Live view of each GPU: instant and 1-s average power, the peak instant power since the\n"
            "last refresh (sampled every 20 ms), energy since the start (from the\n"
            "driver's total-energy counter) and the power that counter gives over the last interval,\n"
            "temperature, SM and memory clocks, utilisation, the enforced power limit and the\n"
            "clock-event (throttle) reasons; CPU package energy where Linux powercap is readable.\n"
            "Readings a source does not give print as n/a.\n"
            "\n"
            "  --interval MS  refresh period in milliseconds (default 500, at least 10)\n"
            "  --count N      stop after N refreshes (default: until Ctrl-C)\n"
            "  --csv FILE     append one row per GPU and refresh to FILE ('-' = stdout) instead of\n"
            "                 the live view; missing values are written as n/a\n"
            "  --gpu N        only GPU N (NVML index)\n"
            "  --fake N       show N simulated GPUs (to try the display where there is no GPU)\n"
            "\n"
            "With no GPU it says so and exits 0. It reads only; it never changes clocks or limits.\n");
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || end == s || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (!g_stop && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

typedef struct gpu_state {
    int have_e0;
    uint64_t e0_mj;   /* counter at the first reading */
    int have_prev;
    uint64_t prev_mj; /* counter and time at the previous refresh */
    double prev_t;
} gpu_state;

/* Energy since the start and the counter's power over the last interval, or n/a. */
static void energy_cols(gpu_state *s, const fw_gpu_reading *r, char *ej, size_t ejl, char *cw, size_t cwl, int csv)
{
    snprintf(ej, ejl, "n/a");
    snprintf(cw, cwl, "n/a");
    if (!(r->valid & FW_TEL_ENERGY)) {
        s->have_prev = 0;
        return;
    }
    if (!s->have_e0) {
        s->have_e0 = 1;
        s->e0_mj = r->energy_mj;
    }
    if (r->energy_mj >= s->e0_mj) snprintf(ej, ejl, csv ? "%.3f" : "%.3f J", (double)(r->energy_mj - s->e0_mj) / 1000.0);
    if (s->have_prev && r->t_s > s->prev_t && r->energy_mj >= s->prev_mj)
        snprintf(cw, cwl, csv ? "%.1f" : "%.1f W", (double)(r->energy_mj - s->prev_mj) / 1000.0 / (r->t_s - s->prev_t));
    s->have_prev = 1;
    s->prev_mj = r->energy_mj;
    s->prev_t = r->t_s;
}

/* Peak instant power among the sampler's readings since `since` (the last refresh), or n/a. */
static void peak_col(fw_telemetry *t, int g, double since, fw_gpu_reading *buf, int cap, char *out, size_t len, int csv)
{
    snprintf(out, len, "n/a");
    int n = buf ? fw_telemetry_samples(t, g, since, buf, cap) : 0;
    double peak = 0;
    int have = 0;
    for (int i = 0; i < n; i++)
        if ((buf[i].valid & FW_TEL_POWER_INSTANT) && (!have || buf[i].power_instant_w > peak)) {
            peak = buf[i].power_instant_w;
            have = 1;
        }
    if (have) snprintf(out, len, csv ? "%.3f" : "%.1f W", peak);
}

static void fmt(const fw_gpu_reading *r, unsigned field, char *buf, size_t len) { fw_gpu_reading_format(r, field, buf, len); }

/* CSV value: the number alone, or n/a */
static void csv_num(char *buf, size_t len, int valid, const char *f, double v)
{
    if (!valid) snprintf(buf, len, "n/a");
    else snprintf(buf, len, f, v);
}

int fw_cmd_monitor(int argc, char **argv)
{
    long interval = 500, count = 0, only = -1, fake_n = 0;
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        int bad = 0;
        if (!strcmp(a, "--interval")) bad = !v || parse_int(v, 10, 3600000, &interval);
        else if (!strcmp(a, "--count")) bad = !v || parse_int(v, 1, 1000000000, &count);
        else if (!strcmp(a, "--gpu")) bad = !v || parse_int(v, 0, MON_MAX_GPUS - 1, &only);
        else if (!strcmp(a, "--fake")) bad = !v || parse_int(v, 1, 8, &fake_n);
        else if (!strcmp(a, "--csv")) bad = !v || !*v, csv_path = v;
        else {
            fprintf(stderr, "flashwatt monitor: unknown argument '%s' (see flashwatt monitor --help)\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "flashwatt monitor: %s needs %s\n", a,
                    !strcmp(a, "--interval")  ? "a period in ms, 10..3600000"
                    : !strcmp(a, "--count")   ? "a count >= 1"
                    : !strcmp(a, "--gpu")     ? "a GPU index"
                    : !strcmp(a, "--fake")    ? "a number of simulated GPUs, 1..8"
                                              : "a file name");
            return 2;
        }
        i++;
    }

    fw_telemetry *t = NULL;
    fw_tel_fake *fake = NULL;
    fw_status st;
    if (fake_n > 0) {
        fake = fw_tel_fake_create((int)fake_n, 0);
        if (!fake) {
            fprintf(stderr, "flashwatt monitor: out of memory\n");
            return 1;
        }
        fw_tel_source s = fw_tel_fake_source(fake);
        st = fw_telemetry_open_with_source(&t, &s, NULL);
    } else {
        st = fw_telemetry_open(&t);
    }
    if (st != FW_OK) {
        fprintf(stderr, "flashwatt monitor: cannot open telemetry: %s\n", fw_status_string(st));
        fw_tel_fake_destroy(fake);
        return 1;
    }
    int n = fw_telemetry_gpu_count(t);
    if (n == 0) {
        printf("flashwatt monitor: no GPU to monitor on this machine.\n  %s\n", fw_telemetry_describe(t));
        fw_cpu_reading c;
        if (fw_telemetry_read_cpu(t, &c) == FW_OK) printf("  CPU package energy is readable (%s).\n", c.source);
        fw_telemetry_close(t);
        return 0;
    }
    if (only >= n) {
        fprintf(stderr, "flashwatt monitor: --gpu %ld but there %s %d GPU%s (0..%d)\n", only, n == 1 ? "is" : "are", n,
                n == 1 ? "" : "s", n - 1);
        fw_telemetry_close(t);
        fw_tel_fake_destroy(fake);
        return 2;
    }
    if (n > MON_MAX_GPUS) n = MON_MAX_GPUS;

    FILE *csv = NULL;
    if (csv_path) {
        csv = strcmp(csv_path, "-") == 0 ? stdout : fopen(csv_path, "a");
        if (!csv) {
            fprintf(stderr, "flashwatt monitor: cannot open %s: %s\n", csv_path, strerror(errno));
            fw_telemetry_close(t);
            fw_tel_fake_destroy(fake);
            return 1;
        }
        fprintf(csv, "t_s,gpu,name,power_instant_w,power_average_w,peak_w,energy_j,counter_w,temperature_c,sm_clock_mhz,"
                     "mem_clock_mhz,util_gpu_pct,util_mem_pct,power_limit_w,throttle_reasons,throttle_names,"
                     "cpu_energy_j\n");
        if (csv != stdout)
            fprintf(stderr, "flashwatt monitor: logging %d GPU%s every %ld ms to %s%s\n", only >= 0 ? 1 : n,
                    (only >= 0 ? 1 : n) == 1 ? "" : "s", interval, csv_path, count ? "" : " (Ctrl-C to stop)");
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    struct sigaction old_int, old_term;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    g_stop = 0;

    const int tty = !csv && isatty(fileno(stdout));
    const char *eol = tty ? "\033[K\n" : "\n"; /* clear the rest of each line when redrawing */
    gpu_state gs[MON_MAX_GPUS];
    memset(gs, 0, sizeof gs);
    char names[MON_MAX_GPUS][64];
    for (int g = 0; g < n; g++) fw_telemetry_gpu_name(t, g, names[g], sizeof names[g]);
    /* the sampler (every 20 ms, or the interval when shorter) gives the peak between refreshes */
    const int sample_ms = interval < 20 ? (int)interval : 20;
    const int ring = interval / sample_ms * 2 + 16 > 65536 ? 65536 : (int)(interval / sample_ms) * 2 + 16;
    fw_gpu_reading *sbuf = (fw_gpu_reading *)malloc((size_t)ring * sizeof *sbuf);
    if (!sbuf || fw_telemetry_start_sampler(t, sample_ms, ring) != FW_OK) {
        free(sbuf);
        sbuf = NULL;
    }
    const double t_start = fw_telemetry_now(t);
    double last_refresh = t_start;
    int have_cpu0 = 0;
    double cpu0 = 0;
    if (tty) printf("\033[2J\033[H\033[?25l");

    for (long it = 0; !g_stop && (count == 0 || it < count); it++) {
        if (it > 0) sleep_ms(interval);
        if (g_stop) break;
        if (fake) { /* make the simulated GPUs look alive */
            double now = fw_telemetry_now(t);
            for (int g = 0; g < n; g++) {
                fw_tel_fake_set_power(fake, g, 250.0 + 150.0 * sin(0.7 * now + g));
                fw_tel_fake_set_temperature(fake, g, 55.0 + 10.0 * sin(0.1 * now + g));
                fw_tel_fake_set_throttle(fake, g, sin(0.7 * now + g) > 0.8 ? FW_THROTTLE_SW_POWER_CAP : 0);
            }
        }
        const double since = last_refresh;
        last_refresh = fw_telemetry_now(t);
        fw_cpu_reading c;
        char cpu_txt[128];
        int cpu_ok = fw_telemetry_read_cpu(t, &c) == FW_OK && c.energy_valid;
        if (cpu_ok && !have_cpu0) {
            have_cpu0 = 1;
            cpu0 = c.energy_j;
        }
        if (cpu_ok) snprintf(cpu_txt, sizeof cpu_txt, "%.3f J since start (%s)", c.energy_j - cpu0, c.source);
        else snprintf(cpu_txt, sizeof cpu_txt, "%s", c.source);

        if (tty) printf("\033[H");
        else if (!csv && it > 0) printf("\n");
        if (!csv) {
            printf("flashwatt monitor: %d GPU%s, every %ld ms, %.1f s%s%s", n, n == 1 ? "" : "s", interval,
                   fw_telemetry_now(t) - t_start, tty ? " (Ctrl-C to stop)" : "", eol);
            printf("%-3s %-24s %10s %10s %10s %12s %10s %5s %8s %8s %9s %6s  %s%s", "gpu", "name", "power", "power 1s",
                   "peak", "energy", "counter W", "temp", "SM", "mem", "util", "limit", "throttle", eol);
        }
        for (int g = 0; g < n; g++) {
            if (only >= 0 && g != only) continue;
            fw_gpu_reading r;
            fw_telemetry_read(t, g, &r); /* a failed read leaves every field n/a */
            char ej[32], cw[32];
            energy_cols(&gs[g], &r, ej, sizeof ej, cw, sizeof cw, csv != NULL);
            char pk[32];
            peak_col(t, g, since, sbuf, ring, pk, sizeof pk, csv != NULL);
            if (csv) {
                char pi[32], pa[32], tc[32], sm[32], mm[32], ug[32], um[32], pl[32], th[32], tn[256], ce[48];
                csv_num(pi, sizeof pi, r.valid & FW_TEL_POWER_INSTANT, "%.3f", r.power_instant_w);
                csv_num(pa, sizeof pa, r.valid & FW_TEL_POWER_AVERAGE, "%.3f", r.power_average_w);
                csv_num(tc, sizeof tc, r.valid & FW_TEL_TEMPERATURE, "%.0f", r.temperature_c);
                csv_num(sm, sizeof sm, r.valid & FW_TEL_SM_CLOCK, "%.0f", (double)r.sm_clock_mhz);
                csv_num(mm, sizeof mm, r.valid & FW_TEL_MEM_CLOCK, "%.0f", (double)r.mem_clock_mhz);
                csv_num(ug, sizeof ug, r.valid & FW_TEL_UTILIZATION, "%.0f", (double)r.util_gpu_pct);
                csv_num(um, sizeof um, r.valid & FW_TEL_UTILIZATION, "%.0f", (double)r.util_mem_pct);
                csv_num(pl, sizeof pl, r.valid & FW_TEL_POWER_LIMIT, "%.1f", r.power_limit_w);
                if (r.valid & FW_TEL_THROTTLE) {
                    snprintf(th, sizeof th, "0x%llx", (unsigned long long)r.throttle_reasons);
                    fw_throttle_reasons_string(r.throttle_reasons, tn, sizeof tn);
                } else {
                    snprintf(th, sizeof th, "n/a");
                    snprintf(tn, sizeof tn, "n/a");
                }
                csv_num(ce, sizeof ce, cpu_ok, "%.3f", c.energy_j - cpu0);
                /* names hold no commas or quotes in practice; quote anyway */
                fprintf(csv, "%.3f,%d,\"%s\",%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,\"%s\",%s\n", r.t_s - t_start, g,
                        names[g], pi, pa, pk, ej, cw, tc, sm, mm, ug, um, pl, th, tn, ce);
            } else {
                char pi[32], pa[32], tc[32], sm[32], mm[32], ut[32], pl[32], tn[256];
                fmt(&r, FW_TEL_POWER_INSTANT, pi, sizeof pi);
                fmt(&r, FW_TEL_POWER_AVERAGE, pa, sizeof pa);
                fmt(&r, FW_TEL_TEMPERATURE, tc, sizeof tc);
                fmt(&r, FW_TEL_SM_CLOCK, sm, sizeof sm);
                fmt(&r, FW_TEL_MEM_CLOCK, mm, sizeof mm);
                fmt(&r, FW_TEL_UTILIZATION, ut, sizeof ut);
                fmt(&r, FW_TEL_POWER_LIMIT, pl, sizeof pl);
                fmt(&r, FW_TEL_THROTTLE, tn, sizeof tn);
                printf("%-3d %-24.24s %10s %10s %10s %12s %10s %5s %8s %8s %9s %6s  %s%s", g, names[g], pi, pa, pk,
                       ej, cw, tc, sm, mm, ut, pl, tn, eol);
            }
        }
        if (!csv) printf("cpu package energy: %s%s", cpu_txt, eol);
        fflush(csv ? csv : stdout);
    }
    if (tty) printf("\033[?25h");
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (csv && csv != stdout) fclose(csv);
    fw_telemetry_close(t); /* stops the sampler */
    free(sbuf);
    fw_tel_fake_destroy(fake);
    return 0;
}
