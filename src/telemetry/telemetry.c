/* fw_telemetry: sources (NVML, powercap, or an injected one), the sampler thread, energy windows,
 * throttle-reason names and "n/a"-aware formatting. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/alloc.h"
#include "telemetry_internal.h"
#include "core/knobs.h"

#define FW_TEL_DEFAULT_PERIOD_MS 20
#define FW_TEL_DEFAULT_CAPACITY 4096

struct fw_telemetry {
    fw_tel_source gpu;
    int has_gpu;
    fw_tel_source cpu;
    int has_cpu;
    int n_gpus;
    char describe[640];
    char cpu_why[128]; /* why CPU energy is n/a */

    pthread_mutex_t mu; /* guards the rings and the sampler state */
    pthread_cond_t cv;
    pthread_t thread;
    int running;
    int stop;
    int period_ms;
    int capacity;
    fw_gpu_reading *ring; /* n_gpus * capacity */
    long *written;        /* per GPU: readings ever written */
};

double fw_tel_monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double fw_telemetry_now(fw_telemetry *t)
{
    if (t && t->has_gpu && t->gpu.now) return t->gpu.now(t->gpu.state);
    return fw_tel_monotonic_s();
}

static fw_status init_common(fw_telemetry *t)
{
    if (pthread_mutex_init(&t->mu, NULL) != 0) return FW_ERR_INTERNAL;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return FW_ERR_INTERNAL;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc == 0 ? FW_OK : FW_ERR_INTERNAL;
}

fw_status fw_telemetry_open_with_source(fw_telemetry **out, const fw_tel_source *gpu,
                                        const fw_tel_source *cpu)
{
    if (!out) return FW_ERR_NULL_ARGUMENT;
    *out = NULL;
    fw_telemetry *t = (fw_telemetry *)fw_calloc(1, sizeof *t);
    if (!t) return FW_ERR_OUT_OF_MEMORY;
    if (init_common(t) != FW_OK) {
        fw_free(t);
        return FW_ERR_INTERNAL;
    }
    if (gpu) {
        t->gpu = *gpu;
        t->has_gpu = 1;
        t->n_gpus = gpu->gpu_count ? gpu->gpu_count(gpu->state) : 0;
        if (t->n_gpus < 0) t->n_gpus = 0;
    }
    if (cpu) {
        t->cpu = *cpu;
        t->has_cpu = 1;
    }
    snprintf(t->cpu_why, sizeof t->cpu_why, "no CPU energy source");
    snprintf(t->describe, sizeof t->describe, "gpu: %s (%d device%s) | cpu: %s",
             gpu ? gpu->name : "n/a", t->n_gpus, t->n_gpus == 1 ? "" : "s",
             cpu ? cpu->name : (gpu && gpu->read_cpu_energy ? gpu->name : "n/a"));
    *out = t;
    return FW_OK;
}

fw_status fw_telemetry_open(fw_telemetry **out)
{
    if (!out) return FW_ERR_NULL_ARGUMENT;
    *out = NULL;
    char why_gpu[256] = "", why_cpu[256] = "";
    fw_tel_source gpu, cpu;
    fw_telemetry_knobs knobs; /* read per telemetry object, e.g. to test the absent paths (knobs.h) */
    fw_knobs_read_telemetry(&knobs);
    const int gpu_rc = fw_tel_nvml_open(knobs.nvml_lib[0] ? knobs.nvml_lib : NULL, &gpu, why_gpu, sizeof why_gpu);
    const int cpu_rc =
        fw_tel_powercap_open(knobs.powercap_root[0] ? knobs.powercap_root : NULL, &cpu, why_cpu, sizeof why_cpu);
    const int have_gpu = gpu_rc == 0, have_cpu = cpu_rc == 0;
    /* a source that is absent is n/a; one that could not get memory is an error of the call */
    fw_status st = gpu_rc == FW_TEL_OPEN_OOM || cpu_rc == FW_TEL_OPEN_OOM
                       ? FW_ERR_OUT_OF_MEMORY
                       : fw_telemetry_open_with_source(out, have_gpu ? &gpu : NULL, have_cpu ? &cpu : NULL);
    if (st != FW_OK) {
        if (have_gpu && gpu.close) gpu.close(gpu.state);
        if (have_cpu && cpu.close) cpu.close(cpu.state);
        return st;
    }
    fw_telemetry *t = *out;
    char g[300], c[300];
    if (have_gpu)
        snprintf(g, sizeof g, "%s (%d device%s)", gpu.name, t->n_gpus, t->n_gpus == 1 ? "" : "s");
    else
        snprintf(g, sizeof g, "n/a (%s)", why_gpu);
    if (have_cpu)
        snprintf(c, sizeof c, "%s", cpu.name);
    else
        snprintf(c, sizeof c, "n/a (%s)", why_cpu);
    snprintf(t->describe, sizeof t->describe, "gpu: %s | cpu: %s", g, c);
    if (!have_cpu) snprintf(t->cpu_why, sizeof t->cpu_why, "%.120s", why_cpu);
    return FW_OK;
}

