/* A scripted telemetry source for tests (and `flashwatt monitor --fake`): power, temperature,
 * throttle reasons and which fields are valid are set by the caller; the energy counter integrates
 * the set power over the source's clock (manual, or the real monotonic clock). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "telemetry_internal.h"

#define FAKE_ALL_FIELDS 0x1ffu

typedef struct fake_gpu {
    double power_w, temp_c, energy_j;
    uint64_t throttle;
    unsigned valid;
    int fail;
    long reads;
} fake_gpu;

struct fw_tel_fake {
    pthread_mutex_t mu;
    int manual;
    double clock_s;  /* manual clock */
    double last_s;   /* energy integrated up to here */
    int n;
    fake_gpu *g;
    int cpu_valid;
    double cpu_w, cpu_j;
};

static double fake_clock(fw_tel_fake *f) { return f->manual ? f->clock_s : fw_tel_monotonic_s(); }

/* under f->mu: integrate energy up to now */
static void integrate(fw_tel_fake *f)
{
    double now = fake_clock(f);
    double dt = now - f->last_s;
    if (dt > 0) {
        for (int i = 0; i < f->n; i++) f->g[i].energy_j += f->g[i].power_w * dt;
        f->cpu_j += f->cpu_w * dt;
        f->last_s = now;
    }
}

fw_tel_fake *fw_tel_fake_create(int n_gpus, int manual_clock)
{
    if (n_gpus < 0) return NULL;
    fw_tel_fake *f = (fw_tel_fake *)fw_calloc(1, sizeof *f);
    if (!f) return NULL;
    f->g = (fake_gpu *)fw_calloc((size_t)(n_gpus > 0 ? n_gpus : 1), sizeof *f->g);
    if (!f->g) {
        fw_free(f);
        return NULL;
    }
    pthread_mutex_init(&f->mu, NULL);
    f->manual = manual_clock;
    f->clock_s = 1000.0; /* arbitrary, non-zero origin */
    f->n = n_gpus;
    f->last_s = fake_clock(f);
    for (int i = 0; i < n_gpus; i++) {
        f->g[i].power_w = 100.0;
        f->g[i].temp_c = 40.0;
        f->g[i].valid = FAKE_ALL_FIELDS;
    }
    return f;
}

void fw_tel_fake_destroy(fw_tel_fake *f)
{
    if (!f) return;
    pthread_mutex_destroy(&f->mu);
    fw_free(f->g);
    fw_free(f);
}

void fw_tel_fake_advance(fw_tel_fake *f, double seconds)
{
    pthread_mutex_lock(&f->mu);
    if (f->manual && seconds > 0) {
        integrate(f);
        f->clock_s += seconds;
        integrate(f);
    }
    pthread_mutex_unlock(&f->mu);
}

#define FAKE_SET(fn_body)                      \
    if (!f || gpu < 0 || gpu >= f->n) return;  \
    pthread_mutex_lock(&f->mu);                \
    integrate(f);                              \
    fn_body;                                   \
    pthread_mutex_unlock(&f->mu)

void fw_tel_fake_set_power(fw_tel_fake *f, int gpu, double watts) { FAKE_SET(f->g[gpu].power_w = watts); }
void fw_tel_fake_set_temperature(fw_tel_fake *f, int gpu, double c) { FAKE_SET(f->g[gpu].temp_c = c); }
void fw_tel_fake_set_throttle(fw_tel_fake *f, int gpu, uint64_t reasons) { FAKE_SET(f->g[gpu].throttle = reasons); }
void fw_tel_fake_set_valid(fw_tel_fake *f, int gpu, unsigned mask) { FAKE_SET(f->g[gpu].valid = mask & FAKE_ALL_FIELDS); }
void fw_tel_fake_set_fail(fw_tel_fake *f, int gpu, int fail) { FAKE_SET(f->g[gpu].fail = fail); }

