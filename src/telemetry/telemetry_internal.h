/* Telemetry internals: the source interface (a table of functions) behind fw_telemetry, so that
 * NVML, powercap and a fake source for tests all plug in the same way. Nothing here is installed. */
#ifndef FW_TELEMETRY_INTERNAL_H
#define FW_TELEMETRY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "flashwatt.h"

/* A GPU source. read_gpu fills the fields it has and sets their FW_TEL_* bits in r->valid (r arrives
 * zeroed with valid = 0 and gpu set); it returns 0 on success (even with some fields missing), -1
 * when the device could not be read at all. All functions may be called from several threads. */
typedef struct fw_tel_source {
    const char *name;
    void *state;
    int (*gpu_count)(void *state);
    int (*gpu_name)(void *state, int gpu, char *buf, size_t len);       /* 0 ok; may be NULL */
    int (*gpu_pci)(void *state, int gpu, char *buf, size_t len);        /* bus id; 0 ok; may be NULL */
    int (*read_gpu)(void *state, int gpu, fw_gpu_reading *r);
    /* CPU package energy in joules (monotonic, wrap-corrected); 0 ok, -1 n/a. May be NULL. */
    int (*read_cpu_energy)(void *state, double *joules, int *packages, char *src, size_t src_len);
    /* The clock of this source in seconds; NULL = CLOCK_MONOTONIC. A fake source drives time. */
    double (*now)(void *state);
    void (*close)(void *state);
} fw_tel_source;

/* Opens fw_telemetry over the given GPU source (copied; its close() is called by
 * fw_telemetry_close). cpu may be NULL (CPU energy then comes from gpu->read_cpu_energy when
 * set, else n/a). */
fw_status fw_telemetry_open_with_source(fw_telemetry **out, const fw_tel_source *gpu,
                                        const fw_tel_source *cpu);

/* NVML through dlopen(lib) ("libnvidia-ml.so.1" when lib is NULL). On failure returns -1 and
 * writes why (library not found, nvmlInit failed with NVML's text, no devices); -2 when out of
 * memory (FW_TEL_OPEN_OOM), which fw_telemetry_open reports rather than a source that is n/a. */
#define FW_TEL_OPEN_OOM (-2)
int fw_tel_nvml_open(const char *lib, fw_tel_source *out, char *why, size_t why_len);

/* Linux powercap package energy (intel-rapl:N, also used by AMD; amd-rapl:N where present) under
 * root ("/sys/class/powercap" when NULL). -1 with why when no readable package zone exists;
 * FW_TEL_OPEN_OOM when out of memory. */
int fw_tel_powercap_open(const char *root, fw_tel_source *out, char *why, size_t why_len);

/* ---- fake source, for tests and `flashwatt monitor --fake` ------------------------------------ */
typedef struct fw_tel_fake fw_tel_fake;

/* n_gpus fake GPUs. manual_clock = 1: time moves only with fw_tel_fake_advance (deterministic);
 * 0: the real monotonic clock. Every GPU starts at 100 W, 40 C, 1500/2600 MHz, all fields valid,
 * energy counter 0. Energy integrates the set power over the source's clock. */
fw_tel_fake *fw_tel_fake_create(int n_gpus, int manual_clock);
/* The source view of the fake (the fake stays owned by the caller: close() does not free it). */
fw_tel_source fw_tel_fake_source(fw_tel_fake *f);
void fw_tel_fake_destroy(fw_tel_fake *f);
void fw_tel_fake_advance(fw_tel_fake *f, double seconds);
void fw_tel_fake_set_power(fw_tel_fake *f, int gpu, double watts);
void fw_tel_fake_set_temperature(fw_tel_fake *f, int gpu, double celsius);
void fw_tel_fake_set_throttle(fw_tel_fake *f, int gpu, uint64_t reasons);
/* Which FW_TEL_* fields the fake reports (others read as missing). */
void fw_tel_fake_set_valid(fw_tel_fake *f, int gpu, unsigned valid_mask);
/* 1: read_gpu fails outright (device lost). */
void fw_tel_fake_set_fail(fw_tel_fake *f, int gpu, int fail);
/* CPU energy: valid or not, and the package power it integrates. */
void fw_tel_fake_set_cpu(fw_tel_fake *f, int valid, double watts);
double fw_tel_fake_now(fw_tel_fake *f);
/* Total counted reads of GPU gpu (to check that the sampler runs). */
long fw_tel_fake_reads(fw_tel_fake *f, int gpu);

double fw_tel_monotonic_s(void);

#endif