void fw_telemetry_close(fw_telemetry *t)
{
    if (!t) return;
    fw_telemetry_stop_sampler(t);
    if (t->has_gpu && t->gpu.close) t->gpu.close(t->gpu.state);
    if (t->has_cpu && t->cpu.close) t->cpu.close(t->cpu.state);
    fw_free(t->ring);
    fw_free(t->written);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    fw_free(t);
}

int fw_telemetry_gpu_count(const fw_telemetry *t) { return t ? t->n_gpus : 0; }

const char *fw_telemetry_describe(const fw_telemetry *t) { return t ? t->describe : "n/a"; }

fw_status fw_telemetry_gpu_name(fw_telemetry *t, int gpu, char *buf, size_t len)
{
    if (!t || !buf || len == 0) return FW_ERR_NULL_ARGUMENT;
    snprintf(buf, len, "n/a");
    if (gpu < 0 || gpu >= t->n_gpus) return FW_ERR_INVALID_VALUE;
    if (!t->gpu.gpu_name || t->gpu.gpu_name(t->gpu.state, gpu, buf, len) != 0) {
        snprintf(buf, len, "n/a");
        return FW_ERR_DEVICE;
    }
    return FW_OK;
}

fw_status fw_telemetry_gpu_pci_bus_id(fw_telemetry *t, int gpu, char *buf, size_t len)
{
    if (!t || !buf || len == 0) return FW_ERR_NULL_ARGUMENT;
    snprintf(buf, len, "n/a");
    if (gpu < 0 || gpu >= t->n_gpus) return FW_ERR_INVALID_VALUE;
    if (!t->gpu.gpu_pci || t->gpu.gpu_pci(t->gpu.state, gpu, buf, len) != 0) {
        snprintf(buf, len, "n/a");
        return FW_ERR_UNSUPPORTED;
    }
    return FW_OK;
}

/* "dddddddd:bb:dd.f" or "dddd:bb:dd.f" (hex, any case) -> numbers; 0 on success */
static int parse_bus_id(const char *s, unsigned long *dom, unsigned *bus, unsigned *dev, unsigned *fn)
{
    char extra;
    if (!s) return -1;
    if (sscanf(s, "%lx:%x:%x.%x%c", dom, bus, dev, fn, &extra) == 4) return 0;
    *fn = 0;
    if (sscanf(s, "%lx:%x:%x%c", dom, bus, dev, &extra) == 3) return 0;
    return -1;
}

int fw_telemetry_gpu_for_pci_bus_id(fw_telemetry *t, const char *bus_id)
{
    unsigned long d0;
    unsigned b0, v0, f0;
    if (!t || parse_bus_id(bus_id, &d0, &b0, &v0, &f0) != 0) return -1;
    for (int g = 0; g < t->n_gpus; g++) {
        char buf[64];
        unsigned long d;
        unsigned b, v, f;
        if (fw_telemetry_gpu_pci_bus_id(t, g, buf, sizeof buf) != FW_OK) continue;
        if (parse_bus_id(buf, &d, &b, &v, &f) == 0 && d == d0 && b == b0 && v == v0 && f == f0) return g;
    }
    return -1;
}

static fw_status read_gpu(fw_telemetry *t, int gpu, fw_gpu_reading *r)
{
    memset(r, 0, sizeof *r);
    r->gpu = gpu;
    r->t_s = fw_telemetry_now(t);
    if (gpu < 0 || gpu >= t->n_gpus) return FW_ERR_INVALID_VALUE;
    if (t->gpu.read_gpu(t->gpu.state, gpu, r) != 0) {
        r->valid = 0;
        return FW_ERR_DEVICE;
    }
    return FW_OK;
}