void fw_tel_fake_set_cpu(fw_tel_fake *f, int valid, double watts)
{
    pthread_mutex_lock(&f->mu);
    integrate(f);
    f->cpu_valid = valid;
    f->cpu_w = watts;
    pthread_mutex_unlock(&f->mu);
}

double fw_tel_fake_now(fw_tel_fake *f)
{
    pthread_mutex_lock(&f->mu);
    double t = fake_clock(f);
    pthread_mutex_unlock(&f->mu);
    return t;
}

long fw_tel_fake_reads(fw_tel_fake *f, int gpu)
{
    if (!f || gpu < 0 || gpu >= f->n) return 0;
    pthread_mutex_lock(&f->mu);
    long n = f->g[gpu].reads;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static int fake_count(void *st) { return ((fw_tel_fake *)st)->n; }

static int fake_name(void *st, int gpu, char *buf, size_t len)
{
    if (gpu < 0 || gpu >= ((fw_tel_fake *)st)->n) return -1;
    snprintf(buf, len, "fake GPU %d", gpu);
    return 0;
}

static int fake_pci(void *st, int gpu, char *buf, size_t len)
{
    if (gpu < 0 || gpu >= ((fw_tel_fake *)st)->n) return -1;
    snprintf(buf, len, "00000000:%02X:00.0", 0x10 + gpu);
    return 0;
}

static int fake_read(void *st, int gpu, fw_gpu_reading *r)
{
    fw_tel_fake *f = (fw_tel_fake *)st;
    if (gpu < 0 || gpu >= f->n) return -1;
    pthread_mutex_lock(&f->mu);
    integrate(f);
    fake_gpu *g = &f->g[gpu];
    g->reads++;
    int fail = g->fail;
    if (!fail) {
        unsigned v = g->valid;
        r->t_s = fake_clock(f);
        if (v & FW_TEL_POWER_INSTANT) r->power_instant_w = g->power_w;
        if (v & FW_TEL_POWER_AVERAGE) r->power_average_w = g->power_w;
        if (v & FW_TEL_ENERGY) r->energy_mj = (uint64_t)(g->energy_j * 1000.0 + 0.5);
        if (v & FW_TEL_TEMPERATURE) r->temperature_c = g->temp_c;
        if (v & FW_TEL_SM_CLOCK) r->sm_clock_mhz = 1500;
        if (v & FW_TEL_MEM_CLOCK) r->mem_clock_mhz = 2600;
        if (v & FW_TEL_UTILIZATION) {
            r->util_gpu_pct = 100;
            r->util_mem_pct = 50;
        }
        if (v & FW_TEL_THROTTLE) r->throttle_reasons = g->throttle;
        if (v & FW_TEL_POWER_LIMIT) r->power_limit_w = 700.0;
        r->valid = v;
    }
    pthread_mutex_unlock(&f->mu);
    return fail ? -1 : 0;
}

static int fake_cpu(void *st, double *joules, int *packages, char *src, size_t src_len)
{
    fw_tel_fake *f = (fw_tel_fake *)st;
    pthread_mutex_lock(&f->mu);
    integrate(f);
    int ok = f->cpu_valid;
    *joules = f->cpu_j;
    *packages = 1;
    snprintf(src, src_len, "%s", ok ? "fake package" : "fake: cpu energy off");
    pthread_mutex_unlock(&f->mu);
    return ok ? 0 : -1;
}

static double fake_now_cb(void *st) { return fw_tel_fake_now((fw_tel_fake *)st); }

static void fake_close(void *st) { (void)st; /* owned by the caller */ }

fw_tel_source fw_tel_fake_source(fw_tel_fake *f)
{
    fw_tel_source s;
    memset(&s, 0, sizeof s);
    s.name = "fake";
    s.state = f;
    s.gpu_count = fake_count;
    s.gpu_name = fake_name;
    s.gpu_pci = fake_pci;
    s.read_gpu = fake_read;
    s.read_cpu_energy = fake_cpu;
    s.now = fake_now_cb;
    s.close = fake_close;
    return s;
}
