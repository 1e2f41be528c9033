/* Energy per call of a repeated call, as docs/ENERGY.md describes (Zeus' method): bounded cool-down
 * to the idle baseline, warm-up, then a window of >= window_s seconds of back-to-back calls over
 * which the NVML energy counter (else the sampled power integral) gives joules; J/call = window
 * joules / calls. Shared by `flashwatt bench` and `flashwatt tune`. Everything is n/a (valid = 0)
 * where there is no GPU telemetry: never a made-up 0. */
#ifndef FW_TOOLS_ENERGY_H
#define FW_TOOLS_ENERGY_H

#include "flashwatt.h"

typedef struct fw_emeas {
    int valid;              /* joules_per_call, watts_avg hold a measurement */
    const char *source;     /* "counter", "sampled", "n/a" */
    long calls;
    double seconds;         /* window length */
    double ms_per_call;     /* window seconds / calls (back-to-back throughput) */
    double joules_per_call, watts_avg;
    int peak_valid;
    double watts_peak;
    int std_valid;
    double watts_std;       /* standard deviation of sampled instant power inside the window */
    double idle_w, start_w; /* baseline, and the power when the window began */
    int settled;            /* 1 settled, 0 timed out, -1 n/a */
    int ntrace;
    double (*trace)[2];     /* [t_s from window start, W], malloc'd; free with fw_emeas_free */
    char note[160];
} fw_emeas;

/* The telemetry of the session: opened once, sampler at 20 ms, idle baseline measured once (1 s).
 * NULL where no GPU power reading exists (then *why says so). gpu: NVML index of CUDA ordinal. */
fw_telemetry *fw_energy_session(int cuda_index, int *gpu, double *idle_w, char *why, size_t why_len);
void fw_energy_session_close(void);

typedef fw_status (*fw_call_fn)(void *arg); /* one call (asynchronous launch is fine) */
typedef fw_status (*fw_sync_fn)(void *arg); /* wait until the device is idle */

/* est_call_s: a rough time per call (to size batches between syncs). */
fw_status fw_energy_measure(fw_telemetry *t, int gpu, double idle_w, double cooldown_s, double warmup_s,
                            double window_s, double est_call_s, fw_call_fn call, fw_sync_fn sync, void *arg,
                            fw_emeas *m);
void fw_emeas_init(fw_emeas *m);
void fw_emeas_free(fw_emeas *m);

/* cudaDeviceSynchronize on device index (no-op without CUDA). */
fw_status fw_device_sync(int cuda_index);

#endif