fw_status fw_telemetry_read(fw_telemetry *t, int gpu, fw_gpu_reading *r)
{
    if (!r) return FW_ERR_NULL_ARGUMENT;
    if (!t) {
        memset(r, 0, sizeof *r);
        r->gpu = gpu;
        return FW_ERR_NULL_ARGUMENT;
    }
    return read_gpu(t, gpu, r);
}

fw_status fw_telemetry_read_cpu(fw_telemetry *t, fw_cpu_reading *r)
{
    if (!r) return FW_ERR_NULL_ARGUMENT;
    memset(r, 0, sizeof *r);
    snprintf(r->source, sizeof r->source, "n/a");
    if (!t) return FW_ERR_NULL_ARGUMENT;
    r->t_s = fw_telemetry_now(t);
    const fw_tel_source *s = t->has_cpu ? &t->cpu : (t->has_gpu && t->gpu.read_cpu_energy ? &t->gpu : NULL);
    if (!s || !s->read_cpu_energy) {
        snprintf(r->source, sizeof r->source, "n/a (%.50s)", t->cpu_why);
        return FW_ERR_UNSUPPORTED;
    }
    double j = 0;
    int pk = 0;
    char src[64] = "";
    if (s->read_cpu_energy(s->state, &j, &pk, src, sizeof src) != 0) {
        snprintf(r->source, sizeof r->source, "n/a (%.50s)", src[0] ? src : "unreadable");
        return FW_ERR_UNSUPPORTED;
    }
    r->energy_valid = 1;
    r->energy_j = j;
    r->packages = pk;
    snprintf(r->source, sizeof r->source, "%s", src[0] ? src : s->name);
    return FW_OK;
}

/* ---- sampler ----------------------------------------------------------------------------------- */
static void *sampler_main(void *arg)
{
    fw_telemetry *t = (fw_telemetry *)arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        int period_ms = t->period_ms;
        pthread_mutex_unlock(&t->mu);
        for (int g = 0; g < t->n_gpus; g++) {
            fw_gpu_reading r;
            read_gpu(t, g, &r); /* a failed read is stored too: valid = 0 marks the gap */
            pthread_mutex_lock(&t->mu);
            t->ring[(size_t)g * (size_t)t->capacity + (size_t)(t->written[g] % t->capacity)] = r;
            t->written[g]++;
            pthread_mutex_unlock(&t->mu);
        }
        /* next deadline; if we fell behind, skip ahead instead of bursting */
        long long ns = (long long)next.tv_nsec + (long long)period_ms * 1000000LL;
        next.tv_sec += (time_t)(ns / 1000000000LL);
        next.tv_nsec = (long)(ns % 1000000000LL);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec > next.tv_nsec)) next = now;
        pthread_mutex_lock(&t->mu);
        while (!t->stop) {
            int rc = pthread_cond_timedwait(&t->cv, &t->mu, &next);
            if (rc == ETIMEDOUT) break;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

fw_status fw_telemetry_start_sampler(fw_telemetry *t, int period_ms, int capacity)
{
    if (!t) return FW_ERR_NULL_ARGUMENT;
    if (period_ms < 0 || period_ms > 60000 || capacity < 0 || capacity > (1 << 24)) return FW_ERR_INVALID_VALUE;
    if (period_ms == 0) period_ms = FW_TEL_DEFAULT_PERIOD_MS;
    if (capacity == 0) capacity = FW_TEL_DEFAULT_CAPACITY;
    fw_telemetry_stop_sampler(t);
    if (t->n_gpus == 0) return FW_ERR_UNSUPPORTED; /* nothing to sample */
    fw_gpu_reading *ring = (fw_gpu_reading *)fw_calloc((size_t)t->n_gpus * (size_t)capacity, sizeof *ring);
    long *written = (long *)fw_calloc((size_t)t->n_gpus, sizeof *written);
    if (!ring || !written) {
        fw_free(ring);
        fw_free(written);
        return FW_ERR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&t->mu);
    fw_free(t->ring);
    fw_free(t->written);
    t->ring = ring;
    t->written = written;
    t->capacity = capacity;
    t->period_ms = period_ms;
    t->stop = 0;
    pthread_mutex_unlock(&t->mu);
    if (pthread_create(&t->thread, NULL, sampler_main, t) != 0) return FW_ERR_INTERNAL;
    t->running = 1;
    return FW_OK;
}

fw_status fw_telemetry_stop_sampler(fw_telemetry *t)
{
    if (!t) return FW_ERR_NULL_ARGUMENT;
    if (!t->running) return FW_OK;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    t->running = 0;
    return FW_OK; /* the ring stays readable until the next start */
}

int fw_telemetry_samples(fw_telemetry *t, int gpu, double since_s, fw_gpu_reading *out, int max)
{
    if (!t || !out || max <= 0 || gpu < 0 || gpu >= t->n_gpus) return 0;
    pthread_mutex_lock(&t->mu);
    int got = 0;
    if (t->ring) {
        long total = t->written[gpu];
        long avail = total < t->capacity ? total : t->capacity;
        /* walk back from the newest while t_s >= since_s, at most max */
        long first = total; /* index (in written order) of the oldest copied */
        for (long k = total - 1; k >= total - avail && got < max; k--) {
            const fw_gpu_reading *r = &t->ring[(size_t)gpu * (size_t)t->capacity + (size_t)(k % t->capacity)];
            if (r->t_s < since_s) break;
            first = k;
            got++;
        }
        for (int i = 0; i < got; i++)
            out[i] = t->ring[(size_t)gpu * (size_t)t->capacity + (size_t)((first + i) % t->capacity)];
    }
    pthread_mutex_unlock(&t->mu);
    return got;
}

/* ---- cool-down helpers ------------------------------------------------------------------------ */
static void sleep_real(double s)
{
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int power_of(const fw_gpu_reading *r, double *w);

int fw_telemetry_wait_settled(fw_telemetry *t, int gpu, double baseline_w, double tol_w, double hold_s,
                              double timeout_s, double *last_w)
{
    if (!t || gpu < 0 || gpu >= t->n_gpus || !(tol_w >= 0) || !(hold_s >= 0) || !(timeout_s >= 0)) return -1;
    double start = fw_telemetry_now(t), since = -1;
    int seen = 0;
    for (;;) {
        fw_gpu_reading r;
        double w, now;
        if (read_gpu(t, gpu, &r) == FW_OK && power_of(&r, &w)) {
            seen = 1;
            if (last_w) *last_w = w;
            now = r.t_s;
            if (w <= baseline_w + tol_w && w >= baseline_w - tol_w) {
                if (since < 0) since = now;
                if (now - since >= hold_s) return 1;
            } else {
                since = -1;
            }
        } else {
            now = fw_telemetry_now(t);
            since = -1;
        }
        if (now - start >= timeout_s) return seen ? 0 : -1;
        sleep_real(0.05);
    }
}

fw_status fw_telemetry_mean_power(fw_telemetry *t, int gpu, double seconds, double *mean_w)
{
    if (!t || !mean_w) return FW_ERR_NULL_ARGUMENT;
    if (gpu < 0 || gpu >= t->n_gpus || !(seconds >= 0)) return FW_ERR_INVALID_VALUE;
    double start = fw_telemetry_now(t), sum = 0;
    long n = 0;
    for (;;) {
        fw_gpu_reading r;
        double w;
        if (read_gpu(t, gpu, &r) == FW_OK && power_of(&r, &w)) {
            sum += w;
            n++;
        }
        if (fw_telemetry_now(t) - start >= seconds) break;
        sleep_real(0.05);
    }
    if (n == 0) return FW_ERR_UNSUPPORTED;
    *mean_w = sum / (double)n;
    return FW_OK;
}

/* ---- throttle reasons and formatting ------------------------------------------------------------ */
static const struct {
    uint64_t bit;
    const char *name;
} k_reasons[] = {
    {FW_THROTTLE_GPU_IDLE, "gpu_idle"},
    {FW_THROTTLE_APPLICATIONS_CLOCKS, "applications_clocks"},
    {FW_THROTTLE_SW_POWER_CAP, "sw_power_cap"},
    {FW_THROTTLE_HW_SLOWDOWN, "hw_slowdown"},
    {FW_THROTTLE_SYNC_BOOST, "sync_boost"},
    {FW_THROTTLE_SW_THERMAL, "sw_thermal"},
    {FW_THROTTLE_HW_THERMAL, "hw_thermal"},
    {FW_THROTTLE_HW_POWER_BRAKE, "hw_power_brake"},
    {FW_THROTTLE_DISPLAY_CLOCKS, "display_clocks"},
};
#define N_REASONS ((int)(sizeof k_reasons / sizeof k_reasons[0]))

const char *fw_throttle_reason_name(uint64_t bit)
{
    for (int i = 0; i < N_REASONS; i++)
        if (k_reasons[i].bit == bit) return k_reasons[i].name;
    return NULL;
}

/* snprintf-style append: keeps counting the wanted length past the end of buf */
static size_t append(char *buf, size_t len, size_t used, const char *s)
{
    size_t n = strlen(s);
    if (buf && len > 0 && used < len) {
        size_t room = len - 1 - used;
        size_t c = n < room ? n : room;
        memcpy(buf + used, s, c);
        buf[used + c] = 0;
    }
    return used + n;
}

size_t fw_throttle_reasons_string(uint64_t reasons, char *buf, size_t len)
{
    if (buf && len > 0) buf[0] = 0;
    if (reasons == 0) return append(buf, len, 0, "none");
    size_t used = 0;
    uint64_t known = 0;
    for (int i = 0; i < N_REASONS; i++) {
        known |= k_reasons[i].bit;
        if (reasons & k_reasons[i].bit) {
            if (used) used = append(buf, len, used, ",");
            used = append(buf, len, used, k_reasons[i].name);
        }
    }
    if (reasons & ~known) {
        char hex[32];
        snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)(reasons & ~known));
        if (used) used = append(buf, len, used, ",");
        used = append(buf, len, used, hex);
    }
    return used;
}

size_t fw_gpu_reading_format(const fw_gpu_reading *r, unsigned field, char *buf, size_t len)
{
    char tmp[160];
    if (!r || !(r->valid & field)) return append(buf, len, 0, "n/a");
    switch (field) {
    case FW_TEL_POWER_INSTANT: snprintf(tmp, sizeof tmp, "%.1f W", r->power_instant_w); break;
    case FW_TEL_POWER_AVERAGE: snprintf(tmp, sizeof tmp, "%.1f W", r->power_average_w); break;
    case FW_TEL_ENERGY: snprintf(tmp, sizeof tmp, "%.3f J", (double)r->energy_mj / 1000.0); break;
    case FW_TEL_TEMPERATURE: snprintf(tmp, sizeof tmp, "%.0f C", r->temperature_c); break;
    case FW_TEL_SM_CLOCK: snprintf(tmp, sizeof tmp, "%u MHz", r->sm_clock_mhz); break;
    case FW_TEL_MEM_CLOCK: snprintf(tmp, sizeof tmp, "%u MHz", r->mem_clock_mhz); break;
    case FW_TEL_UTILIZATION: snprintf(tmp, sizeof tmp, "%u%% / %u%%", r->util_gpu_pct, r->util_mem_pct); break;
    case FW_TEL_THROTTLE: fw_throttle_reasons_string(r->throttle_reasons, tmp, sizeof tmp); break;
    case FW_TEL_POWER_LIMIT: snprintf(tmp, sizeof tmp, "%.0f W", r->power_limit_w); break;
    default: snprintf(tmp, sizeof tmp, "n/a"); break;
    }
    if (buf && len > 0) buf[0] = 0;
    return append(buf, len, 0, tmp);
}

/* ---- energy windows ----------------------------------------------------------------------------- */
static int power_of(const fw_gpu_reading *r, double *w)
{
    if (r->valid & FW_TEL_POWER_INSTANT) {
        *w = r->power_instant_w;
        return 1;
    }
    if (r->valid & FW_TEL_POWER_AVERAGE) {
        *w = r->power_average_w;
        return 1;
    }
    return 0;
}

fw_status fw_energy_begin(fw_telemetry *t, int gpu, fw_energy_window *w)
{
    if (!w) return FW_ERR_NULL_ARGUMENT;
    memset(w, 0, sizeof *w);
    w->t = t;
    w->gpu = gpu;
    w->source = "n/a";
    if (!t) return FW_ERR_NULL_ARGUMENT;
    fw_cpu_reading c;
    if (fw_telemetry_read_cpu(t, &c) == FW_OK && c.energy_valid) {
        w->begin_cpu_valid = 1;
        w->begin_cpu_j = c.energy_j;
    }
    w->t0_s = fw_telemetry_now(t);
    if (gpu == -1) return FW_OK; /* CPU-only window */
    fw_gpu_reading r;
    fw_status st = read_gpu(t, gpu, &r);
    if (st == FW_ERR_INVALID_VALUE) return st;
    w->t0_s = r.t_s;
    if (r.valid & FW_TEL_ENERGY) {
        w->begin_energy_valid = 1;
        w->begin_energy_mj = r.energy_mj;
    }
    if (r.valid & FW_TEL_POWER_INSTANT) {
        w->peak_valid = 1;
        w->peak_w = r.power_instant_w;
    }
    return FW_OK;
}

/* Trapezoid integral of the sampled power over [t0, t1]; the edges hold the nearest sample. */
static int sampled_integral(fw_telemetry *t, int gpu, double t0, double t1, double *joules, int *count,
                            int *peak_valid, double *peak)
{
    int cap = t->capacity > 0 ? t->capacity : 0;
    *count = 0;
    if (cap == 0) return 0;
    fw_gpu_reading *s = (fw_gpu_reading *)fw_malloc((size_t)cap * sizeof *s);
    if (!s) return 0;
    int n = fw_telemetry_samples(t, gpu, t0, s, cap);
    double prev_t = 0, prev_p = 0, first_t = 0, e = 0;
    int have = 0;
    for (int i = 0; i < n && s[i].t_s <= t1; i++) {
        double p;
        if (!power_of(&s[i], &p)) continue;
        (*count)++;
        if ((s[i].valid & FW_TEL_POWER_INSTANT) && (!*peak_valid || s[i].power_instant_w > *peak)) {
            *peak_valid = 1;
            *peak = s[i].power_instant_w;
        }
        if (!have) {
            first_t = s[i].t_s;
            e += p * (s[i].t_s - t0);
        } else {
            e += 0.5 * (p + prev_p) * (s[i].t_s - prev_t);
        }
        prev_t = s[i].t_s;
        prev_p = p;
        have = 1;
    }
    fw_free(s);
    if (*count < 2) return 0;
    e += prev_p * (t1 - prev_t);
    /* the samples must cover most of the window, else the integral is a guess */
    double uncovered = (first_t - t0) + (t1 - prev_t);
    double period = t->period_ms * 1e-3;
    if (uncovered > 0.25 * (t1 - t0) + 2.0 * period) return 0;
    *joules = e;
    return 1;
}

fw_status fw_energy_end(fw_energy_window *w)
{
    if (!w) return FW_ERR_NULL_ARGUMENT;
    fw_telemetry *t = w->t;
    w->valid = 0;
    w->source = "n/a";
    if (!t) return FW_ERR_NULL_ARGUMENT;
    double t1 = fw_telemetry_now(t);
    fw_cpu_reading c;
    if (w->begin_cpu_valid && fw_telemetry_read_cpu(t, &c) == FW_OK && c.energy_valid && c.energy_j >= w->begin_cpu_j) {
        w->cpu_valid = 1;
        w->cpu_joules = c.energy_j - w->begin_cpu_j;
    }
    if (w->gpu == -1) {
        w->seconds = t1 - w->t0_s;
        return w->cpu_valid ? FW_OK : FW_ERR_UNSUPPORTED;
    }
    fw_gpu_reading r;
    fw_status st = read_gpu(t, w->gpu, &r);
    if (st == FW_ERR_INVALID_VALUE) return st;
    if (st == FW_OK) t1 = r.t_s;
    w->seconds = t1 - w->t0_s;
    if (r.valid & FW_TEL_POWER_INSTANT && (!w->peak_valid || r.power_instant_w > w->peak_w)) {
        w->peak_valid = 1;
        w->peak_w = r.power_instant_w;
    }
    double sj = 0;
    w->sampled_valid = sampled_integral(t, w->gpu, w->t0_s, t1, &sj, &w->samples, &w->peak_valid, &w->peak_w);
    if (w->sampled_valid) w->sampled_joules = sj;
    if (w->begin_energy_valid && (r.valid & FW_TEL_ENERGY) && r.energy_mj >= w->begin_energy_mj) {
        w->valid = 1;
        w->source = "counter";
        w->joules = (double)(r.energy_mj - w->begin_energy_mj) / 1000.0;
    } else if (w->sampled_valid) {
        w->valid = 1;
        w->source = "sampled";
        w->joules = sj;
    }
    if (w->valid && w->seconds > 0) w->avg_w = w->joules / w->seconds;
    return w->valid ? FW_OK : FW_ERR_UNSUPPORTED;
}
